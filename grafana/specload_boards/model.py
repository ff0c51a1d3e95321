"""What a board is made of: queries, panels, row headers and variables.

A board is a list of panels and rows; :mod:`specload_boards.render` lays them
out left to right on Grafana's 24-column grid (a row header, or a panel that
no longer fits, starts a new line) and writes Grafana's JSON. Nothing here
knows that JSON, so a board module reads as a list of what it shows.
"""

from __future__ import annotations

from dataclasses import dataclass, field

#: A threshold step: its colour and the value it starts at (``None``: the base
#: colour below the first value).
Threshold = tuple[str, float | None]

TOKENS_PER_SECOND = "suffix: tok/s"
RATIO_TO_REFERENCE = "suffix: \u00d7"  # the multiplication sign: "1.1x as slow"


@dataclass(frozen=True)
class BoardAddress:
    """Where a board lives; fixed, as links, alerts and bookmarks use it."""

    uid: str
    slug: str  # the readable part of the URL after the UID
    title: str


@dataclass(frozen=True)
class Link:
    """A panel link to another board, keeping the time range, model and variant."""

    board: BoardAddress
    title: str = ""  # empty: "Open <board title>"


@dataclass(frozen=True)
class Query:
    expr: str
    legend: str = ""
    instant: bool = False  # one value per series, now, shown as table rows


def range_query(expr: str, legend: str = "{{variant}}") -> Query:
    """A query drawn over the time range; ``expr``'s line breaks are for reading."""
    return Query(" ".join(expr.split()), legend)


def instant_query(expr: str, legend: str = "{{variant}}") -> Query:
    """A query evaluated once at the end of the range, for a table."""
    return Query(" ".join(expr.split()), legend, instant=True)


@dataclass(frozen=True)
class Panel:
    title: str
    queries: list[Query]
    unit: str
    kind: str = "timeseries"  # Grafana's panel type: timeseries, stat, table, state-timeline
    description: str = ""
    width: int = 12
    height: int = 8
    thresholds: list[Threshold] = field(default_factory=lambda: [("green", None)])
    # Texts shown for the values 0, 1, 2...: (text, colour) each.
    value_names: tuple[tuple[str, str], ...] = ()
    min: float | None = None
    max: float | None = None
    links: list[Link] = field(default_factory=list)
    stacked: bool = False


@dataclass(frozen=True)
class Row:
    """A row header across the grid; the panels after it sit under it."""

    title: str


Item = Panel | Row


def stat(
    title: str,
    queries: list[Query],
    unit: str,
    *,
    width: int = 6,
    height: int = 5,
    description: str = "",
    thresholds: list[Threshold] | None = None,
    value_names: tuple[tuple[str, str], ...] = (),
    min: float | None = None,
    max: float | None = None,
) -> Panel:
    """A small single-number panel, four to a row."""
    return Panel(
        title,
        queries,
        unit,
        kind="stat",
        description=description,
        width=width,
        height=height,
        thresholds=thresholds or [("green", None)],
        value_names=value_names,
        min=min,
        max=max,
    )


#: A 0/1 health gauge (``up``, ``specload_target_up``) as words.
UP_OR_DOWN = (("DOWN", "red"), ("UP", "green"))


@dataclass(frozen=True)
class Variable:
    """A query variable over a label's values (``label_values(...)``)."""

    name: str
    label: str
    query: str
    multi: bool = True
    include_all: bool = True  # "All" selects every value (the regex ``.+``)
    default: str | None = None  # preselected value; None with include_all: All


@dataclass(frozen=True)
class Board:
    address: BoardAddress
    folder: str  # the provisioning folder (live, benchmarks); also a tag
    description: str
    items: list[Item]
    # Besides the variables every board has (datasource, model, variant).
    extra_variables: list[Variable] = field(default_factory=list)
