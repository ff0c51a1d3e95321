"""The sweep driver against a fake closed-loop backend and a fake clock."""

from __future__ import annotations

import heapq

import jsonschema
import orjson
import pytest

from specload.records.request import RequestRecord
from specload.results import summary_schema
from specload.sweep.driver import OutagePolicy, SweepDriver
from specload.sweep.plan import SweepPlan, build_plan

pytestmark = pytest.mark.unit


class FakeLoad:
    """Closed-loop users with a fixed request time, on a simulated clock.

    While ``down`` (an outage), requests fail at once with ``refused``. A step's
    budget is honoured like the real load session: a user finding it spent waits for
    the next step. ``stop`` ends in-flight requests as ``unfinished`` records.
    """

    def __init__(self, e2e_s=0.5, tokens=50, ttft_s=0.05, truncated=False):
        self.now = 1000.0
        self.truncated = truncated
        self.e2e_s = e2e_s
        self.ttft_s = ttft_s
        self.tokens = tokens
        self.step = "run"
        self.budget = None
        self.users = 0
        self.waiting = []  # users blocked on a spent budget
        self.events = []  # (end_time, seq, user, record)
        self.seq = 0
        self.driver = None
        self.down_between = None  # (start, end)
        self.calls = []
        self.running_users = None  # override user_count() (a worker died)
        self.lost_count = 0

    # backend protocol
    def set_step(self, step, budget=None):
        self.calls.append(("step", step, self.now, budget))
        self.step = step
        self.budget = budget
        waiting, self.waiting = self.waiting, []
        for u in waiting:
            if u < self.users:
                self._send(u)

    def start(self, level):
        self.calls.append(("start", level.users, self.now))
        for u in range(self.users, level.users):
            self._send(u)
        self.users = max(self.users, level.users)

    def pause(self):
        self.calls.append(("pause", self.now))
        self.events.clear()
        self.waiting.clear()
        self.users = 0

    def hold(self):
        self.calls.append(("hold", self.now))
        self.users = 0  # users finish their request and send no other

    def in_flight(self):
        return len(self.events)

    def user_count(self):
        return self.users if self.running_users is None else self.running_users

    def lost(self):
        return self.lost_count

    def workers_left(self):
        return None

    def stop(self):
        self.calls.append(("stop", self.now))
        events, self.events = self.events, []
        for _end, _seq, _user, rec in events:  # killed mid-way: partial, unfinished
            elapsed = self.now - rec.start_s
            got = max(0, min(rec.tokens_output, int((elapsed - self.ttft_s) / rec.tpot_s) + 1))
            part = RequestRecord(
                category=rec.category,
                step=rec.step,
                variant="v",
                model="m",
                start_s=rec.start_s,
                end_s=self.now,
                error_kind="unfinished",
                tokens_output=got,
                tokens_reasoning=got,
                e2e_s=elapsed,
            )
            self.driver.on_record(part)
        self.users = 0

    def _down(self, t):
        return self.down_between is not None and self.down_between[0] <= t < self.down_between[1]

    def _send(self, user):
        if self.budget is not None:
            if self.budget <= 0:
                self.waiting.append(user)
                return
            self.budget -= 1
        start = self.now
        if self._down(start):
            end, ok = start + 0.01, False
        else:
            end, ok = start + self.e2e_s, True
        tpot = (self.e2e_s - self.ttft_s) / (self.tokens - 1)
        rec = RequestRecord(
            step=self.step,
            category=("math", "coding")[user % 2],
            variant="v",
            model="m",
            ok=ok,
            error_kind=None if ok else "refused",
            start_s=start,
            end_s=end,
            ttft_s=self.ttft_s if ok else None,
            tpot_s=tpot if ok else None,
            e2e_s=self.e2e_s if ok else None,
            tokens_output=self.tokens if ok else 0,
            tokens_reasoning=self.tokens - 10 if ok else 0,
            tokens_content=10 if ok else 0,
            max_tokens=self.tokens,
        )
        if ok and self.truncated:
            rec.tokens_reasoning, rec.tokens_content = self.tokens, 0
            rec.reasoning_truncated, rec.finish_reason = True, "length"
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
        plan,
        load,
        clock=load.clock,
        wall=load.clock,
        sleep=load.sleep,
        on_summary=summaries.append,
        on_record_written=lambda r: records.append(r.to_dict()),
        metadata={
            "schema_version": 1,
            "specload_version": "t",
            "variant": "v",
            "host": "h",
            "model": "m",
            "options": {},
        },
        **kw,
    )
    load.driver = driver
    return driver


