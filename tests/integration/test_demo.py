"""``specload demo --quick`` end to end on the real local stack: simulated server, exporter,
Prometheus on the demo profile of the rules, Alertmanager and the demo as its webhook
receiver; the baseline sweep over the reference's four prompt types at max_tokens 4096, the
fifth prompt and the truncation guard, the n-gram variant predicted before the reload, the
reload watched in Prometheus, the TPOT-regression alert under steady load from pending to the
webhook, the ngram sweep and comparison, the prediction beside what was measured, the
verdicts, and nothing left running afterwards. Facts are checked against their sources:
the sweeps' summaries, the Prometheus answers, the webhook's payloads."""

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
from specload.commands import demo as demo_mod
from specload.commands.demo.constants import AGAINST_MARGIN, AGAINST_MIN_REQUESTS
from specload.results import read_summary
from specload.stack.procs import ProcessId, is_running
from specload.stack.rules import DEMO, DEMO_TIME_SCALE, duration_s
from tests.fixtures.processes import processes_mentioning
from tests.fixtures.sweep import ROOT, specload_cmd

# serial: the share of requests Prometheus scraped (>= 90%) fell to 89% beside other tests
pytestmark = [pytest.mark.integration, pytest.mark.slow, pytest.mark.serial]

LEVELS = (1, 4)  # --quick's concurrencies
#: Alertmanager's group_wait in deploy/alertmanager/alertmanager.yml.
GROUP_WAIT_S = 30.0


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
        timeout=420,
        cwd=ROOT,
        env={**os.environ, "PYTHONUNBUFFERED": "1"},
    )
    assert result.returncode == 0, result.stdout[-4000:] + result.stderr[-3000:]
    return Demo(out, result, json.loads((out / "demo.json").read_text()))


def medians(results_dir: Path) -> dict[int, float]:
    """The sweep's own median TPOT per concurrency (summary.json): the truth."""
    return {lv["concurrency"]: lv["median_tpot_ms"] for lv in read_summary(results_dir)["levels"]}


def line_index(lines: list[str], pattern: str) -> int:
    return next(i for i, ln in enumerate(lines) if re.search(pattern, ln))


def test_demo_tells_the_story_and_leaves_nothing_running(demo: Demo) -> None:
    out, text, facts = demo.out, demo.text, demo.facts
    assert f"({DEMO_TIME_SCALE}x faster than the reference deployment" in text

    # Prometheus ran the demo profile of the rules (the demo asked it for the rule's `for:`).
    assert facts["stack"]["rules_profile"] == "demo"
    assert facts["stack"]["rule_files"] == [
        str(ROOT / "deploy" / "prometheus" / "demo" / "rules" / "*.rules.yml"),
        str(ROOT / "deploy" / "prometheus" / "demo" / "alerts" / "*.alerts.yml"),
    ]
    assert "Prometheus runs the demo profile (deploy/prometheus/demo: windows 20s" in text

    # Baseline: exported, served by the exporter, and Prometheus answered with it per level.
    assert facts["baseline"]["in_prometheus"] == 2
    assert re.search(
        r"Prometheus has it: baseline median TPOT [0-9.]+ ms \[[0-9.]+ ms\] at concurrency 1, "
        r"[0-9.]+ ms \[[0-9.]+ ms\] at concurrency 4",
        text,
    )
    # The client metrics are on: Prometheus scraped the sweep's requests as they finished
    # (all but those of the last scrape interval before the run exited)
    records = (out / "baseline" / "requests.jsonl").read_text().splitlines()
    seen = facts["baseline"]["client_requests_in_prometheus"]
    assert 0.9 * len(records) <= seen <= len(records), (seen, len(records))

    # Reload watched live in Prometheus: loading (with elapsed time), then ready again.
    watch = [ln for ln in text.splitlines() if "Prometheus: specload_target_state" in ln]
    assert [ln for ln in watch if "specload_target_state loading, reload elapsed" in ln], text
    assert "specload_target_state ready" in watch[-1]
    reload = facts["reload"]
    assert reload["counted"] and reload["load_time_s"] == 3.0
    # The exporter's duration is within about one poll interval of the truth.
    assert abs(reload["recorded_s"] - reload["true_s"]) < 1.5, reload
    assert abs(reload["recorded_s"] - 3.0) < 1.5, reload

    # ngram slower than baseline at every level, intervals excluding zero.
    for level in LEVELS:
        line = next(
            ln for ln in text.splitlines() if f"ngram vs baseline at concurrency {level}:" in ln
        )
        assert "slower" in line, line
        ci = re.search(r"95% CI ([+-][0-9.]+)%", line)
        assert ci and float(ci.group(1)) > 0, line
    # Acceptance rate: the sweep's view and Prometheus' agree.
    comp = facts["comparison"]
    assert 0.02 < comp["acceptance_client"] < 0.3
    assert abs(comp["acceptance_prometheus"] - comp["acceptance_client"]) < 0.03, comp

    # Results where the demo says they are.
    for variant in ("baseline", "ngram"):
        summary = read_summary(out / variant)
        assert summary["status"] == "complete" and summary["variant"] == variant
        assert (out / variant / "tpot.png").exists()
        assert f"{out / variant}/summary.md" in text
    assert (out / "baseline" / "baseline.json").exists()
    assert (out / "comparison" / "comparison.md").read_text().startswith("# specload comparison")
    assert f"{out / 'prediction'}/prediction.md, prediction.json, prediction.png" in text
    for name in ("prediction.md", "prediction.json", "prediction.png"):
        assert (out / "prediction" / name).exists(), name

    assert facts["stack_down"] is True
    assert_nothing_running(out, facts)


