"""The HTML report's building blocks: escaped fragments (:class:`Markup`), tags and tables,
the number formats, and a chart as a figure of inline SVG panels (:mod:`.svg`)."""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from html import escape
from typing import Any

from specload.compare.model import ALL
from specload.report import svg
from specload.results.model import finite_number
from specload.results.plots import Chart


class Markup(str):
    """A fragment that is HTML already (built here, its strings escaped): not escaped again."""


def esc(value: object) -> str:
    return value if isinstance(value, Markup) else escape(str(value), quote=True)


def tag(name: str, content: object = "", **attrs: object) -> Markup:
    """``<name attrs>content</name>``; ``class_`` for ``class``, ``data_x`` for ``data-x``."""
    text = "".join(
        f' {k.rstrip("_").replace("_", "-")}="{esc(v)}"' for k, v in attrs.items() if v is not None
    )
    return Markup(f"<{name}{text}>{esc(content)}</{name}>")


def join(parts: Iterable[object]) -> Markup:
    return Markup("".join(esc(p) for p in parts))


def table(
    header: Sequence[object], rows: Iterable[Sequence[object]], *, class_: str = "data"
) -> Markup:
    head = tag("tr", join(tag("th", h) for h in header))
    body = join(tag("tr", join(c if _is_cell(c) else tag("td", c) for c in row)) for row in rows)
    inner = tag("table", join([tag("thead", head), tag("tbody", body)]), class_=class_)
    return tag("div", inner, class_="scroll")


def _is_cell(value: object) -> bool:
    return isinstance(value, Markup) and value.startswith(("<td", "<th"))


# -- numbers -----------------------------------------------------------------------------


def ms(value: Any) -> str:
    v = finite_number(value)
    return "-" if v is None else f"{v:.2f}"


def tok_s(value: Any) -> str:
    v = finite_number(value)
    return "-" if v is None else f"{v:.1f}"


def pct(value: Any, digits: int = 1) -> str:
    v = finite_number(value)
    return "-" if v is None else f"{v * 100:.{digits}f}%"


def rate(value: Any) -> str:
    v = finite_number(value)
    return "-" if v is None else f"{v:.3f}"


def ratio(value: Any) -> str:
    v = finite_number(value)
    return "-" if v is None else f"{v:.2f}"


def count(value: Any) -> int:
    return value if isinstance(value, int) and not isinstance(value, bool) else 0


def measure_value(value: float | None, unit: str) -> str:
    """A comparison cell's value, as ``comparison.md`` writes it."""
    if unit == "ratio":
        return pct(value)
    if unit in ("ms", "req/s"):
        return ms(value)
    return tok_s(value)


def _yes_no(value: bool | None) -> str:
    return "-" if value is None else "yes" if value else "no"


# -- charts ----------------------------------------------------------------------------


def _legend(names: Sequence[str], palette: Mapping[str, str]) -> Markup:
    items = join(
        tag(
            "span",
            join([tag("span", "", class_="swatch", style=f"background:{palette[n]}"), n]),
            class_="key",
        )
        for n in names
    )
    return tag("div", items, class_="legend")


def chart_figure(chart: Chart, title: str) -> Markup:
    names = list(dict.fromkeys(s.variant for s in chart.series))
    palette = svg.colors(names)
    panels = join(
        tag(
            "figure",
            join(
                [
                    Markup(
                        svg.panel_svg(chart, cat, palette)
                        if cat == ALL
                        else svg.panel_svg(chart, cat, palette, width=400, height=250)
                    ),
                    tag("figcaption", "all requests" if cat == ALL else cat),
                ]
            ),
            class_="panel",
        )
        for cat in svg.chart_categories(chart)
    )
    notes = [f"line: {chart.line}"]
    if chart.band:
        notes.append(chart.band.replace("band:", "whiskers:", 1))
    points = [p for s in chart.series for p in s.points]
    if any(p.n is not None for p in points):
        notes.append("n: requests per level")
    if any(p.truncated for p in points):
        notes.append("ringed red: requests hit max_tokens while reasoning")
    caveats = join(tag("li", c) for c in chart.caveats)
    return join(
        [
            tag("h3", title),
            _legend(names, palette),
            tag("div", panels, class_="panels"),
            tag("p", "; ".join(notes) + ".", class_="note"),
            tag("ul", caveats, class_="note") if chart.caveats else "",
        ]
    )
