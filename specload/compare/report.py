"""The comparison as Markdown (stdout and ``comparison.md``) and as JSON (``comparison.json``).

Both start with the comparison's warnings (runs that differ, incomplete or repaired
runs, truncated levels), then the rows; every row carries the sample size per side.
Speculative variants add their efficiency per level and the crossover concurrency
(:mod:`.efficiency`, :mod:`.crossover`). Runs made with ``--precision`` or ``--against``
add how each level's window ended (``decided after 48 requests: slower``,
:attr:`specload.results.model.Level.stopped`): a line per level and ``stopping`` in the JSON;
runs without them read as before.
"""

from __future__ import annotations

from dataclasses import asdict
from typing import Any

from specload.compare.crossover import Crossover
from specload.compare.efficiency import (
    HIGH_ACCEPTANCE_NO_SPEEDUP,
    HIGH_IDEAL,
    NO_SPEEDUP,
    SOURCE_CLIENT,
    Efficiency,
)
from specload.compare.model import ALL, ALL_MEASURES, TOO_FEW, Comparison, LevelComparison
from specload.compare.search import search_headline, search_json, search_markdown
from specload.compare.stats import Difference

JSON_FORMAT = "specload-comparison/1"
WIDENED_MARK = "*"


def _value(value: float | None, unit: str) -> str:
    if value is None:
        return "-"
    if unit == "ratio":
        return f"{value * 100:.1f}%"
    return f"{value:.2f}" if unit in ("ms", "req/s") else f"{value:.1f}"


def difference_text(diff: Difference | None) -> tuple[str, str]:
    """The relative difference and its interval as text (``+3.1%``, ``+1.0% .. +5.2%``)."""
    if diff is None:
        return "-", "-"
    rel = f"{diff.rel * 100:+.1f}%"
    if diff.ci_low is None or diff.ci_high is None:
        return rel, "-"
    ci = f"{diff.ci_low * 100:+.1f}% .. {diff.ci_high * 100:+.1f}%"
    return rel, ci + (WIDENED_MARK if diff.widened else "")


def _marks(comp: Comparison, level: LevelComparison, i: int) -> str:
    marks = level.marks[i] if i < len(level.marks) else []
    return f" [{comp.variants[i]}: {', '.join(marks)}]" if marks else ""


def headline(comp: Comparison) -> list[str]:
    """One line per variant and level: the TPOT verdict with its interval, n and acceptance."""
    lines: list[str] = []
    ref = comp.variants[0]
    if comp.search is not None:
        lines += search_headline(comp.search)
    for i, variant in enumerate(comp.variants[1:], start=1):
        for level in comp.levels:
            cell = level.cells.get((ALL, "tpot"))
            if cell is None:
                continue
            diff = cell.diffs[i]
            rel, ci = difference_text(diff)
            n = f"n {cell.n[0]}/{cell.n[i]}" if cell.n else ""
            acc = level.acceptance[i]
            acc_text = "" if acc is None else f", acceptance rate {acc:.2f}"
            mal = level.mean_acceptance_length[i]
            if mal is not None:
                acc_text += f" (mean acceptance length {mal:.2f})"
            lines.append(
                f"{variant} vs {ref} at {level.label}: median TPOT "
                f"{_value(cell.values[0], 'ms')} → {_value(cell.values[i], 'ms')} ms, "
                f"{rel} (95% CI {ci}, {n}) — {cell.verdicts[i] or 'no data'}{acc_text}"
                f"{_marks(comp, level, 0)}{_marks(comp, level, i)}"
            )
    return lines