def test_most_requests_reach_their_answer_and_coding_is_slowest(demo: Demo) -> None:
    """The reference's budget (4096) and its four prompt types: answers are measured, and
    the types differ as on the reference deployment (coding 16.0 ms, explanation 12.6 ms)."""
    out, facts = demo.out, demo.facts
    for variant in ("baseline", "ngram"):
        summary = read_summary(out / variant)
        assert summary["options"]["max_tokens"] == 4096
        completed = sum(lv["completed"] for lv in summary["levels"])
        truncated = sum(lv["reasoning_truncated"] for lv in summary["levels"])
        # ngram's levels end once their verdict is known, never before AGAINST_MIN_REQUESTS
        least = 20 if variant == "baseline" else len(LEVELS) * AGAINST_MIN_REQUESTS - 1
        assert completed > least and truncated <= 0.1 * completed, (variant, truncated, completed)
        for level in summary["levels"]:
            assert "reasoning_truncated" not in level["flags"], level["name"]
            assert set(level["categories"]) <= set(demo_mod.REFERENCE_TYPES)
            assert level["median_ttfct_ms"] is not None  # answers were measured
    answers = facts["baseline"]["answers"]
    summary = read_summary(out / "baseline")
    assert answers["completed"] == sum(lv["completed"] for lv in summary["levels"])
    assert answers["reasoning_truncated"] == sum(
        lv["reasoning_truncated"] for lv in summary["levels"]
    )
    # per prompt type at concurrency 1, from the sweep's own summary
    c1 = next(lv for lv in summary["levels"] if lv["concurrency"] == 1)
    rows = {r["category"]: r for r in facts["baseline"]["categories"]}
    assert {"coding", "explanation"} <= set(rows), rows
    for name, row in rows.items():
        assert row["median_tpot_ms"] == pytest.approx(c1["categories"][name]["median_tpot_ms"])
        assert row["reference_deployment_tpot_ms"] == demo_mod.REFERENCE_TPOT_MS[name]
    assert rows["coding"]["median_tpot_ms"] > 1.1 * rows["explanation"]["median_tpot_ms"]
    assert facts["baseline"]["slowest_category"] == "coding"
    assert "coding is the slowest, as on the reference" in demo.text
    # on the reference scale, within 10% of the reference's table
    for name in ("coding", "explanation"):
        ref = rows[name]["ref_median_tpot_ms"]
        assert abs(ref / demo_mod.REFERENCE_TPOT_MS[name] - 1) < 0.12, (name, ref)


