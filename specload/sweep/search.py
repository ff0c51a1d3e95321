"""``specload run --search slo``: the highest load at which the objectives hold.

A search over ``--search-range LOW:HIGH`` of the concurrency (closed loop, the default) or the
request rate (``--search-variable request_rate``, open loop): the first level runs LOW; while a
level's SLO attainment (its completed requests meeting every ``--slo`` objective) reaches
``--attainment``, the next doubles (up to HIGH) — bracketing; the first level that falls short
bounds the search from above, and bisection between the highest level that held and the
lowest that did not continues until they are ``--search-precision`` apart. Every level tried
is a normal level of the results, marked ``search_step``; ``summary.json``'s ``search`` names
the limit and the level that set it.

A level is cut short (``search_cut_short`` in the level, the flag ``cut_short``) once its
verdict is known before its window ends: when more requests missed the objectives than its
budget (``--requests``) allows, or when it is clearly saturated — queueing grows through the
window: the TTFT of its latest third of requests at least twice (and 0.25 s above) that of its
first third while its attainment so far is short (:class:`EarlyVerdict`).
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass, field, replace
from typing import Any

from specload.errors import UsageError
from specload.records.request import RequestRecord
from specload.sweep.plan import MAX_CONCURRENCY, MAX_REQUEST_RATE, Level

DEFAULT_ATTAINMENT = 0.9
VARIABLES = ("concurrency", "request_rate")

#: Saturation needs this many completed requests, a third of them each side of the window.
SATURATION_MIN_REQUESTS = 12
SATURATION_RISE = 2.0  # the latest third's median TTFT / the first third's
SATURATION_MIN_RISE_S = 0.25  # and at least this much higher (not noise at ms scale)


def parse_range(text: str, variable: str = "concurrency") -> tuple[float, float]:
    """``1:512`` → (1, 512), one-line errors naming ``--search-range``; whole numbers for the
    concurrency, positive numbers (``0.5:64``) for a request rate."""
    lo_s, sep, hi_s = str(text).partition(":")
    rate = variable == "request_rate"
    example = "0.5:64" if rate else "1:512"
    try:
        lo, hi = (float(lo_s), float(hi_s)) if rate else (int(lo_s), int(hi_s))
    except ValueError:
        raise UsageError(f"--search-range: {text!r} is not LOW:HIGH (e.g. {example})") from None
    top = MAX_REQUEST_RATE if rate else MAX_CONCURRENCY
    bottom = 0 if rate else 1
    if not sep or not bottom <= lo < hi <= top or (rate and lo <= 0):
        lower = "0 < LOW" if rate else "1 <= LOW"
        raise UsageError(
            f"--search-range: {text!r} must be LOW:HIGH with {lower} < HIGH <= {top:,g}"
        )
    return lo, hi


def _rate(value: float) -> float:
    """A request rate with three significant digits (level names stay short and stable)."""
    return float(f"{value:.3g}")


@dataclass
class SloSearch:
    """The search's state: the levels tried, the bracket, the verdict."""

    template: Level  # the window of every level (warm-up, duration or requests, ramp-up)
    attainment: float
    lo: float
    hi: float
    precision: float | None = None  # None: 1 user, or the range's low end in requests/s
    variable: str = "concurrency"
    steps: list[dict[str, Any]] = field(default_factory=list)
    best: float | None = None  # the highest load that held
    fail: float | None = None  # the lowest that did not
    done: bool = False

    def __post_init__(self) -> None:
        if self.variable not in VARIABLES:
            raise UsageError(f"--search-variable: {self.variable!r} is not one of {VARIABLES}")
        if not 0 < self.attainment <= 1:
            raise UsageError(f"--attainment: {self.attainment} must be in (0, 1]")
        if self.precision is None:
            self.precision = 1.0 if self.variable == "concurrency" else self.lo
        if self.precision <= 0 or (
            self.variable == "concurrency" and self.precision != int(self.precision)
        ):
            unit = "a whole number of users" if self.variable == "concurrency" else "positive"
            raise UsageError(f"--search-precision: {self.precision:g} must be {unit}")

    @property
    def rate(self) -> bool:
        return self.variable == "request_rate"

    def load_of(self, level: Level) -> float:
        value = level.request_rate if self.rate else level.concurrency
        assert value is not None
        return float(value)

    def level(self, index: int, load: float) -> Level:
        if self.rate:
            return replace(self.template, index=index, request_rate=_rate(load))
        return replace(self.template, index=index, concurrency=int(load))

    def first(self) -> Level:
        return self.level(0, self.lo)

    def next_level(
        self, level: Level, attainment: float | None, cut_short: str | None = None
    ) -> Level | None:
        """The level after ``level`` (whose attainment was measured), or None: done."""
        load = self.load_of(level)
        held = attainment is not None and attainment >= self.attainment and cut_short is None
        step: dict[str, Any] = {
            "level": level.name,
            self.variable: level.request_rate if self.rate else level.concurrency,
            "attainment": attainment,
            "held": held,
        }
        if cut_short is not None:
            step["cut_short"] = cut_short
        self.steps.append(step)
        if held:
            self.best = max(self.best or 0.0, load)
        else:
            self.fail = load if self.fail is None else min(self.fail, load)
        if self.fail is None:  # still bracketing: double
            if load >= self.hi:
                self.done = True
                return None
            return self.level(level.index + 1, min(load * 2, self.hi))
        assert self.precision is not None
        if self.best is None or self.fail - self.best <= self.precision:
            self.done = True
            return None
        middle = self.best + (self.fail - self.best) / 2
        nxt = self.level(level.index + 1, middle if self.rate else (self.best + self.fail) // 2)
        if self.load_of(nxt) in (self.best, self.fail):  # rounding met an end: as close as it gets
            self.done = True
            return None
        return nxt

    def _name(self, load: float) -> str:
        return self.level(0, load).name

    def result(self) -> dict[str, Any]:
        """``summary.json``'s ``search`` block."""
        unit = "requests/s" if self.rate else "users"
        if self.best is None:
            limit_note = f"no level held: even {self.lo:g} {unit} missed the attainment"
        elif self.fail is None:
            limit_note = f"every level held up to the range's top, {self.hi:g} {unit}"
        else:
            limit_note = f"{self.fail:g} {unit} fell short"
        limit: float | int | None = self.best
        if limit is not None and not self.rate:
            limit = int(limit)
        return {
            "kind": "slo",
            "variable": self.variable,
            "attainment": self.attainment,
            "range": [self.lo, self.hi],
            "precision": self.precision,
            "complete": self.done,
            "limit": limit,
            "limit_level": self._name(self.best) if self.best is not None else None,
            "set_by": self._name(self.fail) if self.fail is not None else None,
            "note": limit_note,
            "steps": self.steps,
        }


@dataclass
class EarlyVerdict:
    """Watches a search level's measured window for a verdict known before its end.

    ``missed``: more completed requests missed an objective than ``planned`` allows at the
    attainment (the level cannot hold whatever the rest do). ``saturated``: the window's
    queue grows — the median TTFT of the latest third of its completed requests (by start)
    at least :data:`SATURATION_RISE` times, and :data:`SATURATION_MIN_RISE_S` above, the
    first third's, past a third of the window, while the attainment so far is short.
    """

    attainment: float
    planned: int | None  # the window's --requests budget (None: a window by time)
    ttfts: list[tuple[float, float]] = field(default_factory=list)  # (start_s, ttft_s)
    completed: int = 0
    missed: int = 0
    _judged: int = -1  # ``completed`` when saturation was last judged (nothing new: same)

    def add(self, record: RequestRecord) -> None:
        if not record.ok:
            return
        self.completed += 1
        if record.slo_met is False:
            self.missed += 1
        if record.ttft_s is not None:
            self.ttfts.append((record.start_s, record.ttft_s))

    def verdict(self, elapsed_ratio: float) -> str | None:
        """Why the level already failed (``elapsed_ratio``: how much of its window is over)."""
        best_case = (self.planned - self.missed) / self.planned if self.planned else None
        if best_case is not None and best_case < self.attainment - 1e-9:
            return (
                f"missed: {self.missed} of its {self.planned} requests missed the objectives, "
                f"more than attainment {self.attainment:g} allows"
            )
        if self.completed and (self.completed - self.missed) / self.completed >= self.attainment:
            return None
        if elapsed_ratio < 1 / 3 or len(self.ttfts) < SATURATION_MIN_REQUESTS:
            return None
        if self._judged == self.completed:  # no request since the last tick's judgement
            return None
        self._judged = self.completed
        ordered = [ttft for _, ttft in sorted(self.ttfts)]
        third = len(ordered) // 3
        first = statistics.median(ordered[:third])
        latest = statistics.median(ordered[-third:])
        if latest >= SATURATION_RISE * first and latest - first >= SATURATION_MIN_RISE_S:
            return f"saturated: TTFT rose from {first:.3f} s to {latest:.3f} s through the window"
        return None
