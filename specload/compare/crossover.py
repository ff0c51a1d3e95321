"""Crossover: the concurrency at which a variant stops being faster than the reference.

The TPOT ratio of a level is ``variant median TPOT / reference median TPOT`` (below 1:
the variant is faster). Over the closed-loop levels in ascending concurrency, the
crossover is the **first** pair of neighbouring levels where the ratio goes from below 1
to 1 or more, **interpolated linearly on log2(concurrency)** between the two (levels are
usually doubling, so a straight line in log2 puts the crossing between 4 and 16 at 8 when
the ratios there are equally far from 1); the answer is ``2 ** x``.

Without such a pair there is no crossover, and the reason says why:
:data:`FASTER_EVERYWHERE` (ratio below 1 at every level), :data:`SLOWER_EVERYWHERE`
(1 or more at every level), :data:`FASTER_AT_HIGH_LOAD` (slower at low load, faster at
the highest level: it does not stop being faster inside the range).

The interval comes from the bootstrap the rows use: every level of both runs resampled
in blocks (:func:`~specload.compare.stats.bootstrap_statistic`, the same block lengths),
each replicate's medians give a ratio per level and the crossing is found again by the
same rule. A replicate without a crossing is **below the range** when its ratio is 1 or
more at every level (the variant stops being faster before the lowest level) and **above
the range** otherwise (still faster at the highest level); their shares are reported. The
interval is the ``alpha/2``, ``1 - alpha/2`` quantiles of all replicates with those at
-∞/+∞: an end that falls among them is "below the lowest level" / "above the highest"
(``None``). Like the rows, an interval that excludes its estimate is extended to it
(``widened``).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from specload.compare.stats import FloatArray, bootstrap_statistic, estimate

FASTER_EVERYWHERE = "faster at every level"
SLOWER_EVERYWHERE = "slower at every level"
FASTER_AT_HIGH_LOAD = (
    "slower at low load, faster at the highest level: it does not stop being faster in the range"
)
OPEN_LOOP = "open-loop levels (request rates): no concurrency to cross at"
TOO_FEW_LEVELS = "fewer than two concurrency levels with a median TPOT on both sides"


@dataclass(frozen=True)
class LevelSamples:
    """One level's TPOT samples (ms, start order) of the reference and the variant."""

    concurrency: float
    reference: Sequence[float]
    variant: Sequence[float]
    block_reference: int
    block_variant: int


@dataclass(frozen=True)
class Crossover:
    variant: str
    ratios: list[tuple[float, float]]  # (concurrency, TPOT ratio) per level used, ascending
    concurrency: float | None = None
    between: tuple[float, float] | None = None  # the measured levels around the crossing
    # None: no bootstrap (n too small at a level); an end None: beyond the range on that side
    interval: tuple[float | None, float | None] | None = None
    below_share: float | None = None  # replicates whose crossing is below the lowest level
    above_share: float | None = None  # … above the highest
    widened: bool = False
    reason: str | None = None  # why there is no crossover (``concurrency`` None)
    note: str | None = None  # why there is no interval

    @property
    def found(self) -> bool:
        return self.concurrency is not None


def crossing(loads: Sequence[float], ratios: Sequence[float]) -> tuple[float, int] | str:
    """The crossover ``(concurrency, k)`` between ``loads[k]`` and ``loads[k + 1]``, or the
    reason there is none. ``loads`` ascending and positive."""
    for k in range(len(ratios) - 1):
        lo, hi = ratios[k], ratios[k + 1]
        if lo < 1.0 <= hi:
            x_lo, x_hi = math.log2(loads[k]), math.log2(loads[k + 1])
            x = x_lo + (1.0 - lo) / (hi - lo) * (x_hi - x_lo)
            return 2.0**x, k
    if all(r < 1.0 for r in ratios):
        return FASTER_EVERYWHERE
    if all(r >= 1.0 for r in ratios):
        return SLOWER_EVERYWHERE
    return FASTER_AT_HIGH_LOAD


