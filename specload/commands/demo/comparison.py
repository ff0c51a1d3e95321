"""Stage 7: the ngram sweep of the reloaded server, then the comparison with the baseline
(:mod:`specload.compare` computes it, :mod:`specload.report.pages` writes its files) and the
prediction of stage 4 beside what was measured."""

from __future__ import annotations

from typing import Any

from specload.commands.demo import figures
from specload.commands.demo.constants import RELOAD_AS, SERVER, VARIANTS
from specload.commands.demo.context import DemoContext, _time
from specload.commands.demo.prediction import predicted_against_measured
from specload.commands.demo.sweeps import _client_metrics_seen, _level_rows, _say_answers, _sweep
from specload.results.model import finite_number

# --- 7. ngram sweep and comparison --------------------------------------------------------------


def ngram_sweep_and_compare(ctx: DemoContext) -> None:
    ctx.say(
        f"== 7. {RELOAD_AS} sweep of the same server, then the comparison "
        "(95% bootstrap confidence intervals)"
    )
    out = _sweep(ctx, RELOAD_AS)
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
        },
    )
    predicted_against_measured(ctx, out)
