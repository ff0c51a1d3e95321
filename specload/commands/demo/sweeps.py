"""The sweeps: ``specload run`` of the stack's server (stage 2, the baseline; stage 3, the
fifth prompt; stage 7, the ngram sweep and the comparison)."""

from __future__ import annotations

import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

from specload.commands.demo import figures
from specload.commands.demo.constants import (
    FIFTH_CONCURRENCY,
    FIFTH_PROMPT,
    FIFTH_REQUESTS,
    REFERENCE_TPOT_MS,
    REFERENCE_TYPES,
    SERVER,
)
from specload.commands.demo.context import DemoContext, _specload, _wait_for
from specload.commands.demo.prediction import _start_predict
from specload.errors import UsageError
from specload.results.model import finite_number
from specload.results.writer import atomic_write_bytes, dump_json
from specload.stack.configs import write_loadgen_targets

# --- runs -------------------------------------------------------------------------------------


def _run_cmd(
    ctx: DemoContext,
    variant: str,
    out: Path,
    *,
    prompts: str,
    concurrency: str | None = None,
    warmup: str | None = None,
    duration: str | None = None,
    requests: int | None = None,
    extra: tuple[str, ...] = (),
    progress: str | None = None,
) -> list[str]:
    """``specload run`` of the stack's server as ``variant``, its client metrics served where
    the stack's Prometheus scrapes them (the target list is labelled with ``variant``)."""
    args = ctx.args
    assert ctx.loadgen_address is not None
    write_loadgen_targets(ctx.state_dir, ctx.loadgen_address, {"variant": variant})
    window = ["--requests", str(requests)] if requests is not None else ["--duration", duration]
    assert requests is not None or duration is not None
    return _specload(
        "run",
        "--host",
        ctx.server_url,
        "--variant",
        variant,
        "--prompts",
        prompts,
        "--concurrency",
        concurrency or args.concurrency,
        "--warmup",
        warmup if warmup is not None else args.warmup,
        *window,
        "--max-tokens",
        str(args.max_tokens),
        "--prompt-seed",
        str(args.seed),
        "--ready-timeout",
        "2m",
        "--out",
        str(out),
        "--metrics-address",
        ctx.loadgen_address,
        "--progress",
        progress or ("auto" if sys.stdout.isatty() else "plain"),
        *extra,
    )


