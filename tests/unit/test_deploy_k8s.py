"""Kubernetes: the rendered kustomize base validates offline against Kubernetes and
prometheus-operator schemas, and carries exactly the repo's rules and boards."""

from __future__ import annotations

import copy
import json
import shutil
import subprocess
from pathlib import Path
from typing import Any

import jsonschema
import kubernetes_validate
import pytest
import yaml

from exporter.config import parse_config
from specload.cli import main
from specload.deploy.k8s import prometheus_rule, render, rule_files

pytestmark = pytest.mark.unit

ROOT = Path(__file__).resolve().parents[2]
BASE = ROOT / "deploy" / "k8s" / "base"
OPERATOR_SCHEMA = json.loads(
    (ROOT / "deploy" / "k8s" / "schemas" / "monitoring.coreos.com-v1.json").read_text()
)
K8S_VERSION = "1.30.0"
KUBECTL = shutil.which("kubectl")


def operator_validator(kind: str) -> jsonschema.Draft202012Validator:
    schema = {k: v for k, v in OPERATOR_SCHEMA.items() if k != "title"}
    schema["$ref"] = f"#/$defs/{kind}"
    return jsonschema.Draft202012Validator(schema)


def validate(doc: dict[str, Any]) -> None:
    if doc["apiVersion"] == "monitoring.coreos.com/v1":
        operator_validator(doc["kind"]).validate(doc)
    else:
        kubernetes_validate.validate(doc, K8S_VERSION, strict=True)


def base_documents(rendered: Path) -> list[dict[str, Any]]:
    """The resources kustomize would load (without kustomize: every listed file)."""
    kustomization = yaml.safe_load((rendered / "kustomization.yaml").read_text())
    docs: list[dict[str, Any]] = []
    for name in kustomization["resources"]:
        docs += [d for d in yaml.safe_load_all((rendered / name).read_text()) if d]
    return docs


