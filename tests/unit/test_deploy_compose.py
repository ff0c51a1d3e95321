"""Compose, without a Docker engine: the compose-spec schema, then cross-references
(services, aliases, ports, mounted paths, commands the programs accept) and the
Prometheus/Alertmanager configs as mounted, checked by promtool and amtool."""

from __future__ import annotations

import re
import shlex
import shutil
import subprocess
from importlib import resources
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import jsonschema
import pytest
import yaml

from exporter.config import load_config
from specload.cli import build_parser

pytestmark = pytest.mark.unit

ROOT = Path(__file__).resolve().parents[2]
COMPOSE_DIR = ROOT / "deploy" / "compose"
COMPOSE_FILE = COMPOSE_DIR / "compose.yaml"
PROFILES = ("sim", "gpu")
# Ports the upstream images listen on (not visible in their commands).
IMAGE_PORTS = {"prometheus": 9090, "alertmanager": 9093, "grafana": 3000}
_INTERPOLATION = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)(?::?-([^}]*))?\}")


def interpolate(value: str) -> str:
    """Compose's ``${VAR:-default}`` with every variable unset; ``$$`` is a literal ``$``."""
    return _INTERPOLATION.sub(lambda m: m.group(2) or "", value).replace("$$", "$")


@pytest.fixture(scope="module")
def compose() -> dict[str, Any]:
    data = yaml.safe_load(COMPOSE_FILE.read_text())
    assert isinstance(data, dict)
    return data


def services_in(compose: dict[str, Any], profile: str) -> dict[str, Any]:
    return {
        name: s
        for name, s in compose["services"].items()
        if not s.get("profiles") or profile in s["profiles"]
    }


def names_on_network(service_name: str, service: dict[str, Any]) -> set[str]:
    names = {service_name}
    for network in (service.get("networks") or {}).values():
        names |= set((network or {}).get("aliases", []))
    return names


def argv_of(service: dict[str, Any]) -> list[str]:
    command = service.get("command") or []
    return [interpolate(c) for c in (shlex.split(command) if isinstance(command, str) else command)]


def listening_ports(name: str, service: dict[str, Any]) -> set[int]:
    ports: set[int] = set()
    image = interpolate(service.get("image", ""))
    for key, port in IMAGE_PORTS.items():
        if key in name or f"/{key}:" in image:
            ports.add(port)
    words = argv_of(service)
    env = {k: interpolate(str(v)) for k, v in (service.get("environment") or {}).items()}
    words += shlex.split(env.get("VLLM_ARGS", ""))
    for flag in ("--port", "--master-bind-port", "--web-port", "--control-port"):
        if flag in words:
            ports.add(int(words[words.index(flag) + 1]))
    metrics = env.get("SPECLOAD_METRICS_ADDRESS")
    if metrics:
        ports.add(int(metrics.rsplit(":", 1)[1]))
    return ports


def test_compose_file_matches_the_compose_spec_schema(compose: dict[str, Any]) -> None:
    schema_text = (
        resources.files("check_jsonschema") / "builtin_schemas/vendor/compose-spec.json"
    ).read_text()
    schema = yaml.safe_load(schema_text)
    jsonschema.Draft202012Validator(schema).validate(compose)
    licence = resources.files("check_jsonschema") / "builtin_schemas/vendor/licenses"
    assert (licence / "LICENSE.compose-spec").is_file()


def test_schema_catches_a_typo(compose: dict[str, Any]) -> None:
    schema = yaml.safe_load(
        (
            resources.files("check_jsonschema") / "builtin_schemas/vendor/compose-spec.json"
        ).read_text()
    )
    broken = yaml.safe_load(COMPOSE_FILE.read_text())
    broken["services"]["exporter"]["volume"] = broken["services"]["exporter"].pop("volumes")
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.Draft202012Validator(schema).validate(broken)


def test_service_references_exist(compose: dict[str, Any]) -> None:
    services = compose["services"]
    declared_volumes = set(compose.get("volumes") or {})
    for name, service in services.items():
        for dep in service.get("depends_on") or []:
            assert dep in services, f"{name}: depends_on {dep}"
        mode = service.get("network_mode", "")
        if mode.startswith("service:"):
            assert mode.split(":", 1)[1] in services, f"{name}: network_mode {mode}"
        for volume in service.get("volumes") or []:
            source = interpolate(volume).split(":", 1)[0]
            if source.startswith("."):
                assert (COMPOSE_DIR / source).exists(), f"{name}: mounts missing {source}"
            elif not source.startswith("/"):
                assert source in declared_volumes, f"{name}: undeclared volume {source}"


