"""``specload demo`` end to end, shortened: simulated baseline and ngram, sweeps, comparison."""

from __future__ import annotations

import re

import pytest

from specload.results import read_summary

pytestmark = [pytest.mark.integration, pytest.mark.slow]


def test_demo_shows_ngram_slower_and_where_results_are(specload_run, tmp_path):
    out = tmp_path / "demo"
    result = specload_run(["demo", "--out", str(out), "--concurrency", "1,4", "--warmup", "1s",
                           "--duration", "5s", "--max-tokens", "48", "--time-scale", "5"],
                          timeout=300)
    assert result.returncode == 0, result.stderr[-3000:]
    text = result.stdout
    assert "time scale 5x (ratios kept)" in text
    for level in (1, 4):
        line = next(ln for ln in text.splitlines()
                    if f"ngram vs baseline at concurrency {level}:" in ln)
        assert "slower" in line, line
        low = float(re.search(r"95% CI ([+-][0-9.]+)%", line).group(1))
        assert low > 0, line  # the interval excludes zero
        assert re.search(r"acceptance rate 0\.\d\d", line), line
    for variant in ("baseline", "ngram"):
        summary = read_summary(out / variant)
        assert summary["status"] == "complete" and summary["variant"] == variant
        assert (out / variant / "tpot.png").exists()
        assert f"{out / variant}/summary.md" in text
    assert (out / "comparison" / "comparison.md").read_text().startswith("# specload comparison")
    assert (out / "comparison" / "compare_tpot.png").exists()
    assert f"{out / 'comparison'}/comparison.md" in text
