"""``specload baseline export``: the file, and the warning on a truncated baseline."""

from __future__ import annotations

import orjson
import pytest

from specload.cli import main
from specload.compare.baseline import FORMAT, export_warnings, load_baseline, truncated_levels
from tests.fixtures.results import make_run

pytestmark = pytest.mark.unit


def test_baseline_export(tmp_path, capsys):
    a = make_run(tmp_path / "a", "baseline", 13.6, levels=(1, 4))
    assert main(["baseline", "export", str(a)]) == 0
    assert capsys.readouterr().err == ""  # nothing to warn about
    data = load_baseline(a / "baseline.json")
    assert data["format"] == FORMAT and data["variant"] == "baseline" and data["model"] == "m"
    summary = orjson.loads((a / "summary.json").read_bytes())
    entries = {(e["concurrency"], e["category"]): e for e in data["entries"]}
    assert set(entries) == {(c, k) for c in (1, 4) for k in ("all", "math", "coding")}
    lvl = summary["levels"][1]
    assert entries[(4, "all")]["tpot_median_seconds"] == pytest.approx(lvl["median_tpot_ms"] / 1000)
    assert entries[(4, "all")]["requests"] == 300
    assert entries[(4, "math")]["tpot_p90_seconds"] == pytest.approx(
        lvl["categories"]["math"]["p90_tpot_ms"] / 1000
    )
    assert main(["baseline", "export", str(a), "--out", str(tmp_path / "x" / "b.json")]) == 2
    assert "does not exist" in capsys.readouterr().err


def test_mostly_truncated_baseline_warns_in_one_line(tmp_path, capsys):
    a = make_run(tmp_path / "a", "baseline", 13.6, levels=(1, 4, 16), truncated=0.75, n=40)
    summary = orjson.loads((a / "summary.json").read_bytes())
    summary["levels"][2]["reasoning_truncated_ratio"] = 0.1  # c16 got its answers
    (a / "summary.json").write_bytes(orjson.dumps(summary))
    assert truncated_levels(summary) == [("c1", 0.75), ("c4", 0.75)]
    assert main(["baseline", "export", str(a)]) == 0  # a warning, not an error
    captured = capsys.readouterr()
    lines = captured.err.strip().splitlines()
    assert len(lines) == 1, captured.err
    assert lines[0].startswith("specload baseline export: warning: 2 of 3 levels")
    assert "c1 75%, c4 75%" in lines[0] and "inside reasoning at max_tokens" in lines[0]
    assert "written to" in captured.out
    assert load_baseline(a / "baseline.json")["entries"]


def test_truncation_counted_without_the_ratio_and_running_run_warned(tmp_path):
    summary = {
        "status": "running",
        "levels": [
            {"name": "c1", "complete": True, "completed": 10, "reasoning_truncated": 6},
            {"name": "c4", "complete": False, "completed": 10, "reasoning_truncated": 9},
        ],
    }
    warnings = export_warnings(summary, "results/x")
    assert len(warnings) == 2
    assert "status running" in warnings[0] and "specload results repair results/x" in warnings[0]
    assert warnings[1].startswith("1 of 1 levels of results/x truncated (c1 60%")