def test_build_context_and_dockerfile_copy_sources_exist(compose: dict[str, Any]) -> None:
    builds = {
        str(s["build"]["context"]) + "|" + s["build"]["dockerfile"]
        for s in compose["services"].values()
        if "build" in s
    }
    assert len(builds) == 1
    context, dockerfile = builds.pop().split("|")
    context_dir = (COMPOSE_DIR / context).resolve()
    assert context_dir == ROOT
    copies = [
        line.split()[1:-1]
        for line in (context_dir / dockerfile).read_text().splitlines()
        if line.startswith("COPY ")
    ]
    for sources in copies:
        for source in sources:
            if source == "README.md" and not (context_dir / source).exists():
                continue  # written by the lead with the README; the build needs it
            assert (context_dir / source).exists(), source


@pytest.mark.parametrize("profile", PROFILES)
def test_each_profile_names_every_server_and_ports_do_not_clash(
    compose: dict[str, Any], profile: str
) -> None:
    active = services_in(compose, profile)
    network: dict[str, str] = {}
    for name, service in active.items():
        if service.get("network_mode", "").startswith("service:"):
            continue
        for alias in names_on_network(name, service):
            assert alias not in network, f"{alias} named by {network.get(alias)} and {name}"
            network[alias] = name
    # Prometheus shares Alertmanager's namespace: reachable under Alertmanager's names.
    listening: dict[str, set[int]] = {}
    for name, service in active.items():
        mode = service.get("network_mode", "")
        owner = mode.split(":", 1)[1] if mode.startswith("service:") else name
        listening.setdefault(owner, set()).update(listening_ports(name, service))

    def reachable(host: str, port: int) -> bool:
        return host in network and port in listening.get(network[host], set())

    targets = []
    for path in (COMPOSE_DIR / "prometheus" / "targets").glob("*.yml"):
        for group in yaml.safe_load(path.read_text()):
            targets += group["targets"]
    exporter_cfg = yaml.safe_load((COMPOSE_DIR / "exporter.yaml").read_text())
    for target in exporter_cfg["targets"]:
        url = urlsplit(target["url"])
        targets.append(f"{url.hostname}:{url.port}")
    master = active["locust-master"]
    targets.append(interpolate(master["environment"]["LOCUST_HOST"]).split("//", 1)[1])
    worker = argv_of(active["locust-worker"])
    targets.append(
        worker[worker.index("--master-host") + 1] + ":" + worker[worker.index("--master-port") + 1]
    )
    assert len(targets) >= 7
    for target in targets:
        host, port = target.rsplit(":", 1)
        assert reachable(host, int(port)), f"profile {profile}: nothing listens on {target}"

    published: dict[int, str] = {}
    for name, service in active.items():
        for spec in service.get("ports") or []:
            host_port, container_port = (int(p) for p in str(spec).split(":")[-2:])
            assert host_port not in published, f"{host_port}: {published.get(host_port)}, {name}"
            published[host_port] = name
            owner_ports = listening.get(name, set())
            assert container_port in owner_ports, f"{name} publishes {container_port}"


def test_gpu_services_differ_only_in_speculative_flags(compose: dict[str, Any]) -> None:
    gpu = {n: s for n, s in compose["services"].items() if "gpu" in (s.get("profiles") or [])}
    assert set(gpu) == {"vllm-baseline", "vllm-ngram"}
    strip = {"command", "networks"}
    first, second = ({k: v for k, v in s.items() if k not in strip} for s in gpu.values())
    assert first == second
    env = gpu["vllm-baseline"]["environment"]
    assert env["NCCL_PROTO"] == "LL" and env["NCCL_ALGO"] == "Ring"
    assert gpu["vllm-baseline"]["command"] == []
    assert gpu["vllm-ngram"]["command"][0] == "--speculative-config"


def test_specload_commands_are_accepted_by_their_parsers(compose: dict[str, Any]) -> None:
    parser = build_parser()
    seen = 0
    for service in compose["services"].values():
        argv = argv_of(service)
        if argv[:1] == ["specload"]:
            parser.parse_args(argv[1:])  # exits on an unknown flag
            seen += 1
    assert seen >= 3


