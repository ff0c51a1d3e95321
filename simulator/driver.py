"""Drivers that turn the engine's steps into wall-clock time.

All times are ``time.monotonic()`` (uvloop's ``loop.time()`` is cached to the
millisecond); timers are set with ``call_later`` from the monotonic clock.

* :class:`SteppingDriver` runs :class:`~simulator.engine.EngineCore`'s step loop:
  each step sleeps its cost-model duration / ``time_scale`` (x the degradation
  factor) against absolute deadlines, so timer lateness never accumulates.
* :class:`FixedDriver` is the fixed-timing profile for accuracy tests: no
  batching; each request gets its first chunk exactly ``ttft_s`` after arrival,
  then one chunk every ``itl_s``, each of ``tokens_per_chunk`` tokens. With
  ``itl_jitter`` J > 0 each request's ITL is ``itl_s`` times its own factor, drawn
  once at its arrival uniformly in [1 - J, 1 + J] from a seeded RNG: the requests'
  true median ITL (and TPOT) is still exactly ``itl_s``, with a known spread.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import random
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from time import monotonic

from simulator.engine import EngineCore, Sequence, StepPlan, record_finished
from simulator.metrics import EngineMetrics
from simulator.prefix_cache import PrefixCache, block_hashes

log = logging.getLogger("simulator")

# Keep the step cadence when a wake-up is at most this late; beyond, restart from now.
_MAX_CATCH_UP_S = 0.2


@dataclass
class Degradation:
    """Step time x ``factor`` once ``active_from`` (monotonic clock) has passed."""

    factor: float = 1.0
    active_from: float = float("inf")

    def current(self, now: float) -> float:
        return self.factor if now >= self.active_from else 1.0


class LagStats:
    """Scheduling lag of timer wake-ups (how late a step or chunk left), last N kept."""

    def __init__(self, keep: int = 20000) -> None:
        self.samples: deque[float] = deque(maxlen=keep)

    def add(self, lag_s: float) -> None:
        self.samples.append(lag_s)

    def quantile(self, q: float) -> float:
        if not self.samples:
            return 0.0
        ordered = sorted(self.samples)
        return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


StepObserver = Callable[[StepPlan, float, float], None]  # plan, start (loop time), duration_s


class SteppingDriver:
    def __init__(
        self,
        core: EngineCore,
        *,
        time_scale: float,
        degradation: Degradation,
        lag: LagStats,
        on_step: StepObserver | None = None,
    ) -> None:
        self.core = core
        self.time_scale = time_scale
        self.degradation = degradation
        self.lag = lag
        self.on_step = on_step
        self._wake: asyncio.Future[None] | None = None
        self._task: asyncio.Task[None] | None = None

    def start(self) -> None:
        self._task = asyncio.get_running_loop().create_task(self._run())

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
            self._task = None

    def submit(self, seq: Sequence) -> None:
        self.core.add(seq)
        wake = self._wake
        if wake is not None and not wake.done():
            wake.set_result(None)

    def abort(self, seq: Sequence) -> None:
        self.core.abort(seq, monotonic())

    async def _run(self) -> None:
        loop = asyncio.get_running_loop()
        core = self.core
        deadline: float | None = None
        while True:
            now = monotonic()
            plan = core.plan(now)
            if plan is None:
                self._wake = loop.create_future()
                await self._wake
                self._wake = None
                deadline = None
                continue
            factor = self.degradation.current(now)
            duration = plan.duration_s * factor / self.time_scale
            start = now if deadline is None or now - deadline > _MAX_CATCH_UP_S else deadline
            deadline = start + duration
            delay = deadline - monotonic()
            if delay > 0:
                await asyncio.sleep(delay)
            woke = monotonic()
            self.lag.add(max(0.0, woke - deadline))
            try:
                core.complete(plan, woke)
                if self.on_step is not None:
                    self.on_step(plan, start, plan.duration_s * factor)
            except Exception:  # a bug in one step must not stop the engine
                log.exception("engine step failed")


class FixedDriver:
    """Exact timings, one timer chain per request, no batching interference."""

    def __init__(
        self,
        metrics: EngineMetrics,
        *,
        ttft_s: float,
        itl_s: float,
        tokens_per_chunk: int,
        degradation: Degradation,
        lag: LagStats,
        kv_cache_tokens: int,
        prefix_cache: PrefixCache | None = None,
        itl_jitter: float = 0.0,
        rng: random.Random | None = None,
    ) -> None:
        if not 0.0 <= itl_jitter < 1.0:
            raise ValueError(f"itl_jitter {itl_jitter}: must be in [0, 1)")
        self.metrics = metrics
        self.prefix_cache = prefix_cache
        self.ttft_s = ttft_s
        self.itl_s = itl_s
        self.itl_jitter = itl_jitter
        self.rng = rng if rng is not None else random.Random(0)
        self.tokens_per_chunk = tokens_per_chunk
        self.degradation = degradation
        self.lag = lag
        self.kv_cache_tokens = kv_cache_tokens
        self.active: dict[int, tuple[Sequence, asyncio.TimerHandle]] = {}
        self.kv_tokens = 0

    def start(self) -> None:
        pass

    async def stop(self) -> None:
        for _, handle in self.active.values():
            handle.cancel()
        self.active.clear()

    def _gauges(self) -> None:
        m = self.metrics
        m.running = len(self.active)
        m.kv_cache_usage = min(1.0, self.kv_tokens / max(1, self.kv_cache_tokens))

    def draw_itl(self) -> float:
        """One request's ITL: ``itl_s`` x a factor uniform in [1 - J, 1 + J] (J = 0: exactly
        ``itl_s``, and the RNG is not touched)."""
        jitter = self.itl_jitter
        if jitter <= 0.0:
            return self.itl_s
        return self.itl_s * self.rng.uniform(1.0 - jitter, 1.0 + jitter)

    def submit(self, seq: Sequence) -> None:
        loop = asyncio.get_running_loop()
        itl = self.draw_itl()
        seq.scheduled = seq.arrival
        cache = self.prefix_cache
        if cache is not None:  # counted as the stepping engine does; timing unchanged
            hashes = block_hashes(seq.prompt_ids(), cache.block_tokens)
            seq.cached_tokens = cache.cached_tokens(hashes, seq.prompt_tokens)
            cache.insert(hashes)
        self.metrics.add_prefix_lookup(seq.prompt_tokens, seq.cached_tokens)
        due = seq.arrival + self.ttft_s
        self.kv_tokens += seq.prompt_tokens
        self.active[seq.rid] = (
            seq,
            loop.call_later(max(0.0, due - monotonic()), self._tick, seq, due, itl),
        )
        self._gauges()

    def abort(self, seq: Sequence) -> None:
        entry = self.active.pop(seq.rid, None)
        if entry is None or seq.aborted:
            return
        seq.aborted = True
        entry[1].cancel()
        self.kv_tokens -= seq.prompt_tokens + seq.generated
        self.metrics.request_success["abort"].inc()
        self._gauges()

    def _tick(self, seq: Sequence, due: float, itl: float) -> None:
        if seq.aborted:
            return
        loop = asyncio.get_running_loop()
        now = monotonic()
        self.lag.add(max(0.0, now - due))
        m = self.metrics
        n = min(self.tokens_per_chunk, seq.target - seq.generated)
        r, c = seq.split(n)
        first = seq.generated == 0
        seq.generated += n
        self.kv_tokens += n
        m.generation_tokens.value += n
        m.h_iteration_tokens.observe(n + (seq.prompt_tokens - seq.cached_tokens if first else 0))
        if first:
            m.add_prompt_tokens(seq.prompt_tokens, seq.cached_tokens)
            m.h_ttft.observe(now - seq.arrival)
            seq.first_token = now
        else:
            m.h_itl.observe(now - seq.last_token)
        seq.last_token = now
        if seq.generated >= seq.target:
            self.active.pop(seq.rid, None)
            self.kv_tokens -= seq.prompt_tokens + seq.generated
            record_finished(m, seq, now)
            self._gauges()
            seq.emit(seq, r, c, seq.finish_reason, now)
            return
        next_due = due + itl * self.degradation.current(now)
        delay = max(0.0, next_due - monotonic())
        self.active[seq.rid] = (seq, loop.call_later(delay, self._tick, seq, next_due, itl))
        seq.emit(seq, r, c, None, now)
