"""Sweep options → plan, and the pausable measured window (fake clock)."""

from __future__ import annotations

import pytest

from specload.errors import UsageError
from specload.sweep.plan import build_plan
from specload.sweep.window import Window

pytestmark = pytest.mark.unit


def plan(**kw):
    base = dict(
        concurrency=None,
        request_rate=None,
        max_concurrency=None,
        warmup="0",
        duration="10s",
        requests=None,
    )
    base.update(kw)
    return build_plan(**base)


def test_closed_loop_levels_and_names():
    p = plan(concurrency="1, 4,16,64", warmup="2s", duration="1m")
    assert p.mode == "closed"
    assert [lv.concurrency for lv in p.levels] == [1, 4, 16, 64]
    assert p.step_names == ("c1", "c4", "c16", "c64")
    assert p.levels[2].warmup_name == "c16-warmup"
    assert p.levels[0].warmup_s == 2.0 and p.levels[0].duration_s == 60.0
    assert p.planned_seconds() == 4 * 62.0


def test_open_loop_levels():
    p = plan(request_rate="0.5,2", max_concurrency=8, duration="30")
    assert p.mode == "open"
    assert [lv.request_rate for lv in p.levels] == [0.5, 2.0]
    assert [lv.users for lv in p.levels] == [8, 8]
    assert p.step_names == ("r0.5", "r2")


def test_requests_window_has_no_planned_time():
    p = plan(concurrency="2", duration=None, requests=50)
    assert p.levels[0].requests == 50 and p.levels[0].duration_s is None
    assert p.planned_seconds() is None


@pytest.mark.parametrize(
    ("kw", "needle"),
    [
        (dict(concurrency=""), "--concurrency: empty list"),
        (dict(concurrency=" , "), "--concurrency: empty list"),
        (dict(concurrency="1,,4"), "--concurrency"),
        (dict(concurrency="0"), "at least 1"),
        (dict(concurrency="4,x"), "'x' is not a whole number"),
        (dict(concurrency="4,4"), "repeats"),
        (dict(duration="-5"), "--duration"),
        (dict(duration="0"), "--duration"),
        (dict(warmup="-1s"), "--warmup"),
        (dict(warmup="soon"), "--warmup"),
        (dict(requests=0, duration=None), "--requests"),
        (dict(requests=5), "exclusive"),
        (dict(concurrency="1", request_rate="2"), "exclusive"),
        (dict(request_rate="0"), "--request-rate"),
        (dict(request_rate="fast"), "--request-rate"),
        (dict(request_rate="1", max_concurrency=0), "--max-concurrency"),
    ],
)
def test_bad_options_one_line(kw, needle):
    with pytest.raises(UsageError) as err:
        plan(**kw)
    assert needle in str(err.value)
    assert "\n" not in str(err.value)


def test_warmup_zero_allowed():
    assert plan(concurrency="1", warmup="0").levels[0].warmup_s == 0.0


def test_window_by_time_excludes_outages():
    w = Window(start_s=100.0, target_s=10.0)
    assert not w.done(105.0)
    assert w.remaining_s(105.0) == pytest.approx(5.0)
    w.pause(106.0)
    assert w.paused and not w.done(200.0)  # never done while paused
    assert w.active_s(150.0) == pytest.approx(6.0)
    w.resume(150.0)
    assert w.outages[0].duration_s == pytest.approx(44.0)
    assert not w.done(153.9)
    assert w.done(154.0)
    w.finish(154.0)
    assert w.active_s(999.0) == pytest.approx(10.0)


def test_window_by_requests():
    w = Window(start_s=0.0, target_s=None, target_requests=3)
    assert w.remaining_s(5.0) is None
    w.completed = 2
    assert not w.done(100.0)
    w.completed = 3
    assert w.done(100.0)
    w.pause(101.0)
    assert not w.done(102.0)


def test_pause_twice_is_one_outage():
    w = Window(start_s=0.0, target_s=5.0)
    a = w.pause(1.0)
    b = w.pause(2.0)
    assert a is b and len(w.outages) == 1
    w.finish(3.0)  # finishing closes the outage
    assert w.outages[0].end_s == 3.0 and w.active_s(10.0) == pytest.approx(1.0)


def test_ramp_up_is_for_closed_loops_inside_the_warmup() -> None:
    plan = build_plan(
        concurrency="4,16", request_rate=None, max_concurrency=None,
        warmup="30s", duration="60s", requests=None, ramp_up="20s",
    )  # fmt: skip
    assert [lv.ramp_up_s for lv in plan.levels] == [20.0, 20.0]
    with pytest.raises(UsageError, match="--ramp-up: 40s is longer than --warmup 30s"):
        build_plan(
            concurrency="4", request_rate=None, max_concurrency=None,
            warmup="30s", duration="60s", requests=None, ramp_up="40s",
        )  # fmt: skip
    with pytest.raises(UsageError, match="--ramp-up: for closed loops"):
        build_plan(
            concurrency=None, request_rate="2", max_concurrency=None,
            warmup="30s", duration="60s", requests=None, ramp_up="10s",
        )  # fmt: skip
