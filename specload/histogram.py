"""Mergeable histograms and percentiles: the one implementation in specload.

:class:`Histogram` is a log-bucketed sketch (the DDSketch idea): a positive
value ``v`` falls in bucket ``i = ceil(log(v) / log(gamma))`` with
``gamma = (1 + a) / (1 - a)``, and a bucket reports ``2 * gamma**i / (gamma + 1)``,
which is within ``a`` (relative) of every value in it. With the default
``a = 0.005`` every percentile is within 0.5% of a true sample value
(the goal is 1%). Zero and negative values are counted in a zero bucket.

Two histograms with the same accuracy merge *exactly* (bucket counts add),
so a Locust master merging its workers' histograms gets the same answer as a
single process that saw every sample. :meth:`Histogram.to_dict` /
:meth:`Histogram.from_dict` serialise to plain JSON/msgpack-friendly data
(bucket indexes and counts only) to travel in runner messages.

Percentile definition: for ``q`` in [0, 1] the value of rank
``floor(q * (n - 1))`` (0-based) in sorted order, i.e. numpy's
``method="lower"``; the result is clamped to the exact min and max.
Per-request figures (TTFT, TPOT, E2E: one value per request) are kept exactly
and read with :func:`exact_quantile` by the same rule; the sketch serves the
per-token figures (ITL), where keeping every value would cost memory.

:class:`BucketCounts` holds Prometheus-style cumulative buckets with fixed
upper bounds (for ``/metrics`` exposition), and :data:`LATENCY_BUCKETS_S` /
:data:`ITL_BUCKETS_S` are the boundaries specload uses for LLM latencies.
"""

from __future__ import annotations

import math
from bisect import bisect_left, bisect_right
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

DEFAULT_RELATIVE_ACCURACY = 0.005

# Boundaries (seconds) for time to first token, time to first content token and
# end-to-end latency: 10 ms to 30 min, roughly 1-2.5-5 per decade, with extra
# resolution where reasoning models live (seconds to minutes).
LATENCY_BUCKETS_S: tuple[float, ...] = (
    0.01,
    0.025,
    0.05,
    0.075,
    0.1,
    0.15,
    0.2,
    0.3,
    0.5,
    0.75,
    1.0,
    1.5,
    2.0,
    3.0,
    5.0,
    7.5,
    10.0,
    15.0,
    20.0,
    30.0,
    45.0,
    60.0,
    90.0,
    120.0,
    180.0,
    300.0,
    600.0,
    1200.0,
    1800.0,
)

# Boundaries (seconds) for time per output token and inter-token latency:
# 0.5 ms to 2 s, dense around 5-50 ms where decode steps of large models are
# (the reference deployment: 13.6 ms per token).
ITL_BUCKETS_S: tuple[float, ...] = (
    0.0005,
    0.001,
    0.002,
    0.003,
    0.004,
    0.005,
    0.006,
    0.007,
    0.008,
    0.009,
    0.010,
    0.011,
    0.012,
    0.013,
    0.014,
    0.015,
    0.016,
    0.018,
    0.020,
    0.0225,
    0.025,
    0.030,
    0.035,
    0.040,
    0.050,
    0.060,
    0.075,
    0.100,
    0.150,
    0.200,
    0.300,
    0.500,
    1.0,
    2.0,
)


def exact_quantile(ordered: Sequence[float], q: float) -> float | None:
    """The exact sample quantile of ``ordered`` (sorted ascending) by the rule above.

    Rank ``floor(q * (n - 1))`` (numpy's ``method="lower"``): the one definition of
    a per-request percentile (summary, Markdown, comparison and its bootstrap).
    """
    n = len(ordered)
    if n == 0:
        return None
    q = min(max(q, 0.0), 1.0)
    return float(ordered[math.floor(q * (n - 1))])


