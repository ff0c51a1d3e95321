"""compare on synthetic runs with known truth: verdicts, n per row, the minimum n."""

from __future__ import annotations

import random
import re

import orjson
import pytest

from specload.cli import main
from specload.compare.model import (
    ALL,
    FASTER,
    SAME,
    SLOWER,
    TOO_FEW,
    compare_runs,
    load_run,
)
from specload.compare.report import comparison_markdown
from specload.compare.stats import MIN_N, block_length, bootstrap_difference
from specload.errors import UsageError
from tests.fixtures.results import make_run

pytestmark = pytest.mark.unit


def test_slower_variant_with_ci_excluding_zero(tmp_path):
    a = make_run(tmp_path / "a", "baseline", 13.6, seed=1)
    b = make_run(tmp_path / "b", "ngram", 13.6 * 1.15, seed=2, acceptance=0.3)
    comp = compare_runs([load_run(a), load_run(b)], n_boot=500)
    assert comp.warnings == []
    for level in comp.levels:
        cell = level.cells[("all", "tpot")]
        diff = cell.diffs[1]
        assert cell.verdicts[1] == SLOWER
        assert cell.n == [300, 300]
        assert diff.ci_low > 0.08 and diff.ci_high < 0.22
        assert diff.ci_low <= diff.rel <= diff.ci_high
        assert level.acceptance == [None, 0.3]
        # same tokens in the same window: throughput equal
        assert level.cells[("all", "output_throughput")].verdicts[1] == SAME
        assert level.cells[("math", "tpot")].verdicts[1] == SLOWER
        assert level.cells[("math", "tpot")].n == [150, 150]
    text = comparison_markdown(comp)
    assert "ngram vs baseline at concurrency 1: median TPOT" in text
    assert "n 300/300" in text
    assert "slower" in text and "acceptance rate 0.30" in text
    assert "| n baseline | n ngram |" in text
    assert "## Warnings" not in text
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


def test_one_request_per_side_has_no_verdict_and_no_interval(tmp_path):
    a = make_run(tmp_path / "a", "baseline", 13.6, n=1, levels=(1,))
    b = make_run(tmp_path / "b", "ngram", 13.6 * 2, n=1, levels=(1,), seed=3)
    comp = compare_runs([load_run(a), load_run(b)], n_boot=200)
    cell = comp.levels[0].cells[(ALL, "tpot")]
    assert cell.n == [1, 1]
    assert cell.verdicts[1] == TOO_FEW
    assert cell.diffs[1].rel == pytest.approx(cell.values[1] / cell.values[0] - 1)
    assert cell.diffs[1].ci_low is None and not cell.diffs[1].excludes_zero
    for measure in ("ttft", "ttfct", "output_throughput"):
        assert comp.levels[0].cells[(ALL, measure)].verdicts[1] == TOO_FEW
    text = comparison_markdown(comp)
    row = next(line for line in text.splitlines() if line.startswith("| **all** | median TPOT"))
    assert row.split(" | ")[2:4] == ["1", "1"]  # n per side
    assert TOO_FEW in row and "%.." not in row.replace(" ", "")
    assert comp.regressions(0.0) == []  # no interval, never a regression


@pytest.mark.parametrize("n", [MIN_N - 1, MIN_N])
def test_minimum_n_boundary(tmp_path, n):
    a = make_run(tmp_path / "a", "baseline", 13.6, n=n, levels=(1,), spread=0.01)
    b = make_run(tmp_path / "b", "ngram", 13.6 * 1.5, n=n, levels=(1,), seed=3, spread=0.01)
    cell = compare_runs([load_run(a), load_run(b)], n_boot=300).levels[0].cells[(ALL, "tpot")]
    if n < MIN_N:
        assert cell.verdicts[1] == TOO_FEW and cell.diffs[1].ci_low is None
    else:
        assert cell.verdicts[1] == SLOWER and cell.diffs[1].ci_low > 0.3


def test_cli_min_n_option(tmp_path, capsys):
    a = make_run(tmp_path / "a", "baseline", 13.6, n=30, levels=(1,))
    b = make_run(tmp_path / "b", "ngram", 13.6 * 1.5, n=30, levels=(1,), seed=3)
    out = tmp_path / "cmp"
    assert (
        main(
            [
                "compare",
                str(a),
                str(b),
                "--out",
                str(out),
                "--no-plots",
                "--min-n",
                "40",
                "--bootstrap",
                "200",
            ]
        )
        == 0
    )
    assert TOO_FEW in (out / "comparison.md").read_text()
    assert "below 40 samples" in (out / "comparison.md").read_text()
    assert main(["compare", str(a), str(b), "--min-n", "1"]) == 2
    assert "--min-n" in capsys.readouterr().err


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


def test_json_output_has_warnings_first_and_n(tmp_path):
    a = make_run(tmp_path / "a", "baseline", 13.6, levels=(1,))
    b = make_run(
        tmp_path / "b", "ngram", 13.6 * 1.2, levels=(1,), seed=2, options={"max_tokens": 512}
    )
    out = tmp_path / "cmp"
    assert (
        main(
            [
                "compare",
                str(a),
                str(b),
                "--out",
                str(out),
                "--no-plots",
                "--json",
                "--bootstrap",
                "200",
            ]
        )
        == 0
    )
    data = orjson.loads((out / "comparison.json").read_bytes())
    assert data["format"] == "specload-comparison/1"
    assert next(iter(data)) == "format" and list(data)[1] == "warnings"
    assert any("max_tokens differs: baseline 256, ngram 512" in w for w in data["warnings"])
    row = next(
        r for r in data["levels"][0]["rows"] if r["category"] == "all" and r["measure"] == "tpot"
    )
    assert row["n"] == [300, 300] and row["verdicts"] == [SLOWER]
    diff = row["differences"][0]
    assert diff["ci_low"] <= diff["rel"] <= diff["ci_high"]
    md = (out / "comparison.md").read_text()
    assert md.index("## Warnings") < md.index("Reference:") < md.index("## Verdicts")
    assert re.search(r"^- max_tokens differs: baseline 256, ngram 512$", md, re.M)


def test_block_bootstrap_widens_the_interval_for_correlated_requests():
    rng = random.Random(3)
    # slow and fast stretches: requests that ran together share the server's state
    a = [v for k in range(40) for v in [10.0 + 3.0 * (k % 2) + rng.gauss(0, 0.1)] * 4]
    b = [v for k in range(40) for v in [13.0 - 3.0 * (k % 2) + rng.gauss(0, 0.1)] * 4]
    single = bootstrap_difference(a, b, n_boot=500)
    blocked = bootstrap_difference(
        a, b, n_boot=500, block_a=block_length(len(a), 4), block_b=block_length(len(b), 4)
    )
    assert blocked.ci_high - blocked.ci_low > single.ci_high - single.ci_low
    assert block_length(160, 4) == 5 and block_length(160, 16) == 16 and block_length(3, 8) == 3
