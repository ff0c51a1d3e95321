"""compare on synthetic runs with known truth; baseline export."""

from __future__ import annotations

import random

import orjson
import pytest

from specload.baseline import FORMAT, load_baseline
from specload.cli import main
from specload.compare.model import FASTER, SAME, SLOWER, compare_runs, load_run
from specload.compare.report import comparison_markdown
from specload.compare.stats import block_length, bootstrap_difference
from specload.errors import UsageError
from specload.results import ResultsWriter
from specload.results.aggregate import LevelAggregate, RecordView

pytestmark = pytest.mark.unit


def make_run(path, variant, tpot_ms, n=300, seed=1, levels=(1, 4), acceptance=None):
    rng = random.Random(seed)
    w = ResultsWriter(path)
    out_levels = []
    for c in levels:
        agg = LevelAggregate()
        for i in range(n):
            cat = ("math", "coding")[i % 2]
            tpot = rng.gauss(tpot_ms * (1 + 0.02 * c), tpot_ms * 0.08) / 1000.0
            rec = {"step": f"c{c}", "category": cat, "ok": True, "ttft_s": 0.1, "ttfct_s": 1.0,
                   "tpot_s": tpot, "e2e_s": 0.1 + 99 * tpot, "tokens_output": 100,
                   "tokens_reasoning": 80, "tokens_content": 20, "chunks": 100}
            w.append(rec)
            agg.add(RecordView(rec))
        level = {"name": f"c{c}", "concurrency": c, "complete": True, "outages": [],
                 "server": {} if acceptance is None
                 else {"spec_decode_acceptance_rate": acceptance},
                 **agg.result(60.0)}
        out_levels.append(level)
    w.write_summary({"variant": variant, "model": "m", "mode": "closed", "levels": out_levels})
    w.close()
    return path


def test_slower_variant_with_ci_excluding_zero(tmp_path):
    a = make_run(tmp_path / "a", "baseline", 13.6, seed=1)
    b = make_run(tmp_path / "b", "ngram", 13.6 * 1.15, seed=2, acceptance=0.3)
    comp = compare_runs([load_run(a), load_run(b)], n_boot=500)
    for level in comp.levels:
        cell = level.cells[("all", "tpot")]
        diff = cell.diffs[1]
        assert cell.verdicts[1] == SLOWER
        assert diff.ci_low > 0.08 and diff.ci_high < 0.22
        assert diff.ci_low < diff.rel < diff.ci_high
        assert level.acceptance == [None, 0.3]
        # fewer tokens per second at the same request count? throughput equal here (same tokens)
        assert level.cells[("all", "output_throughput")].verdicts[1] == SAME
        assert level.cells[("math", "tpot")].verdicts[1] == SLOWER
    text = comparison_markdown(comp)
    assert "ngram vs baseline at concurrency 1: median TPOT" in text
    assert "slower" in text and "acceptance rate 0.30" in text
    # the reverse direction is faster
    rev = compare_runs([load_run(b), load_run(a)], n_boot=500)
    assert rev.levels[0].cells[("all", "tpot")].verdicts[1] == FASTER


def test_same_variant_no_significant_difference(tmp_path):
    a = make_run(tmp_path / "a", "baseline", 13.6, seed=1)
    b = make_run(tmp_path / "b", "baseline-again", 13.6, seed=7)
    comp = compare_runs([load_run(a), load_run(b)], n_boot=500)
    for level in comp.levels:
        for measure in ("tpot", "ttft", "output_throughput"):
            assert level.cells[("all", measure)].verdicts[1] == SAME
        diff = level.cells[("all", "tpot")].diffs[1]
        assert diff.ci_low < 0 < diff.ci_high or abs(diff.rel) < 0.01


def test_cli_fail_on_regression(tmp_path, capsys):
    a = make_run(tmp_path / "a", "baseline", 13.6, seed=1)
    b = make_run(tmp_path / "b", "ngram", 13.6 * 1.15, seed=2)
    out = tmp_path / "cmp"
    args = ["compare", str(a), str(b), "--out", str(out), "--bootstrap", "300"]
    assert main([*args, "--fail-on-regression", "5"]) == 1
    assert "regression: ngram at concurrency 1" in capsys.readouterr().err
    assert main([*args, "--fail-on-regression", "30", "--no-plots"]) == 0
    assert (out / "comparison.md").read_text().startswith("# specload comparison")
    assert (out / "compare_tpot.png").stat().st_size > 1000


def test_cli_bad_input(tmp_path, capsys):
    a = make_run(tmp_path / "a", "baseline", 13.6, levels=(1,))
    assert main(["compare", str(a)]) == 2
    assert main(["compare", str(a), str(tmp_path / "nope")]) == 2
    assert "no such results directory" in capsys.readouterr().err
    c = make_run(tmp_path / "c", "other", 13.6, levels=(8,))
    with pytest.raises(UsageError, match="no level in common"):
        compare_runs([load_run(a), load_run(c)])


def test_baseline_export(tmp_path, capsys):
    a = make_run(tmp_path / "a", "baseline", 13.6, levels=(1, 4))
    assert main(["baseline", "export", str(a)]) == 0
    data = load_baseline(a / "baseline.json")
    assert data["format"] == FORMAT and data["variant"] == "baseline" and data["model"] == "m"
    summary = orjson.loads((a / "summary.json").read_bytes())
    entries = {(e["concurrency"], e["category"]): e for e in data["entries"]}
    assert set(entries) == {(c, k) for c in (1, 4) for k in ("all", "math", "coding")}
    lvl = summary["levels"][1]
    assert entries[(4, "all")]["tpot_median_seconds"] == pytest.approx(lvl["median_tpot_ms"] / 1000)
    assert entries[(4, "math")]["tpot_p90_seconds"] == pytest.approx(
        lvl["categories"]["math"]["p90_tpot_ms"] / 1000
    )
    assert main(["baseline", "export", str(a), "--out", str(tmp_path / "x" / "b.json")]) == 2
    assert "does not exist" in capsys.readouterr().err


def test_block_bootstrap_widens_the_interval_for_correlated_requests():
    rng = random.Random(3)
    # slow and fast stretches: requests that ran together share the server's state
    a = [v for k in range(40) for v in [10.0 + 3.0 * (k % 2) + rng.gauss(0, 0.1)] * 4]
    b = [v for k in range(40) for v in [13.0 - 3.0 * (k % 2) + rng.gauss(0, 0.1)] * 4]
    pa, pb = sorted(a)[len(a) // 2], sorted(b)[len(b) // 2]
    single = bootstrap_difference(a, b, point_a=pa, point_b=pb, n_boot=500)
    blocked = bootstrap_difference(a, b, point_a=pa, point_b=pb, n_boot=500,
                                   block_a=block_length(len(a), 4),
                                   block_b=block_length(len(b), 4))
    assert blocked.ci_high - blocked.ci_low > single.ci_high - single.ci_low
    assert block_length(160, 4) == 5 and block_length(160, 16) == 16 and block_length(3, 8) == 3
