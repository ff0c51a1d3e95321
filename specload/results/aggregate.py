"""A level's numbers from its records: the sweep, ``results repair`` and the tests.

The figures themselves are defined once, in :class:`specload.records.stats.Stats`;
this module only groups a level's records (all, and per category) and defines the two
figures of the level's measured window: the tokens that arrived inside it (throughput)
and the requests in flight while the level sent (``mean_in_flight``), with the level's
flags (:func:`assess_level`).
"""

from __future__ import annotations

import math
from array import array
from collections.abc import Iterable, Mapping
from typing import Any

from specload.records.clientload import (
    CLIENT_SATURATED,
    ClientLoadFigures,
    chunk_gap_s,
    saturated_warning,
    saturation_reasons,
)
from specload.records.request import RequestRecord
from specload.records.stats import HELD_STREAM_LIMIT, TRUNCATED_SHARE_LIMIT, Stats

# defined in the model (the one reader of a result); re-exported for the demo's readers


def as_record(item: RequestRecord | Mapping[str, Any]) -> RequestRecord:
    """A record, from itself or from its ``requests.jsonl`` form."""
    if isinstance(item, RequestRecord):
        return item
    return RequestRecord.from_dict(dict(item))


# A level whose users ran below this share of its concurrency is flagged ``users_short``.
USERS_HELD_MIN_RATIO = 0.95
# A closed-loop level whose requests in flight averaged below this share of its concurrency
# while it sent is flagged ``in_flight_short``: users still starting, failing fast, or
# waiting between requests (for grants behind a master past its ceiling, for a client that
# fell behind). Over the suite's 244 closed-loop levels (simulator, requests of 20 ms to
# 3 s; 2026-12-05) the rest held 0.83-1.0, under 0.9 only with a worker killed or cut off, a
# client stopped, or no warm-up; the 16 below 0.8 had no warm-up and one to ten requests per
# user (their spawn in the window: 0.51-0.76), an outage (0.64), or every request failed
# (0.005-0.15).
IN_FLIGHT_MIN_RATIO = 0.8
# A level whose median request is longer than this share of its window is ``long_requests``.
LONG_REQUEST_RATIO = 0.25
# An open-loop level whose p99 send lateness is beyond this (ms) is flagged ``late_sends``.
LATE_SEND_WARN_MS = 50.0


class LevelAggregate:
    """A level's :class:`Stats` (all and per category) plus the tokens of its window."""

    def __init__(self, objectives: Mapping[str, float] | None = None) -> None:
        self.objectives = dict(objectives or {})  # --slo: goodput and attainment
        self.all = Stats()
        self.categories: dict[str, Stats] = {}
        self.window_tokens = 0.0
        self.window_tokens_by_category: dict[str, float] = {}
        # Every request's (any step's) time in flight inside the window, clipped to it, and
        # the latest start of the level's own requests: mean_in_flight (Little's law).
        self._spans = array("d")  # start, end pairs
        self._window_lo_s: float | None = None
        self._last_start_s: float | None = None

    def add(self, record: RequestRecord) -> None:
        """A request of this level (its step)."""
        self.all.add(record)
        if self._last_start_s is None or record.start_s > self._last_start_s:
            self._last_start_s = record.start_s
        cat = self.categories.get(record.category)
        if cat is None:
            cat = self.categories[record.category] = Stats()
        cat.add(record)

    def add_window_tokens(self, record: RequestRecord, lo_s: float, hi_s: float) -> None:
        """Count the tokens of ``record`` (any step) that arrived in ``[lo_s, hi_s]``, and
        the time it was in flight there (sent to its last byte or error)."""
        start, end = max(record.start_s, lo_s), min(record.end_s, hi_s)
        if end > start:
            self._spans.extend((start, end))
        self._window_lo_s = lo_s
        tokens = record.tokens_between(lo_s, hi_s)
        if tokens > 0:
            self.window_tokens += tokens
            by_cat = self.window_tokens_by_category
            by_cat[record.category] = by_cat.get(record.category, 0.0) + tokens

    def result(self, duration_s: float, *, windowed: bool = True) -> dict[str, Any]:
        """``windowed``: throughput from the window's token arrivals (else completed tokens)."""
        objectives = self.objectives or None
        out = self.all.result(duration_s, self.window_tokens if windowed else None, objectives)
        out["categories"] = {
            name: stats.result(
                duration_s,
                self.window_tokens_by_category.get(name, 0.0) if windowed else None,
                objectives,
            )
            for name, stats in sorted(self.categories.items())
        }
        out["mean_in_flight"] = self.mean_in_flight() if windowed else None
        return out

    def mean_in_flight(self) -> float | None:
        """The requests (any level's) the server had in flight on average while the level
        was sending: Little's law from the records, over the window's start to the last
        start of the level's own requests (a ``--requests`` level's last requests run on
        alone after its budget is spent: that tail is not a lack of load). None without a
        window or before two starts."""
        lo, cut = self._window_lo_s, self._last_start_s
        if lo is None or cut is None or cut <= lo:
            return None
        spans = self._spans
        busy = 0.0
        for i in range(0, len(spans), 2):
            b = min(spans[i + 1], cut) - spans[i]
            if b > 0:
                busy += b
        return busy / (cut - lo)