@pytest.fixture(scope="module")
def rendered(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("k8s")
    render(ROOT, out, image="registry.example/specload:1.2.3", namespace="loadtest")
    return out


def test_every_manifest_validates_against_its_schema(rendered: Path) -> None:
    docs = base_documents(rendered)
    kinds = sorted(d["kind"] for d in docs)
    assert kinds == [
        "Deployment",
        "Deployment",
        "Deployment",
        "PrometheusRule",
        "Service",
        "Service",
        "ServiceMonitor",
        "ServiceMonitor",
    ]
    for doc in docs:
        validate(doc)


@pytest.mark.skipif(KUBECTL is None, reason="kubectl (with kustomize) is not installed")
def test_kustomize_build_validates(rendered: Path) -> None:
    assert KUBECTL is not None
    result = subprocess.run(
        [KUBECTL, "kustomize", str(rendered)],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert result.returncode == 0, result.stderr
    docs = [d for d in yaml.safe_load_all(result.stdout) if d]
    for doc in docs:
        validate(doc)
        assert doc["metadata"]["namespace"] == "loadtest"
        assert doc["metadata"]["labels"]["app.kubernetes.io/part-of"] == "specload"
    images = {
        c["image"]
        for d in docs
        if d["kind"] == "Deployment"
        for c in d["spec"]["template"]["spec"]["containers"]
    }
    assert images == {"registry.example/specload:1.2.3"}
    config_maps = {d["metadata"]["name"]: d for d in docs if d["kind"] == "ConfigMap"}
    exporter_cm = next(
        v for k, v in config_maps.items() if k.startswith("specload-exporter-config")
    )
    exporter = next(
        d
        for d in docs
        if d["kind"] == "Deployment" and d["metadata"]["name"] == "specload-exporter"
    )
    volume = exporter["spec"]["template"]["spec"]["volumes"][0]["configMap"]["name"]
    assert volume == exporter_cm["metadata"]["name"]  # kustomize rewrote the hashed name
    boards_root = ROOT / "grafana" / "dashboards"
    expected: dict[str, list[str]] = {}
    for board in boards_root.rglob("*.json"):
        group = board.parent.relative_to(boards_root).as_posix()
        name = "specload-dashboards" + ("" if group == "." else "-" + group.replace("/", "-"))
        expected.setdefault(name, []).append(board.name)
    boards = {k: v for k, v in config_maps.items() if k.startswith("specload-dashboards")}
    assert {k: sorted(v["data"]) for k, v in boards.items()} == {
        k: sorted(v) for k, v in expected.items()
    }
    for name, config_map in boards.items():
        assert config_map["metadata"]["labels"]["grafana_dashboard"] == "1"
        assert config_map["metadata"]["annotations"]["grafana_folder"].startswith("specload")
        for key, text in config_map["data"].items():
            assert json.loads(text)["uid"], (name, key)


def test_prometheus_rule_carries_every_repo_rule_group(rendered: Path) -> None:
    (rule,) = [d for d in base_documents(rendered) if d["kind"] == "PrometheusRule"]
    expected = []
    for path in rule_files(ROOT):
        expected += [g["name"] for g in yaml.safe_load(path.read_text())["groups"]]
    assert expected, "deploy/prometheus has no rule groups"
    assert [g["name"] for g in rule["spec"]["groups"]] == expected
    assert rule == prometheus_rule(ROOT) | {"metadata": rule["metadata"]}


def test_prometheus_rule_groups_pass_promtool(rendered: Path, tmp_path: Path) -> None:
    promtool = shutil.which("promtool")
    if promtool is None:
        pytest.skip("promtool is not installed (Debian package prometheus)")
    (rule,) = [d for d in base_documents(rendered) if d["kind"] == "PrometheusRule"]
    rules = tmp_path / "rules.yml"
    rules.write_text(yaml.safe_dump(rule["spec"]))
    result = subprocess.run(
        [promtool, "check", "rules", str(rules)],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert result.returncode == 0, result.stdout + result.stderr


def test_service_monitors_select_the_services_with_the_repo_job_names(rendered: Path) -> None:
    docs = base_documents(rendered)
    services = {d["metadata"]["name"]: d for d in docs if d["kind"] == "Service"}
    jobs = {s["metadata"]["labels"]["specload.io/job"] for s in services.values()}
    prometheus = yaml.safe_load((ROOT / "deploy" / "prometheus" / "prometheus.yml").read_text())
    repo_jobs = {j["job_name"] for j in prometheus["scrape_configs"]}
    assert jobs <= repo_jobs
    (main_monitor,) = [
        d for d in docs if d["kind"] == "ServiceMonitor" and d["metadata"]["name"] == "specload"
    ]
    selected = set(main_monitor["spec"]["selector"]["matchExpressions"][0]["values"])
    assert selected == jobs
    for service in services.values():
        # Every scraped Service exposes the port the monitor names.
        assert "metrics" in {p["name"] for p in service["spec"]["ports"]}


def test_deployments_reference_ports_and_the_master_service(rendered: Path) -> None:
    docs = base_documents(rendered)
    deployments = {d["metadata"]["name"]: d for d in docs if d["kind"] == "Deployment"}
    services = {d["metadata"]["name"]: d for d in docs if d["kind"] == "Service"}
    for service in services.values():
        (target,) = [
            d
            for d in deployments.values()
            if d["spec"]["template"]["metadata"]["labels"].items()
            >= service["spec"]["selector"].items()
        ]
        container_ports = {
            p["name"]
            for c in target["spec"]["template"]["spec"]["containers"]
            for p in c.get("ports", [])
        }
        for port in service["spec"]["ports"]:
            assert port["targetPort"] in container_ports
    worker = deployments["locust-worker"]["spec"]["template"]["spec"]["containers"][0]
    master_host = worker["command"][worker["command"].index("--master-host") + 1]
    assert master_host in services


@pytest.mark.parametrize(
    ("mutate", "message"),
    [
        (lambda d: d["spec"]["groups"][0]["rules"][0].update(exprr="up"), "exprr"),
        (lambda d: d["spec"]["groups"][0].update(interval="5 minutes"), "does not match"),
        (lambda d: d["spec"]["groups"][0]["rules"][0].pop("expr"), "'expr' is a required"),
    ],
)
def test_operator_schema_catches_mistakes(rendered: Path, mutate: Any, message: str) -> None:
    (rule,) = [d for d in base_documents(rendered) if d["kind"] == "PrometheusRule"]
    broken = copy.deepcopy(rule)
    mutate(broken)
    with pytest.raises(jsonschema.ValidationError, match=message):
        validate(broken)


def test_kubernetes_schema_catches_mistakes(rendered: Path) -> None:
    docs = base_documents(rendered)
    deployment = copy.deepcopy(next(d for d in docs if d["kind"] == "Deployment"))
    deployment["spec"]["replicas"] = "two"
    with pytest.raises(kubernetes_validate.ValidationError):
        validate(deployment)


def test_cli_renders(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["deploy", "k8s", "--out", str(tmp_path / "out"), "--repo", str(ROOT)]) == 0
    assert (tmp_path / "out" / "prometheusrule.yaml").exists()
    assert "kubectl apply -k" in capsys.readouterr().err
    assert main(["deploy", "k8s", "--out", str(tmp_path / "x"), "--repo", str(tmp_path)]) == 2


def test_locust_settings_are_options_the_load_generator_reads(rendered: Path) -> None:
    options = (ROOT / "specload" / "load" / "options.py").read_text()
    seen = 0
    for doc in base_documents(rendered):
        if doc["kind"] != "Deployment":
            continue
        for container in doc["spec"]["template"]["spec"]["containers"]:
            for env in container.get("env", []):
                if env["name"].startswith("SPECLOAD_"):
                    assert f'env_var="{env["name"]}"' in options, env["name"]
                    seen += 1
    assert seen >= 2


def test_exporter_config_map_is_a_valid_exporter_config() -> None:
    config = parse_config(yaml.safe_load((BASE / "exporter-config.yaml").read_text()), env={})
    assert [t.variant for t in config.targets] == ["baseline", "ngram"]