def test_exporter_config_loads() -> None:
    config = load_config(COMPOSE_DIR / "exporter.yaml", env={})
    assert [t.variant for t in config.targets] == ["baseline", "ngram"]


def _materialise(service: dict[str, Any], root: Path) -> None:
    """Copy a service's relative bind mounts into ``root`` at their container paths."""
    for volume in service.get("volumes") or []:
        source, target = interpolate(volume).split(":")[:2]
        if not source.startswith("."):
            continue
        src = (COMPOSE_DIR / source).resolve()
        dest = root / target.lstrip("/")
        if src.is_dir():
            shutil.copytree(src, dest)
        else:
            dest.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy(src, dest)


def test_prometheus_config_as_mounted_passes_promtool(
    compose: dict[str, Any], tmp_path: Path
) -> None:
    promtool = shutil.which("promtool")
    if promtool is None:
        pytest.skip("promtool is not installed (Debian package prometheus)")
    _materialise(compose["services"]["prometheus"], tmp_path)
    config = tmp_path / "etc" / "prometheus" / "prometheus.yml"
    result = subprocess.run(
        [promtool, "check", "config", str(config)],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    assert "rule files found" in result.stdout
    assert "0 rule files found" not in result.stdout


def test_alertmanager_config_as_mounted_passes_amtool(
    compose: dict[str, Any], tmp_path: Path
) -> None:
    amtool = shutil.which("amtool")
    if amtool is None:
        pytest.skip("amtool is not installed (Debian package prometheus-alertmanager)")
    _materialise(compose["services"]["alertmanager"], tmp_path)
    result = subprocess.run(
        [amtool, "check-config", str(tmp_path / "etc/alertmanager/alertmanager.yml")],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert result.returncode == 0, result.stdout + result.stderr


def test_systemd_path_prometheus_config_passes_promtool() -> None:
    # On a systemd host Prometheus runs the repo's config as is (docs/deploy.md).
    promtool = shutil.which("promtool")
    if promtool is None:
        pytest.skip("promtool is not installed (Debian package prometheus)")
    result = subprocess.run(
        [promtool, "check", "config", str(ROOT / "deploy" / "prometheus" / "prometheus.yml")],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert result.returncode == 0, result.stdout + result.stderr


def test_grafana_provisioning_resolves_inside_compose(compose: dict[str, Any]) -> None:
    grafana = compose["services"]["grafana"]
    env = {k: interpolate(str(v)) for k, v in grafana["environment"].items()}
    provisioning = ROOT / "grafana" / "provisioning"
    used = set()
    for path in provisioning.rglob("*.y*ml"):
        used |= set(re.findall(r"\$\{(SPECLOAD_[A-Z_]+)\}", path.read_text()))
    assert used <= set(env), f"unset in compose: {used - set(env)}"
    mounts = {}
    for volume in grafana["volumes"]:
        source, target = interpolate(volume).split(":")[:2]
        mounts[target] = (COMPOSE_DIR / source).resolve()
    assert mounts["/etc/grafana/provisioning"] == provisioning
    boards = mounts[env["SPECLOAD_GRAFANA_DASHBOARDS"]]
    assert boards == ROOT / "grafana" / "dashboards"
    for path in (provisioning / "dashboards").glob("*.y*ml"):
        for provider in yaml.safe_load(path.read_text())["providers"]:
            folder = provider["options"]["path"].replace(
                "${SPECLOAD_GRAFANA_DASHBOARDS}", str(boards)
            )
            assert list(Path(folder).glob("*.json")), f"{provider['name']}: no boards in {folder}"
    url = urlsplit(env["SPECLOAD_PROMETHEUS_URL"])
    owners = [
        n
        for n, s in compose["services"].items()
        if url.hostname in names_on_network(n, s) and "network_mode" not in s
    ]
    assert owners == ["alertmanager"]  # Prometheus lives in Alertmanager's network namespace
    assert compose["services"]["prometheus"]["network_mode"] == "service:alertmanager"
    assert url.port == 9090


def test_locust_settings_are_options_the_load_generator_reads(compose: dict[str, Any]) -> None:
    options = (ROOT / "specload" / "load" / "options.py").read_text()
    for name in ("locust-master", "locust-worker"):
        for key in compose["services"][name].get("environment") or {}:
            if key.startswith("SPECLOAD_"):
                assert f'env_var="{key}"' in options, f"{name}: {key} is not a load option"