def _grouped(values: Mapping[str, int | None]) -> list[tuple[int | None, str]]:
    """Categories grouped by their value, smallest first (None last): (value, "a, b")."""
    groups: dict[int | None, list[str]] = {}
    for category, value in sorted(values.items()):
        groups.setdefault(value, []).append(category)
    order = sorted(groups, key=lambda v: (v is None, v or 0))
    return [(value, ", ".join(groups[value])) for value in order]


def _truncation_budgets(stats: Stats) -> str:
    """The budgets the truncated requests had, each with its categories (a category's own
    budget, not the largest of the level): ``max_tokens 2048 (explanation), 4096 (coding,
    math)``; a request without max_tokens stopped at the server's own limit."""
    pairs = sorted(stats.truncated_budgets, key=lambda p: (p[0], p[1] is None, p[1] or 0))
    numbered: dict[int, list[str]] = {}
    unbounded: list[str] = []
    for category, budget in pairs:
        if budget is None:
            unbounded.append(category)
        else:
            numbered.setdefault(budget, []).append(category)
    parts = []
    if numbered:
        parts.append(
            "max_tokens "
            + ", ".join(f"{b} ({', '.join(sorted(set(c)))})" for b, c in sorted(numbered.items()))
        )
    if unbounded:
        parts.append(f"the server's own limit ({', '.join(sorted(set(unbounded)))})")
    return " and ".join(parts) or "max_tokens ?"


def _truncation_facts(stats: Stats) -> str:
    """What the truncated requests tell of the budget their reasoning needs: at least what
    they showed (no more is known: none showed its full reasoning), with the longest
    reasoning that finished in those categories as a fact beside it."""
    needed = stats.reasoning_needed()
    groups = _grouped(dict(needed))
    if len(groups) == 1:
        need = f"at least {groups[0][0]} tokens"
    else:
        need = "at least " + ", ".join(
            f"{n}{' tokens' if i == 0 else ''} ({cats})" for i, (n, cats) in enumerate(groups)
        )
    finished = {c: n for c, n in stats.finished_reasoning.items() if c in needed}
    seen = ""
    if len(needed) == 1 and finished:
        seen = f" (the longest finished reasoning was {next(iter(finished.values()))} tokens)"
    elif finished:
        seen = (
            " (the longest finished reasoning: "
            + ", ".join(f"{c} {n} tokens" for c, n in sorted(finished.items()))
            + ")"
        )
    return (
        f"their reasoning needs {need}; no truncated request showed its full reasoning{seen}, "
        "so only a larger budget (--max-tokens, or max_tokens per prompt) can measure "
        "their answers"
    )


def truncation_warnings(stats: Stats, numbers: Mapping[str, Any]) -> list[str]:
    """The truncation guard's warnings for a set of requests (``numbers``: their
    :meth:`Stats.result`): none unless more than :data:`TRUNCATED_SHARE_LIMIT` of the
    completed ones ended inside reasoning. ``specload run`` gives them per level
    (:func:`assess_level`), plain Locust at the end of its run (``specload.load.plugin``)."""
    warnings: list[str] = []
    ratio = numbers.get("reasoning_truncated_ratio")
    if ratio is not None and ratio > TRUNCATED_SHARE_LIMIT:
        warnings.append(
            f"{stats.reasoning_truncated} of {stats.completed} completed requests ended "
            f"inside reasoning at {_truncation_budgets(stats)}: no answer token measured "
            f"for them (TTFCT, content tokens); {_truncation_facts(stats)}"
        )
        if "ttfct" in (numbers.get("slo") or {}).get("objectives_s", {}):
            warnings.append(
                f"goodput counts those {stats.reasoning_truncated} requests as missing the "
                "ttfct objective (they never reached their answer): a budget that fits the "
                "reasoning measures the server, not the budget"
            )
    return warnings


