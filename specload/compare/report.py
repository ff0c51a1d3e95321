"""The comparison as Markdown (stdout and ``comparison.md``)."""

from __future__ import annotations

from specload.compare.model import ALL, MEASURES, Comparison
from specload.compare.stats import Difference


def _value(value: float | None, unit: str) -> str:
    if value is None:
        return "-"
    return f"{value:.2f}" if unit == "ms" else f"{value:.1f}"


def _pct(diff: Difference | None) -> tuple[str, str]:
    if diff is None:
        return "-", "-"
    return f"{diff.rel * 100:+.1f}%", f"{diff.ci_low * 100:+.1f}% .. {diff.ci_high * 100:+.1f}%"


def headline(comp: Comparison) -> list[str]:
    """One line per variant and level: the TPOT verdict with its interval and acceptance."""
    lines: list[str] = []
    ref = comp.variants[0]
    for i, variant in enumerate(comp.variants[1:], start=1):
        for level in comp.levels:
            cell = level.cells.get((ALL, "tpot"))
            if cell is None:
                continue
            diff = cell.diffs[i]
            rel, ci = _pct(diff)
            acc = level.acceptance[i]
            acc_text = "" if acc is None else f", acceptance rate {acc:.2f}"
            mal = level.mean_acceptance_length[i]
            if mal is not None:
                acc_text += f" (mean acceptance length {mal:.2f})"
            lines.append(
                f"{variant} vs {ref} at {level.label}: median TPOT "
                f"{_value(cell.values[0], 'ms')} → {_value(cell.values[i], 'ms')} ms, "
                f"{rel} (95% CI {ci}) — {cell.verdicts[i] or 'no data'}{acc_text}"
            )
    return lines


def comparison_markdown(comp: Comparison) -> str:
    ref = comp.variants[0]
    conf = f"{comp.confidence * 100:g}%"
    lines = [
        f"# specload comparison: {' vs '.join(comp.variants)}",
        "",
        f"Reference: **{ref}** ({comp.paths[0]}). Differences are relative to the reference, "
        f"with a {conf} bootstrap confidence interval ({comp.n_boot} resamples of the requests). "
        f"Verdict: *faster*/*slower* when the interval excludes zero and the difference is at "
        f"least {comp.min_difference * 100:g}%, else *no significant difference*.",
        "",
        "## Verdicts (median TPOT, all requests)",
        "",
    ]
    lines += [f"- {line}" for line in headline(comp)]
    others = comp.variants[1:]
    for level in comp.levels:
        lines += ["", f"## {level.label}", ""]
        acc = [
            f"{v}: {a:.3f}"
            for v, a in zip(comp.variants, level.acceptance, strict=True)
            if a is not None
        ]
        if acc:
            lines += [f"Spec-decode acceptance rate (server): {', '.join(acc)}", ""]
        header = ["category", "measure", *comp.variants]
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
                row += [_value(v, measure.unit) for v in cell.values]
                for i in range(1, len(comp.variants)):
                    rel, ci = _pct(cell.diffs[i])
                    row += [rel, ci, cell.verdicts[i] or "-"]
                lines.append("| " + " | ".join(row) + " |")
    lines.append("")
    return "\n".join(lines)
