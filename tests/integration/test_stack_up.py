"""`specload stack` on this machine: real simulators, exporter, Prometheus, Alertmanager,
Locust master and worker as processes; a sweep through it; a reload seen by the
exporter and Prometheus; `down` leaves no process behind."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import httpx
import pytest

from specload.cli import main
from specload.promtext import parse
from specload.stack.procs import ProcessId, group_members, is_running
from tests.fixtures.processes import processes_mentioning

pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parents[2]


def specload(*args: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "specload", *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        cwd=ROOT,
        check=False,
    )


def wait_for(check: Any, timeout_s: float, what: str) -> Any:
    deadline = time.monotonic() + timeout_s
    last: Any = None
    while time.monotonic() < deadline:
        last = check()
        if last:
            return last
        time.sleep(0.25)
    raise AssertionError(f"timed out waiting for {what} (last: {last!r})")


def metric_value(url: str, name: str, labels: dict[str, str]) -> float | None:
    try:
        text = httpx.get(url, timeout=2).text
    except httpx.HTTPError:
        return None
    family = parse(text).get_family(name)
    return None if family is None else family.total(labels)


@pytest.fixture
def stack_dir(tmp_path: Path) -> Any:
    state = tmp_path / "stack"
    yield state
    # Whatever happens in the test, stop what was started.
    if (state / "stack.json").exists():
        specload("stack", "down", "--state-dir", str(state), timeout=60)
    for pid in processes_mentioning(str(state)):
        os.kill(pid, 9)


@pytest.mark.slow
def test_stack_up_sweep_reload_down(
    stack_dir: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    up = specload(
        "stack",
        "up",
        "--state-dir",
        str(stack_dir),
        "--free-ports",
        "--workers",
        "1",
        "--scrape-interval",
        "1s",
        "--load-time",
        "1s",
        "--time-scale",
        "20",
        "--timeout",
        "60s",
    )
    assert up.returncode == 0, up.stdout + up.stderr
    assert "prometheus" in up.stdout and "http://127.0.0.1:" in up.stdout
    state = json.loads((stack_dir / "stack.json").read_text())
    parts = {p["name"]: p for p in state["parts"]}
    assert set(parts) == {
        "baseline",
        "ngram",
        "alertmanager",
        "exporter",
        "prometheus",
        "locust-master",
        "locust-worker-1",
    }
    prometheus = parts["prometheus"]["url"]
    for name, part in parts.items():
        assert (stack_dir / "pids" / f"{name}.pid").read_text() == f"{part['pid']}\n"

    # A second `up` on the same folder is refused (the CLI in-process from here on).
    assert main(["stack", "up", "--state-dir", str(stack_dir), "--free-ports"]) == 2
    assert "already running" in capsys.readouterr().err

    assert main(["stack", "status", "--state-dir", str(stack_dir), "--json"]) == 0
    status = json.loads(capsys.readouterr().out)
    assert {p["health"] for p in status["parts"]} == {"healthy"}

    # Every Prometheus target is healthy: both variants, the exporter, the load generator.
    def targets_up() -> list[dict[str, Any]] | None:
        active = httpx.get(f"{prometheus}/api/v1/targets", timeout=2).json()["data"][
            "activeTargets"
        ]
        return active if active and all(t["health"] == "up" for t in active) else None

    active = wait_for(targets_up, 30, "all Prometheus targets up")
    jobs = sorted((t["labels"]["job"], t["labels"].get("variant", "")) for t in active)
    assert jobs == [
        ("specload-exporter", ""),
        ("specload-loadgen", ""),
        ("vllm", "baseline"),
        ("vllm", "ngram"),
    ]
    rules = httpx.get(f"{prometheus}/api/v1/rules", timeout=2).json()["data"]["groups"]
    assert rules, "the repo's rules and alerts are loaded"
    alertmanagers = httpx.get(f"{prometheus}/api/v1/alertmanagers", timeout=2).json()
    assert alertmanagers["data"]["activeAlertmanagers"][0]["url"].startswith(
        parts["alertmanager"]["url"]
    )

    # A short sweep through the stack's baseline server.
    results = tmp_path / "results"
    sweep = specload(
        "run",
        "--host",
        parts["baseline"]["url"],
        "--concurrency",
        "2",
        "--warmup",
        "0",
        "--duration",
        "2s",
        "--max-tokens",
        "64",
        "--variant",
        "baseline",
        "--metrics-address",
        "off",
        "--progress",
        "off",
        "--out",
        str(results),
        timeout=90,
    )
    assert sweep.returncode == 0, sweep.stdout + sweep.stderr
    summary = json.loads((results / "summary.json").read_text())
    assert summary["status"] == "complete"
    # And through the stack's own Locust master and worker (its web API).
    master = parts["locust-master"]["url"]
    swarm = httpx.post(
        f"{master}/swarm",
        data={"user_count": 2, "spawn_rate": 2, "host": parts["ngram"]["url"]},
        timeout=5,
    )
    assert swarm.status_code == 200, swarm.text

    def requests_done() -> int:
        stats = httpx.get(f"{master}/stats/requests", timeout=2).json()
        total = next((s for s in stats["stats"] if s["name"] == "Aggregated"), None)
        return int(total["num_requests"]) if total and stats["worker_count"] == 1 else 0

    wait_for(requests_done, 20, "requests through the Locust worker")
    stopped = httpx.post(f"{master}/stop", timeout=5)  # Locust 2.47: POST only
    assert stopped.status_code == 200, stopped.text
    wait_for(
        lambda: httpx.get(f"{master}/stats/requests", timeout=2).json()["state"] == "stopped",
        20,
        "the swarm stopped",
    )

    # A reload of the ngram server, seen by the exporter and then in Prometheus.
    exporter = parts["exporter"]["url"]
    # (The exporter may count the first load, when it polled before the servers were up.)
    before = {
        v: metric_value(exporter, "specload_target_reloads_total", {"variant": v})
        for v in ("baseline", "ngram")
    }
    assert None not in before.values()
    assert (
        main(
            [
                "stack",
                "reload",
                "ngram",
                "--state-dir",
                str(stack_dir),
                "--wait",
                "--timeout",
                "30s",
            ]
        )
        == 0
    )
    assert "ngram serves again" in capsys.readouterr().out
    wait_for(
        lambda: (
            (metric_value(exporter, "specload_target_reloads_total", {"variant": "ngram"}) or 0)
            >= before["ngram"] + 1
        ),
        15,
        "exporter sees the reload",
    )
    assert (
        metric_value(exporter, "specload_target_reloads_total", {"variant": "baseline"})
        == before["baseline"]
    )

    def prometheus_reloads() -> float:
        result = httpx.get(
            f"{prometheus}/api/v1/query",
            timeout=2,
            params={"query": 'specload_target_reloads_total{variant="ngram"}'},
        ).json()["data"]["result"]
        return float(result[0]["value"][1]) if result else 0.0

    wait_for(
        lambda: prometheus_reloads() >= before["ngram"] + 1, 15, "Prometheus records the reload"
    )

    # Down stops exactly what up started, leaving nothing behind.
    processes = [ProcessId(p["pid"], p["start_ticks"]) for p in parts.values()]
    assert all(is_running(p) for p in processes)
    down = specload("stack", "down", "--state-dir", str(stack_dir), timeout=60)
    assert down.returncode == 0, down.stderr
    assert not [p for p in processes if is_running(p)]
    assert not [p for p in processes if group_members(p.pid)]
    assert processes_mentioning(str(stack_dir)) == []
    assert not (stack_dir / "stack.json").exists()
    assert list((stack_dir / "pids").iterdir()) == []
    assert main(["stack", "status", "--state-dir", str(stack_dir)]) == 3


def test_a_part_that_fails_is_reported_and_the_rest_stopped(stack_dir: Path) -> None:
    up = specload(
        "stack",
        "up",
        "--state-dir",
        str(stack_dir),
        "--free-ports",
        "--variants",
        "baseline,no-such-variant",
        "--load-time",
        "0",
        "--timeout",
        "30s",
    )
    assert up.returncode == 1
    assert "no-such-variant failed to start" in up.stderr
    assert "  | " in up.stderr  # the failing part's log tail
    assert "stopping the parts that did start" in up.stderr
    assert processes_mentioning(str(stack_dir)) == []
    assert not (stack_dir / "stack.json").exists()


def test_reload_without_a_stack_is_one_line(
    stack_dir: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["stack", "reload", "ngram", "--state-dir", str(stack_dir)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "no stack" in err