def assess_level(
    level: LevelAggregate,
    numbers: Mapping[str, Any],
    *,
    concurrency: int | None = None,
    planned_duration_s: float | None = None,
    lost: int = 0,
    users_held: float | None = None,
    users_min: int | None = None,
    client: ClientLoadFigures | None = None,
    in_flight_settled: bool = True,
) -> tuple[list[str], list[str]]:
    """A level's ``flags`` and ``warnings`` (sentences with counts and what to change):
    what a reader must know before trusting its numbers (docs/sweep.md). ``client``: the
    client's own lag and busy share over the level (``client_saturated``: with the level's
    chunk gap and share of chunks read together, :func:`specload.records.clientload.saturated`).
    ``in_flight_settled``: every request in flight in the window has reported (a level's
    requests still running when its window ended report later: until the run ends, its
    ``mean_in_flight`` lacks their time and ``in_flight_short`` is not judged)."""
    flags: list[str] = []
    warnings: list[str] = []
    truncation = truncation_warnings(level.all, numbers)
    if truncation:
        flags.append("reasoning_truncated")
        warnings.extend(truncation)
    if numbers.get("unfinished"):
        flags.append("unfinished")
        warnings.append(
            f"{numbers['unfinished']} requests were still in flight at the drain deadline "
            "or the stop (recorded as unfinished, with their partial tokens)"
        )
    if lost:
        flags.append("lost")
        warnings.append(
            f"{lost} requests were lost with a worker that went missing (they count in the "
            "level's requests; the other workers sent what it had not started)"
        )
    if (
        concurrency is not None
        and users_held is not None
        and users_held < USERS_HELD_MIN_RATIO * concurrency
    ):
        flags.append("users_short")
        warnings.append(
            f"held {users_held:.1f} users on average (minimum {users_min}), "
            f"not {concurrency}: the level ran below its concurrency"
        )
    in_flight = numbers.get("mean_in_flight")
    if (
        in_flight_settled
        and concurrency is not None
        and isinstance(in_flight, int | float)
        and in_flight < IN_FLIGHT_MIN_RATIO * concurrency
    ):
        flags.append("in_flight_short")
        warnings.append(
            f"the server had {in_flight:.1f} requests in flight on average while the level "
            f"sent, not {concurrency}: the level measured a lower concurrency than it names — "
            "users still starting (without a warm-up the window holds their spawn), failing "
            "fast, or waiting between requests (for grants behind a master past its ceiling, "
            "docs/load.md, or for a client that fell behind)"
        )
    late_ms = numbers.get("p99_send_lateness_ms")
    if isinstance(late_ms, int | float) and late_ms > LATE_SEND_WARN_MS:
        flags.append("late_sends")
        worst = numbers.get("max_send_lateness_ms") or 0.0
        warnings.append(
            f"the client fell behind the arrivals: 1% of the requests went out more than "
            f"{late_ms:.0f} ms after they were due (max {worst:.0f} ms): the load offered "
            "was less than asked; more workers (--workers) would keep up"
        )
    tpot_ms = numbers.get("median_tpot_ms")
    reasons = saturation_reasons(
        client,
        chunk_gap_s=chunk_gap_s(
            None if tpot_ms is None else tpot_ms / 1000.0, numbers.get("mean_tokens_per_chunk")
        ),
        coalesced_share=numbers.get("coalesced_chunk_share"),
    )
    if reasons:
        flags.append(CLIENT_SATURATED)
        warnings.append(saturated_warning(reasons))
    held_ratio = numbers.get("held_stream_ratio")
    if isinstance(held_ratio, int | float) and held_ratio > HELD_STREAM_LIMIT:
        flags.append("streams_held")
        warnings.append(
            f"{numbers['streams_held']} of {numbers['completed']} streams arrived in one "
            "burst (their first token late, the rest at once: a server front end or a proxy "
            "that fell behind, or the client when client_saturated): the level's TPOT and ITL "
            "are not the decode pace and its TTFT holds the decode; rerun it with the machine "
            "to the server and the client alone"
        )
    median_ms = numbers.get("median_e2el_ms")
    if median_ms is not None and planned_duration_s:
        median = median_ms / 1000.0
        if median > LONG_REQUEST_RATIO * planned_duration_s:
            flags.append("long_requests")
            warnings.append(
                f"the median request ({median:.1f}s) is long against the "
                f"{planned_duration_s:g}s window: few requests per user; a window of "
                f"{math.ceil(10 * median)}s (10 requests per user) or --requests would fit"
            )
    return flags, warnings


def summarize_level(
    records: Iterable[RequestRecord | Mapping[str, Any]],
    *,
    step: str,
    window_start_s: float | None,
    window_end_s: float | None,
    duration_s: float,
    concurrency: int | None = None,
    planned_duration_s: float | None = None,
    objectives: Mapping[str, float] | None = None,
) -> dict[str, Any]:
    """A level's measured numbers (the keys of a ``summary.json`` level, ``categories``
    included) from records: the one definition the sweep, ``results repair`` and the
    tests use. ``records``: :class:`~specload.records.request.RequestRecord` objects (or
    ``requests.jsonl`` dicts) of any step — only ``step``'s count as the level's requests,
    while throughput counts every token that arrived in the window (wall clock,
    ``window_start_s``..``window_end_s``) over ``duration_s``. Without window bounds,
    throughput is the level's completed tokens over ``duration_s``. ``flags`` and
    ``warnings`` as :func:`assess_level` gives them from the records alone.
    """
    level = LevelAggregate(objectives)
    windowed = window_start_s is not None and window_end_s is not None
    for item in records:
        record = as_record(item)
        if record.step == step:
            level.add(record)
        if windowed:
            assert window_start_s is not None and window_end_s is not None
            level.add_window_tokens(record, window_start_s, window_end_s)
    out = level.result(duration_s, windowed=windowed)
    out["flags"], out["warnings"] = assess_level(
        level, out, concurrency=concurrency, planned_duration_s=planned_duration_s
    )
    return out


def aggregate_records(
    records: Iterable[RequestRecord | Mapping[str, Any]], step: str, duration_s: float
) -> dict[str, Any]:
    """A step's numbers without a window (throughput: completed tokens over ``duration_s``)."""
    return summarize_level(
        records, step=step, window_start_s=None, window_end_s=None, duration_s=duration_s
    )
