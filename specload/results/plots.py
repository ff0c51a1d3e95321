"""PNG plots of a run: median TPOT and output tok/s against the load, per category.

:func:`run_figures` builds the figures (returned, so a test reads them) and
:func:`write_plots` saves them; ``specload compare`` draws its figures with the same
:func:`draw_chart` (:mod:`specload.compare.plots`). Every panel has:

- x ticks at the measured levels only (concurrency on a log2 axis, or request rate),
  labelled with the levels themselves;
- a band where the data has a spread: a run's TPOT from its median to its p90 (the
  lowest percentile ``summary.json`` keeps above the median is p90, and none below it),
  a comparison's bootstrap interval; the legend says which;
- n per level (the level's completed requests) along the panel's foot, one row per
  variant in its colour;
- levels where requests hit max_tokens while reasoning (``reasoning_truncated``) ringed
  in red.

The figure's foot names those levels with their counts and, for a run on specload's
simulator (``server_time_scale``), its time scale. The layout is constrained, so no
label, title, legend or note overlaps another.
"""

from __future__ import annotations

import io
import textwrap
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from matplotlib.axes import Axes
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure
from matplotlib.lines import Line2D
from matplotlib.patches import Patch
from matplotlib.ticker import FuncFormatter, NullLocator

from specload.results.model import Figures, Level, Summary, as_summary
from specload.results.writer import atomic_write_bytes

PLOTS = (
    ("median_tpot_ms", "median TPOT (ms)", "tpot.png"),
    ("output_throughput", "output tokens/s", "throughput.png"),
)
# The run's TPOT band: from the median to this percentile of the level's requests.
TPOT_BAND_KEY = "p90_tpot_ms"
TPOT_BAND = "band: p50 to p90 TPOT of the level's requests"

TRUNCATION_COLOR = "red"
CAVEAT_COLOR = "firebrick"
_N_FONT = 7.0  # points: the n rows along a panel's foot
_N_ROW = 0.075  # axes fraction per n row
_N_BASE = 0.02  # axes fraction under the first n row


@dataclass(frozen=True)
class Point:
    """One level of one series: its value, its band (where known), n and truncation."""

    x: float
    y: float
    n: int | None = None  # completed requests of the level (the panel's category)
    low: float | None = None
    high: float | None = None
    truncated: int = 0  # completed requests that hit max_tokens while reasoning


@dataclass(frozen=True)
class Series:
    variant: str
    category: str
    points: tuple[Point, ...]


@dataclass(frozen=True)
class Chart:
    """One figure: a panel per category, a line per variant."""

    name: str  # the file name
    ylabel: str
    xlabel: str
    levels: tuple[float, ...]  # every measured level: the x ticks
    log2: bool
    series: tuple[Series, ...]
    line: str  # what the line is ("median per level")
    band: str | None = None  # what the band is (None: no series has one)
    caveats: tuple[str, ...] = field(default=())


def level_x(level: Level | Mapping[str, Any]) -> float | None:
    """A level's place on the x axis: its concurrency, else its request rate."""
    lv = level if isinstance(level, Level) else Level.from_dict(level)
    return lv.load


def level_label(x: float) -> str:
    return f"{x:g}"


Summaries = Sequence[Summary | Mapping[str, Any]]


def x_axis(summaries: Summaries) -> tuple[str, tuple[float, ...], bool]:
    """The x label, the measured levels of every summary, and whether the axis is log2
    (concurrency, all levels above zero)."""
    runs = [as_summary(s) for s in summaries]
    open_loop = any(s.mode == "open" for s in runs)
    levels = sorted({x for s in runs for lv in s.levels if (x := lv.load) is not None})
    log2 = not open_loop and bool(levels) and all(x > 0 for x in levels)
    return ("request rate (1/s)" if open_loop else "concurrency"), tuple(levels), log2


def categories(summaries: Summaries) -> list[str]:
    """``all``, then every category of any level, sorted."""
    cats = {c for s in summaries for c in as_summary(s).categories}
    return ["all", *sorted(cats)]