def comparison_markdown(comp: Comparison) -> str:
    ref = comp.variants[0]
    conf = f"{comp.confidence * 100:g}%"
    lines = [f"# specload comparison: {' vs '.join(comp.variants)}", ""]
    if comp.warnings:
        lines += ["## Warnings", ""]
        lines += [f"- {w}" for w in comp.warnings]
        lines.append("")
    lines += [
        f"Reference: **{ref}** ({comp.paths[0]}). Differences are relative to the reference, "
        f"with a {conf} percentile bootstrap confidence interval ({comp.n_boot} resamples of "
        "each run's requests in blocks; the estimate is the same statistic on the run's own "
        "sample, so the interval contains it). "
        f"Verdict: *faster*/*slower* when the interval excludes zero and the difference is at "
        f"least {comp.min_difference * 100:g}%, else *no significant difference*; "
        f"*{TOO_FEW}* below {comp.min_n} samples on a side (no interval); "
        f"TTFCT *not comparable* where more than {comp.truncated_share * 100:g}% of a side's "
        f"requests ended inside reasoning at max_tokens. n: samples per variant. "
        f"{WIDENED_MARK}: the bootstrap's percentiles excluded the estimate (a rare, discrete "
        "case) and the interval was extended to it.",
        "",
        "## Verdicts (median TPOT, all requests)",
        "",
    ]
    lines += [f"- {line}" for line in headline(comp)]
    lines += _stopping_markdown(comp)
    if comp.search is not None:
        lines += ["", *search_markdown(comp.search)]
    lines += _efficiency_markdown(comp)
    lines += _crossover_markdown(comp)
    others = comp.variants[1:]
    for level in comp.levels:
        marks = [
            f"{v}: {', '.join(m)}" for v, m in zip(comp.variants, level.marks, strict=False) if m
        ]
        title = level.label + (f" ({'; '.join(marks)})" if marks else "")
        lines += ["", f"## {title}", ""]
        acc = [
            f"{v}: {a:.3f}"
            for v, a in zip(comp.variants, level.acceptance, strict=True)
            if a is not None
        ]
        if acc:
            lines += [
                f"Spec-decode acceptance rate (server counters, else the requests' own): "
                f"{', '.join(acc)}",
                "",
            ]
        stopped = stopped_line(comp, level)
        if stopped:
            lines += [stopped, ""]
        truncated = [
            f"{v}: {share * 100:.0f}%"
            for v, shares in zip(comp.variants, level.truncated, strict=False)
            if (share := shares.get(ALL)) is not None and share > 0
        ]
        if truncated:
            lines += [
                f"Requests ended inside reasoning at max_tokens: {', '.join(truncated)}",
                "",
            ]
        header = ["category", "measure", *(f"n {v}" for v in comp.variants), *comp.variants]
        for v in others:
            header += [f"Δ {v}", f"{conf} CI", "verdict"]
        lines.append("| " + " | ".join(header) + " |")
        lines.append("|---" * len(header) + "|")
        for cat in level.categories:
            for measure in ALL_MEASURES:
                cell = level.cells.get((cat, measure.key))
                if cell is None:
                    continue
                row = [cat if cat != ALL else "**all**", f"{measure.title} ({measure.unit})"]
                row += [str(n) for n in cell.n]
                row += [_value(v, measure.unit) for v in cell.values]
                for i in range(1, len(comp.variants)):
                    rel, ci = difference_text(cell.diffs[i])
                    row += [rel, ci, cell.verdicts[i] or "-"]
                lines.append("| " + " | ".join(row) + " |")
    lines.append("")
    return "\n".join(lines)


def stopped_line(comp: Comparison, level: LevelComparison) -> str | None:
    """``Stopped (--precision/--against): baseline: budget; ngram: decided after 48
    requests: slower`` — each run's way out of the level's window (None: no run had a
    stopping rule, or none says: every level of a plain run ends at its budget)."""
    if not comp.has_stopping:
        return None
    said = [
        f"{v}: {text}"
        for v, text in zip(comp.variants, level.stopped, strict=False)
        if text is not None
    ]
    return f"Stopped (--precision/--against): {'; '.join(said)}" if said else None


def _stopping_markdown(comp: Comparison) -> list[str]:
    """The runs' stopping rules (``--precision``, ``--against``), when any run had some."""
    rules = [
        f"- {v}: {s.text}"
        for v, s in zip(comp.variants, comp.stopping, strict=False)
        if s is not None
    ]
    if not rules:
        return []
    return [
        "",
        "Stopping rules (a level's window ended when its rule said so; the verdicts above are "
        "this comparison's own, on every request each level measured):",
        "",
        *rules,
    ]


def _ratio(value: float | None) -> str:
    return "-" if value is None else f"{value:.2f}"


def _range(pair: tuple[float, float] | None) -> str:
    return "-" if pair is None else f"{pair[0]:.2f} .. {pair[1]:.2f}"


def _share_pct(value: float | None) -> str:
    return "-" if value is None else f"{value * 100:.0f}%"


