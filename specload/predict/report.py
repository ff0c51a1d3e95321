"""The forecast as JSON (``specload-predict/1``) and as Markdown."""

from __future__ import annotations

import math
from typing import Any

import orjson

from simulator.ngram import Totals
from specload.predict.engine_path import EnginePath
from specload.predict.forecast import Forecast, KResult, LevelForecast
from specload.predict.stepcost import Plan, StepCostFit
from specload.results.model import finite_number

FORMAT = "specload-predict/1"


def _f(x: float | None, digits: int = 2) -> str:
    if x is None or (isinstance(x, float) and not math.isfinite(x)):
        return "-"
    return f"{x:.{digits}f}"


def _pct(x: float | None) -> str:
    return "-" if x is None else f"{100 * x:.1f}%"


def _totals_dict(t: Totals) -> dict[str, Any]:
    return t.to_dict()


def level_json(lf: LevelForecast, k: int, plan: Plan) -> dict[str, Any]:
    r: KResult = lf.results[k]
    t = r.totals
    need = plan.need(lf.concurrency, k)
    return {
        "concurrency": lf.concurrency,
        "level": lf.level,
        "requests": lf.requests,
        "acceptance_rate": t.acceptance_rate,
        "mean_acceptance_length": t.mean_acceptance_length,
        "position_acceptance": t.position_acceptance,
        "baseline_median_tpot_ms": lf.baseline_ms,
        "baseline_measured": lf.baseline_measured,
        "replayed_baseline_median_tpot_ms": lf.replayed_baseline_ms,
        "predicted_median_tpot_ms": r.predicted_ms,
        "predicted_low_ms": r.low_ms,
        "predicted_high_ms": r.high_ms,
        "speedup": finite_number(r.speedup),
        "verdict": r.verdict,
        "break_even_step_overhead_ms": finite_number(r.break_even_overhead_ms),
        # the engine path's terms per step at the median request (estimate, all at their
        # low, all at their high), beside the break-even overhead; the probability that the
        # variant is faster (the interval's draws below the baseline's median)
        "estimated_step_overhead_ms": finite_number(r.overhead_ms[0]),
        "estimated_step_overhead_low_ms": finite_number(r.overhead_ms[1]),
        "estimated_step_overhead_high_ms": finite_number(r.overhead_ms[2]),
        "p_faster": r.p_faster,
        # the median request's TPOT part by part: the parts' per_token_ms sum to the
        # predicted median; per_step_ms is the same part per step of that request
        "breakdown": [
            {
                "name": b.name,
                "per_token_ms": finite_number(b.per_token_ms),
                "per_step_ms": finite_number(b.per_step_ms),
                "source": b.source,
            }
            for b in r.breakdown
        ],
        # the most tokens a step of this level verifies, and whether a baseline level
        # measured steps that large (else the curve is extrapolated there: see --plan)
        "step_tokens_max": need.tokens if need is not None else None,
        "extrapolated": need is not None and need.status == "extrapolated",
        "predicted_output_throughput": finite_number(r.output_throughput),
        "baseline_output_throughput": lf.baseline_throughput,
        "replayed_baseline_output_throughput": finite_number(lf.replayed_baseline_throughput),
        "mean_tokens_per_step_baseline": lf.n_tokens,
        "mean_context": lf.context,
        "closed_loop": "duration (batch kept full)" if lf.fill else "requests (batch thins out)",
        "drafts": t.drafts,
        "draft_tokens": t.draft_tokens,
        "accepted_tokens": t.accepted_tokens,
        "accepted_tokens_max": t.accepted_tokens_max,
        "by_phase": {name: _totals_dict(v) for name, v in r.by_phase.items()},
        "by_category": {name: _totals_dict(v) for name, v in r.by_category.items()},
    }


def engine_path_json(path: EnginePath | None) -> dict[str, Any] | None:
    """The engine path as JSON: its own ``to_json()`` where it has one, else its fields."""
    if path is None:
        return None
    to_json = getattr(path, "to_json", None)
    if callable(to_json):
        return dict(to_json())
    return {
        "name": path.name,
        "vllm_version": path.vllm_version,
        "device": path.device,
        "runner": path.runner,
        "proposer": path.proposer,
        "replay_rule": path.replay_rule,
        "baseline_async": path.baseline_async,
        "variant_async": path.variant_async,
        "graph_mode": path.graph_mode,
        "capture_sizes": list(path.capture_sizes),
        "sources": dict(path.sources),
    }


