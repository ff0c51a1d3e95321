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
from specload.deploy.k8s import (
    build,
    check_workers,
    prometheus_rule,
    render,
    render_overlay,
    rule_files,
)
from specload.errors import UsageError

pytestmark = pytest.mark.unit

ROOT = Path(__file__).resolve().parents[2]
BASE = ROOT / "deploy" / "k8s" / "base"
OPERATOR_SCHEMA = json.loads(
    (ROOT / "deploy" / "k8s" / "schemas" / "monitoring.coreos.com-v1.json").read_text()
)
K8S_VERSION = "1.30.0"
# what the base renders, and the overlay too (it patches, it adds no resource)
KINDS = ["Deployment"] * 3 + ["PrometheusRule"] + ["Service"] * 2 + ["ServiceMonitor"] * 2
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
    assert sorted(d["kind"] for d in docs) == KINDS
    for doc in docs:
        validate(doc)


@pytest.mark.skipif(KUBECTL is None, reason="kubectl (with kustomize) is not installed")
def test_kustomize_build_validates(rendered: Path) -> None:
    docs = kubectl_kustomize(rendered)
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


# -- 50 workers: the overlay ----------------------------------------------------------
# Rendered by `specload deploy k8s --overlay` and built by specload's own kustomize subset
# (specload.deploy.k8s.build: resources, strategic-merge patches, replicas, replacements,
# …), which runs on every machine; where kubectl is installed, `kubectl kustomize` builds
# the same folder and the two must give the same objects.

OVERLAY = "workers-50"
OVERLAY_DIR = ROOT / "deploy" / "k8s" / "overlays" / OVERLAY