def _efficiency_markdown(comp: Comparison) -> list[str]:
    rows: list[list[str]] = []
    ref = comp.variants[0]
    conf = f"{comp.confidence * 100:g}%"
    for i, variant in enumerate(comp.variants[1:], start=1):
        for level in comp.levels:
            eff = level.efficiency[i] if i < len(level.efficiency) else None
            if eff is None:
                continue
            share = ""
            if eff.allreduce_share[0] is not None and eff.allreduce_share[1] is not None:
                share = (
                    f"{_share_pct(eff.allreduce_share[0])} → {_share_pct(eff.allreduce_share[1])}"
                )
            source = "client" if eff.source == SOURCE_CLIENT else "server"
            if eff.reference_ideal != 1.0:
                source += f", ÷ {ref}'s {eff.reference_ideal:.2f}"
            rows.append(
                [
                    variant,
                    level.label,
                    f"{eff.ideal:.2f} ({source})",
                    _ratio(eff.measured),
                    _range(eff.measured_ci),
                    _ratio(eff.efficiency),
                    _range(eff.efficiency_ci),
                    share or "-",
                    f"**{HIGH_ACCEPTANCE_NO_SPEEDUP}**" if eff.no_speedup else "",
                ]
            )
    if not rows:
        return []
    lines = [
        "",
        "## Speculation efficiency",
        "",
        f"Measured speedup = {ref}'s median TPOT / the variant's ({conf} CI: the TPOT row's "
        "interval, as a ratio). Ideal speedup = what the acceptance alone would give if a "
        "verification step cost what a plain step costs: decode tokens / (decode tokens - "
        "accepted tokens) over the level (client: the run's `spec_decode.ideal_speedup`; "
        "server: vLLM's counters, decode = generated - one prefill token per request). "
        "Efficiency = measured / ideal. "
        f"*{HIGH_ACCEPTANCE_NO_SPEEDUP}*: ideal ≥ {HIGH_IDEAL:g} and measured ≤ {NO_SPEEDUP:g} "
        "— verification steps cost more than plain ones: the verification itself, expert "
        "weight reads multiplied by the extra tokens (MoE), all-reduce-bound steps. "
        "All-reduce share: decode steps at the level's batch size in each run's profile.",
        "",
        f"| variant | level | ideal speedup | measured speedup | {conf} CI | efficiency "
        f"| {conf} CI | all-reduce share ({ref} → variant) | note |",
        "|---" * 9 + "|",
    ]
    lines += ["| " + " | ".join(row) + " |" for row in rows]
    profiles = [
        f"{variant}: {profile.path} (decode all-reduce share "
        f"{_share_pct(profile.decode_allreduce_ratio)} over the capture's "
        f"{profile.decode_steps if profile.decode_steps is not None else '?'} decode steps)"
        for variant, profile in zip(comp.variants, comp.profiles, strict=False)
        if profile is not None
    ]
    if profiles:
        lines += ["", "Profiles: " + "; ".join(profiles)]
    return lines


def crossover_line(comp: Comparison, cross: Crossover) -> str:
    """One sentence: where the variant stops being faster than the reference, or why not."""
    ref = comp.variants[0]
    ratios = ", ".join(f"{c:g}: {r:.2f}" for c, r in cross.ratios) or "none"
    tail = f" (TPOT ratio {cross.variant}/{ref} by concurrency: {ratios})"
    if cross.concurrency is None or cross.between is None:
        return f"{cross.variant} vs {ref}: no crossover — {cross.reason}{tail}"
    lo_c, hi_c = cross.between
    conf = f"{comp.confidence * 100:g}%"
    if cross.interval is None:
        ci = cross.note or "no interval"
    else:
        low, high = cross.interval
        lo_text = f"{low:.1f}" if low is not None else f"below {cross.ratios[0][0]:g}"
        hi_text = f"{high:.1f}" if high is not None else f"above {cross.ratios[-1][0]:g}"
        ci = (
            f"{conf} CI {lo_text} .. {hi_text}{WIDENED_MARK if cross.widened else ''}; "
            f"replicates crossing below the levels {_share_pct(cross.below_share)}, "
            f"above {_share_pct(cross.above_share)}"
        )
    return (
        f"{cross.variant} vs {ref}: stops being faster at concurrency ≈ "
        f"{cross.concurrency:.1f} (between {lo_c:g} and {hi_c:g}; {ci}){tail}"
    )


def _crossover_markdown(comp: Comparison) -> list[str]:
    if not comp.crossovers:
        return []
    lines = [
        "",
        "## Crossover",
        "",
        "Where the TPOT ratio (variant / reference median TPOT) first goes from below 1 to 1 "
        "or more between two neighbouring levels, interpolated linearly on log2(concurrency); "
        "the interval recomputes the crossing on every bootstrap replicate of every level.",
        "",
    ]
    lines += [f"- {crossover_line(comp, cross)}" for cross in comp.crossovers]
    return lines