def crossings(loads: Sequence[float], ratios: FloatArray) -> FloatArray:
    """Per row of ``ratios`` (replicates x levels), :func:`crossing`'s concurrency; -inf
    for no crossing with every ratio ≥ 1 (below the range), +inf for the others (above)."""
    x = np.log2(np.asarray(loads, dtype=np.float64))
    lo, hi = ratios[:, :-1], ratios[:, 1:]
    cond = (lo < 1.0) & (hi >= 1.0)
    has = cond.any(axis=1)
    k = cond.argmax(axis=1)
    rows = np.arange(ratios.shape[0])
    r_lo, r_hi = lo[rows, k], hi[rows, k]
    with np.errstate(divide="ignore", invalid="ignore"):
        frac = np.where(has, (1.0 - r_lo) / (r_hi - r_lo), 0.0)
    value = np.exp2(x[k] + frac * (x[k + 1] - x[k]))
    below = (ratios >= 1.0).all(axis=1)
    out: FloatArray = np.where(has, value, np.where(below, -np.inf, np.inf))
    return out


def _quantile(ordered: FloatArray, q: float) -> float:
    """Linear-interpolation quantile (numpy's default) of sorted values that may hold ±inf:
    a neighbour at infinity gives infinity."""
    pos = q * (len(ordered) - 1)
    i = math.floor(pos)
    frac = pos - i
    a = float(ordered[i])
    if frac == 0.0 or i + 1 >= len(ordered):
        return a
    b = float(ordered[i + 1])
    if math.isinf(a) or math.isinf(b):
        return a if math.isinf(a) else b
    return a + frac * (b - a)


def find_crossover(
    variant: str,
    levels: Sequence[LevelSamples],
    *,
    n_boot: int,
    confidence: float,
    seed: int,
    min_n: int,
    reference_boot: dict[float, FloatArray] | None = None,
) -> Crossover:
    """The crossover of one variant against the reference over ``levels`` (any order).

    ``reference_boot``: the reference's replicate medians per concurrency, shared between
    variants (filled here when missing)."""
    usable = sorted(
        (lv for lv in levels if lv.reference and lv.variant and lv.concurrency > 0),
        key=lambda lv: lv.concurrency,
    )
    points = []
    for lv in usable:
        a, b = estimate(lv.reference), estimate(lv.variant)
        if a is not None and b is not None and a > 0:
            points.append((lv, b / a))
    if len(points) < 2:
        return Crossover(variant, [(lv.concurrency, r) for lv, r in points], reason=TOO_FEW_LEVELS)
    loads = [lv.concurrency for lv, _ in points]
    ratios = [r for _, r in points]
    pairs = list(zip(loads, ratios, strict=True))
    found = crossing(loads, ratios)
    short = [lv for lv, _ in points if min(len(lv.reference), len(lv.variant)) < min_n]
    note = (
        f"no interval: fewer than {min_n} samples on a side at concurrency "
        + ", ".join(f"{lv.concurrency:g}" for lv in short)
        if short
        else None
    )
    if isinstance(found, str):
        return Crossover(variant, pairs, reason=found, note=note)
    point, k = found
    between = (loads[k], loads[k + 1])
    if short:
        return Crossover(variant, pairs, point, between, note=note)
    rng = np.random.default_rng(seed)
    shared = {} if reference_boot is None else reference_boot
    columns = []
    for lv, _ in points:
        ref = shared.get(lv.concurrency)
        if ref is None:
            ref = shared[lv.concurrency] = bootstrap_statistic(
                lv.reference, n_boot=n_boot, rng=rng, block=lv.block_reference
            )
        var = bootstrap_statistic(lv.variant, n_boot=n_boot, rng=rng, block=lv.block_variant)
        with np.errstate(divide="ignore", invalid="ignore"):
            columns.append(np.where(ref > 0, var / ref, np.inf))
    replicates = crossings(loads, np.stack(columns, axis=1))
    ordered = np.sort(replicates)
    alpha = (1.0 - confidence) / 2.0
    low, high = _quantile(ordered, alpha), _quantile(ordered, 1.0 - alpha)
    widened = not low <= point <= high
    low, high = min(low, point), max(high, point)
    interval = (None if math.isinf(low) else low, None if math.isinf(high) else high)
    below = float(np.mean(np.isneginf(replicates)))
    above = float(np.mean(np.isposinf(replicates)))
    return Crossover(variant, pairs, point, between, interval, below, above, widened)
