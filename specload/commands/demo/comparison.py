"""Stage 7: the ngram sweep of the reloaded server, then the comparison with the baseline
(:mod:`specload.compare` computes it, :mod:`specload.report.pages` writes its files) and the
prediction of stage 4 beside what was measured.

The ngram sweep runs ``specload run --against OUT/baseline``: each level ends as soon as its
verdict against the baseline's same level is known (slower or faster by more than
:data:`~.constants.AGAINST_MARGIN`, or equivalent within it; repeated confidence intervals,
``docs/sweep.md``), its ``--duration`` only the budget. The stage then says, per level, the
verdict, the requests it took against the baseline's fixed level, and what ``compare`` says
on the same pair."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from specload.commands.demo import figures
from specload.commands.demo.constants import (
    AGAINST_MARGIN,
    AGAINST_MIN_REQUESTS,
    RELOAD_AS,
    SERVER,
    VARIANTS,
)
from specload.commands.demo.context import DemoContext, _time
from specload.commands.demo.prediction import predicted_against_measured
from specload.commands.demo.sweeps import _client_metrics_seen, _level_rows, _say_answers, _sweep
from specload.results.model import FASTER, SAME, SLOWER, finite_number

if TYPE_CHECKING:
    from specload.compare.model import Comparison

# --- 7. ngram sweep and comparison --------------------------------------------------------------


def ngram_sweep_and_compare(ctx: DemoContext) -> None:
    base = figures.read(ctx.results["baseline"])
    against = _against(ctx, base)
    ctx.say(
        f"== 7. {RELOAD_AS} sweep of the same server"
        + (
            f", each level ending once its verdict against the baseline's is known (--against "
            f"{ctx.results['baseline']}, margin ±{AGAINST_MARGIN}, at least "
            f"{AGAINST_MIN_REQUESTS} requests; the window {ctx.args.duration} is the budget)"
            if against
            else ""
        )
        + ", then the comparison (95% bootstrap confidence intervals)"
    )
    out = _sweep(ctx, RELOAD_AS, *against)
    # numpy and matplotlib load when the stage runs, not for `specload demo --help`
    from specload.compare.model import compare_runs, load_run  # noqa: PLC0415
    from specload.compare.report import headline  # noqa: PLC0415
    from specload.report.pages import write_comparison  # noqa: PLC0415

    sweep = figures.read(out)
    levels = _level_rows(ctx, sweep)
    _say_answers(ctx, levels)
    runs = [load_run(ctx.results[v]) for v in VARIANTS]
    comp = compare_runs(runs)
    cmp_dir = ctx.out / "comparison"
    cmp_dir.mkdir(exist_ok=True)
    # the report as `specload compare --json` writes it: comparison.md, comparison.html,
    # comparison.json, the plots
    report = write_comparison(cmp_dir, runs, comp, json=True).html
    ctx.comparison = cmp_dir
    lines = headline(comp)
    for line in lines:
        ctx.say("   " + line)
    rows_tpot: list[dict[str, Any]] = []
    for level in comp.levels:
        cell = level.cells.get(("all", "tpot"))
        if cell is None:
            continue
        diff = cell.diffs[1]
        load = finite_number(level.load)
        rows_tpot.append(
            {
                "concurrency": int(load) if load is not None and load.is_integer() else load,
                "baseline_median_tpot_ms": cell.values[0],
                "ngram_median_tpot_ms": cell.values[1],
                "ref_baseline_median_tpot_ms": ctx.ref_ms(cell.values[0]),
                "ref_ngram_median_tpot_ms": ctx.ref_ms(cell.values[1]),
                "rel": None if diff is None else diff.rel,
                "ci_low": None if diff is None else diff.ci_low,
                "ci_high": None if diff is None else diff.ci_high,
                "verdict": cell.verdicts[1],
            }
        )
    ctx.say(
        "   on the reference scale: "
        + "; ".join(
            f"c{v['concurrency']} {_time(finite_number(v['ref_baseline_median_tpot_ms']))} -> "
            f"{_time(finite_number(v['ref_ngram_median_tpot_ms']))}"
            for v in rows_tpot
        )
    )
    for warning in comp.warnings:
        ctx.say(f"   specload compare: warning: {' '.join(warning.split())}")
    stopping = _stopping(ctx, base, sweep, comp) if against else None
    client = sweep.acceptance()
    prom = ctx.prom.value(
        f'specload_spec_decode_acceptance_ratio{{variant="{SERVER}",window="lifetime"}}'
    )
    ctx.say(
        f"   {RELOAD_AS} acceptance rate: {'-' if client is None else f'{client:.3f}'} from the "
        f"sweep's /metrics scrapes (measured windows), {'-' if prom is None else f'{prom:.3f}'} "
        "in Prometheus (specload_spec_decode_acceptance_ratio, since the reload)"
    )
    ctx.record(
        "comparison",
        {
            "dir": str(cmp_dir),
            "report": str(report),
            "headline": lines,
            "warnings": comp.warnings,
            "levels": rows_tpot,
            "ngram_levels": levels,
            "acceptance_client": client,
            "acceptance_prometheus": prom,
            "client_requests_in_prometheus": _client_metrics_seen(ctx, RELOAD_AS),
            "stopping": stopping,
        },
    )
    predicted_against_measured(ctx, out)


def _against(ctx: DemoContext, base: figures.SweepFigures) -> tuple[str, ...]:
    """``--against`` the baseline's run, or nothing (said) when a baseline level has fewer
    requests than the rule needs (a window too short for it: the sweep runs it whole)."""
    short = [lv for lv in base.levels if lv.completed < AGAINST_MIN_REQUESTS]
    if not base.levels or short:
        ctx.say(
            f"   (the {RELOAD_AS} sweep runs its whole windows: the baseline's "
            + ", ".join(f"c{lv.concurrency} has {lv.completed} requests" for lv in short)
            + f", fewer than the {AGAINST_MIN_REQUESTS} a verdict needs)"
        )
        return ()
    return (
        "--against",
        str(ctx.results["baseline"]),
        "--margin",
        AGAINST_MARGIN,
        "--min-requests",
        str(AGAINST_MIN_REQUESTS),
    )


#: The sequential verdict against compare's on the same pair: the same word, or
#: ``equivalent`` (within the margin) beside compare's "no significant difference".
_COMPARE_WORD = {"slower": SLOWER, "faster": FASTER, "equivalent": SAME}


def _stopping(
    ctx: DemoContext, base: figures.SweepFigures, sweep: figures.SweepFigures, comp: Comparison
) -> dict[str, Any]:
    """Per level: the verdict the sweep stopped on, the requests it took against the
    baseline's fixed level, and compare's verdict on the same pair; said and returned."""
    judged = {
        level.load: level.cells[("all", "tpot")].verdicts[1]
        for level in comp.levels
        if ("all", "tpot") in level.cells
    }
    base_by = {lv.concurrency: lv for lv in base.levels}
    rows: list[dict[str, Any]] = []
    for lv in sweep.levels:
        ref = base_by.get(lv.concurrency)
        base_n = ref.completed if ref is not None else None
        compare = judged.get(float(lv.concurrency)) if lv.concurrency is not None else None
        agrees = None
        if lv.verdict in _COMPARE_WORD:
            agrees = _COMPARE_WORD[lv.verdict] == compare
        rows.append(
            {
                "concurrency": lv.concurrency,
                "stop_reason": lv.stop_reason,
                "verdict": lv.verdict,
                "verdict_requests": lv.verdict_requests,
                "verdict_ratio": lv.verdict_ratio,
                "verdict_interval": list(lv.verdict_interval) if lv.verdict_interval else None,
                "requests": lv.completed,
                "baseline_requests": base_n,
                "share": lv.completed / base_n if base_n else None,
                "window_s": lv.window_s,
                "planned_window_s": lv.planned_duration_s,
                "compare_verdict": compare,
                "agrees_with_compare": agrees,
            }
        )
    for row in rows:
        ctx.say("   " + _stopping_line(row))
    used = sum(r["requests"] for r in rows)
    fixed = sum(r["baseline_requests"] or 0 for r in rows)
    decided = [r for r in rows if r["agrees_with_compare"] is not None]
    differ = [r for r in decided if not r["agrees_with_compare"]]
    undecided = [r for r in rows if r["agrees_with_compare"] is None]
    ctx.say(
        f"   in all {used} {RELOAD_AS} requests against the baseline's {fixed} in its fixed "
        f"windows ({used / fixed:.0%})"
        if fixed
        else f"   in all {used} {RELOAD_AS} requests"
    )
    early = sum(1 for r in decided if r["stop_reason"] == "decided")
    said = f"   {len(decided)} of {len(rows)} levels got a verdict ({early} before the budget)"
    if decided:
        said += (
            ", each as specload compare judges the same pair"
            if not differ
            else "; compare judges "
            + ", ".join(f"c{r['concurrency']} {r['compare_verdict']}" for r in differ)
        )
    if undecided:
        said += (
            "; undecided at the budget: "
            + ", ".join(f"c{r['concurrency']}" for r in undecided)
            + f" (its interval still across 1 ± {AGAINST_MARGIN}, or fewer than "
            f"{AGAINST_MIN_REQUESTS} requests by its end)"
        )
    ctx.say(said)
    return {
        "against": str(ctx.results["baseline"]),
        "margin": AGAINST_MARGIN,
        "min_requests": AGAINST_MIN_REQUESTS,
        "levels": rows,
        "requests": used,
        "baseline_requests": fixed,
        "share": used / fixed if fixed else None,
        "decided": len(decided),  # levels with a verdict (at or before the budget)
        "decided_early": early,  # ... before it
        # every decided level's verdict is compare's (None: no level decided)
        "agree_with_compare": not differ if decided else None,
    }


def _stopping_line(row: dict[str, Any]) -> str:
    """``c1: slower after 10 requests (ratio 1.22, 95% interval 1.15 .. 1.31), 11 requests
    against the baseline's 14 (79%), window 7.4 s of 10 s; specload compare: slower``."""
    verdict = row["verdict"] or "no verdict"
    text = f"c{row['concurrency']}: {verdict}"
    if row["stop_reason"] == "decided":
        text += f" after {row['verdict_requests']} requests"
    elif row["stop_reason"] == "budget":
        text += f" at the budget ({row['verdict_requests']} requests in the window)"
    elif row["stop_reason"]:
        text += f" ({row['stop_reason']})"
    ratio, interval = finite_number(row["verdict_ratio"]), row["verdict_interval"]
    if ratio is not None and interval:
        text += (
            f" (median TPOT ratio {ratio:.2f}, 95% repeated interval {interval[0]:.2f} .. "
            f"{interval[1]:.2f})"
        )
    base_n, share = row["baseline_requests"], row["share"]
    text += f", {row['requests']} requests"
    if base_n:
        text += f" against the baseline's {base_n} ({share:.0%})"
    window, planned = finite_number(row["window_s"]), finite_number(row["planned_window_s"])
    if window is not None and planned is not None:
        text += f", window {window:.1f} s of {planned:g} s"
    return text + f"; specload compare on the same pair: {row['compare_verdict'] or 'no data'}"