def closed_plan(
    concurrency: str,
    *,
    warmup: str = "0",
    duration: str | None = "10s",
    requests: int | None = None,
) -> SweepPlan:
    """A closed-loop sweep plan; ``requests`` replaces the timed window."""
    return build_plan(
        concurrency=concurrency,
        request_rate=None,
        max_concurrency=None,
        warmup=warmup,
        duration=None if requests is not None else duration,
        requests=requests,
    )


def test_levels_have_disjoint_samples_and_exact_counts():
    plan = closed_plan("1,4,8", warmup="2s")
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
            level["name"],
            level["name"] + "-warmup",
        }
        # no record of this level started outside its window
        window_starts = [c[2] for c in load.calls if c[:2] == ("step", level["name"])]
        assert level["planned_duration_s"] == 10.0 and level["flags"] == []
        assert all(r["start_s"] >= window_starts[0] for r in mine)
    # in-flight requests of the last level were drained, not lost
    last = summary["levels"][-1]
    assert last["completed"] == len([r for r in records if r["step"] == "c8"])
    assert summary["overhead_s"] == pytest.approx(0.5, abs=0.3)  # the drain of one request
    assert summary["planned_s"] == pytest.approx(36.0)
    jsonschema.validate(orjson.loads(orjson.dumps(summary)), summary_schema())
    # a summary was written at the start and after every level (the next one begun)
    assert [[lv["complete"] for lv in s["levels"]] for s in summaries] == [
        [],
        [True, False],
        [True, True, False],
        [True, True, True],
        [True, True, True],
    ]


def test_requests_window():
    plan = closed_plan("2", requests=30)
    load, records, summaries = FakeLoad(e2e_s=0.25), [], []
    summary = make_driver(load, plan, records, summaries).run()
    level = summary["levels"][0]
    assert level["completed"] == 30  # exactly the budget, not one more per user
    assert len([r for r in records if r["step"] == "c2"]) == 30
    assert level["duration"] == pytest.approx(30 * 0.25 / 2, abs=0.3)


def test_outage_pauses_and_level_completes():
    plan = closed_plan("4", warmup="1s")
    load, records, summaries = FakeLoad(e2e_s=0.5), [], []
    load.down_between = (1005.0, 1025.0)

    def wait_ready(timeout, stop):
        while load._down(load.now):
            load.sleep(0.5)

    policy = OutagePolicy(
        mode="wait", timeout_s=60, is_refusing=lambda: load._down(load.now), wait_ready=wait_ready
    )
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
    plan = closed_plan("2,4")
    load, records, summaries = FakeLoad(), [], []
    load.down_between = (1003.0, 1100.0)
    policy = OutagePolicy(mode="fail", is_refusing=lambda: load._down(load.now))
    summary = make_driver(load, plan, records, summaries, outage=policy).run()
    assert summary["status"] == "failed"
    assert "outage" in summary["stop_reason"]
    assert summary["levels"][0]["complete"] is False
    jsonschema.validate(orjson.loads(orjson.dumps(summary)), summary_schema())


def test_outage_wait_timeout_fails_the_run():
    plan = closed_plan("2")
    load, records, summaries = FakeLoad(), [], []
    load.down_between = (1003.0, 9999.0)

    def wait_ready(timeout, stop):
        load.sleep(timeout)
        raise RuntimeError(f"not ready after {timeout}s")

    policy = OutagePolicy(
        mode="wait", timeout_s=30, is_refusing=lambda: True, wait_ready=wait_ready
    )
    summary = make_driver(load, plan, records, summaries, outage=policy).run()
    assert summary["status"] == "failed" and "not ready after 30" in summary["stop_reason"]