def engine_path_lines(path: EnginePath | None) -> list[str]:
    """One line per field group: the engine path as the Markdown prints it."""
    if path is None:
        return ["engine path: not known (no terms priced: the baseline's curve alone)"]
    describe = getattr(path, "describe", None)
    if callable(describe):
        text = describe()
        return [str(line) for line in (text.splitlines() if isinstance(text, str) else text)]

    def onoff(x: bool | None) -> str:
        return "unknown" if x is None else "on" if x else "off"

    sizes = ", ".join(str(n) for n in path.capture_sizes) or "none"
    return [
        f"engine path: {path.name} (vLLM {path.vllm_version or 'unknown'}, {path.device}), "
        f"runner {path.runner}, proposer {path.proposer}, replay rule {path.replay_rule}",
        f"async scheduling: baseline {onoff(path.baseline_async)}, variant "
        f"{onoff(path.variant_async)}; graph mode {path.graph_mode}, capture sizes {sizes}",
    ]


def terms_json(r: KResult) -> list[dict[str, Any]]:
    return [t.to_dict() for t in r.terms]


def fit_json(fit: StepCostFit) -> dict[str, Any]:
    return fit.to_dict()


def forecast_json(fc: Forecast, measured: dict[str, Any] | None = None) -> dict[str, Any]:
    o = fc.options
    out: dict[str, Any] = {
        "format": FORMAT,
        "baseline": str(fc.baseline.path),
        "method": o.method,
        "num_speculative_tokens": o.num_speculative_tokens,
        "prompt_lookup_min": o.prompt_lookup_min if o.method == "ngram" else None,
        "prompt_lookup_max": o.prompt_lookup_max if o.method == "ngram" else None,
        "max_model_len": o.max_model_len,
        "confidence": o.confidence,
        "n_boot": o.n_boot,
        "min_difference": o.min_difference,
        "curve": o.curve,
        "step_overhead_ms": o.step_overhead_ms,
        "host_step_ms": o.host_step_ms,
        "engine_path": engine_path_json(o.engine_path),
        "warnings": list(fc.warnings),
    }
    if o.method == "draft":
        out["draft_cost_ratio"] = o.draft_cost_ratio
        out["levels"] = fc.draft or []
    else:
        out["levels"] = [level_json(lf, o.num_speculative_tokens, fc.plan) for lf in fc.levels]
        main = fc.levels[0].results[o.num_speculative_tokens] if fc.levels else None
        # the extra terms the engine path implies at k (absent: not implied) and where the
        # padded step sizes came from (None: the path pads nothing)
        out["terms"] = terms_json(main) if main is not None else []
        out["padding"] = main.padding if main is not None else None
        out["totals"] = {
            **_totals_dict(fc.totals),
            "by_phase": {n: _totals_dict(v) for n, v in fc.totals_by_phase.items()},
            "by_category": {n: _totals_dict(v) for n, v in fc.totals_by_category.items()},
        }
        out["k_schedule"] = fc.k_schedule()
    out["fit"] = fit_json(fc.fit)
    out["plan"] = fc.plan.to_dict()
    if measured is not None:
        out["measured"] = measured
    return out


def dumps(data: Any) -> bytes:
    return orjson.dumps(data, option=orjson.OPT_INDENT_2 | orjson.OPT_SERIALIZE_NUMPY) + b"\n"


