"""``specload demo --quick`` end to end on the real local stack: simulated server, exporter,
Prometheus, Alertmanager; baseline sweep, the n-gram variant predicted from it before the
reload, reload into ngram watched in Prometheus, ngram sweep, comparison, the prediction beside
what was measured, alert state, and nothing left running afterwards."""

from __future__ import annotations

import argparse
import json
import math
import os
import re
import signal
import subprocess
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from simulator.variants import PRESETS
from specload import demo as demo_mod
from specload.results import read_summary
from specload.stack.procs import ProcessId, is_running
from tests.fixtures.processes import processes_mentioning
from tests.fixtures.sweep import ROOT, specload_cmd

pytestmark = [pytest.mark.integration, pytest.mark.slow]

LEVELS = (1, 4)  # --quick's concurrencies


def assert_nothing_running(out: Path, facts: dict[str, Any]) -> None:
    parts = facts["stack"]["parts"]
    assert set(parts) == {"baseline", "exporter", "prometheus", "alertmanager"}
    for name, part in parts.items():
        assert not is_running(ProcessId(part["pid"], part["start_ticks"])), name
    assert processes_mentioning(str(out)) == []
    assert not (out / "stack" / "stack.json").exists()


@dataclass(frozen=True)
class Demo:
    out: Path
    result: subprocess.CompletedProcess[str]
    facts: dict[str, Any]

    @property
    def text(self) -> str:
        return self.result.stdout

    @property
    def lines(self) -> list[str]:
        return self.text.splitlines()


@pytest.fixture(scope="module")
def demo(tmp_path_factory: pytest.TempPathFactory) -> Demo:
    """One ``specload demo --quick`` for every assertion on its story."""
    out = tmp_path_factory.mktemp("demo") / "demo"
    result = subprocess.run(
        specload_cmd("demo", "--quick", "--out", str(out)),
        check=False,
        capture_output=True,
        text=True,
        timeout=240,
        cwd=ROOT,
        env={**os.environ, "PYTHONUNBUFFERED": "1"},
    )
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    return Demo(out, result, json.loads((out / "demo.json").read_text()))


def medians(results_dir: Path) -> dict[int, float]:
    """The sweep's own median TPOT per concurrency (summary.json): the truth."""
    return {lv["concurrency"]: lv["median_tpot_ms"] for lv in read_summary(results_dir)["levels"]}


def line_index(lines: list[str], pattern: str) -> int:
    return next(i for i, ln in enumerate(lines) if re.search(pattern, ln))


def test_demo_tells_the_story_and_leaves_nothing_running(demo: Demo) -> None:
    out, text, facts = demo.out, demo.text, demo.facts
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
    for level in LEVELS:
        line = next(
            ln for ln in text.splitlines() if f"ngram vs baseline at concurrency {level}:" in ln
        )
        assert "slower" in line, line
        ci = re.search(r"95% CI ([+-][0-9.]+)%", line)
        assert ci, line
        low = float(ci.group(1))
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
    assert f"{out / 'prediction'}/prediction.md, prediction.json, prediction.png" in text
    for name in ("prediction.md", "prediction.json", "prediction.png"):
        assert (out / "prediction" / name).exists(), name

    assert facts["stack_down"] is True
    assert_nothing_running(out, facts)


def test_demo_predicts_the_ngram_variant_before_the_reload(demo: Demo) -> None:
    out, lines, facts = demo.out, demo.lines, demo.facts
    preset = PRESETS["ngram"]
    k, lo, hi = preset.num_speculative_tokens, preset.prompt_lookup_min, preset.prompt_lookup_max
    # The prediction step runs after the baseline sweep and before the reload, in the output
    # and in the order the facts were learnt.
    baseline_at = line_index(lines, r"^== 2\. baseline sweep")
    predict_at = line_index(
        lines,
        rf"^== 3\. specload predict {re.escape(str(out / 'baseline'))} --method ngram "
        rf"--num-speculative-tokens {k} --prompt-lookup-min {lo} --prompt-lookup-max {hi}:",
    )
    decision_at = line_index(lines, rf"^   n-gram k={k} predicted .*: not worth a 30-minute reload")
    reload_at = line_index(lines, r"^== 4\. specload stack reload baseline --as ngram")
    assert baseline_at < predict_at < decision_at < reload_at, demo.text
    order = list(facts)
    assert order.index("baseline") < order.index("prediction") < order.index("reload"), order

    pred = facts["prediction"]
    assert pred["ok"], pred
    assert (pred["num_speculative_tokens"], pred["prompt_lookup_min"]) == (k, lo)
    assert pred["prompt_lookup_max"] == hi
    # Against the baseline sweep's own medians, every level the demo swept.
    baseline = medians(out / "baseline")
    assert [lv["concurrency"] for lv in pred["levels"]] == list(LEVELS)
    for lv in pred["levels"]:
        c = lv["concurrency"]
        assert lv["baseline_median_tpot_ms"] == pytest.approx(baseline[c], rel=1e-9), lv
        assert math.isfinite(lv["predicted_median_tpot_ms"]) and lv["predicted_median_tpot_ms"] > 0
        assert lv["speedup"] == pytest.approx(
            lv["baseline_median_tpot_ms"] / lv["predicted_median_tpot_ms"]
        )
        # ngram on the simulator is slower (the comparison measures it): so is the forecast.
        assert lv["verdict"] == "slower", lv
        printed = lines[line_index(lines, rf"^   n-gram k={k} at concurrency {c}: predicted")]
        assert f"TPOT {lv['predicted_median_tpot_ms']:.2f} ms" in printed, printed
        assert f"vs {baseline[c]:.2f} ms measured baseline" in printed, printed
    assert pred["worth_reload"] is False
    assert pred["decision"] == "not worth a 30-minute reload"


