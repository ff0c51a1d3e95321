"""The comparison as Markdown (stdout and ``comparison.md``) and as JSON (``comparison.json``).

Both start with the comparison's warnings (runs that differ, incomplete or repaired
runs, truncated levels), then the rows; every row carries the sample size per side.
"""

from __future__ import annotations

from typing import Any

from specload.compare.model import ALL, MEASURES, TOO_FEW, Comparison, LevelComparison
from specload.compare.stats import Difference

JSON_FORMAT = "specload-comparison/1"
WIDENED_MARK = "*"


def _value(value: float | None, unit: str) -> str:
    if value is None:
        return "-"
    return f"{value:.2f}" if unit == "ms" else f"{value:.1f}"


def _pct(diff: Difference | None) -> tuple[str, str]:
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
    for i, variant in enumerate(comp.variants[1:], start=1):
        for level in comp.levels:
            cell = level.cells.get((ALL, "tpot"))
            if cell is None:
                continue
            diff = cell.diffs[i]
            rel, ci = _pct(diff)
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
            lines += [f"Spec-decode acceptance rate (server): {', '.join(acc)}", ""]
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
            for measure in MEASURES:
                cell = level.cells.get((cat, measure.key))
                if cell is None:
                    continue
                row = [cat if cat != ALL else "**all**", f"{measure.title} ({measure.unit})"]
                row += [str(n) for n in cell.n]
                row += [_value(v, measure.unit) for v in cell.values]
                for i in range(1, len(comp.variants)):
                    rel, ci = _pct(cell.diffs[i])
                    row += [rel, ci, cell.verdicts[i] or "-"]
                lines.append("| " + " | ".join(row) + " |")
    lines.append("")
    return "\n".join(lines)


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
            for measure in MEASURES:
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
        "levels": levels,
    }