def fit_markdown(fit: StepCostFit) -> list[str]:
    a, b, c = (float(x) for x in fit.coef)
    lines = [
        "## Step-cost curve (fitted to the baseline)",
        "",
        f"T(n, ctx) = {a:.3f} ms + {b:.4f} ms x n + {c * 1000:.4f} ms x ctx/1000"
        f"  (n tokens in the step, ctx mean context per sequence; curve `{fit.curve}`"
        + (", context term dropped" if not fit.uses_context else "")
        + ")",
        "",
        f"R² {_f(fit.r2, 4)}, residual SD {_f(fit.residual_sd, 3)} ms",
        "",
        "| point | tokens/step | mean context | measured ms | fitted ms | residual ms |",
        "|---|---:|---:|---:|---:|---:|",
    ]
    for p, r in zip(fit.points, fit.residuals, strict=True):
        lines.append(
            f"| {p.label}{'' if p.weight else ' (knot only)'} | {p.n_tokens:.2f} | "
            f"{p.context:.0f} | {p.tpot_ms:.3f} | {p.tpot_ms - float(r):.3f} | {float(r):+.3f} |"
        )
    lines.extend(f"- {n}" for n in fit.notes)
    lines.append("")
    return lines


def plan_markdown(plan: Plan) -> list[str]:
    lines = ["## Plan: baseline levels for the step sizes needed", ""]
    lines.append("measured levels: " + (", ".join(f"c{c}" for c in plan.measured) or "none"))
    beyond = [n for n in plan.needs if n.status == "extrapolated"]
    if beyond:
        worst = max(beyond, key=lambda n: n.tokens)
        lines.append(
            f"{len(beyond)} of {len(plan.needs)} (concurrency, k) pairs put more tokens in a "
            f"step than measured (up to {worst.tokens} at c{worst.concurrency}, k={worst.k})"
        )
    if plan.extra_levels:
        lines.append("extra levels: " + ", ".join(f"c{c}" for c in plan.extra_levels))
        lines.append(f"`{plan.command()}`")
    else:
        lines.append("no extra levels needed")
    lines.extend(f"- {n}" for n in plan.notes)
    lines.append("")
    return lines


def measured_markdown(m: dict[str, Any]) -> list[str]:
    lines = [
        "## Predicted against measured",
        "",
        f"variant: `{m['variant']}`",
        "",
        "| concurrency | predicted ms | measured ms | error | in interval | predicted "
        "speedup | measured speedup | acceptance predicted / measured | measured truncated "
        "| implied step overhead ms |",
        "|---:|---:|---:|---:|---|---:|---:|---|---:|---:|",
    ]
    for row in m["levels"]:
        lines.append(
            f"| {row['concurrency']} | {_f(row['predicted_median_tpot_ms'])} | "
            f"{_f(row['measured_median_tpot_ms'])} | {_signed_pct(row['error_ratio'])} | "
            f"{'yes' if row['within_interval'] else 'no'} | "
            f"{_f(row['predicted_speedup'], 3)}x | {_f(row['measured_speedup'], 3)}x | "
            f"{_pct(row['predicted_acceptance_rate'])} / {_pct(row['measured_acceptance_rate'])} | "
            f"{_pct(row.get('measured_truncated_share'))} | {_f(row['implied_step_overhead_ms'])} |"
        )
    for row in m["levels"]:
        # reasoning_truncated has its own column
        flags = [f for f in row.get("measured_flags") or () if f != "reasoning_truncated"]
        if flags:
            lines.append(
                f"\nmeasured c{row['concurrency']} is flagged {', '.join(flags)} "
                "(docs/sweep.md): judge its row with that in mind"
            )
    if m["totals"]:
        lines += [
            "",
            "| counter | predicted | measured (server, summed over levels) | error |",
            "|---|---:|---:|---:|",
        ]
        for name, v in m["totals"].items():
            pred = f"{v['predicted']:.0f}"
            if v.get("predicted_max") is not None and v["predicted_max"] != v["predicted"]:
                pred += f" (≤ {v['predicted_max']:.0f})"
            lines.append(
                f"| {name} | {pred} | {v['measured']:.0f} | {_signed_pct(v['error_ratio'])} |"
            )
    if m.get("implied_step_overhead_ms") is not None:
        lines += [
            "",
            f"Median implied step overhead {m['implied_step_overhead_ms']:.2f} ms: the variant's "
            "own cost per step that the baseline cannot show (docs/predict.md); "
            "`--step-overhead-ms` carries it to other k and concurrencies.",
        ]
    lines.append("")
    return lines


def _signed_pct(x: float | None) -> str:
    return "-" if x is None or not math.isfinite(x) else f"{100 * x:+.1f}%"