def _wait_run(proc: subprocess.Popen[Any], what: str, out: Path, ok: tuple[int, ...] = (0,)) -> int:
    """Wait for a run; Ctrl-C reaches it too (same terminal), SIGTERM to us is passed on."""
    try:
        code = proc.wait()
    except BaseException:
        if proc.poll() is None:
            proc.send_signal(signal.SIGINT)
        try:
            proc.wait(30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        raise
    if code not in ok:
        raise UsageError(f"demo: {what} failed (exit {code}); see {out}", exit_code=1)
    return code


def _sweep(ctx: DemoContext, variant: str, *extra: str) -> Path:
    out = ctx.out / variant
    cmd = _run_cmd(
        ctx,
        variant,
        out,
        prompts="builtin:" + ",".join(REFERENCE_TYPES),
        duration=ctx.args.duration,
        extra=extra,
    )
    _wait_run(subprocess.Popen(cmd), f"the sweep of {variant}", out)
    ctx.results[variant] = out
    return out


def _learn_time_scale(ctx: DemoContext, sweep: figures.SweepFigures) -> None:
    if sweep.time_scale is not None:
        ctx.time_scale = sweep.time_scale


# --- 2. baseline sweep --------------------------------------------------------------------------


def _category_rows(ctx: DemoContext, level: figures.LevelFigures | None) -> list[dict[str, Any]]:
    rows = []
    for name in REFERENCE_TYPES:
        stats = level.categories.get(name) if level is not None else None
        if stats is None:
            continue
        tpot, ttfct = stats.median_tpot_ms, stats.median_ttfct_ms
        rows.append(
            {
                "category": name,
                "completed": stats.completed,
                "reasoning_truncated": stats.reasoning_truncated,
                "median_tpot_ms": tpot,
                "ref_median_tpot_ms": ctx.ref_ms(tpot),
                "reference_deployment_tpot_ms": REFERENCE_TPOT_MS[name],
                "median_ttfct_ms": ttfct,
                "ref_median_ttfct_ms": ctx.ref_ms(ttfct),
            }
        )
    return rows


def _level_rows(ctx: DemoContext, sweep: figures.SweepFigures) -> list[dict[str, Any]]:
    rows = []
    for level in sweep.levels:
        tpot, thr = level.median_tpot_ms, level.output_throughput
        rows.append(
            {
                "concurrency": level.concurrency,
                "completed": level.completed,
                "reasoning_truncated": level.reasoning_truncated,
                "median_tpot_ms": tpot,
                "ref_median_tpot_ms": ctx.ref_ms(tpot),
                "output_throughput": thr,
                "ref_output_throughput": None if thr is None else thr / ctx.scale,
                "warnings": list(level.warnings),
            }
        )
    return rows


def _say_answers(ctx: DemoContext, levels: list[dict[str, Any]]) -> dict[str, int]:
    completed = sum(r["completed"] for r in levels)
    truncated = sum(r["reasoning_truncated"] for r in levels)
    ctx.say(
        f"   {completed - truncated} of {completed} completed requests reached their answer"
        + (
            f" ({truncated} ended inside reasoning at max_tokens {ctx.args.max_tokens}; the "
            "sweep warns after a level where more than 20% do)"
            if truncated
            else f" (none ended inside reasoning at max_tokens {ctx.args.max_tokens})"
        )
    )
    return {"completed": completed, "reasoning_truncated": truncated}


def _client_metrics_seen(ctx: DemoContext, variant: str) -> float | None:
    """The run's finished requests as the stack's Prometheus scraped them from the client."""
    expr = f'sum(max_over_time(specload_client_requests_total{{variant="{variant}"}}[10m]))'
    value = _wait_for(lambda: ctx.prom.value(expr), timeout_s=5)
    return finite_number(value)


def baseline_sweep(ctx: DemoContext) -> None:
    args = ctx.args
    ctx.say(
        f"== 2. baseline sweep of {ctx.server_url}: the reference's four prompt types "
        f"({', '.join(REFERENCE_TYPES)}) at max_tokens {args.max_tokens} as it measured them, "
        f"concurrency {args.concurrency}, warm-up {args.warmup}, window {args.duration} per level; "
        "token ids recorded (tokens.jsonl, for the prediction)"
    )
    out = _sweep(ctx, "baseline", "--record-token-ids")
    sweep = figures.read(out)
    _learn_time_scale(ctx, sweep)
    levels = _level_rows(ctx, sweep)
    for row in levels:
        thr, ref_thr = row["output_throughput"], row["ref_output_throughput"]
        ctx.say(
            f"   c{row['concurrency']}: median TPOT {ctx.both(row['median_tpot_ms'])}, "
            + ("" if thr is None else f"{thr:.0f} output tok/s [{ref_thr:.1f} tok/s], ")
            + f"{row['completed']} requests"
        )
    answers = _say_answers(ctx, levels)
    first = sweep.levels[0] if sweep.levels else None
    categories = _category_rows(ctx, first)
    ctx.say(
        f"   per prompt type at concurrency {first.concurrency if first else None}, median TPOT "
        "[reference scale] against the reference deployment's, and time to the first answer "
        "token:"
    )
    for row in categories:
        ctx.say(
            f"     {row['category']:<12} {ctx.both(row['median_tpot_ms'])}, reference "
            f"{row['reference_deployment_tpot_ms']:.1f} ms; "
            f"{row['completed'] - row['reasoning_truncated']} of {row['completed']} answered, "
            f"TTFCT {ctx.both(row['median_ttfct_ms'])}"
        )
    ranked = [r for r in categories if r["median_tpot_ms"] is not None]
    slowest = max(ranked, key=lambda r: r["median_tpot_ms"])["category"] if ranked else None
    if slowest is not None:
        ctx.say(
            f"   {slowest} is the slowest"
            + (
                ", as on the reference: its long reasoning chain makes every step attend to a "
                "longer context"
                if slowest == "coding"
                else f" (on the reference: coding, {REFERENCE_TPOT_MS['coding']} ms)"
            )
        )
    baseline = sweep.baseline_export()
    assert ctx.baseline_file is not None
    atomic_write_bytes(ctx.baseline_file, dump_json(baseline))
    ctx.say(
        f"   specload baseline export {out} -> {ctx.baseline_file} "
        f"({len(baseline['entries'])} entries), served by the exporter"
    )
    expr = f'specload_baseline_tpot_seconds{{variant="{SERVER}",quantile="0.5",category="all"}}'
    seen = _wait_for(lambda: ctx.prom.samples(expr), timeout_s=30)
    in_prom = sorted(seen, key=lambda s: float(s[0].get("concurrency") or 0))
    ctx.say(
        "   Prometheus has it: baseline median TPOT "
        + ", ".join(
            f"{ctx.both(v * 1000)} at concurrency {m.get('concurrency')}" for m, v in in_prom
        )
    )
    client = _client_metrics_seen(ctx, "baseline")
    ctx.say(
        "   and the load generator's own metrics (Load test board, reasoning-truncated alert): "
        + (f"{client:.0f} requests of baseline" if client is not None else "none seen")
    )
    ctx.record(
        "baseline",
        {
            "file": str(ctx.baseline_file),
            "entries": len(baseline["entries"]),
            "in_prometheus": len(in_prom),
            "time_scale": ctx.scale,
            "levels": levels,
            "answers": answers,
            "categories": categories,
            "slowest_category": slowest,
            "client_requests_in_prometheus": client,
        },
    )


# --- 3. the fifth prompt ------------------------------------------------------------------------


def fifth_prompt(ctx: DemoContext) -> None:
    """The reference's fifth prompt at the same budget (while the prediction runs)."""
    ctx.predict_job = _start_predict(ctx)
    out = ctx.out / "fifth-prompt"
    ctx.say(
        f"== 3. the reference's fifth prompt type, {FIFTH_PROMPT}: {FIFTH_REQUESTS} requests, "
        f"{FIFTH_CONCURRENCY} at a time, max_tokens {ctx.args.max_tokens} (specload predict "
        "runs meanwhile)"
    )
    cmd = _run_cmd(
        ctx,
        "baseline",
        out,
        prompts=f"builtin:{FIFTH_PROMPT}",
        concurrency=str(FIFTH_CONCURRENCY),
        warmup="0s",
        requests=FIFTH_REQUESTS,
        extra=("--no-plots",),
    )
    _wait_run(subprocess.Popen(cmd), f"the {FIFTH_PROMPT} run", out)
    ctx.results["fifth-prompt"] = out
    sweep = figures.read(out)
    completed, truncated = sweep.completed, sweep.reasoning_truncated
    guard = [w for w in sweep.warnings if "ended inside reasoning" in w]
    ctx.say(
        f"   {truncated} of {completed} spent all {ctx.args.max_tokens} tokens reasoning and "
        "produced no answer, as the reference's fifth prompt did: "
        + (
            "the sweep's truncation guard said so above (no TTFCT or content tokens measured "
            "for them; a budget that fits)"
            if guard
            else "below the sweep's 20% warning threshold this time"
        )
    )
    ctx.record(
        "fifth_prompt",
        {
            "category": FIFTH_PROMPT,
            "dir": str(out),
            "completed": completed,
            "reasoning_truncated": truncated,
            "guard_warnings": guard,
        },
    )
