"""Bootstrap confidence intervals for the relative difference of two variants.

Point estimates are medians from :mod:`specload.histogram` (the numbers in
``summary.json``). The interval resamples each run's requests with
replacement (independently, a fixed seed, so the report is reproducible) and
takes the percentiles of ``stat(B*) / stat(A*) - 1`` — the exact sample
median of each resample (numpy's ``method="lower"``, the same definition as
:mod:`specload.histogram`; a sketch per resample would be thousands of times
slower for no gain).

Requests that ran at the same time are not independent (they shared the
server's batches), so resampling single requests would make the interval
too narrow. The samples come in start order and are resampled in *blocks*
of consecutive requests (the moving-block bootstrap), ``block`` long — at
least the concurrency, so requests that overlapped stay together.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from specload.histogram import Histogram

FloatArray = npt.NDArray[np.float64]
# Statistic over resamples: (resamples x n) matrix → one value per row.
Statistic = Callable[[FloatArray], FloatArray]

_CHUNK_CELLS = 2_000_000  # cap the resample matrix at ~16 MB


@dataclass(frozen=True)
class Difference:
    a: float
    b: float
    rel: float  # b / a - 1
    ci_low: float
    ci_high: float
    n_a: int
    n_b: int

    @property
    def excludes_zero(self) -> bool:
        return self.ci_low > 0 or self.ci_high < 0


def row_median(matrix: FloatArray) -> FloatArray:
    result: FloatArray = np.quantile(matrix, 0.5, axis=1, method="lower")
    return result


def median(values: Sequence[float]) -> float | None:
    hist = Histogram()
    hist.extend(values)
    return hist.quantile(0.5)


def block_length(n: int, concurrency: int = 1) -> int:
    """At least the concurrency, and about n^(1/3) (the usual moving-block choice)."""
    cube_root = round(math.pow(n, 1.0 / 3.0))
    return max(1, min(n, max(concurrency, cube_root)))


def _resample(
    values: FloatArray, n_boot: int, rng: np.random.Generator, stat: Statistic, block: int
) -> FloatArray:
    n = len(values)
    block = max(1, min(block, n))
    n_blocks = -(-n // block)
    offsets = np.arange(block)
    out = np.empty(n_boot, dtype=np.float64)
    step = max(1, _CHUNK_CELLS // max(n_blocks * block, 1))
    for lo in range(0, n_boot, step):
        hi = min(n_boot, lo + step)
        starts = rng.integers(0, n - block + 1, size=(hi - lo, n_blocks))
        idx = (starts[:, :, None] + offsets).reshape(hi - lo, n_blocks * block)[:, :n]
        out[lo:hi] = stat(values[idx])
    return out


def bootstrap_difference(
    a: Sequence[float],
    b: Sequence[float],
    *,
    point_a: float,
    point_b: float,
    stat: Statistic = row_median,
    n_boot: int = 2000,
    confidence: float = 0.95,
    seed: int = 0,
    block_a: int = 1,
    block_b: int = 1,
) -> Difference | None:
    """``None`` when either side has no samples or a zero statistic.

    ``a`` and ``b`` in request start order; ``block_*`` as in :func:`block_length`.
    """
    if len(a) == 0 or len(b) == 0 or point_a == 0:
        return None
    rng = np.random.default_rng(seed)
    arr_a = np.asarray(a, dtype=np.float64)
    arr_b = np.asarray(b, dtype=np.float64)
    boot_a = _resample(arr_a, n_boot, rng, stat, block_a)
    boot_b = _resample(arr_b, n_boot, rng, stat, block_b)
    valid = boot_a != 0
    ratios = boot_b[valid] / boot_a[valid] - 1.0
    alpha = (1.0 - confidence) / 2.0
    low, high = np.quantile(ratios, [alpha, 1.0 - alpha])
    return Difference(
        point_a, point_b, point_b / point_a - 1.0, float(low), float(high), len(a), len(b)
    )