def decision_line(lf: LevelForecast, r: KResult) -> str:
    """'faster with p=0.83; break-even 2.1 ms/step vs estimated 0.9 (0.6-1.5)'."""
    p = "-" if r.p_faster is None else f"{r.p_faster:.2f}"
    faster = r.predicted_ms < lf.baseline_ms
    prob = f"faster with p={p}" if faster else f"not faster (p faster {p})"
    est, lo, hi = r.overhead_ms
    estimated = (
        "no extra term priced"
        if not r.terms
        else f"estimated {_f(est)}" + ("" if lo == hi else f" ({_f(lo)}-{_f(hi)})")
    )
    return f"{prob}; break-even {_f(max(r.break_even_overhead_ms, 0.0))} ms/step vs {estimated}"


def _as_list(lines: list[str]) -> list[str]:
    """The first line as it is, the rest as a Markdown list."""
    if len(lines) < 2:
        return lines
    return [lines[0], "", *(f"- {line.strip()}" for line in lines[1:])]


def breakdown_markdown(fc: Forecast) -> list[str]:
    """Per level, the median request's TPOT part by part (ms per output token), the terms'
    sources below."""
    k = fc.options.num_speculative_tokens
    if not fc.levels:
        return []
    names: list[str] = []
    for lf in fc.levels:
        for b in lf.results[k].breakdown:
            if b.name not in names:
                names.append(b.name)
    lines = [
        f"## Cost breakdown (k={k}, ms per output token at the median request; per step in "
        "brackets)",
        "",
        *_as_list(engine_path_lines(fc.options.engine_path)),
        "",
        "| concurrency | " + " | ".join(names) + " | predicted ms |",
        "|---:|" + "---:|" * (len(names) + 1),
    ]
    for lf in fc.levels:
        r = lf.results[k]
        by = {b.name: b for b in r.breakdown}
        cells = [
            f"{_f(by[n].per_token_ms, 3)} [{_f(by[n].per_step_ms, 3)}]" if n in by else "-"
            for n in names
        ]
        lines.append(f"| {lf.concurrency} | " + " | ".join(cells) + f" | {_f(r.predicted_ms)} |")
    main = fc.levels[0].results[k]
    lines.append("")
    if main.padding is not None:
        lines.append(
            f"- padding: the curve at the padded size minus at the step's own; {main.padding}"
        )
    for t in main.terms:
        rng = "" if t.low == t.high else f" (range {t.low:g}-{t.high:g})"
        lines.append(f"- {t.name}: {t.value:g} {t.unit}{rng}, {t.source}: {t.why}")
    if not main.terms and main.padding is None:
        lines.append(
            "- no extra term: the variant's steps are priced on the baseline's curve alone"
        )
    lines.append("")
    return lines