def _summary_series(summary: Summary, key: str, band_key: str | None) -> list[Series]:
    levels = sorted(
        (lv for lv in summary.levels if lv.load is not None), key=lambda lv: lv.load or 0.0
    )
    variant = str(summary.variant)
    out = []
    for cat in categories([summary]):
        points = []
        for level in levels:
            stats = level.category(cat) or Figures()
            y = stats.figure(key)
            x = level.load
            if y is None or x is None:
                continue
            high = stats.figure(band_key) if band_key else None
            points.append(
                Point(
                    x,
                    y,
                    n=stats.completed,
                    low=y if high is not None else None,
                    high=high,
                    truncated=stats.reasoning_truncated or 0,
                )
            )
        out.append(Series(variant, cat, tuple(points)))
    return out


def _wrap(text: str, width_in: float) -> str:
    return textwrap.fill(text, width=max(40, int(width_in * 13)))


def summary_caveats(summaries: Summaries, labels: Sequence[str] | None = None) -> list[str]:
    """The figure's notes: per run, the levels where requests hit max_tokens while reasoning
    (``reasoning_truncated`` of ``completed``), and the simulator's time scale
    (``server_time_scale``) — a run on the simulator reads its times divided by it."""
    runs = [as_summary(s) for s in summaries]
    names = list(labels) if labels is not None else [str(s.variant) for s in runs]
    several = len(runs) > 1
    out: list[str] = []
    for summary, name in zip(runs, names, strict=True):
        cut = []
        for level in summary.levels:
            count = level.figures.reasoning_truncated or 0
            if count > 0:
                x = level.load
                label = level.name or (level_label(x) if x is not None else "?")
                cut.append(f"{label} {count} of {level.figures.completed}")
        if cut:
            who = f"{name}: " if several else ""
            out.append(
                f"{who}requests that hit max_tokens while reasoning (ringed): "
                + ", ".join(cut)
                + " completed; they measure reasoning cut at max_tokens, not answers"
            )
    scales = [s.server_time_scale for s in runs]
    known = [scale for scale in scales if scale is not None]
    if not known:  # a real server (or a summary from before server_time_scale)
        return out
    if len(set(scales)) > 1:
        told = ", ".join(
            f"{name} {'none (not the simulator)' if scale is None else f'{scale:g}'}"
            for name, scale in zip(names, scales, strict=True)
        )
        out.append(
            f"simulator time scale differs ({told}): the simulator divides its step times by "
            "it, so these runs' ms and tok/s are not on one clock"
        )
        return out
    scale, what = known[0], "runs" if several else "run"
    if scale == 1:
        out.append(f"simulator {what}, time scale 1: the modelled deployment's own clock")
    else:
        out.append(
            f"simulator {what}, time scale {scale:g}: step times divided by {scale:g}, so "
            f"ms read 1/{scale:g} and tok/s {scale:g}x the modelled deployment's "
            "(ratios kept)"
        )
    return out


def run_charts(summaries: Summaries, prefix: str = "") -> list[Chart]:
    """The charts of :data:`PLOTS` for ``summaries`` (one run, or several to set side by side)."""
    runs = [as_summary(s) for s in summaries]
    xlabel, levels, log2 = x_axis(runs)
    caveats = tuple(summary_caveats(runs))
    charts = []
    for key, ylabel, name in PLOTS:
        band_key = TPOT_BAND_KEY if key == "median_tpot_ms" else None
        series = tuple(s for summary in runs for s in _summary_series(summary, key, band_key))
        has_band = any(p.high is not None for s in series for p in s.points)
        charts.append(
            Chart(
                name=f"{prefix}{name}",
                ylabel=ylabel,
                xlabel=xlabel,
                levels=levels,
                log2=log2,
                series=series,
                line="median per level" if band_key else "tok/s over the level's window",
                band=TPOT_BAND if has_band else None,
                caveats=caveats,
            )
        )
    return charts


# -- drawing --------------------------------------------------------------------------------


def _new_figure(width_in: float, height_in: float) -> Figure:
    fig = Figure(figsize=(width_in, height_in), layout="constrained")
    FigureCanvasAgg(fig)  # a canvas of its own: no pyplot, no global figure state
    return fig


