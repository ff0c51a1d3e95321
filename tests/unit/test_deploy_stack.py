"""The local stack's plan and generated configs (no processes started)."""

from __future__ import annotations

import shutil
import socket
import subprocess
from pathlib import Path

import pytest
import yaml

from exporter.config import parse_config
from specload.cli import build_parser
from specload.errors import UsageError
from specload.stack import plan as plan_module
from specload.stack.configs import _seconds, exporter_config, prometheus_config, write_configs
from specload.stack.plan import DEFAULT_PORTS, StackOptions, build_plan, find_repo

pytestmark = pytest.mark.unit

ROOT = Path(__file__).resolve().parents[2]
needs_prometheus = pytest.mark.skipif(
    shutil.which("prometheus") is None or shutil.which("prometheus-alertmanager") is None,
    reason="Debian packages prometheus and prometheus-alertmanager are not installed",
)


def options(tmp_path: Path, **kw: object) -> StackOptions:
    return StackOptions(state_dir=tmp_path / "stack", repo=ROOT, **kw)  # type: ignore[arg-type]


@needs_prometheus
def test_default_plan_uses_the_documented_ports(tmp_path: Path) -> None:
    if not all(plan_module._port_free(p) for p in (8000, 8001, 8100, 8101, 9090, 9093, 9464)):
        pytest.skip("a default port is taken on this machine")
    plan = build_plan(options(tmp_path))
    assert [p.name for p in plan.parts] == [
        "baseline",
        "ngram",
        "alertmanager",
        "exporter",
        "prometheus",
    ]
    assert plan.part("baseline").ports == {"port": 8000, "control": 8100}
    assert plan.part("ngram").ports == {"port": 8001, "control": 8101}
    assert plan.part("prometheus").url == "http://127.0.0.1:9090"
    assert plan.part("exporter").ports == {"port": DEFAULT_PORTS["exporter"]}


@needs_prometheus
def test_plan_with_workers_and_free_ports(tmp_path: Path) -> None:
    plan = build_plan(options(tmp_path, workers=3, free_ports=True, variants=("a", "b", "c")))
    names = [p.name for p in plan.parts]
    assert names[-4:] == ["locust-master", "locust-worker-1", "locust-worker-2", "locust-worker-3"]
    ports = [port for p in plan.parts for port in p.ports.values()]
    assert len(ports) == len(set(ports))
    master = plan.part("locust-master")
    worker = plan.part("locust-worker-2").argv
    assert worker[worker.index("--master-port") + 1] == str(master.ports["master"])
    host = master.argv[master.argv.index("--host") + 1]
    assert host == plan.part("a").url


@needs_prometheus
def test_commands_are_accepted_by_the_sim_and_exporter_parsers(tmp_path: Path) -> None:
    plan = build_plan(options(tmp_path, free_ports=True, time_scale=10.0))
    parser = build_parser()
    for part in plan.parts:
        if part.argv[1:3] == ("-m", "specload"):
            args = parser.parse_args(list(part.argv[3:]))  # exits on an unknown flag
            assert args.command in ("sim", "exporter")


@needs_prometheus
def test_busy_default_port_is_one_line(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    with socket.socket() as holder:
        holder.bind(("127.0.0.1", 0))
        holder.listen()
        busy = holder.getsockname()[1]
        monkeypatch.setitem(plan_module.DEFAULT_PORTS, "prometheus", busy)  # type: ignore[index]
        with pytest.raises(UsageError, match=rf"prometheus \({busy}\).*--free-ports"):
            build_plan(options(tmp_path, free_ports=False, variants=("x",)))


@pytest.mark.parametrize(
    ("variants", "message"),
    [((), "at least one"), (("a", "a"), "twice"), (("prometheus",), "another part")],
)
def test_bad_variant_lists(tmp_path: Path, variants: tuple[str, ...], message: str) -> None:
    with pytest.raises(UsageError, match=message):
        build_plan(options(tmp_path, variants=variants))


def test_prometheus_config_keeps_jobs_and_points_at_the_stack() -> None:
    repo_config = ROOT / "deploy" / "prometheus" / "prometheus.yml"
    original = yaml.safe_load(repo_config.read_text())
    config = prometheus_config(repo_config, alertmanager="127.0.0.1:1234", scrape_interval_s=0.5)
    assert config["global"]["scrape_interval"] == "500ms"
    assert config["alerting"]["alertmanagers"][0]["static_configs"][0]["targets"] == [
        "127.0.0.1:1234"
    ]
    assert all(Path(p).is_absolute() for p in config["rule_files"])
    assert [j["job_name"] for j in config["scrape_configs"]] == [
        j["job_name"] for j in original["scrape_configs"]
    ]
    for job, before in zip(config["scrape_configs"], original["scrape_configs"], strict=True):
        assert {k: v for k, v in job.items() if k != "file_sd_configs"} == {
            k: v for k, v in before.items() if k != "file_sd_configs"
        }


@needs_prometheus
def test_generated_configs_pass_promtool_and_the_exporter(tmp_path: Path) -> None:
    plan = build_plan(options(tmp_path, free_ports=True, workers=1, scrape_interval_s=1.0))
    write_configs(plan)
    state = tmp_path / "stack"
    result = subprocess.run(
        ["promtool", "check", "config", str(state / "prometheus" / "prometheus.yml")],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    assert "0 rule files found" not in result.stdout
    vllm = yaml.safe_load((state / "prometheus" / "targets" / "vllm.yml").read_text())
    assert [(g["targets"], g["labels"]["variant"]) for g in vllm] == [
        ([f"127.0.0.1:{plan.part(v).ports['port']}"], v) for v in ("baseline", "ngram")
    ]
    loadgen = yaml.safe_load(
        (state / "prometheus" / "targets" / "specload-loadgen.yml").read_text()
    )
    assert loadgen == [{"targets": [f"127.0.0.1:{plan.part('locust-master').ports['metrics']}"]}]
    cfg = parse_config(yaml.safe_load((state / "exporter.yaml").read_text()))
    assert cfg.port == plan.part("exporter").ports["port"]
    assert [t.variant for t in cfg.targets] == ["baseline", "ngram"]
    assert exporter_config(plan)["targets"][0]["url"] == plan.part("baseline").url


def test_prometheus_durations() -> None:
    assert [_seconds(v) for v in (5, 0.8, 1.5, 60)] == ["5s", "800ms", "1500ms", "60s"]


def test_find_repo(tmp_path: Path) -> None:
    assert find_repo(str(ROOT)) == ROOT
    with pytest.raises(UsageError, match="--repo"):
        find_repo(str(tmp_path))
