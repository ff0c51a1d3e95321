"""The last screen: one verdict per variant, and where everything is."""

from __future__ import annotations

from typing import Any

from specload.commands.demo.constants import RELOAD_AS
from specload.commands.demo.context import DemoContext, _time
from specload.results.model import finite_number

# --- 9. verdicts, and where things are ---------------------------------------------------------


def _pct(rel: Any) -> str:
    v = finite_number(rel)
    return "-" if v is None else f"{abs(v):.0%} {'slower' if v > 0 else 'faster'}"


def _decided(stopping: Any) -> str:
    """``; against the baseline: slower at 1, slower at 4, in 25 requests (its fixed windows:
    52)``, or nothing when the sweep ran no ``--against``."""
    if not isinstance(stopping, dict) or not stopping.get("levels"):
        return ""
    said = ", ".join(f"{r.get('verdict')} at {r.get('concurrency')}" for r in stopping["levels"])
    return (
        f"; the sweep against the baseline: {said}, in {stopping.get('requests')} requests "
        f"(the baseline's fixed windows: {stopping.get('baseline_requests')})"
    )


def verdicts(ctx: DemoContext) -> None:
    """One short verdict per variant, where the report is."""
    ctx.say("== verdict")
    comp = ctx.facts.get("comparison") or {}
    rows = [r for r in comp.get("levels") or [] if isinstance(r, dict)]
    slower = bool(rows) and all(
        (finite_number(r.get("ci_low")) or 0) > 0 and r.get("verdict") == "slower" for r in rows
    )
    lines: dict[str, str] = {}
    base = [r for r in (ctx.facts.get("baseline") or {}).get("levels") or [] if r]
    if base:
        figures = ", ".join(
            f"{_time(finite_number(r['ref_median_tpot_ms']))} at concurrency {r['concurrency']}"
            for r in base
        )
        lines["baseline"] = (
            f"baseline: median TPOT {figures} on the reference scale (the reference deployment: "
            f"~13.6 ms single stream)" + (": keep it" if slower else "")
        )
    if rows:
        pred = ctx.facts.get("prediction") or {}
        measured = ", ".join(
            f"{_pct(r.get('rel'))} at {'concurrency ' if i == 0 else ''}{r['concurrency']}"
            for i, r in enumerate(rows)
        )
        alert = ctx.facts.get("alert") or {}
        predicted = ""
        if pred.get("ok"):
            predicted = (
                ", as predicted before the reload"
                if (not pred.get("worth_reload")) == slower
                else f"; predicted before the reload: {pred.get('decision')}"
            )
        lines["ngram"] = (
            f"ngram (k={pred.get('num_speculative_tokens', '?')}): {measured}"
            + (" (95% intervals above zero)" if slower else "")
            + _decided(comp.get("stopping"))
            + predicted
            + ("; the TPOT alert fired and reached the webhook" if alert.get("received_at") else "")
            + (": not worth a 30-minute reload" if slower else "")
        )
    for line in lines.values():
        ctx.say("   " + line)
    report = comp.get("report")
    if report:
        ctx.say(f"   report: {report}")
    ctx.record("verdicts", lines)
    tell_where(ctx)


def tell_where(ctx: DemoContext) -> None:
    for variant, path in ctx.results.items():
        ctx.say(f"   {variant}: {path}/summary.md, summary.json, requests.jsonl")
    if ctx.baseline_file is not None and ctx.baseline_file.exists():
        ctx.say(f"   baseline for the exporter and alerts: {ctx.baseline_file}")
    prediction = ctx.out / "prediction"
    if (prediction / "prediction.json").exists():
        versus = (ctx.facts.get("predicted_vs_measured") or {}).get("ok")
        ctx.say(
            f"   prediction: {prediction}/prediction.md, prediction.json, prediction.png"
            + (f" (with the measured {RELOAD_AS} sweep beside it)" if versus else "")
        )
    ctx.say(f"   the story's facts: {ctx.out / 'demo.json'}; stack logs: {ctx.state_dir / 'logs'}")
    if not ctx.args.keep_stack:
        ctx.say(
            "   to look around in Prometheus and Grafana afterwards: specload demo --keep-stack"
        )
