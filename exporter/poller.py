"""Polls every target on an interval, each in its own thread.

Each target has a thread, an ``httpx.Client`` and a lock; its polls start on a
common schedule (every ``interval`` from the same origin), so a slow or
hanging vLLM delays only its own view, and a Prometheus scrape never waits on
any of them: scrapes read the latest views. :meth:`Poller.once` polls all
targets concurrently and waits (``--once``, tests, the benchmark).

Each poll has one deadline (the target's timeout from its start) for all it
sends and reads; :meth:`Poller.stop` cancels polls under way (their sockets are
shut down) and returns within about :data:`STOP_JOIN_S` whatever the targets do.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

import httpx

from exporter.fetch import Deadline, PollTransport
from exporter.target import TargetMonitor

log = logging.getLogger("specload.exporter")

#: How long :meth:`Poller.stop` waits for each poller thread after cancelling its poll.
STOP_JOIN_S = 2.0


@dataclass(frozen=True)
class PollStats:
    polls_total: int = 0
    cpu_total_s: float = 0.0  # CPU of all polls so far
    round_duration_s: float | None = None  # wall time of the slowest target's last poll
    round_cpu_s: float | None = None  # CPU of every target's last poll, summed
    last_end_s: float | None = None


@dataclass
class _Slot:
    monitor: TargetMonitor
    transport: httpx.BaseTransport
    owned: bool  # created here, closed here
    lock: threading.Lock
    last_duration_s: float | None = None
    last_cpu_s: float | None = None
    thread: threading.Thread | None = None


class Poller:
    def __init__(
        self,
        targets: Sequence[TargetMonitor],
        *,
        interval_s: float,
        transport: httpx.BaseTransport | None = None,
    ) -> None:
        self.interval_s = interval_s
        self._slots = [
            _Slot(t, transport or self._make_transport(), transport is None, threading.Lock())
            for t in targets
        ]
        self._stop = threading.Event()
        self._stats_lock = threading.Lock()
        self._polls = 0
        self._cpu_total = 0.0
        self._last_end: float | None = None
        self._origin = time.monotonic()

    @property
    def targets(self) -> list[TargetMonitor]:
        return [s.monitor for s in self._slots]

    @staticmethod
    def _make_transport() -> httpx.BaseTransport:
        # One keep-alive connection per target; the system proxy settings do not apply.
        return PollTransport(max_connections=2, max_keepalive_connections=1)

    @property
    def stats(self) -> PollStats:
        durations = [s.last_duration_s for s in self._slots if s.last_duration_s is not None]
        cpus = [s.last_cpu_s for s in self._slots if s.last_cpu_s is not None]
        with self._stats_lock:
            return PollStats(
                polls_total=self._polls,
                cpu_total_s=self._cpu_total,
                round_duration_s=max(durations) if durations else None,
                round_cpu_s=sum(cpus) if cpus else None,
                last_end_s=self._last_end,
            )

    def _poll(self, slot: _Slot) -> None:
        with slot.lock:
            t0, c0 = time.perf_counter(), time.thread_time()
            deadline = Deadline.after(slot.monitor.timeout_s, self._stop)
            try:
                slot.monitor.poll(slot.transport, deadline)
            except Exception:
                # A bug in our own code must not stop this target's thread or the exporter.
                log.exception("polling %s failed", slot.monitor.cfg.variant)
            cpu = time.thread_time() - c0
            slot.last_duration_s = time.perf_counter() - t0
            slot.last_cpu_s = cpu
        with self._stats_lock:
            self._polls += 1
            self._cpu_total += cpu
            self._last_end = time.time()

    def _loop(self, slot: _Slot) -> None:
        interval = self.interval_s
        while not self._stop.is_set():
            self._poll(slot)
            # Next tick of the common schedule (skipping ticks a slow poll overran).
            now = time.monotonic()
            ticks = int((now - self._origin) / interval) + 1
            if self._stop.wait(max(0.0, self._origin + ticks * interval - now)):
                return

    def start(self) -> None:
        self._stop.clear()
        self._origin = time.monotonic()
        for slot in self._slots:
            if slot.thread is None:
                slot.thread = threading.Thread(
                    target=self._loop,
                    args=(slot,),
                    name=f"specload-poll-{slot.monitor.cfg.variant}",
                    daemon=True,
                )
                slot.thread.start()

    def once(self) -> None:
        """Poll every target once, concurrently, and wait for all of them."""
        if not self._slots:
            return
        if len(self._slots) == 1:
            self._poll(self._slots[0])
            return
        with ThreadPoolExecutor(len(self._slots), thread_name_prefix="specload-once") as pool:
            list(pool.map(self._poll, self._slots))

    poll_now = once

    def stop(self) -> None:
        """Cancel the polls under way and stop the threads, in about ``STOP_JOIN_S`` at most.

        A thread still stuck after that (a connect or DNS wait the deadline bounds but
        an abort cannot end) is a daemon: it ends with its deadline or the process.
        """
        self._stop.set()
        for slot in self._slots:
            abort = getattr(slot.transport, "abort", None)
            if slot.owned and callable(abort):
                abort()
        until = time.monotonic() + STOP_JOIN_S
        stuck = []
        for slot in self._slots:
            if slot.thread is not None:
                slot.thread.join(timeout=max(0.0, until - time.monotonic()))
                if slot.thread.is_alive():
                    stuck.append(slot.monitor.cfg.variant)
                slot.thread = None
        if stuck:
            log.warning("poller threads still busy at stop: %s", ", ".join(stuck))
        for slot in self._slots:
            if slot.owned:
                try:
                    slot.transport.close()
                except Exception as exc:  # a stuck thread may still hold a connection
                    log.debug("closing the transport failed: %s", type(exc).__name__)