def test_signal_during_outage_wait_ends_the_wait_interrupted():
    """SIGINT while the run waits out an outage: the wait ends at the stop, the run is
    ``interrupted`` (not an outage failure) and every record before it is kept."""
    plan = closed_plan("2")
    load, records, summaries = FakeLoad(), [], []
    load.down_between = (1003.0, 99999.0)  # a reload that never comes back
    driver = None
    waited = []

    def wait_ready(timeout, stop):
        # the readiness gate: polls until ready, asking stop() between probes
        start = load.now
        while load.now - start < timeout:
            if load.now - start >= 5.0:
                driver.request_stop("SIGINT")  # the operator, five seconds into the wait
            reason = stop()
            if reason is not None:
                waited.append(load.now - start)
                raise RuntimeError(f"interrupted by {reason}")
            load.sleep(0.1)
        raise RuntimeError(f"not ready after {timeout}s")

    policy = OutagePolicy(
        mode="wait", timeout_s=2700, is_refusing=lambda: True, wait_ready=wait_ready
    )
    driver = make_driver(load, plan, records, summaries, outage=policy)
    summary = driver.run()
    assert waited == [pytest.approx(5.0, abs=0.2)]  # not the 45 minutes of the timeout
    assert summary["status"] == "interrupted" and summary["stop_reason"] == "SIGINT"
    (level,) = summary["levels"]
    assert level["complete"] is False and len(level["outages"]) == 1
    mine = [r for r in records if r["step"] == "c2"]
    assert level["completed"] + level["failed"] + level["unfinished"] == len(mine) > 0
    assert summaries[-1]["status"] == "interrupted"
    jsonschema.validate(orjson.loads(orjson.dumps(summary)), summary_schema())


def test_drain_note_shows_count_and_deadline():
    load = FakeLoad(e2e_s=100.0, tokens=1000)
    plan = closed_plan("3", duration="5s")
    notes = []
    driver = make_driver(
        load, plan, [], [], drain_timeout_s=25.0, on_tick=lambda d: notes.append(d.phase_note)
    )
    driver.run()
    drain = [n for n in notes if n.startswith("draining")]
    assert drain[0] == "draining: 3 requests in flight, up to 25s"
    assert drain[-1] == "draining: 3 requests in flight, up to 1s"
    assert driver.phase_note == ""


def test_signal_during_the_drain_stops_it_and_keeps_the_requests():
    load = FakeLoad(e2e_s=100.0, tokens=1000)
    plan = closed_plan("2", duration="5s")
    records = []

    def operator(d):
        if d.phase_note.startswith("draining") and load.now >= 1010.0:
            d.request_stop("SIGTERM")

    summary = make_driver(load, plan, records, [], drain_timeout_s=600.0, on_tick=operator).run()
    assert summary["status"] == "interrupted" and summary["stop_reason"] == "SIGTERM"
    assert load.now < 1020.0  # not the drain's 600 s
    (level,) = summary["levels"]
    assert level["complete"] is True  # its window was over: only the drain was cut
    assert level["unfinished"] == 2 == len([r for r in records if r["step"] == "c2"])


def test_stop_request_keeps_partial_level():
    plan = closed_plan("1,2")
    load, records, summaries = FakeLoad(), [], []
    driver = make_driver(
        load,
        plan,
        records,
        summaries,
        on_tick=lambda d: d.request_stop("SIGTERM") if load.now >= 1014 else None,
    )
    summary = driver.run()
    assert summary["status"] == "interrupted" and summary["stop_reason"] == "SIGTERM"
    first, second = summary["levels"]
    assert first["complete"] is True and second["complete"] is False
    assert second["duration"] == pytest.approx(4.0, abs=0.1)
    mine = [r for r in records if r["step"] == "c2"]
    # the two requests in flight at the stop are recorded, as unfinished
    assert second["unfinished"] == 2 and summary["levels"][0]["unfinished"] == 0
    assert second["completed"] + second["unfinished"] == len(mine)
    assert load.calls[-1][0] == "stop"
    jsonschema.validate(orjson.loads(orjson.dumps(summary)), summary_schema())


def test_transient_errors_without_refusal_are_not_outages():
    plan = closed_plan("2", duration="5s")
    load, records, summaries = FakeLoad(), [], []
    driver = make_driver(
        load, plan, records, summaries, outage=OutagePolicy(is_refusing=lambda: False)
    )
    driver.on_record(
        RequestRecord(
            category="math",
            step="c2",
            variant="v",
            model="m",
            start_s=load.now,
            end_s=load.now,
            error_kind="reset",
        )
    )
    summary = driver.run()
    assert summary["levels"][0]["outages"] == []


