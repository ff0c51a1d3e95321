"""The interval contains its estimate; one median per figure (summary.json = comparison.md).

Known truth: the estimate is the statistic on the run's own sample (for medians the rule
of :func:`specload.histogram.exact_quantile`), so it must equal summary.json's figure and
lie inside its percentile-bootstrap interval — over many datasets and resample seeds.
"""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import orjson
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from specload.cli import main
from specload.compare.model import ALL, MEASURES, Run, compare_runs, load_run
from specload.compare.stats import (
    block_length,
    bootstrap_difference,
    median,
    row_mean,
    row_median,
)
from specload.histogram import exact_quantile
from specload.results.report import summary_markdown
from tests.fixtures.results import OPTIONS, T0, level_entry, make_records, make_run

pytestmark = pytest.mark.unit


def _dataset(rng: np.random.Generator, kind: int, n: int) -> list[float]:
    if kind == 0:
        return list(rng.normal(10.0, rng.uniform(0.01, 2.0), n))
    if kind == 1:
        return list(rng.lognormal(0.0, rng.uniform(0.1, 1.5), n))
    if kind == 2:  # few distinct values: many ties
        return list(rng.integers(1, 6, n).astype(float))
    # bimodal: slow and fast stretches in blocks
    return [v for _ in range(-(-n // 8)) for v in [rng.choice([10.0, 13.0])] * 8][:n]


def test_interval_contains_estimate_over_200_datasets():
    rng = np.random.default_rng(2026)
    widened = 0
    for k in range(200):
        n_a, n_b = int(rng.integers(10, 300)), int(rng.integers(10, 300))
        a = _dataset(rng, k % 4, n_a)
        b = [v * rng.uniform(0.8, 1.3) for v in _dataset(rng, k % 4, n_b)]
        stat = row_mean if k % 5 == 4 else row_median
        diff = bootstrap_difference(
            a,
            b,
            stat=stat,
            n_boot=300,
            seed=k,
            block_a=block_length(n_a, int(rng.integers(1, 32))),
            block_b=block_length(n_b, 4),
        )
        assert diff is not None
        assert diff.ci_low <= diff.rel <= diff.ci_high, (k, diff)
        if stat is row_median:  # the estimate is the one rule's median
            assert diff.a == exact_quantile(sorted(a), 0.5)
            assert diff.b == exact_quantile(sorted(b), 0.5)
        widened += diff.widened
    assert widened <= 4  # extending to the estimate is the rare exception, not the rule


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    a=st.lists(st.floats(0.001, 1000.0), min_size=10, max_size=80),
    b=st.lists(st.sampled_from([1.0, 2.0, 2.5, 40.0]), min_size=10, max_size=80),
    seed=st.integers(0, 2**32 - 1),
    block=st.integers(1, 12),
)
def test_interval_contains_estimate_property(a, b, seed, block):
    for x, y in ((a, b), (b, a)):
        diff = bootstrap_difference(x, y, n_boot=200, seed=seed, block_a=block, block_b=block)
        assert diff is not None
        assert diff.ci_low <= diff.rel <= diff.ci_high
        assert diff.rel == pytest.approx(median(y) / median(x) - 1.0)


def test_median_is_exact_quantile_rule():
    rng = np.random.default_rng(1)
    for n in range(1, 60):
        values = list(rng.lognormal(0, 1, n))
        assert median(values) == exact_quantile(sorted(values), 0.5)
    matrix = rng.normal(size=(50, 31))
    want = np.quantile(matrix, 0.5, axis=1, method="lower")
    assert np.array_equal(row_median(matrix), want)


def _run(tmp: Path, name: str, tpot_ms: float, seed: int, spread: float, n: int) -> Run:
    recs = make_records("c4", n=n, tpot_ms=tpot_ms, start=T0, seed=seed, spread=spread)
    summary = {
        "variant": name,
        "status": "complete",
        "model": "m",
        "mode": "closed",
        "options": dict(OPTIONS),
        "levels": [level_entry("c4", recs, start=T0)],
    }
    return Run(tmp / name, summary, recs, name)


def test_every_compared_row_contains_its_estimate_and_summary_median(tmp_path):
    """End to end over 40 pairs of runs, tight ones included (an interval narrower than a
    sketch's 0.5% error caught medians read from a histogram)."""
    rng = np.random.default_rng(7)
    for k in range(40):
        spread = float(rng.choice([0.002, 0.01, 0.08]))
        n_a, n_b = int(rng.integers(20, 200)), int(rng.integers(20, 200))
        a = _run(tmp_path, "a", 13.6, 2 * k, spread, n_a)
        b = _run(tmp_path, "b", 13.6 * rng.uniform(0.9, 1.2), 2 * k + 1, spread, n_b)
        comp = compare_runs([a, b], n_boot=200, seed=k)
        level = comp.levels[0]
        for (cat, key), cell in level.cells.items():
            diff = cell.diffs[1]
            if diff is None or diff.ci_low is None:
                continue
            assert diff.ci_low <= diff.rel <= diff.ci_high, (k, cat, key, diff)
        for run, i in ((a, 0), (b, 1)):
            info = run.result.levels[0].figures
            for measure in MEASURES:
                if measure.summary_key:
                    want = info.figure(measure.summary_key)
                    assert level.cells[(ALL, measure.key)].values[i] == want
            assert level.cells[(ALL, "output_throughput")].values[i] == pytest.approx(
                info.output_throughput, rel=1e-9
            )
        assert not any("disagree" in w for w in comp.warnings)


def test_median_printed_in_comparison_md_equals_summary_json(tmp_path):
    a = make_run(tmp_path / "a", "baseline", 5.7, n=201, spread=0.01, seed=4)
    b = make_run(tmp_path / "b", "ngram", 6.5, n=199, spread=0.01, seed=5)
    out = tmp_path / "cmp"
    assert (
        main(["compare", str(a), str(b), "--out", str(out), "--no-plots", "--bootstrap", "200"])
        == 0
    )
    md = (out / "comparison.md").read_text()
    for path, col in ((a, 0), (b, 1)):
        summary = orjson.loads((path / "summary.json").read_bytes())
        for level in summary["levels"]:
            label = f"## concurrency {level['concurrency']}"
            section = md[md.index(label) :]
            row = next(
                line for line in section.splitlines() if line.startswith("| **all** | median TPOT")
            )
            cells = [c.strip() for c in row.strip("|").split("|")]
            printed = cells[4 + col]  # category, measure, n a, n b, then the values
            assert printed == f"{level['median_tpot_ms']:.2f}"
    # and summary.md (the same figure, the same format)
    summary = orjson.loads((a / "summary.json").read_bytes())
    text = summary_markdown(summary)
    for level in summary["levels"]:
        assert re.search(
            rf"\| {level['concurrency']} \| {level['completed']} \|.*"
            rf"\| {level['median_tpot_ms']:.2f} \|",
            text,
        )
    assert "disagree" not in md


def test_a_summary_that_disagrees_with_its_records_is_named(tmp_path):
    a = make_run(tmp_path / "a", "baseline", 13.6, levels=(1,))
    b = make_run(tmp_path / "b", "ngram", 13.6, levels=(1,), seed=3)
    path = b / "summary.json"
    summary = orjson.loads(path.read_bytes())
    summary["levels"][0]["median_tpot_ms"] *= 1.004  # a sketch's error, as before
    path.write_bytes(orjson.dumps(summary))
    comp = compare_runs([load_run(a), load_run(b)], n_boot=200)
    assert any(
        w.startswith("ngram c1: summary.json and requests.jsonl disagree (median TPOT")
        for w in comp.warnings
    )
