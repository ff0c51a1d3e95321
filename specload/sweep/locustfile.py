"""The sweep's Locust entry file: specload's chat users, paced for open-loop levels.

``specload run`` loads it in its own process (single process or master) and
starts local workers with it; workers on other hosts use it too::

    locust -f $(python -c 'import specload.sweep.locustfile as m; print(m.__file__)') \\
        --worker --master-host MASTER

Closed loop: each user sends its next request when the last one ends, at once
(:class:`SweepRequests`: without the ``gevent.sleep(0)`` Locust puts between tasks).
Open loop (``--request-rate``): a per-process :class:`Pacer` issues tickets at
Poisson arrival times; a user takes a ticket before each request, so at most
``max_concurrency`` requests are in flight and arrivals beyond that queue
(like ``vllm bench serve --max-concurrency``). The master splits the rate
among its workers with the ``specload:pace`` runner message.
"""

from __future__ import annotations

import random
from typing import Any

import gevent
import gevent.queue
from locust import TaskSet, events, task
from locust.runners import WorkerRunner

# The module, not the class: Locust would run every User class found in this file.
from specload.load import user as _chat

MSG_PACE = "specload:pace"


class Pacer:
    """Poisson arrivals at ``rate`` per second as tickets in a queue; ``None`` = closed loop."""

    def __init__(self, seed: int | None = None) -> None:
        self.rate: float | None = None
        self.hold = False
        self.seq = 0
        self._tickets: gevent.queue.Queue[int] = gevent.queue.Queue()
        self._greenlet: gevent.Greenlet[Any, Any] | None = None
        self._rng = random.Random(seed)

    def set_rate(self, rate: float | None, seq: int = 0, *, hold: bool = False) -> None:
        """Open loop at ``rate``; closed loop when ``None``; ``hold``: no new requests at all."""
        if seq and seq < self.seq:
            return
        self.seq = seq or self.seq + 1
        if self._greenlet is not None:
            self._greenlet.kill(block=False)
            self._greenlet = None
        while not self._tickets.empty():  # a new level starts without a backlog
            self._tickets.get_nowait()
        self.hold = hold
        self.rate = rate if rate and rate > 0 else None
        if self.rate is not None and not hold:
            self._greenlet = gevent.spawn(self._arrivals, self.rate)

    def _arrivals(self, rate: float) -> None:
        while True:
            gevent.sleep(self._rng.expovariate(rate))
            self._tickets.put(1)

    def wait(self) -> None:
        if self.rate is not None or self.hold:
            self._tickets.get()

    def backlog(self) -> int:
        return int(self._tickets.qsize())


def get_pacer(environment: Any) -> Pacer:
    pacer: Pacer | None = getattr(environment, "_specload_pacer", None)
    if pacer is None:
        pacer = Pacer()
        environment._specload_pacer = pacer
    return pacer


def _loop_iteration() -> int | None:
    """How many times gevent's event loop has gone round (None where it does not say)."""
    iteration: int | None = getattr(gevent.get_hub().loop, "iteration", None)
    return iteration


class SweepRequests(TaskSet):
    """A sweep user's requests one after another: Locust's task loop, with one change.

    Between two tasks Locust sleeps ``wait_time()``, and ``gevent.sleep(0)`` is not free:
    it puts the user at the back of the hub's queue. When many streams end in the same
    moment (closed-loop users in step, as against a fixed-timing server, or after a stall
    of the machine), every user then waited for all the others' bookkeeping (the record,
    publishing it) before its next request went out: 20-40 ms per request at 256 streams,
    1-2% of the offered load (bench/results/client.md). So a zero wait after a request
    that blocked in the event loop (it waited for its answer; in the open loop, also the
    wait for a ticket) does not yield again: the next request goes out at once. After a
    request that did not block (one that failed before any I/O) it still yields, so a
    failing user never keeps the others from running.
    """

    _iteration: int | None = None

    @task
    def chat(self) -> None:
        self._iteration = _loop_iteration()
        user = self.user
        assert isinstance(user, _chat.ChatUser)
        user.chat()

    def _sleep(self, seconds: float) -> None:
        if seconds > 0 or self._iteration is None or _loop_iteration() == self._iteration:
            gevent.sleep(seconds)


class SweepUser(_chat.ChatUser):
    """A chat user that takes a pacing ticket before each request (open loop only)."""

    def on_start(self) -> None:
        super().on_start()
        get_pacer(self.environment).wait()

    def wait_time(self) -> float:
        get_pacer(self.environment).wait()
        return 0.0


# Its requests run in SweepRequests (set here: Locust's metaclass would add the inherited
# ``ChatUser.chat`` task to any ``tasks`` given in the class body).
SweepUser.tasks = [SweepRequests]


def _on_pace(environment: Any, msg: Any, **kw: Any) -> None:
    data = msg.data or {}
    get_pacer(environment).set_rate(
        data.get("rate"), int(data.get("seq", 0)), hold=bool(data.get("hold"))
    )


def _on_init(environment: Any, runner: Any = None, **kw: Any) -> None:
    # The master only sends paces (it runs no users); a local runner is paced directly.
    if isinstance(runner, WorkerRunner):
        runner.register_message(MSG_PACE, _on_pace)


events.init.add_listener(_on_init)  # type: ignore[no-untyped-call]
__all__ = ["MSG_PACE", "Pacer", "SweepRequests", "SweepUser", "get_pacer"]
