"""The sweep driver against a fake closed-loop backend and a fake clock."""

from __future__ import annotations

import heapq

import jsonschema
import orjson
import pytest

from specload.results import summary_schema
from specload.sweep.driver import OutagePolicy, SweepDriver
from specload.sweep.plan import build_plan

pytestmark = pytest.mark.unit


class FakeLoad:
    """Closed-loop users with a fixed request time, on a simulated clock.

    While ``down`` (an outage), requests fail at once with ``refused``.
    """

    def __init__(self, e2e_s=0.5, tokens=50):
        self.now = 1000.0
        self.e2e_s = e2e_s
        self.tokens = tokens
        self.step = "run"
        self.users = 0
        self.events = []  # (end_time, seq, user, record)
        self.seq = 0
        self.driver = None
        self.down_between = None  # (start, end)
        self.calls = []
        self.epoch = 0  # bumped on pause: in-flight requests of paused users are dropped

    # backend protocol
    def set_step(self, step):
        self.calls.append(("step", step, self.now))
        self.step = step

    def start(self, level):
        self.calls.append(("start", level.users, self.now))
        for u in range(self.users, level.users):
            self._send(u)
        self.users = max(self.users, level.users)

    def pause(self):
        self.calls.append(("pause", self.now))
        self.events.clear()
        self.users = 0

    def hold(self):
        self.calls.append(("hold", self.now))
        self.users = 0  # users finish their request and send no other

    def in_flight(self):
        return len(self.events)

    def stop(self):
        self.calls.append(("stop", self.now))
        self.events.clear()
        self.users = 0

    def _down(self, t):
        return self.down_between is not None and self.down_between[0] <= t < self.down_between[1]

    def _send(self, user):
        start = self.now
        if self._down(start):
            end, ok = start + 0.01, False
        else:
            end, ok = start + self.e2e_s, True
        rec = {"step": self.step, "category": ("math", "coding")[user % 2], "ok": ok,
               "error_kind": None if ok else "refused", "start_s": start, "end_s": end,
               "ttft_s": 0.05 if ok else None, "tpot_s": (self.e2e_s - 0.05) / (self.tokens - 1)
               if ok else None, "e2e_s": self.e2e_s if ok else None,
               "tokens_output": self.tokens if ok else 0, "tokens_reasoning": 40 if ok else 0,
               "tokens_content": 10 if ok else 0, "user": user}
        self.seq += 1
        heapq.heappush(self.events, (end, self.seq, user, rec))

    # clock
    def clock(self):
        return self.now

    def sleep(self, dt):
        target = self.now + dt
        while self.events and self.events[0][0] <= target:
            end, _, user, rec = heapq.heappop(self.events)
            self.now = end
            self.driver.on_record(rec)
            if user < self.users:
                self._send(user)
        self.now = target


def make_driver(load, plan, records, summaries, **kw):
    driver = SweepDriver(
        plan, load, clock=load.clock, wall=load.clock, sleep=load.sleep,
        on_summary=summaries.append, on_record_written=records.append,
        metadata={"schema_version": 1, "specload_version": "t", "variant": "v", "host": "h",
                  "model": "m", "options": {}},
        **kw,
    )
    load.driver = driver
    return driver


def test_levels_have_disjoint_samples_and_exact_counts():
    plan = build_plan(concurrency="1,4,8", request_rate=None, max_concurrency=None,
                      warmup="2s", duration="10s", requests=None)
    load, records, summaries = FakeLoad(e2e_s=0.5), [], []
    summary = make_driver(load, plan, records, summaries).run()
    assert summary["status"] == "complete"
    steps = [r["step"] for r in records]
    for level, users in zip(summary["levels"], (1, 4, 8), strict=True):
        mine = [r for r in records if r["step"] == level["name"]]
        assert level["completed"] == len(mine)
        # started in the window: 10 s / 0.5 s per request per user
        assert level["completed"] == pytest.approx(users * 20, abs=users)
        assert level["duration"] == pytest.approx(10.0)
        assert level["request_throughput"] == pytest.approx(users * 2, rel=0.1)
        assert level["complete"] is True
        assert {s for s in steps if s.startswith(level["name"])} == {
            level["name"], level["name"] + "-warmup"}
        # no record of this level started outside its window
        window_starts = [c[2] for c in load.calls if c[:2] == ("step", level["name"])]
        assert all(r["start_s"] >= window_starts[0] for r in mine)
    # in-flight requests of the last level were drained, not lost
    last = summary["levels"][-1]
    assert last["completed"] == len([r for r in records if r["step"] == "c8"])
    assert summary["overhead_s"] == pytest.approx(0.5, abs=0.3)  # the drain of one request
    assert summary["planned_s"] == pytest.approx(36.0)
    jsonschema.validate(orjson.loads(orjson.dumps(summary)), summary_schema())
    # a summary was written at the start and after every level (the next one begun)
    assert [[lv["complete"] for lv in s["levels"]] for s in summaries] == [
        [], [True, False], [True, True, False], [True, True, True], [True, True, True]]