def test_the_fifth_prompt_ends_inside_reasoning_and_the_guard_says_so(demo: Demo) -> None:
    out, facts = demo.out, demo.facts
    fifth = facts["fifth_prompt"]
    summary = read_summary(out / "fifth-prompt")
    (level,) = summary["levels"]
    assert set(level["categories"]) == {"long_reasoning"}
    assert (fifth["completed"], fifth["reasoning_truncated"]) == (
        level["completed"],
        level["reasoning_truncated"],
    )
    assert fifth["completed"] == demo_mod.FIFTH_REQUESTS and fifth["reasoning_truncated"] >= 1
    # the sweep's guard: a warning when more than 20% of a level ended inside reasoning
    share = fifth["reasoning_truncated"] / fifth["completed"]
    assert bool(fifth["guard_warnings"]) == (share > 0.2)
    for warning in fifth["guard_warnings"]:
        assert "ended inside reasoning at max_tokens 4096 (long_reasoning)" in warning
        assert f"warning: {warning}" in demo.text  # printed by the sweep as it ran
    assert f"{fifth['reasoning_truncated']} of {fifth['completed']} spent all 4096" in demo.text


def test_the_ngram_sweep_stops_each_level_on_its_verdict_against_the_baseline(
    demo: Demo,
) -> None:
    """``specload run --against OUT/baseline``: each ngram level ends once its verdict is
    known; the demo says per level the verdict, the requests it took against the baseline's
    fixed level, and compare's verdict on the same pair — read here from the summaries."""
    out, lines, facts = demo.out, demo.lines, demo.facts
    baseline = {lv["concurrency"]: lv for lv in read_summary(out / "baseline")["levels"]}
    summary = read_summary(out / "ngram")
    stopping = summary["stopping"]
    assert stopping["against"] == str(out / "baseline")
    assert stopping["margin"] == float(AGAINST_MARGIN.rstrip("%")) / 100
    assert stopping["min_requests"] == AGAINST_MIN_REQUESTS
    facts_stop = facts["comparison"]["stopping"]
    rows = {r["concurrency"]: r for r in facts_stop["levels"]}
    assert sorted(rows) == list(LEVELS)
    stage = lines[line_index(lines, r"^== 7\. ngram sweep") :]
    assert "each level ending once its verdict against the baseline's is known" in stage[0]
    compare = {  # compare's verdict per level, as its headline printed it
        c: next(ln for ln in stage if f"ngram vs baseline at concurrency {c}:" in ln)
        for c in LEVELS
    }
    for lv in summary["levels"]:
        c, row = lv["concurrency"], rows[lv["concurrency"]]
        # ngram is 15-70% slower: never faster nor equivalent; decided, or undecided at the
        # budget (a level of ~10 requests at concurrency 1 under --quick)
        assert lv["verdict"] in ("slower", "undecided"), lv
        assert lv["stop_reason"] in ("decided", "budget"), lv
        if lv["stop_reason"] == "decided":  # before the budget: a verdict, never too soon
            assert lv["verdict"] == "slower" and lv["verdict_requests"] >= AGAINST_MIN_REQUESTS
            assert row["window_s"] < row["planned_window_s"], row
        assert (row["verdict"], row["verdict_requests"], row["stop_reason"]) == (
            lv["verdict"],
            lv["verdict_requests"],
            lv["stop_reason"],
        )
        assert (row["requests"], row["baseline_requests"]) == (
            lv["completed"],
            baseline[c]["completed"],
        )
        # the same verdict as compare's on the same pair (its headline's last word)
        assert compare[c].split(" — ")[1].startswith(row["compare_verdict"]), compare[c]
        if lv["verdict"] == "slower":
            assert row["compare_verdict"] == "slower" and row["agrees_with_compare"], row
        said = next(ln for ln in stage if ln.startswith(f"   c{c}: {lv['verdict']}"))
        assert f"{lv['completed']} requests against the baseline's {baseline[c]['completed']}" in (
            said
        ), said
        assert said.endswith(f"; specload compare on the same pair: {row['compare_verdict']}")
        if lv["stop_reason"] == "decided":
            assert f"slower after {lv['verdict_requests']} requests" in said, said
        else:
            assert f"at the budget ({lv['verdict_requests']} requests in the window)" in said
    used = sum(lv["completed"] for lv in summary["levels"])
    fixed = sum(lv["completed"] for lv in baseline.values())
    assert (facts_stop["requests"], facts_stop["baseline_requests"]) == (used, fixed)
    assert any(
        ln.startswith(f"   in all {used} ngram requests against the baseline's {fixed} ")
        for ln in stage
    )
    decided = [r for r in rows.values() if r["verdict"] == "slower"]
    early = [r for r in decided if r["stop_reason"] == "decided"]
    assert (facts_stop["decided"], facts_stop["decided_early"]) == (len(decided), len(early))
    assert facts_stop["agree_with_compare"] == (True if decided else None)
    head = (
        f"   {len(decided)} of {len(LEVELS)} levels got a verdict ({len(early)} before the budget)"
    )
    assert any(ln.startswith(head) for ln in stage), head
    # the last screen says it too
    assert (
        "; the sweep against the baseline: "
        + ", ".join(f"{rows[c]['verdict']} at {c}" for c in LEVELS)
        + f", in {used} requests (the baseline's fixed windows: {fixed})"
    ) in facts["verdicts"]["ngram"]