def forecast_markdown(fc: Forecast, measured: dict[str, Any] | None = None) -> str:
    o = fc.options
    lines: list[str] = []
    if o.method == "draft":
        lines.append(
            f"# Forecast: draft method, k={o.num_speculative_tokens}, "
            f"draft cost ratio {o.draft_cost_ratio}"
        )
    else:
        lines.append(
            f"# Forecast: n-gram, k={o.num_speculative_tokens}, "
            f"prompt_lookup {o.prompt_lookup_min}..{o.prompt_lookup_max}"
        )
    lines += ["", f"baseline: `{fc.baseline.path}`", ""]
    if fc.warnings:
        lines += ["## Warnings", ""] + [f"- {w}" for w in fc.warnings] + [""]
    if o.method == "draft":
        lines += [
            "## Break-even mean acceptance length",
            "",
            "A draft step costs R x a baseline step; the variant pays when its mean acceptance "
            "length (1 + accepted / drafts) exceeds:",
            "",
            "| concurrency | baseline TPOT ms | verify step ms | break-even length | "
            "break-even acceptance (i.i.d.) |",
            "|---:|---:|---:|---:|---:|",
        ]
        for row in fc.draft or []:
            main = row["by_k"][str(o.num_speculative_tokens)]
            length = row["break_even_mean_acceptance_length"]
            lines.append(
                f"| {row['concurrency']} | {_f(row['baseline_median_tpot_ms'])} | "
                f"{_f(main['verify_step_ms'])} | {_f(length)}"
                f"{'' if row['possible'] else ' (above k+1: cannot pay)'} | "
                f"{_pct(row['break_even_acceptance_rate'])} |"
            )
        lines.append("")
    else:
        k = o.num_speculative_tokens
        lines += [
            f"## Per level (k={k})",
            "",
            "| concurrency | acceptance | mean acc. length | baseline TPOT ms | predicted ms "
            f"({int(o.confidence * 100)}% interval) | speedup | verdict | tok/s | "
            "break-even step overhead ms |",
            "|---:|---:|---:|---:|---|---:|---|---:|---:|",
        ]
        for lf in fc.levels:
            r = lf.results[k]
            base = _f(lf.baseline_ms) + ("" if lf.baseline_measured else " (replayed)")
            need = fc.plan.need(lf.concurrency, k)
            beyond = (
                f" extrapolated (steps of up to {need.tokens} tokens)"
                if need is not None and need.status == "extrapolated"
                else ""
            )
            lines.append(
                f"| {lf.concurrency} | {_pct(r.totals.acceptance_rate)} | "
                f"{_f(r.totals.mean_acceptance_length)} | {base} | "
                f"{_f(r.predicted_ms)} ({_f(r.low_ms)}-{_f(r.high_ms)}){beyond} | "
                f"{_f(r.speedup, 3)}x | {r.verdict} | {_f(r.output_throughput, 1)} | "
                f"{_f(max(r.break_even_overhead_ms, 0.0))} |"
            )
        lines += [
            "",
            "Break-even step overhead: the variant's own cost per step (beyond the curve at "
            "the padded step size) at which it stops paying; 0: it does not pay even without "
            "one. Estimated: the engine path's terms per step at the median request (all at "
            "their low .. high); p: the share of the interval's draws (curve x requests x the "
            "terms' ranges) faster than the baseline's median.",
            "",
        ]
        for lf in fc.levels:
            lines.append(f"- c{lf.concurrency}: {decision_line(lf, lf.results[k])}")
        lines += ["", "Per-position acceptance (accepted at position / drafts):", ""]
        for lf in fc.levels:
            pa = lf.results[k].totals.position_acceptance
            lines.append(
                f"- c{lf.concurrency}: "
                + (", ".join(f"{x:.3f}" for x in pa) if pa else "no drafts")
            )
        lines += ["", *breakdown_markdown(fc)]
        t = fc.totals
        lines += [
            "## Totals over the recorded requests (what the variant's counters would show)",
            "",
            f"drafts {t.drafts}, draft tokens {t.draft_tokens}, accepted tokens "
            f"{t.accepted_tokens} (at most {t.accepted_tokens_max} counting drafts past the "
            f"outputs' end), acceptance {_pct(t.acceptance_rate)}, mean acceptance length "
            f"{_f(t.mean_acceptance_length)}",
            "",
            "| part | drafts | draft tokens | accepted | acceptance |",
            "|---|---:|---:|---:|---:|",
        ]
        for name, v in [*fc.totals_by_phase.items(), *fc.totals_by_category.items()]:
            lines.append(
                f"| {name} | {v.drafts} | {v.draft_tokens} | {v.accepted_tokens} | "
                f"{_pct(v.acceptance_rate)} |"
            )
        sched = fc.k_schedule()
        lines += ["", f"## Best k per concurrency (k = {sched['ks'][0]}..{sched['ks'][-1]})", ""]
        for row in sched["per_concurrency"]:
            lines.append(
                f"- c{row['concurrency']}: {row['advice']} (fastest k={row['fastest_k']}: "
                f"{_f(row['predicted_median_tpot_ms'])} ms, {_f(row['speedup'], 3)}x, "
                f"{row['verdict']})"
            )
        lines.append("")
        if sched["speculative_config"]:
            lines += [
                "`--speculative-config`:",
                "",
                "```json",
                orjson.dumps(sched["speculative_config"]).decode(),
                "```",
                "",
            ]
        else:
            lines += ["**Do not speculate**: no k pays at any forecast concurrency.", ""]
    if measured is not None:
        lines += measured_markdown(measured)
    lines += fit_markdown(fc.fit)
    lines += plan_markdown(fc.plan)
    return "\n".join(lines)