def _set_levels(ax: Axes, levels: Sequence[float], log2: bool) -> None:
    """Ticks at the measured levels only, labelled with them; no minor ticks."""
    if log2:
        ax.set_xscale("log", base=2)
    if not levels:
        ax.set_xticks([])  # nothing measured: no tick claims a level
        return
    ax.set_xticks(list(levels), labels=[level_label(x) for x in levels])
    ax.xaxis.set_minor_locator(NullLocator())
    lo, hi = min(levels), max(levels)
    if log2:
        pad = 2.0**0.35 if hi > lo else 2.0
        ax.set_xlim(lo / pad, hi * pad)
    else:
        span = hi - lo if hi > lo else max(abs(hi), 1.0)
        ax.set_xlim(lo - 0.08 * span, hi + 0.08 * span)
    if len(levels) > 10:
        ax.tick_params(axis="x", labelrotation=45)


def _set_ylim(ax: Axes, values: Sequence[float], rows: int) -> None:
    """Room at the panel's foot for ``rows`` rows of n: the data start above them."""
    if not values:
        return
    lo, hi = min(values), max(values)
    span = hi - lo if hi > lo else max(abs(hi) * 0.1, 1e-9)
    top = hi + 0.08 * span
    floor = _N_BASE + _N_ROW * rows + 0.04  # axes fraction where the data may start
    bottom = (lo - floor * top) / (1.0 - floor)
    ax.set_ylim(bottom, top)
    if lo >= 0:  # the n rows sit below zero: no negative tick labels for a positive measure
        ax.yaxis.set_major_formatter(FuncFormatter(lambda v, _pos: "" if v < 0 else f"{v:g}"))


def _panel(ax: Axes, chart: Chart, category: str, colors: Mapping[str, str]) -> None:
    values: list[float] = []
    present = [s for s in chart.series if s.category == category and s.points]
    for row, series in enumerate(present):
        color = colors[series.variant]
        points = sorted(series.points, key=lambda p: p.x)
        xs, ys = [p.x for p in points], [p.y for p in points]
        values += ys
        banded = [p for p in points if p.low is not None and p.high is not None]
        if banded:
            lows = [float(p.low) for p in banded if p.low is not None]
            highs = [float(p.high) for p in banded if p.high is not None]
            values += lows + highs
            ax.fill_between([p.x for p in banded], lows, highs, color=color, alpha=0.2, linewidth=0)
        ax.plot(xs, ys, marker="o", color=color)
        cut = [p for p in points if p.truncated > 0]
        if cut:
            ax.scatter(
                [p.x for p in cut],
                [p.y for p in cut],
                s=150,
                facecolors="none",
                edgecolors=TRUNCATION_COLOR,
                linewidths=1.5,
                zorder=3,
            )
        for p in points:
            if p.n is not None:
                ax.text(
                    p.x,
                    _N_BASE + _N_ROW * (len(present) - 1 - row),
                    str(p.n),
                    transform=ax.get_xaxis_transform(),
                    ha="center",
                    va="bottom",
                    fontsize=_N_FONT,
                    color=color,
                )
    _set_levels(ax, chart.levels, chart.log2)
    _set_ylim(ax, values, len(present))
    ax.set_title(category)
    ax.set_xlabel(chart.xlabel)
    ax.set_ylabel(chart.ylabel)
    ax.grid(True, alpha=0.3)


def _legend_handles(chart: Chart, colors: Mapping[str, str]) -> list[Any]:
    handles: list[Any] = [
        Line2D([], [], color=color, marker="o", label=f"{variant}: {chart.line}")
        for variant, color in colors.items()
    ]
    if chart.band is not None:
        handles.append(Patch(facecolor="gray", alpha=0.3, label=chart.band))
    if any(p.truncated > 0 for s in chart.series for p in s.points):
        handles.append(
            Line2D(
                [],
                [],
                linestyle="none",
                marker="o",
                markersize=11,
                markerfacecolor="none",
                markeredgecolor=TRUNCATION_COLOR,
                label="ringed: requests hit max_tokens while reasoning",
            )
        )
    rows = "one row per variant, in its colour" if len(colors) > 1 else "per level"
    handles.append(
        Line2D(
            [], [], linestyle="none", label=f"numbers at the foot: n, completed requests ({rows})"
        )
    )
    return handles