@pytest.fixture(scope="module")
def overlay(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("k8s-overlay")
    applied, _ = render_overlay(
        ROOT, out, OVERLAY, image="registry.example/specload:1.2.3", namespace="loadtest"
    )
    assert applied == out / "overlays" / OVERLAY
    return applied


def deployment(docs: list[dict[str, Any]], name: str) -> dict[str, Any]:
    (found,) = [d for d in docs if d["kind"] == "Deployment" and d["metadata"]["name"] == name]
    return found


def container(docs: list[dict[str, Any]], name: str, container_name: str) -> dict[str, Any]:
    pod = deployment(docs, name)["spec"]["template"]["spec"]
    (found,) = [c for c in pod["containers"] if c["name"] == container_name]
    return found


def master_env(docs: list[dict[str, Any]]) -> dict[str, str]:
    return {e["name"]: e["value"] for e in container(docs, "locust-master", "master")["env"]}


def assert_workers_agree(docs: list[dict[str, Any]]) -> int:
    """The worker Deployment's replicas == the workers the master waits for; returns it.
    (Read here from the objects, not with the renderer's own check.)"""
    master = container(docs, "locust-master", "master")
    # Locust reads the expected workers from the env; a flag would override it.
    assert not any(a.startswith("--expect-workers") for a in master["command"])
    replicas = deployment(docs, "locust-worker")["spec"]["replicas"]
    expected = int(master_env(docs)["LOCUST_EXPECT_WORKERS"])
    assert replicas == expected, f"{replicas} workers run, the master waits for {expected}"
    return replicas


def test_base_master_waits_for_the_base_workers(rendered: Path) -> None:
    docs = build(rendered)
    assert assert_workers_agree(docs) == 2
    assert int(master_env(docs)["LOCUST_EXPECT_WORKERS_MAX_WAIT"]) > 0


def test_overlay_runs_50_workers_and_the_master_waits_for_them(overlay: Path) -> None:
    docs = build(overlay)
    assert sorted(d["kind"] for d in docs) == KINDS
    for doc in docs:
        validate(doc)
        assert doc["metadata"]["namespace"] == "loadtest"
    assert assert_workers_agree(docs) == 50
    env = master_env(docs)
    # Every setting of the overlay's master patch arrives as written (a replacement whose
    # path matched more than LOCUST_EXPECT_WORKERS would overwrite one of them).
    patch = yaml.safe_load((OVERLAY_DIR / "master-autostart.yaml").read_text())
    (patched,) = patch["spec"]["template"]["spec"]["containers"]
    assert {e["name"]: env[e["name"]] for e in patched["env"]} == {
        e["name"]: e["value"] for e in patched["env"]
    }
    assert env["LOCUST_AUTOSTART"] == "true"  # the run starts once the 50 are connected
    assert 0 < int(env["LOCUST_EXPECT_WORKERS_MAX_WAIT"]) <= 3600  # and never waits forever
    users = int(env["LOCUST_USERS"])
    assert users >= 50 and users % 50 == 0  # every worker runs as many users
    master = container(docs, "locust-master", "master")
    assert "--enable-rebalancing" in master["command"]
    worker = container(docs, "locust-worker", "worker")
    # One Locust process uses one core at most: a core requested, no CPU limit (throttling).
    assert worker["resources"]["requests"]["cpu"] == "1"
    for c in (master, worker):
        assert "cpu" not in c["resources"].get("limits", {})
    # The workers reach the master by its Service, on the port the master listens on.
    services = {d["metadata"]["name"]: d for d in docs if d["kind"] == "Service"}
    host = worker["command"][worker["command"].index("--master-host") + 1]
    port = worker["command"][worker["command"].index("--master-port") + 1]
    assert int(port) in {p["port"] for p in services[host]["spec"]["ports"]}
    # The base's other objects are there unchanged.
    base = {(d["kind"], d["metadata"]["name"]): d for d in build(overlay.parents[1] / "base")}
    for doc in docs:
        if doc["kind"] != "Deployment":
            assert doc == base[(doc["kind"], doc["metadata"]["name"])]


def _break_without_replacement(kustomization: dict[str, Any], folder: Path) -> None:
    del kustomization["replacements"]  # replicas 50, the master still waits for 2


def _break_master_only(kustomization: dict[str, Any], folder: Path) -> None:
    # The master told 50 by a patch, the Deployment left at the base's 2.
    del kustomization["replicas"]
    del kustomization["replacements"]
    (folder / "expect.yaml").write_text(
        yaml.safe_dump(
            {
                "apiVersion": "apps/v1",
                "kind": "Deployment",
                "metadata": {"name": "locust-master"},
                "spec": {
                    "template": {
                        "spec": {
                            "containers": [
                                {
                                    "name": "master",
                                    "env": [{"name": "LOCUST_EXPECT_WORKERS", "value": "50"}],
                                }
                            ]
                        }
                    }
                },
            }
        )
    )
    kustomization["patches"].append({"path": "expect.yaml"})


def _break_replacement_target(kustomization: dict[str, Any], folder: Path) -> None:
    # The replacement aimed at another Deployment: the master keeps the base's 2.
    kustomization["replacements"][0]["targets"][0]["select"]["name"] = "specload-exporter"
    kustomization["replacements"][0]["targets"][0]["fieldPaths"] = ["spec.replicas"]


@pytest.fixture(
    params=[_break_without_replacement, _break_master_only, _break_replacement_target],
    ids=["replicas-only", "master-only", "replacement-elsewhere"],
)
def broken_overlay(request: pytest.FixtureRequest, overlay: Path, tmp_path: Path) -> Path:
    """The rendered tree with the overlay changed so that the two counts disagree."""
    tree = tmp_path / "tree"
    shutil.copytree(overlay.parents[1], tree)
    folder = tree / "overlays" / OVERLAY
    kustomization = yaml.safe_load((folder / "kustomization.yaml").read_text())
    request.param(kustomization, folder)
    (folder / "kustomization.yaml").write_text(yaml.safe_dump(kustomization))
    return folder


def test_an_overlay_whose_counts_disagree_fails(broken_overlay: Path) -> None:
    docs = build(broken_overlay)
    with pytest.raises(AssertionError, match="workers run, the master waits for"):
        assert_workers_agree(docs)
    with pytest.raises(
        UsageError, match=r"locust-worker runs \d+ replicas but the master waits for"
    ):
        check_workers(docs, where="overlay")
    if KUBECTL is not None:  # kustomize itself builds the same disagreement
        with pytest.raises(AssertionError, match="workers run, the master waits for"):
            assert_workers_agree(kubectl_kustomize(broken_overlay))


def test_render_refuses_an_overlay_whose_counts_disagree(tmp_path: Path) -> None:
    repo = tmp_path / "repo"
    for part in ("deploy", "grafana"):
        shutil.copytree(ROOT / part, repo / part)
    kustomization = repo / "deploy" / "k8s" / "overlays" / OVERLAY / "kustomization.yaml"
    data = yaml.safe_load(kustomization.read_text())
    del data["replacements"]
    kustomization.write_text(yaml.safe_dump(data))
    with pytest.raises(UsageError, match="runs 50 replicas but the master waits for 2"):
        render_overlay(repo, tmp_path / "out", OVERLAY)
    with pytest.raises(UsageError, match="no overlay 'workers-5'"):
        render_overlay(repo, tmp_path / "out", "workers-5")


def test_build_refuses_what_it_does_not_apply(overlay: Path, tmp_path: Path) -> None:
    shutil.copytree(overlay.parents[1], tmp_path / "tree")
    folder = tmp_path / "tree" / "overlays" / OVERLAY
    kustomization = folder / "kustomization.yaml"
    data = yaml.safe_load(kustomization.read_text())
    for changed, message in [
        ({"commonLabels": {"a": "b"}}, "commonLabels: outside"),
        ({"patches": [{"patch": "x"}]}, r"only \{path: FILE\}"),
        ({"resources": ["../../nowhere"]}, "nowhere: not found"),
    ]:
        kustomization.write_text(yaml.safe_dump(data | changed))
        with pytest.raises(UsageError, match=message):
            build(folder)


def kubectl_kustomize(folder: Path) -> list[dict[str, Any]]:
    assert KUBECTL is not None
    result = subprocess.run(
        [KUBECTL, "kustomize", str(folder)],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert result.returncode == 0, result.stderr
    return [d for d in yaml.safe_load_all(result.stdout) if d]


def _unhashed(docs: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """kustomize's objects less its generated ConfigMaps, their references unhashed."""
    hashed = {
        d["metadata"]["name"]: d["metadata"]["name"].rsplit("-", 1)[0]
        for d in docs
        if d["kind"] == "ConfigMap" and "specload-exporter-config" in d["metadata"]["name"]
    }
    out = []
    for doc in docs:
        if doc["kind"] == "ConfigMap":
            continue
        for volume in doc.get("spec", {}).get("template", {}).get("spec", {}).get("volumes", []):
            if "configMap" in volume:
                name = volume["configMap"]["name"]
                volume["configMap"]["name"] = hashed.get(name, name)
        out.append(doc)
    return out


@pytest.mark.skipif(KUBECTL is None, reason="kubectl (with kustomize) is not installed")
@pytest.mark.parametrize("which", ["overlay", "base"])
def test_kustomize_builds_what_specload_builds(overlay: Path, which: str) -> None:
    folder = overlay if which == "overlay" else overlay.parents[1] / "base"
    docs = kubectl_kustomize(folder)
    for doc in docs:
        validate(doc)
    assert assert_workers_agree(docs) == (50 if which == "overlay" else 2)
    key = lambda d: (d["kind"], d["metadata"]["name"])  # noqa: E731
    ours = {key(d): d for d in build(folder)}
    theirs = {key(d): d for d in _unhashed(docs)}
    assert ours.keys() == theirs.keys()
    for name, doc in ours.items():
        assert doc == theirs[name], name


def test_cli_renders_an_overlay(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "out"
    assert (
        main(["deploy", "k8s", "--out", str(out), "--overlay", OVERLAY, "--repo", str(ROOT)]) == 0
    )
    assert f"kubectl apply -k {out / 'overlays' / OVERLAY}" in capsys.readouterr().err
    assert (out / "base" / "prometheusrule.yaml").exists()
    assert main(["deploy", "k8s", "--out", str(out), "--overlay", "nope", "--repo", str(ROOT)]) == 2
    assert "no overlay 'nope'" in capsys.readouterr().err
