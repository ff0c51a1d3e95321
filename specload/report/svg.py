"""A chart of :mod:`specload.results.plots` drawn as inline SVG: one panel per category.

The data is the PNG plots' (:class:`~specload.results.plots.Chart`: a run's, or a
comparison's from :func:`specload.compare.plots.comparison_charts`), so the report and
the plots show one set of numbers. Each panel has x ticks at the measured levels only
(concurrency on a log2 axis, or request rate), the interval of each point as a whisker
where the chart has one, n per level in a row per series along the foot, points of
levels whose requests hit max_tokens while reasoning ringed in red, and a tooltip
(``<title>``) per point. Every string is escaped; no script, no external reference.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from html import escape

from specload.results.plots import Chart, Point, Series, level_label

# One colour per series, in order (colour-blind-safe qualitative palette).
PALETTE = (
    "#0072b2",
    "#d55e00",
    "#009e73",
    "#cc79a7",
    "#e69f00",
    "#56b4e9",
    "#7f7f7f",
    "#000000",
)
TRUNCATION_COLOR = "#d62728"

WIDTH = 520
HEIGHT = 300
_LEFT = 62
_RIGHT = 18
_TOP = 14
_AXIS_FOOT = 40  # under the plot area: tick labels and the x label
_N_ROW = 13  # px per n row
_FONT = 11


def colors(names: Sequence[str]) -> dict[str, str]:
    """A colour per series name, in first-seen order."""
    out: dict[str, str] = {}
    for name in names:
        if name not in out:
            out[name] = PALETTE[len(out) % len(PALETTE)]
    return out


def nice_ticks(high: float, count: int = 5) -> list[float]:
    """Ticks from 0 to at least ``high`` at a step of 1, 2, 2.5 or 5 x 10^k."""
    if not math.isfinite(high) or high <= 0:
        return [0.0, 1.0]
    raw = high / count
    power = 10.0 ** math.floor(math.log10(raw))
    step = next(m * power for m in (1.0, 2.0, 2.5, 5.0, 10.0) if m * power >= raw)
    n = math.ceil(high / step - 1e-9)
    return [round(i * step, 12) for i in range(n + 1)]


def _tick_text(value: float) -> str:
    return f"{value:g}" if abs(value) < 1e6 else f"{value:.3g}"


@dataclass(frozen=True)
class Scale:
    """Data to pixels on one axis (``log2``: positions by log2 of the value)."""

    lo: float
    hi: float
    start: float
    end: float
    log2: bool = False

    def _t(self, v: float) -> float:
        return math.log2(v) if self.log2 else v

    def __call__(self, v: float) -> float:
        lo, hi = self._t(self.lo), self._t(self.hi)
        if hi == lo:
            return (self.start + self.end) / 2
        return self.start + (self._t(v) - lo) / (hi - lo) * (self.end - self.start)


def x_scale(levels: Sequence[float], log2: bool, start: float, end: float) -> Scale:
    """The x axis over the levels, with a margin so the end points are not on the frame."""
    if not levels:
        return Scale(0.0, 1.0, start, end)
    lo, hi = min(levels), max(levels)
    if log2:
        pad = max(0.25, 0.06 * (math.log2(hi) - math.log2(lo)))
        return Scale(2 ** (math.log2(lo) - pad), 2 ** (math.log2(hi) + pad), start, end, True)
    pad = 0.06 * (hi - lo) if hi > lo else max(abs(lo) * 0.25, 0.5)
    return Scale(lo - pad, hi + pad, start, end)


def _point_title(series: Series, point: Point, ylabel: str) -> str:
    text = f"{series.variant}, {level_label(point.x)}: {ylabel} {point.y:.4g}"
    if point.low is not None and point.high is not None:
        text += f" (interval {point.low:.4g} to {point.high:.4g})"
    if point.n is not None:
        text += f", n {point.n}"
    if point.truncated:
        text += f", {point.truncated} hit max_tokens while reasoning"
    return text


def panel_svg(
    chart: Chart,
    category: str,
    palette: Mapping[str, str],
    *,
    width: int = WIDTH,
    height: int = HEIGHT,
) -> str:
    """One category's panel of ``chart`` as an ``<svg>`` element (a string)."""
    series = [s for s in chart.series if s.category == category]
    rows = sum(1 for s in series if any(p.n is not None for p in s.points))  # n rows
    total_h = height + rows * _N_ROW + 4
    x0, x1 = _LEFT, width - _RIGHT
    y_top, y_bottom = _TOP, height - _AXIS_FOOT
    values = [v for s in series for p in s.points for v in (p.y, p.high) if v is not None]
    ticks = nice_ticks(max(values) * 1.05 if values else 1.0)
    ys = Scale(0.0, ticks[-1], y_bottom, y_top)
    xs = x_scale(chart.levels, chart.log2, x0, x1)
    title = f"{chart.ylabel} against {chart.xlabel}: {category}"
    out = [
        f'<svg xmlns="http://www.w3.org/2000/svg" class="chart" width="{width}" '
        f'height="{total_h}" viewBox="0 0 {width} {total_h}" role="img" '
        f'aria-label="{escape(title)}" font-size="{_FONT}">',
        f"<title>{escape(title)}</title>",
        f'<rect x="{x0}" y="{y_top}" width="{x1 - x0}" height="{y_bottom - y_top}" '
        'fill="#ffffff" stroke="#999999"/>',
    ]
    for tick in ticks:
        y = ys(tick)
        out.append(
            f'<line x1="{x0}" y1="{y:.1f}" x2="{x1}" y2="{y:.1f}" stroke="#e4e4e4"/>'
            f'<text x="{x0 - 5}" y="{y + 4:.1f}" text-anchor="end" class="ytick">'
            f"{escape(_tick_text(tick))}</text>"
        )
    for level in chart.levels:
        x = xs(level)
        out.append(
            f'<line x1="{x:.1f}" y1="{y_top}" x2="{x:.1f}" y2="{y_bottom}" stroke="#eeeeee"/>'
            f'<line x1="{x:.1f}" y1="{y_bottom}" x2="{x:.1f}" y2="{y_bottom + 4}" '
            'stroke="#555555"/>'
            f'<text x="{x:.1f}" y="{y_bottom + 16}" text-anchor="middle" class="xtick" '
            f'data-level="{escape(level_label(level))}">{escape(level_label(level))}</text>'
        )
    out.append(
        f'<text x="{(x0 + x1) / 2:.1f}" y="{y_bottom + 32}" text-anchor="middle" '
        f'class="xlabel">{escape(chart.xlabel)}</text>'
        f'<text x="14" y="{(y_top + y_bottom) / 2:.1f}" text-anchor="middle" class="ylabel" '
        f'transform="rotate(-90 14 {(y_top + y_bottom) / 2:.1f})">{escape(chart.ylabel)}</text>'
    )
    row = -1
    for s in series:
        color = palette.get(s.variant, PALETTE[0])
        name = escape(s.variant)
        pts = sorted(s.points, key=lambda p: p.x)
        if len(pts) > 1:
            path = " ".join(f"{xs(p.x):.1f},{ys(p.y):.1f}" for p in pts)
            out.append(
                f'<polyline points="{path}" fill="none" stroke="{color}" stroke-width="2" '
                f'data-series="{name}"/>'
            )
        for p in pts:
            x, y = xs(p.x), ys(p.y)
            if p.low is not None and p.high is not None:
                lo, hi = ys(p.low), ys(p.high)
                out.append(
                    f'<path d="M{x:.1f},{lo:.1f}V{hi:.1f}M{x - 4:.1f},{lo:.1f}h8'
                    f'M{x - 4:.1f},{hi:.1f}h8" stroke="{color}" stroke-width="1.3" '
                    f'class="interval" data-series="{name}" data-x="{p.x:g}" '
                    f'data-low="{p.low:.6g}" data-high="{p.high:.6g}"/>'
                )
            out.append(
                f'<circle cx="{x:.1f}" cy="{y:.1f}" r="3.5" fill="{color}" class="point" '
                f'data-series="{name}" data-x="{p.x:g}" data-y="{p.y:.6g}">'
                f"<title>{escape(_point_title(s, p, chart.ylabel))}</title></circle>"
            )
            if p.truncated:
                out.append(
                    f'<circle cx="{x:.1f}" cy="{y:.1f}" r="7" fill="none" '
                    f'stroke="{TRUNCATION_COLOR}" stroke-width="1.5" class="truncated"/>'
                )
        if all(p.n is None for p in pts):
            continue
        row += 1
        y_n = height + (row + 1) * _N_ROW - 2
        out.append(
            f'<text x="{x0 - 5}" y="{y_n}" text-anchor="end" fill="{color}" class="nlabel">n</text>'
        )
        for p in pts:
            if p.n is not None:
                out.append(
                    f'<text x="{xs(p.x):.1f}" y="{y_n}" text-anchor="middle" fill="{color}" '
                    f'class="n" data-series="{name}" data-x="{p.x:g}">{p.n}</text>'
                )
    out.append("</svg>")
    return "".join(out)


def chart_categories(chart: Chart) -> list[str]:
    """The chart's categories in its order (``all`` first, as the plots have them)."""
    seen: list[str] = []
    for s in chart.series:
        if s.category not in seen and s.points:
            seen.append(s.category)
    return seen