def draw_chart(chart: Chart) -> Figure:
    """The figure of ``chart``: a panel for all requests and one per category."""
    cats = list(dict.fromkeys(s.category for s in chart.series)) or ["all"]
    cols = min(3, len(cats))
    rows = (len(cats) + cols - 1) // cols
    width = 4.8 * cols
    notes = [_wrap(c, width) for c in chart.caveats]
    foot = 0.9 + 0.18 * sum(n.count("\n") + 1 for n in notes)
    fig = _new_figure(width, 3.5 * rows + foot)
    axes = fig.subplots(rows, cols, squeeze=False)
    for ax in axes.flat[len(cats) :]:
        fig.delaxes(ax)
    variants = list(dict.fromkeys(s.variant for s in chart.series))
    colors = {v: f"C{i % 10}" for i, v in enumerate(variants)}
    for ax, cat in zip(axes.flat, cats, strict=False):
        _panel(ax, chart, cat, colors)
    fig.suptitle(f"{chart.ylabel} by {chart.xlabel}")
    # The notes head the legend: one artist at the foot, which the layout makes room for.
    legend = fig.legend(
        handles=_legend_handles(chart, colors),
        loc="outside lower center",
        ncols=1 if cols == 1 else 2,
        fontsize="small",
        frameon=False,
        title="\n".join(notes) or None,
        title_fontproperties={"size": "small"},
    )
    legend.get_title().set_color(CAVEAT_COLOR)
    legend.get_title().set_multialignment("center")
    return fig


def save_figure(fig: Figure, path: Path) -> Path:
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=100)
    atomic_write_bytes(path, buf.getvalue())
    return path


def run_figures(summaries: Summaries, prefix: str = "") -> list[tuple[str, Figure]]:
    """(file name, figure) per measure of :data:`PLOTS`, as :func:`write_plots` saves them."""
    return [(chart.name, draw_chart(chart)) for chart in run_charts(summaries, prefix)]


def write_plots(summaries: Summaries, out_dir: Path, prefix: str = "") -> list[Path]:
    """One PNG per measure: a panel for all requests and a panel per category."""
    return [save_figure(fig, out_dir / name) for name, fig in run_figures(summaries, prefix)]


def prediction_figure(prediction: Mapping[str, Any]) -> Figure:
    """Median TPOT against concurrency: the baseline as measured, the forecast with its
    interval, and the variant as measured where ``prediction["measured"]`` has it."""
    levels = sorted(prediction.get("levels") or [], key=lambda lv: lv["concurrency"])
    xs = [float(lv["concurrency"]) for lv in levels]
    fig = _new_figure(6.4, 4.4)
    ax = fig.subplots()
    ax.plot(xs, [lv["baseline_median_tpot_ms"] for lv in levels], marker="o", label="baseline")
    k = prediction.get("num_speculative_tokens")
    ax.plot(
        xs,
        [lv["predicted_median_tpot_ms"] for lv in levels],
        marker="s",
        linestyle="--",
        label=f"predicted {prediction.get('method')} k={k}",
    )
    ax.fill_between(
        xs,
        [lv["predicted_low_ms"] for lv in levels],
        [lv["predicted_high_ms"] for lv in levels],
        alpha=0.2,
        label=f"{int(100 * float(prediction.get('confidence') or 0.95))}% interval",
    )
    rows = (prediction.get("measured") or {}).get("levels") or []
    if rows:
        rows = sorted(rows, key=lambda r: r["concurrency"])
        ax.plot(
            [float(r["concurrency"]) for r in rows],
            [r["measured_median_tpot_ms"] for r in rows],
            marker="^",
            label="measured variant",
        )
    ticks = sorted(set(xs) | {float(r["concurrency"]) for r in rows})
    _set_levels(ax, ticks, bool(ticks) and all(x > 0 for x in ticks))
    ax.set_xlabel("concurrency")
    ax.set_ylabel("median TPOT (ms)")
    ax.set_title("speculative variant: forecast from the baseline")
    ax.grid(True, alpha=0.3)
    ax.legend(fontsize="small")
    return fig


def write_prediction_plot(prediction: Mapping[str, Any], path: Path) -> Path:
    return save_figure(prediction_figure(prediction), path)
