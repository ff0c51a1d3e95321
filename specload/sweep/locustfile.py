"""The sweep's Locust entry file: specload's chat users, paced for open-loop levels.

``specload run`` loads it in its own process (single process or master) and
starts local workers with it; workers on other hosts use it too::

    locust -f $(python -c 'import specload.sweep.locustfile as m; print(m.__file__)') \\
        --worker --master-host MASTER

Closed loop: each user sends its next request when the last one ends. Users that
start together and get identical requests (a fixed-timing server, fixed output lengths)
would stay in step for the whole run, so in a warm-up each new user's first request
is spread over :data:`START_SPREAD_S` (:meth:`Pacer.start_delay`).
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
from locust import events
from locust.runners import WorkerRunner

# The module, not the class: Locust would run every User class found in this file.
from specload.load import user as _chat
from specload.load.options import WARMUP_SUFFIX

MSG_PACE = "specload:pace"
# Closed-loop users in step end their streams in the same moment, and the client then
# handles hundreds of completions at once: each user's next request goes out tens of ms
# late (1-3% of the offered load at 256 streams) and first tokens read late carry a later
# arrival stamp (bench/results/client.md). A warm-up spreads new users' first requests
# over this many seconds; once apart, users with identical requests stay apart.
START_SPREAD_S = 1.0


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

    def start_delay(self, step: str) -> float:
        """Seconds a new user waits before its first request: in a closed-loop warm-up,
        uniform below :data:`START_SPREAD_S`; else none (the open loop's tickets are
        spread already, and a measured window starts no user late)."""
        if self.rate is not None or self.hold or not step.endswith(WARMUP_SUFFIX):
            return 0.0
        return self._rng.uniform(0.0, START_SPREAD_S)

    def backlog(self) -> int:
        return int(self._tickets.qsize())


def get_pacer(environment: Any) -> Pacer:
    pacer: Pacer | None = getattr(environment, "_specload_pacer", None)
    if pacer is None:
        pacer = Pacer()
        environment._specload_pacer = pacer
    return pacer


class SweepUser(_chat.ChatUser):
    """A chat user that takes a pacing ticket before each request (open loop only)."""

    def on_start(self) -> None:
        super().on_start()
        pacer = get_pacer(self.environment)
        delay = pacer.start_delay(self._session.step)
        if delay > 0:
            gevent.sleep(delay)
        pacer.wait()

    def wait_time(self) -> float:
        get_pacer(self.environment).wait()
        return 0.0


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
__all__ = ["MSG_PACE", "START_SPREAD_S", "WARMUP_SUFFIX", "Pacer", "SweepUser", "get_pacer"]
