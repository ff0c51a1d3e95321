"""The master's side of a worker that goes missing: its unreported requests are booked lost
once, only its unstarted budget goes to the others, and a worker that comes back is told to
quit, its records set aside (never counted). Driven with a stand-in runner; the real
processes across failing links are tests/integration/test_multihost_netns.py."""

from __future__ import annotations

from dataclasses import dataclass, field
from types import SimpleNamespace
from typing import Any

import pytest

from specload.load.messages import MSG_BUDGET, MSG_STEP, RecordsMessage, WantMessage
from specload.load.session import LoadSession

pytestmark = pytest.mark.unit


@dataclass
class Client:
    state: str = "ready"


@dataclass
class Runner:
    clients: dict[str, Client] = field(default_factory=dict)
    sent: list[tuple[str, Any, str | None]] = field(default_factory=list)

    def send_message(self, msg_type: str, data: Any = None, client_id: str | None = None) -> None:
        self.sent.append((msg_type, data, client_id))


def _master() -> tuple[LoadSession, Runner]:
    runner = Runner({"w1": Client(), "w2": Client()})
    env = SimpleNamespace(runner=runner, parsed_options=None, events=SimpleNamespace())
    session = LoadSession(env)
    session.role = "master"
    return session, runner


def _records(n: int, step: str, start: float = 0.0) -> list[dict[str, Any]]:
    return [{"step": step, "start_s": start + i, "end_s": start + i + 1.0} for i in range(n)]


def _report(session: LoadSession, node: str, report: RecordsMessage) -> None:
    session._on_records(session.environment, SimpleNamespace(node_id=node, data=report.payload()))


def _want(session: LoadSession, node: str, waiting: int) -> None:
    msg = SimpleNamespace(node_id=node, data=WantMessage(session.step_seq, waiting).payload())
    session._on_want(session.environment, msg)


def test_a_lost_worker_costs_its_unreported_requests_and_gives_back_the_rest() -> None:
    session, runner = _master()
    for node in ("w1", "w2"):  # first messages: each is sent the step
        _report(session, node, RecordsMessage([], 0, 0, None, 0))
    session.set_step("c4", 40)
    _want(session, "w1", 5)  # granted 2 per waiting user: 10
    _want(session, "w2", 5)
    assert [m[1]["add"] for m in runner.sent if m[0] == MSG_BUDGET] == [10, 10]
    # w1 started 7 of its 10 and reported 3 records; then its link fails
    _report(session, "w1", RecordsMessage(_records(3, "c4"), 7, session.step_seq, 3, 7))
    runner.clients["w1"].state = "missing"
    session.check_workers()
    assert session.lost_requests() == 4  # started 7, reported 3: booked lost, once
    assert session.workers_left() == 1
    # its 3 unstarted go back to the pool, for the others (not its 4 in flight)
    assert session._pool == 40 - 10 - 10 + 3
    _want(session, "w2", 2)
    assert [m[1]["add"] for m in runner.sent if m[0] == MSG_BUDGET][-1] == 4
    # the link comes back: Locust marks it ready again, its held records arrive
    runner.clients["w1"].state = "ready"
    _report(session, "w1", RecordsMessage(_records(5, "c4", 10.0), 9, session.step_seq, 1, 9))
    _report(session, "w1", RecordsMessage(_records(1, "c4", 20.0), 9, session.step_seq, 1, 9))
    assert len(session.late_records) == 6  # set aside, not counted
    assert session._workers["w1"].received == 3  # only what it reported before it was lost
    quits = [m for m in runner.sent if m[0] == "quit"]
    assert quits == [("quit", None, "w1")]  # told once
    assert session.lost_requests() == 4  # what it sent late changes nothing counted
    assert session.in_flight() == 0  # nothing of it is waited for
    _want(session, "w1", 4)  # and it gets no budget
    assert [m for m in runner.sent if m[0] == MSG_BUDGET and m[2] == "w1"][-1][1]["add"] == 10


def test_a_new_worker_is_sent_the_step_by_its_first_message_not_on_connect() -> None:
    session, runner = _master()
    session.set_step("c1", None)
    runner.sent.clear()
    session._on_worker_connect("w3")
    assert not runner.sent  # its handlers are not registered yet: it would only warn
    _report(session, "w3", RecordsMessage([], 0, 0, None, 0))
    assert [(m[0], m[2]) for m in runner.sent] == [(MSG_STEP, "w3")]
    runner.sent.clear()
    session._on_worker_connect("w3")  # it reconnected: its handlers are there
    assert [(m[0], m[2]) for m in runner.sent] == [(MSG_STEP, "w3")]


def test_a_workers_backoffs_reach_the_masters_client_metrics() -> None:
    waits = [["v", "m", "math", "c1", 0.25], ["v", "m", "math", "c1", 0.5], ["bad"]]
    payload = RecordsMessage([], 2, 0, None, 2, waits).payload()  # as a worker sends it
    for served in (True, False):  # --metrics-address HOST:PORT, or off: nothing to feed
        session, _runner = _master()
        session.metrics_served = served
        session._on_records(session.environment, SimpleNamespace(node_id="w1", data=payload))
        got = {
            s.name: s.value
            for fam in session.metrics.collect()
            if fam.name.startswith("specload_client_backoff")
            for s in fam.samples
            if s.labels == {"variant": "v", "model": "m", "category": "math", "step": "c1"}
        }
        want = {"specload_client_backoffs_total": 2, "specload_client_backoff_seconds_total": 0.75}
        assert got == (want if served else {}), served


def test_the_step_sent_again_keeps_the_budget_granted_since() -> None:
    runner = Runner()
    env = SimpleNamespace(runner=runner, parsed_options=None, events=SimpleNamespace())
    worker = LoadSession(env)
    worker.role = "worker"

    def receive(kind: str, payload: dict[str, Any]) -> None:
        handler = worker._on_step if kind == MSG_STEP else worker._on_budget
        handler(env, SimpleNamespace(data=payload))

    receive(MSG_STEP, {"name": "c4", "seq": 3, "budget": 0})
    receive(MSG_BUDGET, {"seq": 3, "add": 8})
    receive(MSG_STEP, {"name": "c4", "seq": 3, "budget": 0})  # the greeting, late
    assert (worker.step, worker.budget) == ("c4", 8)
    receive(MSG_STEP, {"name": "c8", "seq": 4, "budget": 0})  # a new step starts from 0
    assert (worker.step, worker.budget) == ("c8", 0)
    receive(MSG_STEP, {"name": "c8", "seq": 4, "budget": None})  # no budget after all
    assert worker.budget is None
