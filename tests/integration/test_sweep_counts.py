"""``specload run`` counts against the simulator's own counters: exactly N requests per
count-based level (one process and with workers), requests in flight at the drain deadline
recorded as unfinished, a killed worker's requests booked lost (the other worker carries the
rest), and the exit code of a run in which every request failed."""

from __future__ import annotations

import time
from pathlib import Path

import httpx
import jsonschema
import psutil
import pytest

from specload.results import read_requests, read_summary, summary_schema

pytestmark = pytest.mark.integration

SIM = ["--time-scale", "10"]
LOAD = ["--metrics-address", "off", "--progress", "plain", "--no-plots"]


def server_requests(url: str) -> float:
    """Requests the simulator finished, from its own ``vllm:request_success_total``."""
    text = httpx.get(url + "/metrics", timeout=10).text
    return sum(
        float(line.rsplit(" ", 1)[1])
        for line in text.splitlines()
        if line.startswith("vllm:request_success_total")
    )


def level_records(out: Path, step: str) -> list[dict]:
    return [r for r in read_requests(out) if r["step"] == step]


@pytest.mark.parametrize("workers", [0, 2])
def test_requests_n_sends_exactly_n(sweep_sim, specload_run, tmp_path, workers):
    sim = sweep_sim(["--variant", "baseline", *SIM])
    out = tmp_path / "run"
    args = [
        "run",
        "--host",
        sim.url,
        "--concurrency",
        "1,4,16",
        "--warmup",
        "0",
        "--requests",
        "20",
        "--max-tokens",
        "64",
        "--out",
        str(out),
        *LOAD,
    ]
    if workers:
        args += ["--workers", str(workers)]
    result = specload_run(args, timeout=180)
    assert result.returncode == 0, result.stderr
    summary = read_summary(out)
    jsonschema.validate(summary, summary_schema())
    assert summary["status"] == "complete"
    for level in summary["levels"]:
        records = level_records(out, level["name"])
        assert level["completed"] + level["failed"] == 20 == len(records), level["name"]
        assert level["planned_requests"] == 20
    # the server served exactly the run's requests (no warm-up: nothing else ran)
    assert server_requests(sim.url) == 60
    if workers:
        assert len({r["worker"] for r in read_requests(out)}) == workers


def test_drain_deadline_records_unfinished_requests(sweep_sim, specload_run, tmp_path):
    sim = sweep_sim(["--variant", "baseline", "--time-scale", "1"])
    out = tmp_path / "run"
    result = specload_run(
        [
            "run",
            "--host",
            sim.url,
            "--concurrency",
            "3",
            "--warmup",
            "0",
            "--duration",
            "1",
            "--drain-timeout",
            "1",
            "--max-tokens",
            "4000",
            "--out",
            str(out),
            *LOAD,
        ]
    )
    assert result.returncode == 0, result.stderr
    summary = read_summary(out)
    jsonschema.validate(summary, summary_schema())
    (level,) = summary["levels"]
    records = level_records(out, "c3")
    unfinished = [r for r in records if r["error_kind"] == "unfinished"]
    # 4000 tokens at ~13.6 ms each: none of the 3 ends within the 2 s the run allows
    assert level["unfinished"] == len(unfinished) == 3 and level["completed"] == 0
    assert all(r["tokens_output"] > 10 and r["ok"] is False for r in unfinished)
    assert "unfinished" in level["flags"]
    assert summary["status"] == "incomplete"
    assert "3 unfinished" in result.stdout


def _workers_of(pid: int) -> list[psutil.Process]:
    return [p for p in psutil.Process(pid).children(recursive=True) if "--worker" in p.cmdline()]


def test_killed_worker_costs_its_requests_and_the_other_carries_the_rest(
    sweep_sim, specload_popen, tmp_path
):
    sim = sweep_sim(["--variant", "baseline", *SIM])
    out = tmp_path / "run"
    # ~0.1 s requests: 400 at 4 users take ~10 s, against ~4 s until Locust calls a
    # silent worker missing
    proc = specload_popen(
        [
            "run",
            "--host",
            sim.url,
            "--concurrency",
            "4",
            "--warmup",
            "0",
            "--requests",
            "400",
            "--max-tokens",
            "64",
            "--workers",
            "2",
            "--out",
            str(out),
            *LOAD,
        ]
    )
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline and len(level_records(out, "c4")) < 20:
        time.sleep(0.05)
    victim = _workers_of(proc.pid)[0]
    victim.kill()
    _stdout, stderr = proc.communicate(timeout=120)
    assert proc.returncode == 0, stderr
    summary = read_summary(out)
    jsonschema.validate(summary, summary_schema())
    (level,) = summary["levels"]
    records = level_records(out, "c4")
    # Exactly N accounted for: the requests in flight on the dead worker are booked lost
    # (not sent again), the budget it had not started went to the other worker.
    assert len(records) == level["completed"] + level["failed"] + level["unfinished"]
    assert len(records) + level["lost"] == 400
    assert level["lost"] >= 1 and "lost" in level["flags"]
    assert summary["status"] == "incomplete"
    log = (out / "run.log").read_text()
    assert "went missing" in log
    # Locust started the lost users again on the remaining worker: without that the level
    # would hold ~2 users after the kill
    assert level["users_min"] <= 3 and level["users_held"] > 2.6


def test_every_request_failing_exits_4(sweep_sim, specload_run, tmp_path):
    # every chat request answered 500 (a --model the server does not list ends at the gate)
    sim = sweep_sim(["--variant", "baseline", "--fault-every", "http500=1", *SIM])
    out = tmp_path / "run"
    result = specload_run(
        [
            "run",
            "--host",
            sim.url,
            "--concurrency",
            "2",
            "--warmup",
            "0",
            "--duration",
            "1",
            "--out",
            str(out),
            *LOAD,
        ]
    )
    assert result.returncode == 4, result.stderr
    assert "every measured request failed (http_500" in result.stdout
    assert "complete:" not in result.stdout  # the final line does not claim a measurement
    summary = read_summary(out)
    (level,) = summary["levels"]
    assert level["completed"] == 0 and level["failed"] > 0
