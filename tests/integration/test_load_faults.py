"""Every fault class is counted, the request marked failed, and the run goes on."""

from __future__ import annotations

import csv
from collections import Counter

import pytest

from tests.fixtures.load import free_port

pytestmark = pytest.mark.integration

FAST = [
    "--timing",
    "fixed",
    "--fixed-ttft",
    "0.02",
    "--fixed-itl",
    "0.005",
    "--fixed-tokens-per-chunk",
    "1",
    "--fixed-reasoning-tokens",
    "10",
    "--fixed-content-tokens",
    "10",
    "--seed",
    "3",
]


def test_every_stream_and_status_fault_is_classified(load_sim, run_locust) -> None:
    rates = [
        "http500=0.08",
        "http503=0.08",
        "http429=0.08",
        "reset=0.08",
        "malformed=0.08",
        "stall=0.08",
        "no-done=0.08",
    ]
    sim = load_sim([*FAST, *[f"--fault-rate={r}" for r in rates], "--stall-seconds", "4"])
    run = run_locust(sim.url, users=8, seconds=5, args=["--request-timeout", "1"])
    assert run.returncode in (0, 1), run.stderr[-2000:]  # 1: Locust saw failures
    assert "Traceback" not in run.stderr
    kinds = Counter(r["error_kind"] for r in run.records if not r["ok"])
    for kind in ("http_500", "http_503", "http_429", "reset", "malformed", "timeout", "no_done"):
        assert kinds[kind] > 0, kinds
    # stalled requests still in flight when Locust stops: recorded as unfinished
    assert set(kinds) <= {
        "http_500",
        "http_503",
        "http_429",
        "reset",
        "malformed",
        "timeout",
        "no_done",
        "unfinished",
    }, kinds
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
    run = run_locust(f"http://127.0.0.1:{port}", users=2, seconds=2, args=["--model", "m"])
    assert run.returncode in (0, 1), run.stderr[-2000:]
    assert "Traceback" not in run.stderr
    assert run.records and {r["error_kind"] for r in run.records} == {"refused"}
    # Back-off: a down target is not hammered in a tight loop.
    assert len(run.records) < 2 * 2 / 0.25 + 4


def test_plain_locust_categories_add_up_to_the_step(load_sim, run_locust) -> None:
    # Per-category output tok/s share the step's span (one definition with `specload run`):
    # the categories add up to the step's figure, whatever each category's own span.
    sim = load_sim(FAST)
    run = run_locust(sim.url, users=4, seconds=3)
    assert run.returncode == 0, run.stderr[-2000:]
    csv_path = run.csv_prefix.parent / (run.csv_prefix.name + "_specload.csv")
    rows = list(csv.DictReader(csv_path.read_text().splitlines()))
    cats = [r for r in rows if r["step"] == "run" and r["category"] != "all"]
    (whole,) = [r for r in rows if r["step"] == "run" and r["category"] == "all"]
    assert len(cats) >= 2
    total = sum(float(r["output_tokens_per_s"]) for r in cats)
    assert total == pytest.approx(float(whole["output_tokens_per_s"]), abs=0.1 * len(cats))
    assert int(whole["completed"]) == sum(int(r["completed"]) for r in cats) == len(run.ok())
