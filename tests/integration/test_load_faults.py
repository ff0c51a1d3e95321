"""Every fault class is counted, the request marked failed, and the run goes on."""

from __future__ import annotations

from collections import Counter

import pytest

from tests.fixtures.load import free_port

pytestmark = pytest.mark.integration

FAST = ["--timing", "fixed", "--fixed-ttft", "0.02", "--fixed-itl", "0.005",
        "--fixed-tokens-per-chunk", "1", "--fixed-reasoning-tokens", "10",
        "--fixed-content-tokens", "10", "--seed", "3"]


def test_every_stream_and_status_fault_is_classified(load_sim, run_locust) -> None:
    rates = ["http500=0.08", "http503=0.08", "http429=0.08", "reset=0.08", "malformed=0.08",
             "stall=0.08", "no-done=0.08"]
    sim = load_sim([*FAST, *[f"--fault-rate={r}" for r in rates], "--stall-seconds", "4"])
    run = run_locust(sim.url, users=8, seconds=5, args=["--request-timeout", "1"])
    assert run.returncode in (0, 1), run.stderr[-2000:]  # 1: Locust saw failures
    assert "Traceback" not in run.stderr
    kinds = Counter(r["error_kind"] for r in run.records if not r["ok"])
    for kind in ("http_500", "http_503", "http_429", "reset", "malformed", "timeout", "no_done"):
        assert kinds[kind] > 0, kinds
    assert set(kinds) <= {"http_500", "http_503", "http_429", "reset", "malformed", "timeout",
                          "no_done"}, kinds
    ok = run.ok()
    assert len(ok) > 20
    # Good requests on connections that saw faults are still exact.
    assert all(r["tokens_output"] == 20 for r in ok)
    for r in run.records:
        if r["error_kind"] == "http_503":
            assert r["http_status"] == 503 and r["error_detail"]
        if r["error_kind"] == "no_done":
            assert r["tokens_output"] > 0  # what was received is kept
    csv = (run.csv_prefix.parent / (run.csv_prefix.name + "_specload.csv")).read_text()
    assert "run,all," in csv


def test_refused_target_is_counted_not_fatal(run_locust) -> None:
    port = free_port()  # nothing listens there
    run = run_locust(f"http://127.0.0.1:{port}", users=2, seconds=2,
                     args=["--model", "m"])
    assert run.returncode in (0, 1), run.stderr[-2000:]
    assert "Traceback" not in run.stderr
    assert run.records and {r["error_kind"] for r in run.records} == {"refused"}
    # Back-off: a down target is not hammered in a tight loop.
    assert len(run.records) < 2 * 2 / 0.25 + 4
