"""The median's interval: the moving-block bootstrap, for ``compare`` and the forecast alike.

Requests that ran at the same time are not independent (they shared the server's batches),
so resampling single requests would make an interval too narrow for a closed loop. The
samples come in start order and are resampled in *blocks* of consecutive requests (the
moving-block bootstrap), :func:`block_length` long — at least the concurrency, so requests
that overlapped stay together. :func:`block_indices` draws the resamples' indices; every
interval of a median in specload (``compare``'s differences and crossover, ``predict``'s
forecast, which the report judges "within the interval" against) draws them here.

The median is :func:`row_median` (per resample) and :func:`specload.results.model.median`
(one sample): the lower median, rank ``floor(0.5 * (n - 1))``, the rule of
:func:`specload.histogram.exact_quantile` that ``summary.json`` uses.
"""

from __future__ import annotations

import math
from collections.abc import Iterator

import numpy as np
import numpy.typing as npt

FloatArray = npt.NDArray[np.float64]
IntArray = npt.NDArray[np.int64]

_CHUNK_CELLS = 2_000_000  # cap a chunk of resample indices at ~16 MB


def row_median(matrix: FloatArray) -> FloatArray:
    """Per row, the value of rank ``floor(0.5 * (n - 1))``: :func:`exact_quantile`'s rule."""
    n = matrix.shape[1]
    k = (n - 1) // 2
    result: FloatArray = np.partition(matrix, k, axis=1)[:, k]
    return result


def block_length(n: int, concurrency: int = 1) -> int:
    """At least the concurrency, and about n^(1/3) (the usual moving-block choice)."""
    cube_root = round(math.pow(n, 1.0 / 3.0)) if n > 0 else 1
    return max(1, min(n, max(concurrency, cube_root)))


def block_index_chunks(
    n: int, block: int, n_boot: int, rng: np.random.Generator
) -> Iterator[tuple[int, int, IntArray]]:
    """The moving-block resamples of ``n`` samples (in start order), in chunks: ``(lo, hi,
    idx)`` with ``idx`` the ``(hi - lo, n)`` indices of resamples ``lo..hi``. Each resample
    is ``ceil(n / block)`` runs of ``block`` consecutive indices, each run's start drawn
    uniformly from ``0..n - block``, cut to ``n``."""
    block = max(1, min(block, n))
    n_blocks = -(-n // block)
    offsets = np.arange(block)
    step = max(1, _CHUNK_CELLS // max(n_blocks * block, 1))
    for lo in range(0, n_boot, step):
        hi = min(n_boot, lo + step)
        starts = rng.integers(0, n - block + 1, size=(hi - lo, n_blocks))
        idx = (starts[:, :, None] + offsets).reshape(hi - lo, n_blocks * block)[:, :n]
        yield lo, hi, idx


def block_indices(n: int, block: int, n_boot: int, rng: np.random.Generator) -> IntArray:
    """All ``(n_boot, n)`` indices of :func:`block_index_chunks` at once."""
    if n_boot == 0 or n == 0:
        return np.zeros((n_boot, n), dtype=np.int64)
    return np.concatenate([idx for _, _, idx in block_index_chunks(n, block, n_boot, rng)])