class Histogram:
    """A mergeable log-bucketed histogram with bounded relative error."""

    __slots__ = (
        "_counts",
        "_gamma",
        "_log_gamma",
        "count",
        "max",
        "min",
        "relative_accuracy",
        "sum",
        "zero_count",
    )

    def __init__(self, relative_accuracy: float = DEFAULT_RELATIVE_ACCURACY) -> None:
        if not 0 < relative_accuracy < 1:
            raise ValueError(f"relative_accuracy must be in (0, 1), got {relative_accuracy}")
        self.relative_accuracy = relative_accuracy
        self._gamma = (1 + relative_accuracy) / (1 - relative_accuracy)
        self._log_gamma = math.log(self._gamma)
        self._counts: dict[int, int] = {}
        self.zero_count = 0
        self.count = 0
        self.sum = 0.0
        self.min = math.inf
        self.max = -math.inf

    # -- adding -----------------------------------------------------------
    def add(self, value: float, count: int = 1) -> None:
        """Add ``value`` ``count`` times."""
        if count <= 0:
            return
        if value > 0:
            i = math.ceil(math.log(value) / self._log_gamma)
            counts = self._counts
            counts[i] = counts.get(i, 0) + count
        else:
            self.zero_count += count
        self.count += count
        self.sum += value * count
        self.min = min(self.min, value)
        self.max = max(self.max, value)

    def extend(self, values: Iterable[float]) -> None:
        """Add many values at once: the same buckets as :meth:`add` in a loop, much faster.

        The values are sorted once; then each occupied bucket costs one ``log`` and one
        binary search, whatever its count (a request's 400 inter-token gaps fill a few
        buckets), instead of one ``log`` per value.
        """
        ordered = sorted(values)
        n = len(ordered)
        if not n:
            return
        log = math.log
        ceil = math.ceil
        lg = self._log_gamma
        counts = self._counts
        j = bisect_right(ordered, 0.0)  # zero and negative values: the zero bucket
        self.zero_count += j
        while j < n:
            i = ceil(log(ordered[j]) / lg)
            # Past bucket i: a guess from its upper edge, then settled with the exact rule
            # (the index is monotonic in the value, so the run j..end-1 is all bucket i).
            end = bisect_right(ordered, math.exp(i * lg), j + 1)
            while end > j + 1 and ceil(log(ordered[end - 1]) / lg) != i:
                end -= 1
            while end < n and ceil(log(ordered[end]) / lg) == i:
                end += 1
            counts[i] = counts.get(i, 0) + (end - j)
            j = end
        self.count += n
        self.sum += math.fsum(ordered)
        self.min = min(self.min, ordered[0])
        self.max = max(self.max, ordered[-1])

    def merge(self, other: Histogram) -> None:
        """Add every sample of ``other`` (same accuracy) into this histogram."""
        if other.relative_accuracy != self.relative_accuracy:
            raise ValueError("cannot merge histograms of different accuracy")
        counts = self._counts
        for i, c in other._counts.items():
            counts[i] = counts.get(i, 0) + c
        self.zero_count += other.zero_count
        self.count += other.count
        self.sum += other.sum
        self.min = min(self.min, other.min)
        self.max = max(self.max, other.max)

    def copy(self) -> Histogram:
        h = Histogram(self.relative_accuracy)
        h.merge(self)
        return h

    # -- reading ----------------------------------------------------------
    def __len__(self) -> int:
        return self.count

    @property
    def mean(self) -> float | None:
        return self.sum / self.count if self.count else None

    def _value_of(self, index: int) -> float:
        return 2.0 * math.exp(index * self._log_gamma) / (self._gamma + 1.0)

    def buckets(self) -> list[tuple[float, int]]:
        """``(representative value, count)`` per non-empty bucket, ascending (zero first)."""
        out = [(0.0, self.zero_count)] if self.zero_count else []
        out.extend((self._value_of(i), self._counts[i]) for i in sorted(self._counts))
        return out

    def quantile(self, q: float) -> float | None:
        """The value at quantile ``q`` (0..1), or None when empty."""
        return self.quantiles([q])[0]

    def quantiles(self, qs: Iterable[float]) -> list[float | None]:
        qlist = list(qs)
        if self.count == 0:
            return [None for _ in qlist]
        order = sorted(range(len(qlist)), key=lambda k: qlist[k])
        out: list[float | None] = [None] * len(qlist)
        keys = sorted(self._counts)
        cum = self.zero_count
        ki = 0
        for k in order:
            q = min(max(qlist[k], 0.0), 1.0)
            rank = math.floor(q * (self.count - 1))
            if rank < self.zero_count:
                out[k] = max(self.min, min(self.max, 0.0))
                continue
            while ki < len(keys) and cum + self._counts[keys[ki]] <= rank:
                cum += self._counts[keys[ki]]
                ki += 1
            value = self._value_of(keys[min(ki, len(keys) - 1)])
            out[k] = max(self.min, min(self.max, value))
        return out

    def percentiles(self) -> dict[str, float | None]:
        """mean, median, p90, p99 (the keys results use)."""
        median, p90, p99 = self.quantiles([0.5, 0.9, 0.99])
        return {"mean": self.mean, "median": median, "p90": p90, "p99": p99}

    # -- serialising ------------------------------------------------------
    def to_dict(self) -> dict[str, Any]:
        """Plain data (string keys) for JSON or Locust's msgpack messages."""
        return {
            "a": self.relative_accuracy,
            "n": self.count,
            "s": self.sum,
            "lo": self.min if self.count else None,
            "hi": self.max if self.count else None,
            "z": self.zero_count,
            "b": [[i, c] for i, c in self._counts.items()],
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Histogram:
        h = cls(float(data["a"]))
        h.count = int(data["n"])
        h.sum = float(data["s"])
        if h.count:
            h.min = float(data["lo"])
            h.max = float(data["hi"])
        h.zero_count = int(data["z"])
        h._counts = {int(i): int(c) for i, c in data["b"]}
        return h

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Histogram):
            return NotImplemented
        return (
            self.relative_accuracy == other.relative_accuracy
            and self._counts == other._counts
            and self.zero_count == other.zero_count
            and self.count == other.count
        )

    __hash__ = None  # type: ignore[assignment]

    def __repr__(self) -> str:
        return f"Histogram(count={self.count}, median={self.quantile(0.5)})"


class BucketCounts:
    """Prometheus cumulative buckets with fixed upper bounds, plus sum and count."""

    __slots__ = ("bounds", "count", "counts", "sum")

    def __init__(self, bounds: Iterable[float]) -> None:
        self.bounds: tuple[float, ...] = tuple(sorted(bounds))
        self.counts = [0] * (len(self.bounds) + 1)  # last one is +Inf
        self.count = 0
        self.sum = 0.0

    def add(self, value: float, count: int = 1) -> None:
        self.counts[bisect_left(self.bounds, value)] += count
        self.count += count
        self.sum += value * count

    def cumulative(self) -> list[tuple[str, int]]:
        """``[(le, cumulative_count), ...]`` ending with ``("+Inf", count)``."""
        out: list[tuple[str, int]] = []
        running = 0
        for bound, c in zip(self.bounds, self.counts, strict=False):
            running += c
            out.append((repr(float(bound)), running))
        out.append(("+Inf", running + self.counts[-1]))
        return out
