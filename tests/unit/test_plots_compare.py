"""Comparison plots from result directories with known truth: ticks at the levels, n per
variant, each variant's bootstrap interval as its band (of the right width, absent below
min_n), the truncation and time-scale notes per variant, no overlapping text."""

from __future__ import annotations

import math
from pathlib import Path

import pytest
from matplotlib.axes import Axes
from matplotlib.collections import PolyCollection
from matplotlib.figure import Figure

from specload.compare.model import Run, check_runs, load_run
from specload.compare.plots import comparison_figures, write_comparison_plots
from tests.fixtures.figures import all_text, n_texts, outside, overlapping, panels, rings
from tests.fixtures.results import make_run

pytestmark = pytest.mark.unit

LEVELS = (1, 3, 6)


def runs(tmp_path: Path, **b_options: object) -> list[Run]:
    a = make_run(tmp_path / "a", "baseline", 13.6, seed=1, levels=LEVELS, n=200)
    options = {"n": 240, "seed": 2, "levels": LEVELS, **b_options}
    b = make_run(tmp_path / "b", "eagle3", 10.0, **options)  # type: ignore[arg-type]
    out = [load_run(a), load_run(b)]
    check_runs(out)
    return out


def figures(runs: list[Run], **kw: object) -> dict[str, Figure]:
    return dict(comparison_figures(runs, n_boot=400, **kw))  # type: ignore[arg-type]


def bands(ax: Axes) -> list[dict[float, tuple[float, float]]]:
    """Per band (one per variant with one): x -> (low, high)."""
    out = []
    for coll in ax.collections:
        if not isinstance(coll, PolyCollection):
            continue
        (path,) = coll.get_paths()
        by_x: dict[float, list[float]] = {}
        for x, y in path.vertices:
            by_x.setdefault(round(float(x), 9), []).append(float(y))
        out.append({x: (min(ys), max(ys)) for x, ys in by_x.items()})
    return out


def medians(run: Run) -> dict[float, float]:
    return {
        float(lv.concurrency or 0): lv.figures.median_tpot_ms or 0.0 for lv in run.result.levels
    }


def test_ticks_are_the_levels_and_n_is_per_variant(tmp_path: Path) -> None:
    both = runs(tmp_path)
    for name, fig in figures(both).items():
        fig.canvas.draw()
        for title, ax in panels(fig).items():
            assert list(ax.get_xticks()) == [1.0, 3.0, 6.0], (name, title)
            assert [t.get_text() for t in ax.get_xticklabels()] == ["1", "3", "6"]
        # make_records alternates two categories: 100/100 of 200, 120/120 of 240
        assert n_texts(panels(fig)["all"]) == {x: ["200", "240"] for x in (1.0, 3.0, 6.0)}
        assert n_texts(panels(fig)["math"]) == {x: ["100", "120"] for x in (1.0, 3.0, 6.0)}
        assert overlapping(fig) == [] and outside(fig) == [], name


def test_lines_are_each_runs_median_and_bands_contain_them(tmp_path: Path) -> None:
    both = runs(tmp_path)
    ax = panels(figures(both)["compare_tpot.png"])["all"]
    lines = ax.get_lines()
    assert [line.get_color() for line in lines] == ["C0", "C1"]
    for run, line, band in zip(both, lines, bands(ax), strict=True):
        truth = medians(run)
        assert dict(zip(line.get_xdata(), line.get_ydata(), strict=True)) == pytest.approx(truth)
        for x, (low, high) in band.items():
            assert low < truth[x] < high


def test_the_band_is_the_medians_sampling_interval(tmp_path: Path) -> None:
    """TPOT ~ N(mu, (0.08 mu)^2), independent requests: the 95% interval of the median is
    about 2 * 1.96 * 1.2533 * sigma / sqrt(n) wide; four times the requests, half as wide."""
    a = make_run(tmp_path / "a", "small", 20.0, seed=3, levels=(1,), n=100)
    b = make_run(tmp_path / "b", "large", 20.0, seed=4, levels=(1,), n=1600)
    both = [load_run(a), load_run(b)]
    check_runs(both)
    ax = panels(figures(both)["compare_tpot.png"])["all"]
    widths = []
    for band, n in zip(bands(ax), (100, 1600), strict=True):
        ((low, high),) = band.values()
        sigma = 0.08 * 20.0 * 1.02  # make_run: 2% slower per user
        expected = 2 * 1.96 * 1.2533 * sigma / math.sqrt(n)
        assert 0.5 * expected < high - low < 2.0 * expected, (n, high - low, expected)
        widths.append(high - low)
    assert 2.0 < widths[0] / widths[1] < 8.0


def test_no_band_below_min_n(tmp_path: Path) -> None:
    both = runs(tmp_path, n=8)
    fig = figures(both, min_n=10)["compare_tpot.png"]
    ax = panels(fig)["all"]
    assert len(bands(ax)) == 1  # the reference's only: eagle3 has 8 requests per level
    assert n_texts(ax)[3.0] == ["200", "8"]
    assert "none below n=10" in all_text(fig)


def test_truncation_and_time_scales_are_noted_per_variant(tmp_path: Path) -> None:
    a = make_run(tmp_path / "a", "baseline", 13.6, seed=1, levels=LEVELS, n=200)
    b = make_run(
        tmp_path / "b",
        "eagle3",
        10.0,
        seed=2,
        levels=LEVELS,
        n=200,
        truncated=0.1,
        server_time_scale=5.0,
    )
    both = [load_run(a), load_run(b)]
    check_runs(both)
    figs = figures(both)
    for name, fig in figs.items():
        text = all_text(fig)
        assert "eagle3: requests that hit max_tokens while reasoning" in text, name
        assert "c1 20 of 200, c3 20 of 200, c6 20 of 200" in text
        assert "baseline: requests that hit" not in text
        assert "simulator time scale differs (baseline none (not the simulator), eagle3 5)" in text
        assert overlapping(fig) == [] and outside(fig) == [], name
    ax = panels(figs["compare_tpot.png"])["all"]
    ringed = {x for x, _ in rings(ax)}
    assert ringed == {1.0, 3.0, 6.0}
    assert sorted(y for _, y in rings(ax)) == pytest.approx(sorted(medians(both[1]).values()))


def test_written_as_compare_pngs(tmp_path: Path) -> None:
    out = tmp_path / "cmp"
    out.mkdir()
    paths = write_comparison_plots(runs(tmp_path), out, n_boot=200)
    assert [p.name for p in paths] == ["compare_tpot.png", "compare_throughput.png"]
    assert all(p.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" for p in paths)
