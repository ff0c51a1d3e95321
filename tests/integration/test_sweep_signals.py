"""``specload run`` stopped by SIGINT/SIGTERM while it waits for the server: during an outage
(a reload that does not come back) and during the first readiness wait. The run ends at
once, ``summary.json`` says ``interrupted`` and every record is kept."""

from __future__ import annotations

import json
import signal
import socket
import time
from pathlib import Path

import jsonschema
import pytest

from specload.results import read_requests, read_summary, summary_schema

pytestmark = pytest.mark.integration

SIM = ["--time-scale", "10"]
LOAD = ["--max-tokens", "48", "--metrics-address", "off", "--progress", "plain", "--no-plots"]
# The goal is 2 s; the assertion leaves room for a loaded test machine.
EXIT_WITHIN_S = 5.0


def _wait_for(predicate, timeout: float, what: str, proc) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return
        if proc.poll() is not None:
            _out, err = proc.communicate()
            raise AssertionError(f"specload run exited with {proc.returncode}: {err}")
        time.sleep(0.05)
    raise TimeoutError(f"{what} after {timeout}s")


def _records(out: Path, step: str) -> int:
    try:
        return sum(1 for r in read_requests(out) if r["step"] == step)
    except (OSError, ValueError):
        return 0


def _summary(out: Path) -> dict:
    try:
        return dict(json.loads((out / "summary.json").read_text()))
    except (OSError, ValueError):  # not written yet, or being replaced
        return {}


def _in_outage(out: Path) -> bool:
    """summary.json (written when the outage began) shows it, unfinished."""
    levels = _summary(out).get("levels") or []
    return bool(levels and levels[0].get("outages"))


RUN_C2_60S = "--concurrency 2 --warmup 0 --duration 60".split()


@pytest.mark.parametrize(
    ("sig", "code"), [(signal.SIGINT, 130), (signal.SIGTERM, 143)], ids=["SIGINT", "SIGTERM"]
)
def test_signal_during_outage_wait_ends_at_once(sweep_sim, specload_popen, tmp_path, sig, code):
    sim = sweep_sim(["--variant", "baseline", *SIM])
    out = tmp_path / "run"
    proc = specload_popen(["run", "--host", sim.url, "--out", str(out), *RUN_C2_60S, *LOAD])
    _wait_for(lambda: _records(out, "c2") >= 5, 30, "fewer than 5 records", proc)
    sim.reload(load_time=600)  # the server goes away and does not come back
    # the run sees the outage and waits for the target (up to --outage-timeout, 45m)
    _wait_for(
        lambda: _in_outage(out),
        30,
        "no outage in summary.json",
        proc,
    )
    served = sim.state()["requests_served"]  # the old engine's count: final while it loads
    time.sleep(0.5)  # well inside the wait
    before = len(read_requests(out))
    started = time.monotonic()
    proc.send_signal(sig)
    stdout, stderr = proc.communicate(timeout=20)
    took = time.monotonic() - started
    print(f"{signal.Signals(sig).name} during the outage wait: exit after {took:.2f}s")
    assert proc.returncode == code, stderr
    assert took < EXIT_WITHIN_S
    assert "Traceback" not in stderr
    summary = read_summary(out)
    jsonschema.validate(summary, summary_schema())
    assert summary["status"] == "interrupted"
    assert summary["stop_reason"] == signal.Signals(sig).name
    (level,) = summary["levels"]
    assert level["complete"] is False
    assert len(level["outages"]) == 1
    records = read_requests(out)
    assert len(records) >= before
    mine = [r for r in records if r["step"] == "c2"]
    # every record kept: the level's counts are its records, and every request the server
    # took in has a record (the refused ones never reached it)
    assert level["completed"] + level["failed"] + level["unfinished"] == len(mine) >= 5
    reached = [r for r in records if r["error_kind"] != "refused"]
    # (a request sent on a connection the reload had just reset may never have been counted)
    sure = [r for r in reached if r["error_kind"] != "reset"]
    assert len(sure) <= served <= len(reached)
    assert "interrupted" in stdout


@pytest.mark.parametrize("server", ["refusing", "silent"])
@pytest.mark.parametrize(
    ("sig", "code"), [(signal.SIGINT, 130), (signal.SIGTERM, 143)], ids=["SIGINT", "SIGTERM"]
)
def test_signal_during_first_readiness_wait(specload_popen, tmp_path, sig, code, server):
    """Nothing listens (refused), or a port that takes connections and never answers (each
    probe waits its 5 s timeout): the signal ends the wait at once either way."""
    with socket.socket() as silent:
        silent.bind(("127.0.0.1", 0))
        if server == "silent":
            silent.listen(64)  # the kernel completes the connections; nobody reads them
        port = silent.getsockname()[1]
        out = tmp_path / "run"
        proc = specload_popen(
            [
                "run",
                "--host",
                f"http://127.0.0.1:{port}",
                "--ready-timeout",
                "10m",
                "--out",
                str(out),
                *LOAD,
            ]
        )
        _wait_for((out / "run.log").exists, 30, "no run.log", proc)
        time.sleep(1.5)  # inside the wait (a silent server's probe in flight)
        started = time.monotonic()
        proc.send_signal(sig)
        _stdout, stderr = proc.communicate(timeout=20)
        took = time.monotonic() - started
    name = signal.Signals(sig).name
    print(f"{name} during the readiness wait ({server}): exit after {took:.2f}s")
    assert proc.returncode == code, stderr
    assert took < EXIT_WITHIN_S
    assert "Traceback" not in stderr
    assert stderr.strip().splitlines()[-1] == (
        f"specload: interrupted ({signal.Signals(sig).name}) while waiting for "
        f"http://127.0.0.1:{port}: nothing was measured"
    )
    # nothing was measured: no summary claims a run
    assert _summary(out).get("status") is None