def test_every_figure_has_its_reference_scale_reading(demo: Demo) -> None:
    """Reference scale = simulator figure x the time scale the simulator reports."""
    facts = demo.facts
    scale = read_summary(demo.out / "baseline")["server_time_scale"]
    assert scale == DEMO_TIME_SCALE == facts["baseline"]["time_scale"]
    pairs: list[tuple[Any, Any]] = []
    for row in facts["baseline"]["levels"]:
        pairs.append((row["median_tpot_ms"], row["ref_median_tpot_ms"]))
        assert row["ref_output_throughput"] == pytest.approx(row["output_throughput"] / scale)
    pairs += [
        (r["median_tpot_ms"], r["ref_median_tpot_ms"]) for r in facts["baseline"]["categories"]
    ]
    pairs += [
        (r["median_ttfct_ms"], r["ref_median_ttfct_ms"]) for r in facts["baseline"]["categories"]
    ]
    for lv in facts["prediction"]["levels"]:
        pairs.append((lv["predicted_median_tpot_ms"], lv["ref_predicted_median_tpot_ms"]))
        pairs.append((lv["baseline_median_tpot_ms"], lv["ref_baseline_median_tpot_ms"]))
    for lv in facts["comparison"]["levels"]:
        pairs.append((lv["ngram_median_tpot_ms"], lv["ref_ngram_median_tpot_ms"]))
    assert len(pairs) > 10
    for sim, ref in pairs:
        if sim is None:  # (a type whose requests all ended inside reasoning: no TTFCT)
            assert ref is None
            continue
        assert ref == pytest.approx(sim * scale), (sim, ref)
    # printed beside each other: "0.45 ms [13.43 ms]"
    c1 = facts["baseline"]["levels"][0]
    assert f"median TPOT {c1['median_tpot_ms']:.2f} ms [{c1['ref_median_tpot_ms']:.2f} ms]" in (
        demo.text
    )


