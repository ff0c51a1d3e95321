"""``specload run --search slo``: the highest concurrency at which the objectives hold.

A closed-loop search over ``--search-range LO:HI``: the first level runs LO users; while a
level's SLO attainment (its completed requests meeting every ``--slo`` objective) reaches
``--attainment``, the next doubles (up to HI) — bracketing; the first level that falls short
bounds the search from above, and bisection between the highest level that held and the
lowest that did not continues until they are ``--search-precision`` users apart. Every level
tried is a normal level of the results, marked ``search_step``; ``summary.json``'s ``search``
names the limit and the level that set it.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Any

from specload.errors import UsageError
from specload.sweep.plan import MAX_CONCURRENCY, Level

DEFAULT_ATTAINMENT = 0.9


def parse_range(text: str) -> tuple[int, int]:
    """``1:512`` → (1, 512), one-line errors naming ``--search-range``."""
    lo_s, sep, hi_s = str(text).partition(":")
    try:
        lo, hi = int(lo_s), int(hi_s)
    except ValueError:
        raise UsageError(f"--search-range: {text!r} is not LOW:HIGH (e.g. 1:512)") from None
    if not sep or not 1 <= lo < hi <= MAX_CONCURRENCY:
        raise UsageError(
            f"--search-range: {text!r} must be LOW:HIGH with 1 <= LOW < HIGH <= {MAX_CONCURRENCY:,}"
        )
    return lo, hi


@dataclass
class SloSearch:
    """The search's state: the levels tried, the bracket, the verdict."""

    template: Level  # the window of every level (warm-up, duration or requests, ramp-up)
    attainment: float
    lo: int
    hi: int
    precision: int = 1
    steps: list[dict[str, Any]] = field(default_factory=list)
    best: int | None = None  # the highest concurrency that held
    fail: int | None = None  # the lowest that did not
    done: bool = False

    def __post_init__(self) -> None:
        if not 0 < self.attainment <= 1:
            raise UsageError(f"--attainment: {self.attainment} must be in (0, 1]")
        if self.precision < 1:
            raise UsageError(f"--search-precision: {self.precision} must be at least 1 user")

    def level(self, index: int, users: int) -> Level:
        return replace(self.template, index=index, concurrency=users)

    def first(self) -> Level:
        return self.level(0, self.lo)

    def next_level(self, level: Level, attainment: float | None) -> Level | None:
        """The level after ``level`` (whose attainment was measured), or None: done."""
        users = level.concurrency
        assert users is not None
        held = attainment is not None and attainment >= self.attainment
        self.steps.append(
            {"level": level.name, "concurrency": users, "attainment": attainment, "held": held}
        )
        if held:
            self.best = max(self.best or 0, users)
        else:
            self.fail = users if self.fail is None else min(self.fail, users)
        if self.fail is None:  # still bracketing: double
            if users >= self.hi:
                self.done = True
                return None
            return self.level(level.index + 1, min(users * 2, self.hi))
        if self.best is None or self.fail - self.best <= self.precision:
            self.done = True
            return None
        return self.level(level.index + 1, (self.best + self.fail) // 2)

    def result(self) -> dict[str, Any]:
        """``summary.json``'s ``search`` block."""
        if self.best is None:
            limit_note = f"no level held: even {self.lo} users missed the attainment"
        elif self.fail is None:
            limit_note = f"every level held up to the range's top, {self.hi} users"
        else:
            limit_note = f"{self.fail} users fell short"
        return {
            "kind": "slo",
            "attainment": self.attainment,
            "range": [self.lo, self.hi],
            "precision": self.precision,
            "complete": self.done,
            "limit": self.best,
            "set_by": f"c{self.fail}" if self.fail is not None else None,
            "note": limit_note,
            "steps": self.steps,
        }
