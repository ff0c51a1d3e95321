"""A run's plots, read from the matplotlib figures the writer saves: x ticks at the measured
levels (and only there), n per level, the p50-p90 TPOT band, truncation ringed and named,
the simulator's time scale noted, and no two texts overlapping once drawn."""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

import pytest
from matplotlib.figure import Figure

from specload.results.plots import run_figures, summary_caveats, write_plots
from tests.fixtures.figures import (
    all_text,
    band_vertices,
    n_texts,
    outside,
    overlapping,
    panels,
    rings,
)

pytestmark = pytest.mark.unit


# -- synthetic summaries ---------------------------------------------------------------------


def stats(median: float, p90: float, tok_s: float, n: int, cut: int = 0) -> dict[str, Any]:
    return {
        "completed": n,
        "median_tpot_ms": median,
        "p90_tpot_ms": p90,
        "output_throughput": tok_s,
        "reasoning_truncated": cut,
        "reasoning_truncated_ratio": cut / n if n else None,
    }


def summary(
    loads: Sequence[float],
    *,
    open_loop: bool = False,
    n: Iterable[int] | None = None,
    cut: Mapping[float, int] | None = None,
    categories: Sequence[str] = ("coding", "math"),
    variant: str = "baseline",
    **top: Any,
) -> dict[str, Any]:
    """A summary with known figures: at load x, median TPOT 10 + x ms, p90 13 + 1.5 x,
    tok/s 100 x; n per level from ``n`` (default 100 + x), split 60/40 over the categories;
    ``cut[x]`` requests of the level truncated, all in the first category."""
    counts = list(n) if n is not None else [100 + int(x) for x in loads]
    levels = []
    for x, count in zip(loads, counts, strict=True):
        truncated = (cut or {}).get(x, 0)
        cats = {}
        shares = (
            [0.6, 0.4] if len(categories) == 2 else [1 / max(len(categories), 1)] * len(categories)
        )
        for k, (cat, share) in enumerate(zip(categories, shares, strict=True)):
            cats[cat] = stats(
                10 + x + k,
                13 + 1.5 * x + k,
                100 * x * share,
                round(count * share),
                truncated if k == 0 else 0,
            )
        load = (
            {"concurrency": None, "request_rate": x, "name": f"r{x:g}"}
            if open_loop
            else {"concurrency": int(x), "request_rate": None, "name": f"c{int(x)}"}
        )
        levels.append(
            {
                **load,
                "complete": True,
                **stats(10 + x, 13 + 1.5 * x, 100 * x, count, truncated),
                "categories": cats,
            }
        )
    return {
        "variant": variant,
        "mode": "open" if open_loop else "closed",
        "status": "complete",
        "levels": levels,
        **top,
    }


def figures(*summaries: Mapping[str, Any]) -> dict[str, Figure]:
    return dict(run_figures(list(summaries)))


# -- ticks -----------------------------------------------------------------------------------

LEVELS = (1, 3, 12, 48)  # not powers of two: a log2 locator would tick 1, 2, 4, 8, 16, 32


def test_x_ticks_are_exactly_the_measured_concurrencies() -> None:
    for name, fig in figures(summary(LEVELS)).items():
        fig.canvas.draw()
        assert set(panels(fig)) == {"all", "coding", "math"}, name
        for title, ax in panels(fig).items():
            assert ax.get_xscale() == "log", (name, title)
            assert list(ax.get_xticks()) == [1.0, 3.0, 12.0, 48.0], (name, title)
            assert [t.get_text() for t in ax.get_xticklabels()] == ["1", "3", "12", "48"]
            assert len(ax.xaxis.get_minorticklocs()) == 0, (name, title)
            lo, hi = ax.get_xlim()
            assert lo < 1 and hi > 48  # every level inside the axes


def test_x_ticks_of_an_open_loop_run_are_its_rates() -> None:
    fig = figures(summary((0.5, 1.5, 4.0), open_loop=True))["tpot.png"]
    fig.canvas.draw()
    ax = panels(fig)["all"]
    assert ax.get_xscale() == "linear"
    assert list(ax.get_xticks()) == [0.5, 1.5, 4.0]
    assert [t.get_text() for t in ax.get_xticklabels()] == ["0.5", "1.5", "4"]
    assert ax.get_xlabel() == "request rate (1/s)"


# -- n, band, line ---------------------------------------------------------------------------


def test_n_per_level_is_written_at_each_level_of_each_panel() -> None:
    fig = figures(summary(LEVELS, n=[200, 150, 90, 31]))["tpot.png"]
    found = {title: n_texts(ax) for title, ax in panels(fig).items()}
    assert found["all"] == {1.0: ["200"], 3.0: ["150"], 12.0: ["90"], 48.0: ["31"]}
    assert found["coding"] == {1.0: ["120"], 3.0: ["90"], 12.0: ["54"], 48.0: ["19"]}
    assert found["math"] == {1.0: ["80"], 3.0: ["60"], 12.0: ["36"], 48.0: ["12"]}
    assert "n, completed requests" in all_text(fig)


def test_tpot_line_is_the_median_and_its_band_p50_to_p90() -> None:
    fig = figures(summary(LEVELS))["tpot.png"]
    ax = panels(fig)["all"]
    (line,) = ax.get_lines()
    assert list(line.get_xdata()) == [1, 3, 12, 48]
    assert list(line.get_ydata()) == [11, 13, 22, 58]  # 10 + x
    corners = band_vertices(ax)
    for x in LEVELS:
        assert (x, 10 + x) in corners and (x, 13 + 1.5 * x) in corners, x
    assert "p50 to p90" in all_text(fig)


