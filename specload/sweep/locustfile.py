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

import logging
import random
import time
import zlib
from collections.abc import Callable, Iterator
from typing import Any

import gevent
import gevent.queue
from locust import events
from locust.runners import WorkerRunner

# The module, not the class: Locust would run every User class found in this file.
from specload.load import user as _chat
from specload.load.options import WARMUP_SUFFIX
from specload.prompts import Prompt
from specload.prompts.trace import TraceEntry, load_trace, share, trace_digest

log = logging.getLogger("specload.load")

MSG_PACE = "specload:pace"
# Closed-loop users in step end their streams in the same moment, and the client then
# handles hundreds of completions at once: each user's next request goes out tens of ms
# late (1-3% of the offered load at 256 streams) and first tokens read late carry a later
# arrival stamp (bench/results/client.md). A warm-up spreads new users' first requests
# over this many seconds; once apart, users with identical requests stay apart.
START_SPREAD_S = 1.0
# Open loop: a ticket goes to a waiting user this long before it is due, and the user sleeps
# to the due time itself (one timer on the way to the send, not the pacer's and a queue hop).
TICKET_LEAD_S = 0.02
# A trace replayed by workers starts this long after the master's pace message, on the wall
# clock (the hosts' clocks agree: one host, or NTP), so every worker's share keeps the
# trace's own spacing whatever the message's delay to each.
TRACE_START_LEAD_S = 0.25


def gaps(rng: random.Random, rate: float, burstiness: float) -> Iterator[float]:
    """Inter-arrival times (s) at ``rate`` per second: gamma with shape ``burstiness`` and
    mean 1/rate, as ``vllm bench serve --burstiness`` draws them (1: Poisson; below 1
    burstier, above 1 more even; the coefficient of variation is 1/sqrt(burstiness))."""
    if burstiness == 1.0:
        while True:
            yield rng.expovariate(rate)
    theta = 1.0 / (rate * burstiness)
    while True:
        yield rng.gammavariate(burstiness, theta)


class Pacer:
    """Open-loop arrivals at ``rate`` per second as tickets in a queue (:func:`gaps`: Poisson,
    or gamma with ``--burstiness``); ``None`` = closed loop. Arrival times are kept on an
    absolute schedule: a late wake-up does not push the later arrivals back."""

    def __init__(
        self,
        seed: int | None = None,
        burstiness: float = 1.0,
        trace: Callable[[], list[TraceEntry]] | None = None,
    ) -> None:
        self.burstiness = burstiness
        self._trace = trace  # the trace's entries (loaded on first use), for --trace
        self.rate: float | None = None
        self.hold = False
        self.seq = 0
        # Each ticket: when its request was due (wall clock, the record's scheduled_s) and,
        # replaying a trace, the request's prompt.
        self._tickets: gevent.queue.Queue[tuple[float, Prompt | None]] = gevent.queue.Queue()
        self._greenlet: gevent.Greenlet[Any, Any] | None = None
        self._rng = random.Random(seed)

    def set_rate(
        self,
        rate: float | None,
        seq: int = 0,
        *,
        hold: bool = False,
        trace: tuple[int, int] | None = None,
        trace_start: float | None = None,
    ) -> None:
        """Open loop at ``rate``; closed loop when ``None``; ``hold``: no new requests at all;
        ``trace``: replay this process's share of the trace (``(index, of count)``) from
        ``trace_start`` (wall clock: every worker's share on one schedule; None: now)."""
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
        if trace is not None and self._trace is not None and not hold:
            self.rate = float("inf")  # open loop: users wait for the trace's tickets
            self._greenlet = gevent.spawn(self._replay, share(self._trace(), *trace), trace_start)
        elif self.rate is not None and not hold:
            self._greenlet = gevent.spawn(self._arrivals, self.rate)

    def _arrivals(self, rate: float) -> None:
        start = time.monotonic()
        wall = time.time() - start  # monotonic -> wall clock
        due = start
        for gap in gaps(self._rng, rate, self.burstiness):
            due += gap
            delay = due - TICKET_LEAD_S - time.monotonic()
            if delay > 0:
                gevent.sleep(delay)
            self._tickets.put((wall + due, None))

    def _replay(self, entries: list[TraceEntry], start_wall: float | None = None) -> None:
        now = time.monotonic()
        wall = time.time() - now  # monotonic -> wall clock
        start = now if start_wall is None else start_wall - wall
        for entry in entries:
            due = start + entry.offset_s
            delay = due - TICKET_LEAD_S - time.monotonic()
            if delay > 0:
                gevent.sleep(delay)
            self._tickets.put((wall + due, entry.prompt))

    def wait(self) -> tuple[float | None, Prompt | None]:
        """Take a ticket (open loop, or held): when its request was due (wall clock) and
        the trace's prompt; ``(None, None)`` in a closed loop."""
        if self.rate is not None or self.hold:
            due, prompt = self._tickets.get()
            if due is not None:  # the ticket came early: its user sleeps to the due time
                early = due - time.time()
                if early > 0:
                    gevent.sleep(early)
            return due, prompt
        return None, None

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
        opts = getattr(environment, "parsed_options", None)
        # Arrivals repeat with the prompt seed; each worker draws its own sequence.
        runner = getattr(environment, "runner", None)
        worker = str(getattr(runner, "client_id", "") or "")
        seed = f"{getattr(opts, 'prompt_seed', 0)}:{worker}"
        path = str(getattr(opts, "trace", "") or "")
        speedup = float(getattr(opts, "trace_speedup", 1.0) or 1.0)
        pacer = Pacer(
            seed=zlib.crc32(seed.encode()),
            burstiness=float(getattr(opts, "burstiness", 1.0) or 1.0),
            trace=(lambda: load_trace(path, speedup=speedup)) if path else None,
        )
        environment._specload_pacer = pacer
    return pacer