@pytest.mark.parametrize("concurrency", [1, 4, 16])
@pytest.mark.parametrize("warmup", ["0", "2s"])
def test_requests_window_sends_exactly_n(concurrency, warmup):
    plan = closed_plan(f"{concurrency}", warmup=warmup, requests=24)
    load, records, summaries = FakeLoad(e2e_s=0.3), [], []
    summary = make_driver(load, plan, records, summaries).run()
    level = summary["levels"][0]
    assert level["completed"] == 24 and level["planned_requests"] == 24
    assert len([r for r in records if r["step"] == level["name"]]) == 24
    assert summary["status"] == "complete"
    budgets = [c[3] for c in load.calls if c[:2] == ("step", level["name"])]
    assert budgets == [24]


def test_throughput_counts_tokens_that_arrived_in_the_window():
    # 8 streams of 7 s requests (250 tokens) against a 10 s window
    load = FakeLoad(e2e_s=7.0, tokens=250, ttft_s=0.04)
    plan = closed_plan("8", warmup="5s")
    records, summaries = [], []
    summary = make_driver(load, plan, records, summaries).run()
    level = summary["levels"][0]
    truth = 8 * 250 / 7.0  # each stream delivers 250 tokens every 7 s
    assert level["output_throughput"] == pytest.approx(truth, rel=0.03)
    # the old definition (tokens of requests started in the window) read 40% high
    started = sum(r["tokens_output"] for r in records if r["step"] == "c8" and r["ok"])
    assert started / 10.0 > 1.3 * truth
    assert "long_requests" in level["flags"]
    assert any("window of 70s" in w for w in level["warnings"])
    cats = level["categories"]
    assert cats["math"]["output_throughput"] + cats["coding"]["output_throughput"] == (
        pytest.approx(level["output_throughput"])
    )


def test_drain_deadline_records_unfinished_requests():
    load = FakeLoad(e2e_s=100.0, tokens=1000)
    plan = closed_plan("2", duration="5s")
    records, summaries = [], []
    summary = make_driver(load, plan, records, summaries, drain_timeout_s=10.0).run()
    level = summary["levels"][0]
    assert level["completed"] == 0 and level["unfinished"] == 2
    unfinished = [r for r in records if r["error_kind"] == "unfinished"]
    assert len(unfinished) == 2 and all(r["tokens_output"] > 100 for r in unfinished)
    assert "unfinished" in level["flags"]
    assert summary["status"] == "incomplete"
    jsonschema.validate(orjson.loads(orjson.dumps(summary)), summary_schema())


def test_users_short_and_lost_are_flagged():
    load = FakeLoad(e2e_s=0.5)
    plan = closed_plan("8")
    records, summaries = [], []

    def worker_dies(driver):
        if load.now >= 1003.0 and load.running_users is None:
            load.running_users = 4
            load.lost_count = 3

    summary = make_driver(load, plan, records, summaries, on_tick=worker_dies).run()
    level = summary["levels"][0]
    assert level["users_held"] == pytest.approx(8 * 1.5 / 8.5 + 4 * 7 / 8.5, abs=0.1)
    assert level["users_min"] == 4
    assert {"users_short", "lost"} <= set(level["flags"]) and level["lost"] == 3
    assert summary["status"] == "incomplete"


def test_truncation_guard_names_count_categories_and_a_budget():
    load = FakeLoad(e2e_s=0.5, tokens=128, truncated=True)
    plan = closed_plan("2", duration="5s")
    records, summaries = [], []
    summary = make_driver(load, plan, records, summaries).run()
    level = summary["levels"][0]
    n = level["completed"]
    assert level["reasoning_truncated_ratio"] == 1.0 and "reasoning_truncated" in level["flags"]
    (warning,) = [w for w in level["warnings"] if "inside reasoning" in w]
    assert f"{n} of {n} completed requests" in warning
    assert "max_tokens 128" in warning and "(coding, math)" in warning
    # what is known, not a guess: at least the budget, no request showed its full reasoning
    assert "needs at least 128 tokens; no truncated request showed its full reasoning" in warning


def test_a_run_that_reaches_its_answers_has_no_truncation_warning():
    load = FakeLoad(e2e_s=0.5, tokens=128)
    plan = closed_plan("2", duration="5s")
    summary = make_driver(load, plan, [], []).run()
    level = summary["levels"][0]
    assert level["reasoning_truncated_ratio"] == 0.0 and level["warnings"] == []
