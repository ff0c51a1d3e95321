"""A sweep plan: the levels to measure, each with a warm-up and a measured window.

Pure data, built from command-line values and validated here, so every bad
option becomes one line naming the option.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from specload.durations import parse_duration
from specload.errors import UsageError
from specload.load.options import WARMUP_SUFFIX

#: Bounds that keep a typo (``--concurrency 100000000000``, ``--request-rate 1e23``) from
#: becoming a process that pins a core and fills memory without sending anything.
MAX_CONCURRENCY = 100_000  # users of a level, and --max-concurrency
MAX_REQUEST_RATE = 10_000.0  # arrivals per second of an open-loop level
MAX_REQUESTS = 10_000_000  # --requests: a level's budget (it travels in runner messages)


@dataclass(frozen=True)
class Level:
    """One level of a sweep.

    Closed loop: ``concurrency`` users, each sending its next request when the
    last one ends. Open loop: Poisson arrivals at ``request_rate`` per second,
    at most ``max_concurrency`` in flight.
    """

    index: int
    concurrency: int | None
    request_rate: float | None
    max_concurrency: int | None
    warmup_s: float
    duration_s: float | None
    requests: int | None
    ramp_up_s: float = 0.0  # closed loop: new users start over this long (0: at once)
    trace: int = 0  # a trace replay of this many requests (request_rate: its mean rate)

    @property
    def name(self) -> str:
        """The step label of the measured window (bounded, stable): ``c16``, ``r2.5`` or
        ``trace``."""
        if self.trace:
            return "trace"
        if self.concurrency is not None:
            return f"c{self.concurrency}"
        assert self.request_rate is not None
        return f"r{self.request_rate:g}"

    @property
    def warmup_name(self) -> str:
        return self.name + WARMUP_SUFFIX

    @property
    def users(self) -> int:
        """Locust users to run: the concurrency, or the open-loop in-flight cap."""
        if self.concurrency is not None:
            return self.concurrency
        assert self.max_concurrency is not None
        return self.max_concurrency

    @property
    def load(self) -> float:
        """The x value of plots: concurrency or request rate."""
        return float(self.concurrency if self.concurrency is not None else self.request_rate or 0.0)


@dataclass(frozen=True)
class SweepPlan:
    levels: tuple[Level, ...]
    mode: str  # "closed" or "open"

    @property
    def step_names(self) -> tuple[str, ...]:
        return tuple(level.name for level in self.levels)

    def planned_seconds(self) -> float | None:
        """Warm-ups plus measured windows, when every window is a duration."""
        total = 0.0
        for level in self.levels:
            if level.duration_s is None:
                return None
            total += level.warmup_s + level.duration_s
        return total


def parse_int_list(text: str, *, name: str, limit: int | None = None) -> list[int]:
    items = [part.strip() for part in str(text).split(",")]
    if not any(items):
        raise UsageError(f"{name}: empty list (give levels like 1,4,16,64)")
    values: list[int] = []
    for item in items:
        if not item:
            raise UsageError(f"{name}: {text!r} has an empty item")
        try:
            value = int(item)
        except ValueError:
            raise UsageError(f"{name}: {item!r} is not a whole number") from None
        if value < 1:
            raise UsageError(f"{name}: {item!r} must be at least 1")
        if limit is not None and value > limit:
            raise UsageError(f"{name}: {item} is beyond the limit of {limit:,}")
        values.append(value)
    if len(set(values)) != len(values):
        raise UsageError(f"{name}: {text!r} repeats a level")
    return values


def parse_float_list(text: str, *, name: str, limit: float | None = None) -> list[float]:
    items = [part.strip() for part in str(text).split(",")]
    if not any(items):
        raise UsageError(f"{name}: empty list (give rates like 0.5,1,2)")
    values: list[float] = []
    for item in items:
        try:
            value = float(item)
        except ValueError:
            raise UsageError(f"{name}: {item!r} is not a number") from None
        if not math.isfinite(value) or value <= 0:
            raise UsageError(f"{name}: {item!r} must be a positive number")
        if limit is not None and value > limit:
            raise UsageError(f"{name}: {item} is beyond the limit of {limit:,g} per second")
        values.append(value)
    if len(set(values)) != len(values):
        raise UsageError(f"{name}: {text!r} repeats a level")
    return values


def build_plan(
    *,
    concurrency: str | None,
    request_rate: str | None,
    max_concurrency: int | None,
    warmup: str | float,
    duration: str | float | None,
    requests: int | None,
    ramp_up: str | float = 0,
    trace: tuple[int, float] | None = None,
) -> SweepPlan:
    """Validate the sweep options and return the plan (raises :class:`UsageError`)."""
    if concurrency is not None and request_rate is not None:
        raise UsageError("--concurrency and --request-rate are exclusive (closed or open loop)")
    if trace is not None:
        return _trace_plan(
            trace,
            concurrency=concurrency,
            request_rate=request_rate,
            max_concurrency=max_concurrency,
            duration=duration,
            requests=requests,
            ramp_up=ramp_up,
        )
    warmup_s = parse_duration(warmup, name="--warmup")
    ramp_up_s = parse_duration(ramp_up, name="--ramp-up")
    if ramp_up_s > 0 and request_rate is not None:
        raise UsageError(
            "--ramp-up: for closed loops (--concurrency); an open loop's arrivals ramp by rate"
        )
    if ramp_up_s > warmup_s:
        raise UsageError(
            f"--ramp-up: {ramp_up} is longer than --warmup {warmup}: the measured window would "
            "start before every user runs"
        )
    if duration is not None and requests is not None:
        raise UsageError("--duration and --requests are exclusive (a window by time or by count)")
    duration_s: float | None = None
    if requests is not None:
        if requests < 1:
            raise UsageError(f"--requests: {requests} must be at least 1")
        if requests > MAX_REQUESTS:
            raise UsageError(f"--requests: {requests} is beyond the limit of {MAX_REQUESTS:,}")
    else:
        duration_s = parse_duration(
            duration if duration is not None else "60s", name="--duration", allow_zero=False
        )
    if max_concurrency is not None and max_concurrency < 1:
        raise UsageError(f"--max-concurrency: {max_concurrency} must be at least 1")
    if max_concurrency is not None and max_concurrency > MAX_CONCURRENCY:
        raise UsageError(
            f"--max-concurrency: {max_concurrency} is beyond the limit of {MAX_CONCURRENCY:,}"
        )
    if request_rate is not None:
        rates = parse_float_list(request_rate, name="--request-rate", limit=MAX_REQUEST_RATE)
        cap = max_concurrency if max_concurrency is not None else 256
        levels = tuple(
            Level(i, None, rate, cap, warmup_s, duration_s, requests)
            for i, rate in enumerate(rates)
        )
        return SweepPlan(levels, "open")
    counts = parse_int_list(
        concurrency if concurrency is not None else "1,4,16,64",
        name="--concurrency",
        limit=MAX_CONCURRENCY,
    )
    levels = tuple(
        Level(i, c, None, None, warmup_s, duration_s, requests, ramp_up_s)
        for i, c in enumerate(counts)
    )
    return SweepPlan(levels, "closed")


def _trace_plan(
    trace: tuple[int, float],
    *,
    concurrency: str | None,
    request_rate: str | None,
    max_concurrency: int | None,
    duration: str | float | None,
    requests: int | None,
    ramp_up: str | float,
) -> SweepPlan:
    """One open-loop level, ``trace``: the trace's ``(entries, span_s)`` sent at their times,
    at most ``max_concurrency`` in flight; its window ends when every request has."""
    given = [
        flag
        for flag, value in (
            ("--concurrency", concurrency),
            ("--request-rate", request_rate),
            ("--duration", duration),
            ("--requests", requests),
        )
        if value is not None
    ]
    if given:
        raise UsageError(f"{given[0]}: not with --trace (the trace sets the arrivals and count)")
    if parse_duration(ramp_up, name="--ramp-up"):
        raise UsageError("--ramp-up: not with --trace (the trace sets the arrivals)")
    if max_concurrency is not None and not 1 <= max_concurrency <= MAX_CONCURRENCY:
        raise UsageError(
            f"--max-concurrency: {max_concurrency} must be from 1 to {MAX_CONCURRENCY:,}"
        )
    entries, span_s = trace
    rate = entries / span_s if span_s > 0 else float(entries)
    cap = max_concurrency if max_concurrency is not None else 256
    level = Level(0, None, rate, cap, 0.0, None, entries, trace=entries)
    return SweepPlan((level,), "open")
