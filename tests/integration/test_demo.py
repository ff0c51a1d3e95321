"""``specload demo --quick`` end to end on the real local stack: simulated server, exporter,
Prometheus, Alertmanager; baseline sweep, reload into ngram watched in Prometheus, ngram
sweep, comparison, alert state, and nothing left running afterwards."""

from __future__ import annotations

import json
import re
import signal
import subprocess
from pathlib import Path

import pytest

from specload.results import read_summary
from specload.stack.procs import ProcessId, is_running
from tests.fixtures.processes import processes_mentioning

pytestmark = [pytest.mark.integration, pytest.mark.slow]


def assert_nothing_running(out: Path, facts: dict) -> None:
    parts = facts["stack"]["parts"]
    assert set(parts) == {"baseline", "exporter", "prometheus", "alertmanager"}
    for name, part in parts.items():
        assert not is_running(ProcessId(part["pid"], part["start_ticks"])), name
    assert processes_mentioning(str(out)) == []
    assert not (out / "stack" / "stack.json").exists()


def test_demo_tells_the_story_and_leaves_nothing_running(specload_run, tmp_path):
    out = tmp_path / "demo"
    result = specload_run(["demo", "--quick", "--out", str(out)], timeout=240)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    text = result.stdout
    facts = json.loads((out / "demo.json").read_text())
    assert "time scale 5x, ratios kept" in text

    # Baseline: exported, served by the exporter, and Prometheus answered with it per level.
    assert facts["baseline"]["in_prometheus"] == 2
    assert re.search(
        r"Prometheus has it: baseline median TPOT [0-9.]+ ms at concurrency 1, "
        r"[0-9.]+ ms at concurrency 4",
        text,
    )

    # Reload watched live in Prometheus: loading (with elapsed time), then ready again.
    watch = [ln for ln in text.splitlines() if "Prometheus: specload_target_state" in ln]
    loading = [ln for ln in watch if "specload_target_state loading, reload elapsed" in ln]
    assert loading, text
    assert "specload_target_state ready" in watch[-1]
    reload = facts["reload"]
    assert reload["counted"] and reload["load_time_s"] == 4.0
    # The exporter's duration is within about one poll interval (0.5 s) of the truth.
    assert abs(reload["recorded_s"] - reload["true_s"]) < 1.5, reload
    assert abs(reload["recorded_s"] - 4.0) < 1.5, reload

    # ngram slower than baseline at every level, intervals excluding zero.
    for level in (1, 4):
        line = next(
            ln for ln in text.splitlines() if f"ngram vs baseline at concurrency {level}:" in ln
        )
        assert "slower" in line, line
        low = float(re.search(r"95% CI ([+-][0-9.]+)%", line).group(1))
        assert low > 0, line
    # Acceptance rate: the sweep's view and Prometheus' agree (the simulator's ngram ~0.08).
    comp = facts["comparison"]
    assert 0.02 < comp["acceptance_client"] < 0.3
    assert abs(comp["acceptance_prometheus"] - comp["acceptance_client"]) < 0.03, comp

    # Alert state from Prometheus and Alertmanager; the regression ratio behind the TPOT alert.
    alerts = facts["alerts"]
    names = {n for group in alerts["rules"].values() for n in group}
    assert {"SpecloadTPOTRegression", "SpecloadReloadTooLong"} <= names
    assert all(row["ratio"] > 1.10 for row in alerts["tpot_ratio_per_level"]), alerts
    assert len(alerts["tpot_ratio_per_level"]) == 2
    assert "SpecloadTPOTRegression is inactive" in text  # too soon after the reload

    # Results where the demo says they are.
    for variant in ("baseline", "ngram"):
        summary = read_summary(out / variant)
        assert summary["status"] == "complete" and summary["variant"] == variant
        # The demo's budget ends most requests inside reasoning: the truncation guard says so.
        for level in summary["levels"]:
            assert "reasoning_truncated" in level["flags"], level["name"]
        assert (out / variant / "tpot.png").exists()
        assert f"{out / variant}/summary.md" in text
    assert "completed requests ended inside reasoning at max_tokens 48" in text
    assert (out / "baseline" / "baseline.json").exists()
    assert (out / "comparison" / "comparison.md").read_text().startswith("# specload comparison")
    assert f"{out / 'comparison'}/comparison.md" in text

    assert facts["stack_down"] is True
    assert_nothing_running(out, facts)


def test_demo_stopped_mid_sweep_stops_the_stack(specload_popen, tmp_path):
    out = tmp_path / "demo"
    proc = specload_popen(["demo", "--quick", "--out", str(out), "--duration", "30s"])
    assert proc.stdout is not None
    lines = []
    for line in proc.stdout:
        lines.append(line)
        if line.startswith("level 1/2 c1 measure"):
            break
    else:
        pytest.fail("".join(lines) + proc.stderr.read())
    proc.send_signal(signal.SIGTERM)  # to the demo only: it passes the stop on to the sweep
    try:
        rest, err = proc.communicate(timeout=60)
    except subprocess.TimeoutExpired:
        proc.kill()
        raise
    assert proc.returncode == 130, rest + err
    assert "demo interrupted: stopping the stack" in rest
    facts = json.loads((out / "demo.json").read_text())
    assert facts["stack_down"] is True
    assert read_summary(out / "baseline")["status"] == "interrupted"  # measured data kept
    assert_nothing_running(out, facts)