def _efficiency_json(eff: Efficiency | None) -> dict[str, Any] | None:
    if eff is None:
        return None
    return {
        "ideal_speedup": eff.ideal,
        "ideal_source": eff.source,
        "reference_ideal_speedup": eff.reference_ideal,
        "measured_speedup": eff.measured,
        "measured_speedup_ci": list(eff.measured_ci) if eff.measured_ci else None,
        "efficiency": eff.efficiency,
        "efficiency_ci": list(eff.efficiency_ci) if eff.efficiency_ci else None,
        "high_acceptance_no_speedup": eff.no_speedup,
        "allreduce_share": list(eff.allreduce_share),
    }


def _crossover_json(cross: Crossover) -> dict[str, Any]:
    found = None
    if cross.concurrency is not None:
        found = {
            "concurrency": cross.concurrency,
            "interval": list(cross.interval) if cross.interval is not None else None,
            "between": list(cross.between) if cross.between is not None else None,
            "below_share": cross.below_share,
            "above_share": cross.above_share,
            "widened": cross.widened,
        }
    return {
        "variant": cross.variant,
        "crossover": found,
        "reason": cross.reason,
        "note": cross.note,
        "tpot_ratios": [{"concurrency": c, "ratio": r} for c, r in cross.ratios],
    }


def _diff_json(diff: Difference | None) -> dict[str, Any] | None:
    if diff is None:
        return None
    return {
        "rel": diff.rel,
        "ci_low": diff.ci_low,
        "ci_high": diff.ci_high,
        "n_a": diff.n_a,
        "n_b": diff.n_b,
        "widened": diff.widened,
    }


def comparison_json(comp: Comparison) -> dict[str, Any]:
    """The comparison as plain data (``comparison.json``): warnings first, then the rows."""
    levels = []
    for level in comp.levels:
        rows = []
        for cat in level.categories:
            for measure in ALL_MEASURES:
                cell = level.cells.get((cat, measure.key))
                if cell is None:
                    continue
                rows.append(
                    {
                        "category": cat,
                        "measure": measure.key,
                        "unit": measure.unit,
                        "values": cell.values,
                        "n": cell.n,
                        "differences": [_diff_json(d) for d in cell.diffs[1:]],
                        "verdicts": cell.verdicts[1:],
                    }
                )
        levels.append(
            {
                "name": level.name,
                "label": level.label,
                "load": level.load,
                "marks": level.marks,
                "acceptance": level.acceptance,
                "mean_acceptance_length": level.mean_acceptance_length,
                "reasoning_truncated_ratio": [shares.get(ALL) for shares in level.truncated],
                "efficiency": [_efficiency_json(e) for e in level.efficiency[1:]],
                **_stops_json(comp, level),
                "rows": rows,
            }
        )
    return {
        "format": JSON_FORMAT,
        "warnings": comp.warnings,
        "variants": comp.variants,
        "paths": [str(p) for p in comp.paths],
        "statuses": comp.statuses,
        "confidence": comp.confidence,
        "n_boot": comp.n_boot,
        "min_difference": comp.min_difference,
        "min_n": comp.min_n,
        "truncated_share": comp.truncated_share,
        "profiles": [
            None
            if p is None
            else {
                "path": str(p.path),
                "decode_allreduce_ratio": p.decode_allreduce_ratio,
                "decode_steps": p.decode_steps,
            }
            for p in comp.profiles
        ],
        "crossovers": [_crossover_json(c) for c in comp.crossovers],
        "search": search_json(comp.search) if comp.search is not None else None,
        **(
            {"stopping": [None if s is None else asdict(s) for s in comp.stopping]}
            if comp.has_stopping
            else {}
        ),
        "levels": levels,
    }


def _stops_json(comp: Comparison, level: LevelComparison) -> dict[str, Any]:
    """A level's ``stopping``: per run its summary's fields and ``stopped`` in words (null:
    the run does not say); absent when no run had a stopping rule (comparisons of older or
    plain runs unchanged)."""
    if not comp.has_stopping or all(s is None for s in level.stops):
        return {}
    return {
        "stopping": [
            None if fields is None else {**fields, "stopped": text}
            for fields, text in zip(level.stops, level.stopped, strict=True)
        ]
    }