class SweepUser(_chat.ChatUser):
    """A chat user that takes a pacing ticket before each request (open loop only)."""

    trace_prompt: Prompt | None = None

    def on_start(self) -> None:
        super().on_start()
        pacer = get_pacer(self.environment)
        delay = pacer.start_delay(self._session.step)
        if delay > 0:
            gevent.sleep(delay)
        self.scheduled_s, self.trace_prompt = pacer.wait()

    def wait_time(self) -> float:
        self.scheduled_s, self.trace_prompt = get_pacer(self.environment).wait()
        return 0.0

    def next_prompt(self) -> Prompt:
        prompt, self.trace_prompt = self.trace_prompt, None
        return prompt if prompt is not None else super().next_prompt()


def _own_trace_digest(environment: Any) -> str:
    opts = getattr(environment, "parsed_options", None)
    path = str(getattr(opts, "trace", "") or "")
    return trace_digest(path, float(getattr(opts, "trace_speedup", 1.0) or 1.0)) if path else ""


def _on_pace(environment: Any, msg: Any, **kw: Any) -> None:
    data = msg.data or {}
    trace = None
    hold = bool(data.get("hold"))
    workers = data.get("trace_workers")
    if isinstance(workers, list):  # this worker's share: its place among the workers
        me = str(getattr(environment.runner, "client_id", ""))
        trace = (workers.index(me) if me in workers else 0, max(1, len(workers)))
        wanted = data.get("trace_digest")
        if wanted is not None and wanted != _own_trace_digest(environment):
            # Without the master's trace this worker would send another workload (closed
            # loop, or another file) and the level would count it as the trace's.
            log.error(
                "specload: the master replays a trace this worker does not have (--trace, "
                "--trace-speedup differ or are missing): it sends nothing; start every "
                "worker with the master's load options and the same trace file"
            )
            hold, trace = True, None
    start = data.get("trace_start")
    get_pacer(environment).set_rate(
        data.get("rate"),
        int(data.get("seq", 0)),
        hold=hold,
        trace=trace,
        trace_start=float(start) if isinstance(start, int | float) else None,
    )


def _on_init(environment: Any, runner: Any = None, **kw: Any) -> None:
    # The master only sends paces (it runs no users); a local runner is paced directly.
    if isinstance(runner, WorkerRunner):
        runner.register_message(MSG_PACE, _on_pace)


events.init.add_listener(_on_init)  # type: ignore[no-untyped-call]
__all__ = [
    "MSG_PACE",
    "START_SPREAD_S",
    "TRACE_START_LEAD_S",
    "WARMUP_SUFFIX",
    "Pacer",
    "SweepUser",
    "get_pacer",
]
