"""Comparison plots: each variant's median TPOT and output tok/s against the load.

Drawn as a run's plots are (:func:`specload.results.plots.draw_chart`: ticks at the
levels, n per level, truncation ringed, the time scales noted), with each variant's
own interval as the band: the percentile bootstrap of the same estimator and the same
resampling as ``comparison.md`` (:mod:`.stats`) — the median TPOT of the level's
requests in moving blocks at least the concurrency long, the output tok/s as the mean
of the window's time bins. Below ``min_n`` samples a level has no band (``n too small``
in the report).
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import numpy as np
from matplotlib.figure import Figure

from specload.compare.model import (
    ALL,
    THROUGHPUT_BINS,
    Run,
    throughput_bins,
    window_bounds,
)
from specload.compare.stats import (
    MIN_N,
    Statistic,
    block_length,
    bootstrap_statistic,
    estimate,
    row_mean,
    row_median,
)
from specload.records.request import RequestRecord
from specload.results.model import Figures
from specload.results.plots import (
    Chart,
    Point,
    Series,
    categories,
    draw_chart,
    save_figure,
    summary_caveats,
    x_axis,
)


def _interval(
    samples: Sequence[float],
    point: float,
    *,
    stat: Statistic,
    block: int,
    n_boot: int,
    confidence: float,
    seed: int,
) -> tuple[float, float]:
    """The percentile bootstrap interval of ``stat``, extended to contain ``point``."""
    rng = np.random.default_rng(seed)
    replicates = bootstrap_statistic(samples, n_boot=n_boot, rng=rng, stat=stat, block=block)
    alpha = (1.0 - confidence) / 2.0
    low, high = (float(v) for v in np.quantile(replicates, [alpha, 1.0 - alpha]))
    return min(low, point), max(high, point)


def _tpot_ms(records: Sequence[RequestRecord]) -> list[float]:
    """The TPOT samples of the comparison: completed requests with a finite TPOT, in ms."""
    return [
        float(r.tpot_s) * 1000.0
        for r in records
        if r.ok and r.tpot_s is not None and np.isfinite(r.tpot_s)
    ]


def _truncated(records: Sequence[RequestRecord], stats: Figures) -> int:
    if records:
        return sum(1 for r in records if r.ok and r.reasoning_truncated)
    return stats.reasoning_truncated or 0


def _run_points(
    run: Run,
    index: int,
    *,
    n_boot: int,
    confidence: float,
    seed: int,
    min_n: int,
) -> dict[tuple[str, str], list[Point]]:
    """Per (measure, category): the run's points, with their intervals."""
    ordered = sorted(run.records, key=lambda r: r.start_s)
    steps: dict[str, list[RequestRecord]] = {}
    for r in ordered:
        steps.setdefault(r.step, []).append(r)
    out: dict[tuple[str, str], list[Point]] = {}
    for k, level in enumerate(run.result.levels):
        x = level.load
        if x is None:
            continue
        step = steps.get(level.name, [])
        bins = throughput_bins(ordered, window_bounds(level, step), level.figures.duration or 0.0)
        users = level.users
        for c, cat in enumerate(categories([run.result])):
            stats = level.category(cat) or Figures()
            recs = step if cat == ALL else [r for r in step if r.category == cat]
            done = sum(1 for r in recs if r.ok)
            cut = _truncated(recs, stats)
            cell_seed = seed + 1_000_003 * index + 1009 * k + 31 * c
            tpot = _tpot_ms(recs)
            y = estimate(tpot, row_median) if tpot else stats.median_tpot_ms
            if y is not None:
                low = high = None
                if len(tpot) >= min_n:
                    low, high = _interval(
                        tpot,
                        y,
                        stat=row_median,
                        block=block_length(len(tpot), users),
                        n_boot=n_boot,
                        confidence=confidence,
                        seed=cell_seed,
                    )
                n = len(tpot) if recs else stats.completed
                out.setdefault(("tpot", cat), []).append(Point(x, y, n, low, high, cut))
            tok = bins.get(cat) or []
            y = estimate(tok, row_mean) if tok else stats.output_throughput
            if y is not None:
                low = high = None
                if len(tok) == THROUGHPUT_BINS and recs:
                    low, high = _interval(
                        tok,
                        y,
                        stat=row_mean,
                        block=1,
                        n_boot=n_boot,
                        confidence=confidence,
                        seed=cell_seed + 17,
                    )
                n = done if recs else stats.completed
                out.setdefault(("output_throughput", cat), []).append(
                    Point(x, y, n, low, high, cut)
                )
    return out


_MEASURES = (
    ("tpot", "median TPOT (ms)", "compare_tpot.png", "median per level", "median TPOT"),
    (
        "output_throughput",
        "output tokens/s",
        "compare_throughput.png",
        "tok/s over the level's window",
        "window tok/s (mean of its time bins)",
    ),
)


def comparison_charts(
    runs: Sequence[Run],
    *,
    confidence: float = 0.95,
    n_boot: int = 2000,
    seed: int = 0,
    min_n: int = MIN_N,
) -> list[Chart]:
    summaries = [run.result for run in runs]
    xlabel, levels, log2 = x_axis(summaries)
    labels = [run.label or run.variant for run in runs]
    caveats = tuple(summary_caveats(summaries, labels))
    points = [
        _run_points(run, i, n_boot=n_boot, confidence=confidence, seed=seed, min_n=min_n)
        for i, run in enumerate(runs)
    ]
    cats = categories(summaries)
    charts = []
    for key, ylabel, name, line, what in _MEASURES:
        series = tuple(
            Series(label, cat, tuple(sorted(mine.get((key, cat), []), key=lambda p: p.x)))
            for cat in cats
            for label, mine in zip(labels, points, strict=True)
        )
        has_band = any(p.high is not None for s in series for p in s.points)
        band = (
            f"band: {confidence * 100:g}% bootstrap interval of the {what}"
            + (f"; none below n={min_n}" if key == "tpot" else "")
            if has_band
            else None
        )
        charts.append(
            Chart(
                name=name,
                ylabel=ylabel,
                xlabel=xlabel,
                levels=levels,
                log2=log2,
                series=series,
                line=line,
                band=band,
                caveats=caveats,
            )
        )
    return charts


def comparison_figures(
    runs: Sequence[Run],
    *,
    confidence: float = 0.95,
    n_boot: int = 2000,
    seed: int = 0,
    min_n: int = MIN_N,
) -> list[tuple[str, Figure]]:
    """(file name, figure) per measure, as :func:`write_comparison_plots` saves them."""
    charts = comparison_charts(runs, confidence=confidence, n_boot=n_boot, seed=seed, min_n=min_n)
    return [(chart.name, draw_chart(chart)) for chart in charts]


def write_comparison_plots(
    runs: list[Run],
    out_dir: Path,
    *,
    confidence: float = 0.95,
    n_boot: int = 2000,
    seed: int = 0,
    min_n: int = MIN_N,
) -> list[Path]:
    figures = comparison_figures(runs, confidence=confidence, n_boot=n_boot, seed=seed, min_n=min_n)
    return [save_figure(fig, out_dir / name) for name, fig in figures]