def test_requests_window():
    plan = build_plan(concurrency="2", request_rate=None, max_concurrency=None,
                      warmup="0", duration=None, requests=30)
    load, records, summaries = FakeLoad(e2e_s=0.25), [], []
    summary = make_driver(load, plan, records, summaries).run()
    level = summary["levels"][0]
    assert level["completed"] >= 30
    assert level["duration"] == pytest.approx(30 * 0.25 / 2, abs=0.3)


def test_outage_pauses_and_level_completes():
    plan = build_plan(concurrency="4", request_rate=None, max_concurrency=None,
                      warmup="1s", duration="10s", requests=None)
    load, records, summaries = FakeLoad(e2e_s=0.5), [], []
    load.down_between = (1005.0, 1025.0)

    def wait_ready(timeout):
        while load._down(load.now):
            load.sleep(0.5)

    policy = OutagePolicy(mode="wait", timeout_s=60, is_refusing=lambda: load._down(load.now),
                          wait_ready=wait_ready)
    summary = make_driver(load, plan, records, summaries, outage=policy).run()
    level = summary["levels"][0]
    assert level["complete"] is True
    assert len(level["outages"]) == 1
    outage = level["outages"][0]
    assert outage["duration_s"] == pytest.approx(20.0, abs=0.6)
    assert outage["phase"] == "measure"
    assert level["duration"] == pytest.approx(10.0)
    assert summary["outage_s"] == pytest.approx(outage["duration_s"])
    # requests resumed after the outage and the window got its full 10 s of service
    ok_after = [r for r in records if r["step"] == "c4" and r["ok"] and r["start_s"] >= 1025.0]
    assert len(ok_after) > 0
    assert level["completed"] == pytest.approx(4 * 20, abs=8)
    pauses = [c[1] for c in load.calls if c[0] == "pause"]
    assert pauses == [pytest.approx(1005.0, abs=0.1)]


def test_outage_fail_policy_stops_with_valid_summary():
    plan = build_plan(concurrency="2,4", request_rate=None, max_concurrency=None,
                      warmup="0", duration="10s", requests=None)
    load, records, summaries = FakeLoad(), [], []
    load.down_between = (1003.0, 1100.0)
    policy = OutagePolicy(mode="fail", is_refusing=lambda: load._down(load.now))
    summary = make_driver(load, plan, records, summaries, outage=policy).run()
    assert summary["status"] == "failed"
    assert "outage" in summary["stop_reason"]
    assert summary["levels"][0]["complete"] is False
    jsonschema.validate(orjson.loads(orjson.dumps(summary)), summary_schema())


def test_outage_wait_timeout_fails_the_run():
    plan = build_plan(concurrency="2", request_rate=None, max_concurrency=None,
                      warmup="0", duration="10s", requests=None)
    load, records, summaries = FakeLoad(), [], []
    load.down_between = (1003.0, 9999.0)

    def wait_ready(timeout):
        load.sleep(timeout)
        raise RuntimeError(f"not ready after {timeout}s")

    policy = OutagePolicy(mode="wait", timeout_s=30, is_refusing=lambda: True,
                          wait_ready=wait_ready)
    summary = make_driver(load, plan, records, summaries, outage=policy).run()
    assert summary["status"] == "failed" and "not ready after 30" in summary["stop_reason"]


def test_stop_request_keeps_partial_level():
    plan = build_plan(concurrency="1,2", request_rate=None, max_concurrency=None,
                      warmup="0", duration="10s", requests=None)
    load, records, summaries = FakeLoad(), [], []
    driver = make_driver(load, plan, records, summaries,
                         on_tick=lambda d: d.request_stop("SIGTERM") if load.now >= 1014 else None)
    summary = driver.run()
    assert summary["status"] == "interrupted" and summary["stop_reason"] == "SIGTERM"
    first, second = summary["levels"]
    assert first["complete"] is True and second["complete"] is False
    assert second["duration"] == pytest.approx(4.0, abs=0.1)
    assert second["completed"] == len([r for r in records if r["step"] == "c2"])
    assert load.calls[-1][0] == "stop"
    jsonschema.validate(orjson.loads(orjson.dumps(summary)), summary_schema())


def test_transient_errors_without_refusal_are_not_outages():
    plan = build_plan(concurrency="2", request_rate=None, max_concurrency=None,
                      warmup="0", duration="5s", requests=None)
    load, records, summaries = FakeLoad(), [], []
    driver = make_driver(load, plan, records, summaries,
                         outage=OutagePolicy(is_refusing=lambda: False))
    driver.on_record({"step": "c2", "ok": False, "error_kind": "reset"})
    summary = driver.run()
    assert summary["levels"][0]["outages"] == []
