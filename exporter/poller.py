"""Polls every target concurrently on an interval, in one background thread.

The thread runs an asyncio loop with one ``httpx.AsyncClient``; each cycle
polls all targets at once (each bounded by its own deadline), so a slow or
hanging vLLM delays only its own view and a Prometheus scrape never waits on
any of them: scrapes read the latest views.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import logging
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass

import httpx

from exporter.target import TargetMonitor

log = logging.getLogger("specload.exporter")


@dataclass(frozen=True)
class PollStats:
    cycles_total: int = 0
    last_duration_s: float | None = None  # wall time of the last cycle
    last_cpu_s: float | None = None  # CPU time of the poll thread in the last cycle
    last_end_s: float | None = None


class Poller:
    def __init__(
        self,
        targets: Sequence[TargetMonitor],
        *,
        interval_s: float,
        transport: httpx.AsyncBaseTransport | None = None,
    ) -> None:
        self.targets = list(targets)
        self.interval_s = interval_s
        self.stats = PollStats()
        self._transport = transport
        self._thread: threading.Thread | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._stop: asyncio.Event | None = None
        self._client: httpx.AsyncClient | None = None
        self._started = threading.Event()
        self._cycle_lock: asyncio.Lock | None = None

    def _make_client(self) -> httpx.AsyncClient:
        n = max(1, len(self.targets))
        return httpx.AsyncClient(
            transport=self._transport,
            timeout=httpx.Timeout(30.0),  # each fetch has its own overall deadline
            limits=httpx.Limits(max_connections=4 * n, max_keepalive_connections=2 * n),
            follow_redirects=False,
            trust_env=False,
        )

    async def cycle(self, client: httpx.AsyncClient) -> None:
        """Poll every target once, concurrently (one cycle at a time)."""
        if self._cycle_lock is None:
            self._cycle_lock = asyncio.Lock()
        async with self._cycle_lock:
            await self._cycle(client)

    async def _cycle(self, client: httpx.AsyncClient) -> None:
        t0, c0 = time.perf_counter(), time.thread_time()
        results = await asyncio.gather(
            *(t.poll(client) for t in self.targets), return_exceptions=True
        )
        for target, res in zip(self.targets, results, strict=True):
            if isinstance(res, BaseException):
                # A bug in our own code must not stop the others or the exporter.
                log.error("polling %s failed: %r", target.cfg.variant, res)
        s = self.stats
        self.stats = PollStats(
            cycles_total=s.cycles_total + 1,
            last_duration_s=time.perf_counter() - t0,
            last_cpu_s=time.thread_time() - c0,
            last_end_s=time.time(),
        )

    async def _main(self) -> None:
        self._stop = asyncio.Event()
        self._loop = asyncio.get_running_loop()
        async with self._make_client() as client:
            self._client = client
            self._started.set()
            while not self._stop.is_set():
                started = time.monotonic()
                await self.cycle(client)
                wait = max(0.0, self.interval_s - (time.monotonic() - started))
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(self._stop.wait(), wait)
            self._client = None

    def _run(self) -> None:
        try:
            asyncio.run(self._main())
        except Exception:  # pragma: no cover - logged, the scrape side keeps answering
            log.exception("poller stopped")
        finally:
            self._started.set()

    def start(self) -> None:
        if self._thread is not None:
            return
        self._thread = threading.Thread(
            target=self._run, name="specload-exporter-poller", daemon=True
        )
        self._thread.start()
        self._started.wait(10)

    def once(self) -> None:
        """One cycle in the calling thread, without the background thread (``--once``)."""

        async def go() -> None:
            async with self._make_client() as client:
                await self.cycle(client)

        asyncio.run(go())

    def poll_now(self, timeout_s: float = 60.0) -> None:
        """Run one extra cycle on the poller's loop and wait for it (tests, ``--once``)."""
        loop, client = self._loop, self._client
        if loop is None or client is None:
            raise RuntimeError("poller is not running")
        fut = asyncio.run_coroutine_threadsafe(self.cycle(client), loop)
        try:
            fut.result(timeout_s)
        except concurrent.futures.TimeoutError:
            fut.cancel()
            raise

    def stop(self) -> None:
        loop, stop = self._loop, self._stop
        if loop is not None and stop is not None and not loop.is_closed():
            with contextlib.suppress(RuntimeError):
                loop.call_soon_threadsafe(stop.set)
        if self._thread is not None:
            self._thread.join(timeout=30)
            self._thread = None