def test_the_tpot_alert_goes_pending_fires_and_reaches_the_webhook(demo: Demo) -> None:
    facts, lines = demo.facts, demo.lines
    alert = facts["alert"]
    ready = facts["reload"]["ready_at"]  # the port open again, as the demo probed it
    pending, firing, received = alert["pending_at"], alert["firing_at"], alert["received_at"]
    assert ready < alert["load_started_at"] < pending < firing < received, alert
    window_s, for_s = duration_s(DEMO.window), duration_s(DEMO.for_regression)
    # silent while the reload is in the window (the exporter's poll and Prometheus' scrape,
    # a second each, may see it ready late), then pending for the rule's `for:`
    assert pending - ready >= window_s - 2, alert
    assert for_s - 0.5 <= firing - pending <= for_s + 3, alert
    # Alertmanager holds a new group for its group_wait before the webhook hears of it
    assert GROUP_WAIT_S - 1.5 <= received - firing <= GROUP_WAIT_S + 5, alert
    # exactly one notification: the TPOT regression of the deployment (the server keeps its
    # Prometheus name `baseline` through the reload), which serves the n-gram variant now
    (note,) = alert["webhook"]
    assert note["received_at"] == received and note["status"] == "firing"
    (only,) = note["alerts"]
    assert only["alertname"] == "SpecloadTPOTRegression" and only["status"] == "firing"
    assert only["labels"]["variant"] == demo_mod.SERVER
    assert note["group_labels"] == {"variant": demo_mod.SERVER}
    assert alert["served_method"] == "ngram"
    ratio = float(re.search(r"over 20s is ([0-9.]+)x its baseline", only["description"])[1])
    assert ratio > 1.10
    assert facts["alerts"]["webhook_notifications"] == 1
    # printed in order as it happened
    at = [
        line_index(lines, r"SpecloadTPOTRegression\{variant=\"baseline\"\} pending"),
        line_index(lines, r"SpecloadTPOTRegression firing"),
        line_index(lines, r"the webhook received it"),
    ]
    assert at == sorted(at)
    assert line_index(lines, r"^== 5\. specload stack reload") < at[0]
    assert at[-1] < line_index(lines, r"^== 7\. ngram sweep")


def test_demo_predicts_the_ngram_variant_before_the_reload(demo: Demo) -> None:
    out, lines, facts = demo.out, demo.lines, demo.facts
    preset = PRESETS["ngram"]
    k, lo, hi = preset.num_speculative_tokens, preset.prompt_lookup_min, preset.prompt_lookup_max
    baseline_at = line_index(lines, r"^== 2\. baseline sweep")
    predict_at = line_index(
        lines,
        rf"^== 4\. specload predict {re.escape(str(out / 'baseline'))} --method ngram "
        rf"--num-speculative-tokens {k} --prompt-lookup-min {lo} --prompt-lookup-max {hi}:",
    )
    decision_at = line_index(
        lines,
        rf"^   n-gram k={k} predicted [0-9]+% slower at concurrency 1 .*, [0-9]+% slower at 4: "
        "not worth a 30-minute reload",
    )
    reload_at = line_index(lines, r"^== 5\. specload stack reload baseline --as ngram")
    assert baseline_at < predict_at < decision_at < reload_at, demo.text
    order = list(facts)
    assert order.index("baseline") < order.index("prediction") < order.index("reload"), order

    pred = facts["prediction"]
    assert pred["ok"], pred
    assert (pred["num_speculative_tokens"], pred["prompt_lookup_min"]) == (k, lo)
    assert pred["prompt_lookup_max"] == hi
    baseline = medians(out / "baseline")
    assert [lv["concurrency"] for lv in pred["levels"]] == list(LEVELS)
    for lv in pred["levels"]:
        c = lv["concurrency"]
        assert lv["baseline_median_tpot_ms"] == pytest.approx(baseline[c], rel=1e-9), lv
        assert math.isfinite(lv["predicted_median_tpot_ms"]) and lv["predicted_median_tpot_ms"] > 0
        assert lv["speedup"] == pytest.approx(
            lv["baseline_median_tpot_ms"] / lv["predicted_median_tpot_ms"]
        )
        assert lv["verdict"] == "slower", lv
        printed = lines[line_index(lines, rf"^   n-gram k={k} at concurrency {c}: predicted")]
        assert f"TPOT {lv['predicted_median_tpot_ms']:.2f} ms [" in printed, printed
        assert f"vs {baseline[c]:.2f} ms [" in printed, printed
    assert pred["worth_reload"] is False
    assert pred["decision"] == "not worth a 30-minute reload"