def test_throughput_has_no_band_the_summary_has_no_spread_for_it() -> None:
    fig = figures(summary(LEVELS))["throughput.png"]
    ax = panels(fig)["all"]
    assert list(ax.get_lines()[0].get_ydata()) == [100, 300, 1200, 4800]
    assert band_vertices(ax) == set()
    assert "p90" not in all_text(fig)


def test_the_n_rows_sit_below_the_data() -> None:
    fig = figures(summary(LEVELS))["tpot.png"]
    fig.canvas.draw()
    renderer = fig.canvas.get_renderer()  # type: ignore[attr-defined]
    ax = panels(fig)["all"]
    lowest = ax.transData.transform((1.0, 11.0))[1]  # the lowest marker (and band) centre
    assert len(ax.texts) == 4
    for text in ax.texts:
        assert text.get_window_extent(renderer).y1 < lowest - 5


# -- caveats ---------------------------------------------------------------------------------


def test_reasoning_truncation_is_ringed_and_counted() -> None:
    figs = figures(summary(LEVELS, n=[200, 150, 90, 31], cut={12: 9, 48: 30}))
    for name, fig in figs.items():
        text = all_text(fig)
        assert "hit max_tokens while reasoning" in text, name
        assert "c12 9 of 90, c48 30 of 31" in text, name
        assert "c1 " not in text and "c3 " not in text
    ax = panels(figs["tpot.png"])["all"]
    assert rings(ax) == [(12.0, 22.0), (48.0, 58.0)]  # at the medians of those levels
    assert rings(panels(figs["tpot.png"])["coding"]) == [(12.0, 22.0), (48.0, 58.0)]
    assert rings(panels(figs["tpot.png"])["math"]) == []  # no truncation in that category
    assert rings(panels(figs["throughput.png"])["all"]) == [(12.0, 1200.0), (48.0, 4800.0)]


def test_no_truncation_no_ring_no_note() -> None:
    for fig in figures(summary(LEVELS)).values():
        assert "max_tokens" not in all_text(fig)
        assert all(rings(ax) == [] for ax in fig.axes)


def test_the_simulators_time_scale_is_noted() -> None:
    for fig in figures(summary(LEVELS, server_time_scale=5.0)).values():
        text = all_text(fig)
        assert "time scale 5" in text
        assert "tok/s 5x" in text
    one = figures(summary(LEVELS, server_time_scale=1))["tpot.png"]
    assert "time scale 1: the modelled deployment's own clock" in all_text(one)
    for fig in figures(summary(LEVELS, server_time_scale=None)).values():
        assert "simulator" not in all_text(fig)
        assert "time scale" not in all_text(fig)


# -- layout ----------------------------------------------------------------------------------

WIDE = (1, 2, 4, 8, 16, 32, 64, 128, 256)


@pytest.mark.parametrize(
    "case",
    [
        {"loads": LEVELS},
        {"loads": WIDE, "n": [9999] * 9, "cut": {x: 7 for x in WIDE}, "server_time_scale": 20.0},
        {"loads": WIDE, "categories": ("coding",), "cut": {1: 3}, "server_time_scale": 2.5},
        {"loads": (0.5, 1.0, 2.0, 3.5, 5.0), "open_loop": True},
        {"loads": (4,), "categories": ("a", "b", "c", "d", "e")},
        {"loads": WIDE, "categories": (), "n": [9999] * 9, "cut": {256: 9000}},
    ],
    ids=["four", "wide-with-notes", "one-category", "open-loop", "five-categories", "one-panel"],
)
def test_no_text_overlaps_another_or_leaves_the_figure(case: dict[str, Any]) -> None:
    loads = case.pop("loads")
    for name, fig in figures(summary(loads, **case)).items():
        assert overlapping(fig) == [], name
        assert outside(fig) == [], name


def test_the_overlap_check_sees_an_overlap() -> None:
    """The check itself: a text put on a panel's title is found."""
    fig = figures(summary(LEVELS))["tpot.png"]
    ax = panels(fig)["all"]
    ax.text(0.5, 1.02, "on the title", transform=ax.transAxes, ha="center")
    assert ("all", "on the title") in overlapping(fig) or (
        "on the title",
        "all",
    ) in overlapping(fig)


# -- files -----------------------------------------------------------------------------------


def test_write_plots_saves_the_figures_as_png(tmp_path: Path) -> None:
    paths = write_plots([summary(LEVELS)], tmp_path)
    assert [p.name for p in paths] == ["tpot.png", "throughput.png"]
    for p in paths:
        assert p.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["throughput.png", "tpot.png"]


def test_runs_on_one_time_scale_get_one_note_and_truncation_per_run() -> None:
    a = summary(LEVELS, variant="baseline", server_time_scale=5.0)
    b = summary(LEVELS, variant="ngram", server_time_scale=5.0, cut={3: 4})
    notes = summary_caveats([a, b], ["baseline", "ngram (dir b)"])
    assert notes == [
        "ngram (dir b): requests that hit max_tokens while reasoning (ringed): c3 4 of 103 "
        "completed; they measure reasoning cut at max_tokens, not answers",
        "simulator runs, time scale 5: step times divided by 5, so ms read 1/5 and tok/s 5x "
        "the modelled deployment's (ratios kept)",
    ]
    assert summary_caveats([summary(LEVELS), summary(LEVELS)]) == []
