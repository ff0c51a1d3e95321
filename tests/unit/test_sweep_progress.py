"""The live display's numbers (no terminal needed)."""

from __future__ import annotations

import io

import pytest

from specload.records.request import RequestRecord
from specload.sweep.driver import SweepDriver
from specload.sweep.plan import build_plan
from specload.sweep.progress import Progress, describe, final_count, snapshot

pytestmark = pytest.mark.unit


class Idle:
    def set_step(self, step, budget=None):
        pass

    def start(self, level):
        pass

    def pause(self):
        pass

    def stop(self):
        pass

    def hold(self):
        pass

    def in_flight(self):
        return 0

    def user_count(self):
        return 0

    def lost(self):
        return 0

    def workers_left(self):
        return None


def rec(**kw):
    base = {"category": "math", "variant": "v", "model": "m", "start_s": 100.5, "end_s": 101.5}
    return RequestRecord(**{**base, **kw})


def test_snapshot_and_plain_line():
    now = [100.0]
    plan = build_plan(
        concurrency="2,8",
        request_rate=None,
        max_concurrency=None,
        warmup="0",
        duration="10",
        requests=None,
    )
    driver = SweepDriver(
        plan,
        Idle(),
        clock=lambda: now[0],
        wall=lambda: now[0],
        sleep=lambda s: None,
        on_summary=lambda s: None,
    )
    assert describe(snapshot(driver)) == "starting"
    driver._begin_level(driver.states[0])
    for tpot in (0.010, 0.012, 0.014):
        driver.on_record(
            rec(step="c2", ok=True, tpot_s=tpot, tokens_output=100, ttft_s=0.0, e2e_s=1.0)
        )
    driver.on_record(rec(step="c2", ok=False, error_kind="http_500"))
    now[0] = 104.0
    snap = snapshot(driver)
    assert snap["level"] == "c2" and snap["index"] == 1 and snap["levels"] == 2
    assert snap["phase"] == "measure" and snap["elapsed_s"] == pytest.approx(4.0)
    assert snap["completed"] == 3 and snap["failed"] == 1
    assert snap["median_tpot_ms"] == pytest.approx(12.0, rel=1e-12)
    assert snap["output_tok_s"] == pytest.approx(75.0)
    line = describe(snap)
    assert line.startswith("level 1/2 c2 measure 4.0s/10s | requests 3 ok 1 failed")
    assert "errors http_500 1" in line
    out = io.StringIO()
    progress = Progress("plain", stream=out)
    progress.tick(driver)
    progress.tick(driver)  # same phase, too soon: one line only
    assert out.getvalue().count("\n") == 1
    rich_out = io.StringIO()
    live = Progress("rich", stream=rich_out)
    live.tick(driver)
    live.close()
    assert "c2" in rich_out.getvalue() and "75.0" in rich_out.getvalue()


class Draining(Idle):
    """Three requests in flight that never finish: the drain waits out its deadline."""

    def in_flight(self):
        return 3


def test_drain_line_shows_count_and_deadline_once_per_interval():
    now = [100.0]
    plan = build_plan(
        concurrency="3",
        request_rate=None,
        max_concurrency=None,
        warmup="0",
        duration="1",
        requests=None,
    )
    out = io.StringIO()
    progress = Progress("plain", stream=out, every_s=3600)

    def sleep(dt):
        now[0] += dt

    driver = SweepDriver(
        plan,
        Draining(),
        clock=lambda: now[0],
        wall=lambda: now[0],
        sleep=sleep,
        on_summary=lambda s: None,
        drain_timeout_s=25.0,
        tick_s=0.5,
        on_tick=progress.tick,
    )
    driver.run()
    lines = out.getvalue().splitlines()
    drain = [line for line in lines if line.startswith("draining")]
    # the drain says what it waits for and until when; its countdown does not flood
    assert drain == ["draining: 3 requests in flight, up to 25s"]


def _summary(status, *names):
    return {"status": status, "levels": [{"name": n} for n in names]}


def test_final_count_separates_warmup_from_measured_requests():
    steps = {"c1-warmup": 2, "c1": 10, "c4-warmup": 4, "c4": 21}
    assert final_count(_summary("complete", "c1", "c4"), 37, steps) == (
        "complete: 31 measured requests (+6 warm-up)"
    )
    # requests started as an outage began, and the drain's, are named apart too
    steps = {"c2": 1, "c2-outage": 2, "drain": 1}
    assert final_count(_summary("interrupted", "c2"), 4, steps) == (
        "interrupted: 1 measured request (+2 during outages, +1 other)"
    )
    assert final_count(_summary("complete", "c2"), 5, {"c2": 5}) == (
        "complete: 5 measured requests"
    )


def test_final_count_never_says_complete_when_every_measured_request_failed():
    steps = {"c2-warmup": 3, "c2": 12}
    line = final_count(_summary("complete", "c2"), 15, steps, all_failed=True)
    assert line == "finished, nothing measured: 12 measured requests (+3 warm-up)"
    line = final_count(_summary("incomplete", "c2"), 15, steps, all_failed=True)
    assert not line.startswith(("complete", "incomplete"))
    # an interrupted or failed run says so, whatever its requests did
    assert final_count(_summary("interrupted", "c2"), 15, steps, all_failed=True).startswith(
        "interrupted:"
    )