def test_demo_shows_predicted_against_measured_after_the_ngram_sweep(demo: Demo) -> None:
    out, lines, facts = demo.out, demo.lines, demo.facts
    versus = facts["predicted_vs_measured"]
    assert versus["ok"], versus
    assert line_index(lines, r"^== 7\. ngram sweep") < line_index(
        lines, r"^   predicted \(stage 4, from the baseline alone\) against measured"
    )
    measured = medians(out / "ngram")
    predicted = {
        lv["concurrency"]: lv["predicted_median_tpot_ms"] for lv in facts["prediction"]["levels"]
    }
    assert [row["concurrency"] for row in versus["levels"]] == list(LEVELS)
    for row in versus["levels"]:
        c = row["concurrency"]
        assert row["predicted_median_tpot_ms"] == pytest.approx(predicted[c], rel=1e-9), row
        assert row["measured_median_tpot_ms"] == pytest.approx(measured[c], rel=1e-9), row
        assert row["error_ratio"] == pytest.approx(predicted[c] / measured[c] - 1), row
        printed = lines[line_index(lines, rf"^   c{c}: predicted")]
        assert f"measured {measured[c]:.2f} ms [" in printed, printed
        assert f"({100 * (predicted[c] / measured[c] - 1):+.1f}%" in printed, printed
    server = [lv["server"] for lv in read_summary(out / "ngram")["levels"]]
    for name, counter in (
        ("drafts", "spec_decode_num_drafts"),
        ("draft_tokens", "spec_decode_num_draft_tokens"),
        ("accepted_tokens", "spec_decode_num_accepted_tokens"),
    ):
        total = versus["totals"][name]
        assert total["measured"] == pytest.approx(sum(s[counter] for s in server)), name
        assert total["predicted"] > 0, name


def test_the_last_screen_gives_a_verdict_per_variant_and_the_report(demo: Demo) -> None:
    out, lines, facts = demo.out, demo.lines, demo.facts
    last = lines[line_index(lines, r"^== verdict") :]
    verdicts = facts["verdicts"]
    assert set(verdicts) == {"baseline", "ngram"}
    assert f"   {verdicts['baseline']}" in last and f"   {verdicts['ngram']}" in last
    assert verdicts["ngram"].startswith("ngram (k=5): ")
    assert verdicts["ngram"].endswith(": not worth a 30-minute reload")
    for row in facts["comparison"]["levels"]:
        assert f"{row['rel']:.0%}" in verdicts["ngram"]
    html = out / "comparison" / "comparison.html"
    report = html if html.exists() else out / "comparison" / "comparison.md"
    assert facts["comparison"]["report"] == str(report)
    assert f"   report: {report}" in last
    # the wall time, measured and printed
    wall = re.search(r"^demo done in (\d+) min (\d+) s \(wall time\)$", lines[-1])
    assert wall, lines[-1]
    assert abs(int(wall[1]) * 60 + int(wall[2]) - facts["wall_s"]) <= 1


def test_demo_says_where_the_prediction_is_extrapolated(demo: Demo) -> None:
    """The forecast made before the reload names the levels whose steps the baseline did not
    measure (its accuracy against the simulator is tests/integration/test_predict_sim.py)."""
    levels = demo.facts["prediction"]["levels"]
    assert sorted(lv["concurrency"] for lv in levels) == list(LEVELS)
    # c1 and c4 only: at k = 5 every level needs larger steps (6 and 24 tokens) than the
    # baseline measured (4), and the demo says so at each
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
