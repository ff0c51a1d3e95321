"""The client's own lag and CPU, measured in every process that runs users.

:class:`LagMeter` is one greenlet per such process (a single process, or each worker): it
sleeps :data:`~specload.records.clientload.LAG_INTERVAL_S`, and each time it wakes it adds
how late it woke, and the process's CPU and wall time since its last wake-up, to the step in
force (the process's :class:`~specload.load.session.LoadSession` step), as a
:class:`~specload.records.clientload.ClientLoad`. It runs from Locust's ``test_start`` to its
``test_stop`` (or the process's quit): a paused level (an outage) is not measured.

:class:`ClientLoadBook` holds a process's figures per step. A worker adds what it measured
since its last report to Locust's own statistics report (``report_to_master``, every 3 s and
once more when it quits; key :data:`REPORT_KEY`), and the master keeps each worker's apart
(``worker_report``), so a level's figures merge the processes that ran its users
(:func:`specload.records.clientload.figures`). A level's last ticks reach the master with the
worker's next report, up to 3 s after its window ends: ``specload run`` writes the summary
again after each level and at the end, so the final summary counts them.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from typing import Any

import gevent

from specload.records.clientload import (
    LAG_INTERVAL_S,
    ClientLoad,
    ClientLoadFigures,
    figures,
)

#: The key of a worker's client load in Locust's statistics report.
REPORT_KEY = "specload_client_load"


class LagMeter:
    """Wake-up lateness, CPU and wall time of this process, per step."""

    def __init__(
        self,
        step: Callable[[], str],
        *,
        interval_s: float = LAG_INTERVAL_S,
        clock: Callable[[], float] = time.perf_counter,
        cpu: Callable[[], float] = time.process_time,
        sleep: Callable[[float], Any] = gevent.sleep,
        keep_unsent: bool = False,
    ) -> None:
        self.step = step
        self.interval_s = interval_s
        self.clock = clock
        self.cpu = cpu
        self.sleep = sleep
        self.steps: dict[str, ClientLoad] = {}
        self._keep_unsent = keep_unsent  # a worker: what is not reported yet, apart
        self._unsent: dict[str, ClientLoad] = {}
        self._greenlet: gevent.Greenlet | None = None

    def tick(self, step: str, late_s: float, cpu_s: float, wall_s: float) -> None:
        """One wake-up: ``late_s`` after it was due, ``cpu_s`` of CPU in ``wall_s``."""
        load = self.steps.get(step)
        if load is None:
            load = self.steps[step] = ClientLoad()
        load.add(late_s, cpu_s, wall_s)
        if self._keep_unsent:
            unsent = self._unsent.get(step)
            if unsent is None:
                unsent = self._unsent[step] = ClientLoad()
            unsent.add(late_s, cpu_s, wall_s)

    def run(self) -> None:
        """Tick until killed."""
        clock, cpu, sleep, interval = self.clock, self.cpu, self.sleep, self.interval_s
        last_t, last_cpu = clock(), cpu()
        while True:
            sleep(interval)
            now, used = clock(), cpu()
            wall = now - last_t
            self.tick(self.step(), max(0.0, wall - interval), used - last_cpu, wall)
            last_t, last_cpu = now, used

    def start(self, **_kw: Any) -> None:
        if self._greenlet is None or self._greenlet.dead:
            self._greenlet = gevent.spawn(self.run)

    def stop(self, **_kw: Any) -> None:
        greenlet, self._greenlet = self._greenlet, None
        if greenlet is not None:
            greenlet.kill(block=False)

    @property
    def running(self) -> bool:
        return self._greenlet is not None and not self._greenlet.dead

    def take(self) -> dict[str, dict[str, Any]]:
        """What was measured since the last call, per step (for the master), and forget it."""
        unsent, self._unsent = self._unsent, {}
        return {step: load.to_dict() for step, load in unsent.items()}


class ClientLoadBook:
    """A process's client load per step: its own (single process, worker) or, on the
    master, each worker's as reported."""

    def __init__(self, meter: LagMeter | None, variant: str = "") -> None:
        self.meter = meter
        self.variant = variant
        self.workers: dict[str, dict[str, ClientLoad]] = {}

    def report_to_master(self, client_id: str = "", data: Any = None, **_kw: Any) -> None:
        """A worker's statistics report: add what its meter measured since the last one."""
        if self.meter is not None and isinstance(data, dict):
            data[REPORT_KEY] = self.meter.take()

    def worker_report(self, client_id: str = "", data: Any = None, **_kw: Any) -> None:
        """The master: a worker's report (its steps' loads since its last report)."""
        if not isinstance(data, Mapping):
            return
        sent = data.get(REPORT_KEY)
        if not isinstance(sent, Mapping):
            return
        mine = self.workers.setdefault(str(client_id), {})
        for step, raw in sent.items():
            try:
                load = ClientLoad.from_dict(raw)
            except (KeyError, TypeError, ValueError):
                continue  # not a report of this version: nothing to count
            have = mine.get(str(step))
            if have is None:
                mine[str(step)] = load
            else:
                have.merge(load)

    def parts(self, step: str) -> list[ClientLoad]:
        """Each process's load in ``step``."""
        if self.workers:
            return [steps[step] for steps in self.workers.values() if step in steps]
        if self.meter is not None and step in self.meter.steps:
            return [self.meter.steps[step]]
        return []

    def figures(self, step: str) -> ClientLoadFigures | None:
        """``step``'s figures, its processes merged (None: nothing measured in it)."""
        return figures(self.parts(step))

    def step_names(self) -> list[str]:
        names: set[str] = set()
        for steps in self.workers.values():
            names.update(steps)
        if self.meter is not None:
            names.update(self.meter.steps)
        return sorted(names)


def attach(
    environment: Any, role: str, step: Callable[[], str], variant: str = ""
) -> ClientLoadBook:
    """The process's book (and, where users run, its meter), wired to Locust's events."""
    events = environment.events
    meter = None
    if role in ("local", "worker"):
        meter = LagMeter(step, keep_unsent=role == "worker")
        events.test_start.add_listener(meter.start)
        events.test_stop.add_listener(meter.stop)
        events.quitting.add_listener(meter.stop)
    book = ClientLoadBook(meter, variant)
    if role == "worker":
        events.report_to_master.add_listener(book.report_to_master)
    elif role == "master":
        events.worker_report.add_listener(book.worker_report)
    environment._specload_client_load = book
    return book


def get_book(environment: Any) -> ClientLoadBook | None:
    """The book :func:`attach` made for ``environment`` (None: none)."""
    book = getattr(environment, "_specload_client_load", None)
    return book if isinstance(book, ClientLoadBook) else None