def test_demo_shows_predicted_against_measured_after_the_ngram_sweep(demo: Demo) -> None:
    out, lines, facts = demo.out, demo.lines, demo.facts
    versus = facts["predicted_vs_measured"]
    assert versus["ok"], versus
    assert line_index(lines, r"^== 5\. ngram sweep") < line_index(
        lines, r"^   predicted \(stage 3, from the baseline alone\) against measured"
    )
    measured = medians(out / "ngram")
    predicted = {
        lv["concurrency"]: lv["predicted_median_tpot_ms"] for lv in facts["prediction"]["levels"]
    }
    assert [row["concurrency"] for row in versus["levels"]] == list(LEVELS)
    for row in versus["levels"]:
        c = row["concurrency"]
        # the same forecast as before the reload, beside the ngram sweep's own median
        assert row["predicted_median_tpot_ms"] == pytest.approx(predicted[c], rel=1e-9), row
        assert row["measured_median_tpot_ms"] == pytest.approx(measured[c], rel=1e-9), row
        assert row["error_ratio"] == pytest.approx(predicted[c] / measured[c] - 1), row
        assert (
            f"   c{c}: predicted {predicted[c]:.2f} ms, measured {measured[c]:.2f} ms "
            f"({100 * (predicted[c] / measured[c] - 1):+.1f}%"
            in lines[line_index(lines, rf"^   c{c}: predicted")]
        )
    # The server's speculative-decoding counters, summed over the ngram sweep's level windows.
    server = [lv["server"] for lv in read_summary(out / "ngram")["levels"]]
    for name, counter in (
        ("drafts", "spec_decode_num_drafts"),
        ("draft_tokens", "spec_decode_num_draft_tokens"),
        ("accepted_tokens", "spec_decode_num_accepted_tokens"),
    ):
        total = versus["totals"][name]
        assert total["measured"] == pytest.approx(sum(s[counter] for s in server)), name
        assert total["predicted"] > 0, name
    assert "speculative-decoding counters (predicted over the baseline's requests" in demo.text


def test_demo_says_where_the_prediction_is_extrapolated(demo: Demo) -> None:
    """The forecast made before the reload names the levels whose steps the baseline did not
    measure (its accuracy against the simulator is tests/integration/test_predict_sim.py)."""
    levels = demo.facts["prediction"]["levels"]
    assert sorted(lv["concurrency"] for lv in levels) == list(LEVELS)
    # --quick measures c1 and c4 only: at k = 5 every level needs larger steps (6 and 24
    # tokens) than the baseline measured (4), and the demo says so at each
    assert all(lv["extrapolated"] for lv in levels)
    assert demo.text.count("     extrapolated: a step there holds up to ") == len(LEVELS)


def test_a_failed_prediction_is_one_line_and_the_demo_goes_on(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    (tmp_path / "baseline").mkdir()  # a baseline sweep that left no results
    ctx = demo_mod.DemoContext(argparse.Namespace(), tmp_path, tmp_path / "stack")
    ctx.results["baseline"] = tmp_path / "baseline"
    demo_mod.predict_variant(ctx)
    demo_mod.predicted_against_measured(ctx, tmp_path / "ngram")
    said = [ln for ln in capsys.readouterr().out.splitlines() if ln.startswith("   ")]
    assert len(said) == 3, said
    assert said[0].startswith("   no prediction: specload predict failed (exit 2): "), said
    assert said[0].endswith("; going on without it"), said
    assert said[2].startswith("   no comparison with the prediction: specload predict failed")
    facts = json.loads((tmp_path / "demo.json").read_text())
    assert facts["prediction"]["ok"] is False and facts["predicted_vs_measured"]["ok"] is False


def test_demo_stopped_mid_sweep_stops_the_stack(
    specload_popen: Callable[[list[str]], subprocess.Popen[str]], tmp_path: Path
) -> None:
    out = tmp_path / "demo"
    proc = specload_popen(["demo", "--quick", "--out", str(out), "--duration", "30s"])
    assert proc.stdout is not None and proc.stderr is not None
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
