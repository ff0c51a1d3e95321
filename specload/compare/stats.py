"""Bootstrap confidence intervals for the relative difference of two variants.

One estimator, one rule. A statistic is a function from a ``(rows x n)`` matrix to
one value per row; the **point estimate is that statistic applied to the run's own
sample** (one row) and the interval applies **the same function** to every
resample. For per-request figures the statistic is :func:`row_median`: the value
of rank ``floor(0.5 * (n - 1))`` in sorted order — the rule of
:func:`specload.histogram.exact_quantile`, which ``summary.json`` uses too, so a
run's median is one number in ``summary.md``, ``summary.json`` and
``comparison.md``. For throughput it is the mean of the window's time bins.

The interval is the percentile bootstrap of ``stat(B*) / stat(A*) - 1``: each
run's sample resampled with replacement (independently, a fixed seed, so the
report is reproducible), the ``alpha/2`` and ``1 - alpha/2`` quantiles of the
ratios. A percentile interval of a statistic evaluated by the same function
contains its estimate except in rare discrete cases (many ties, few distinct
values, a skewed bootstrap distribution); then the interval is **extended to the
estimate** and marked ``widened`` — extending never makes an interval exclude
zero that did not before, so no verdict is created by it. Below :data:`MIN_N`
samples on a side there is no interval and no verdict.

Requests that ran at the same time are not independent (they shared the
server's batches), so resampling single requests would make the interval
too narrow. The samples come in start order and are resampled in *blocks*
of consecutive requests (the moving-block bootstrap), ``block`` long — at
least the concurrency, so requests that overlapped stay together. The
resampling and the median are defined once, in :mod:`specload.results.bootstrap`
(the forecast's interval draws the same blocks).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np

from specload.compare.options import MIN_N_DEFAULT
from specload.results.bootstrap import FloatArray, block_index_chunks, block_length, row_median
from specload.results.model import median

# the one definitions (specload.results), for compare's readers
__all__ = ["FloatArray", "block_length", "median", "row_median"]

# Statistic over resamples: (resamples x n) matrix → one value per row.
Statistic = Callable[[FloatArray], FloatArray]

# Fewest samples per side for an interval and a verdict (fewer: "n too small").
MIN_N = MIN_N_DEFAULT


@dataclass(frozen=True)
class Difference:
    a: float
    b: float
    rel: float  # b / a - 1
    ci_low: float | None  # None: no interval (too few samples, or a zero statistic)
    ci_high: float | None
    n_a: int
    n_b: int
    widened: bool = False  # the percentile interval was extended to contain ``rel``

    @property
    def has_interval(self) -> bool:
        return self.ci_low is not None and self.ci_high is not None

    @property
    def excludes_zero(self) -> bool:
        if self.ci_low is None or self.ci_high is None:
            return False
        return self.ci_low > 0 or self.ci_high < 0


def row_mean(matrix: FloatArray) -> FloatArray:
    result: FloatArray = np.mean(matrix, axis=1)
    return result


def estimate(values: Sequence[float], stat: Statistic = row_median) -> float | None:
    """The point estimate: ``stat`` applied to the sample itself (``None`` when empty)."""
    if len(values) == 0:
        return None
    return float(stat(np.asarray(values, dtype=np.float64)[None, :])[0])


def _resample(
    values: FloatArray, n_boot: int, rng: np.random.Generator, stat: Statistic, block: int
) -> FloatArray:
    out = np.empty(n_boot, dtype=np.float64)
    for lo, hi, idx in block_index_chunks(len(values), block, n_boot, rng):
        out[lo:hi] = stat(values[idx])
    return out


def bootstrap_statistic(
    values: Sequence[float],
    *,
    n_boot: int,
    rng: np.random.Generator,
    stat: Statistic = row_median,
    block: int = 1,
) -> FloatArray:
    """``n_boot`` moving-block resamples of ``values`` (start order), ``stat`` of each:
    the replicates :func:`bootstrap_difference` draws, for statistics built from several
    of them (the crossover of :mod:`specload.compare.crossover`)."""
    return _resample(np.asarray(values, dtype=np.float64), n_boot, rng, stat, block)


def bootstrap_difference(
    a: Sequence[float],
    b: Sequence[float],
    *,
    stat: Statistic = row_median,
    n_boot: int = 2000,
    confidence: float = 0.95,
    seed: int = 0,
    block_a: int = 1,
    block_b: int = 1,
    min_n: int = MIN_N,
) -> Difference | None:
    """The relative difference ``stat(b) / stat(a) - 1`` and its interval.

    ``None`` when either side has no samples or ``stat(a)`` is zero. With fewer than
    ``min_n`` samples on a side the difference has no interval (``ci_* = None``).
    ``a`` and ``b`` in request start order; ``block_*`` as in :func:`block_length`.
    """
    point_a, point_b = estimate(a, stat), estimate(b, stat)
    if point_a is None or point_b is None or point_a == 0:
        return None
    rel = point_b / point_a - 1.0
    if len(a) < min_n or len(b) < min_n:
        return Difference(point_a, point_b, rel, None, None, len(a), len(b))
    rng = np.random.default_rng(seed)
    boot_a = _resample(np.asarray(a, dtype=np.float64), n_boot, rng, stat, block_a)
    boot_b = _resample(np.asarray(b, dtype=np.float64), n_boot, rng, stat, block_b)
    valid = boot_a != 0
    if not valid.any():
        return Difference(point_a, point_b, rel, None, None, len(a), len(b))
    ratios = boot_b[valid] / boot_a[valid] - 1.0
    alpha = (1.0 - confidence) / 2.0
    low, high = (float(x) for x in np.quantile(ratios, [alpha, 1.0 - alpha]))
    widened = not low <= rel <= high
    return Difference(point_a, point_b, rel, min(low, rel), max(high, rel), len(a), len(b), widened)
