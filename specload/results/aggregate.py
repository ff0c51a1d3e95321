"""A level's numbers from its records: the sweep, ``results repair`` and the tests.

The figures themselves are defined once, in :class:`specload.load.aggregate.Stats`;
this module only groups a level's records (all, and per category) and counts the
tokens that arrived inside the level's measured window.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from specload.load.aggregate import Stats
from specload.load.records import RequestRecord


def as_record(item: RequestRecord | Mapping[str, Any]) -> RequestRecord:
    """A record, from itself or from its ``requests.jsonl`` form."""
    if isinstance(item, RequestRecord):
        return item
    return RequestRecord.from_dict(dict(item))


class LevelAggregate:
    """A level's :class:`Stats` (all and per category) plus the tokens of its window."""

    def __init__(self) -> None:
        self.all = Stats()
        self.categories: dict[str, Stats] = {}
        self.window_tokens = 0.0
        self.window_tokens_by_category: dict[str, float] = {}

    def add(self, record: RequestRecord) -> None:
        """A request of this level (its step)."""
        self.all.add(record)
        cat = self.categories.get(record.category)
        if cat is None:
            cat = self.categories[record.category] = Stats()
        cat.add(record)

    def add_window_tokens(self, record: RequestRecord, lo_s: float, hi_s: float) -> None:
        """Count the tokens of ``record`` (any step) that arrived in ``[lo_s, hi_s]``."""
        tokens = record.tokens_between(lo_s, hi_s)
        if tokens > 0:
            self.window_tokens += tokens
            by_cat = self.window_tokens_by_category
            by_cat[record.category] = by_cat.get(record.category, 0.0) + tokens

    def result(self, duration_s: float, *, windowed: bool = True) -> dict[str, Any]:
        """``windowed``: throughput from the window's token arrivals (else completed tokens)."""
        out = self.all.result(duration_s, self.window_tokens if windowed else None)
        out["categories"] = {
            name: stats.result(
                duration_s, self.window_tokens_by_category.get(name, 0.0) if windowed else None
            )
            for name, stats in sorted(self.categories.items())
        }
        return out


def summarize_level(
    records: Iterable[RequestRecord | Mapping[str, Any]],
    *,
    step: str,
    window_start_s: float | None,
    window_end_s: float | None,
    duration_s: float,
) -> dict[str, Any]:
    """A level's measured numbers (the keys of a ``summary.json`` level, ``categories``
    included) from records: the one definition the sweep, ``results repair`` and the
    tests use. ``records``: :class:`~specload.load.records.RequestRecord` objects (or
    ``requests.jsonl`` dicts) of any step — only ``step``'s count as the level's requests,
    while throughput counts every token that arrived in the window (wall clock,
    ``window_start_s``..``window_end_s``) over ``duration_s``. Without window bounds,
    throughput is the level's completed tokens over ``duration_s``.
    """
    level = LevelAggregate()
    windowed = window_start_s is not None and window_end_s is not None
    for item in records:
        record = as_record(item)
        if record.step == step:
            level.add(record)
        if windowed:
            assert window_start_s is not None and window_end_s is not None
            level.add_window_tokens(record, window_start_s, window_end_s)
    return level.result(duration_s, windowed=windowed)


def aggregate_records(
    records: Iterable[RequestRecord | Mapping[str, Any]], step: str, duration_s: float
) -> dict[str, Any]:
    """A step's numbers without a window (throughput: completed tokens over ``duration_s``)."""
    return summarize_level(
        records, step=step, window_start_s=None, window_end_s=None, duration_s=duration_s
    )
