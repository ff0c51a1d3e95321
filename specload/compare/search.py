"""``specload compare`` of searched runs (``--search slo``): the load each variant sustains
under the same objectives, and the ratio to the reference — the number a decision needs.

A search brackets its limit: the highest level that held (``limit``) and the lowest that fell
short (``set_by``); the true limit lies between. The ratio is ``limit_i / limit_0`` and its
bracket ``[limit_i / fail_0, fail_i / limit_0]`` (an open end where a search never fell short,
"at least"). Runs searched under other objectives, attainment or variable are not compared.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from specload.results.model import Summary
from specload.slo import parse_slo


@dataclass(frozen=True)
class SearchLimit:
    """One variant's search: the highest load that held, the lowest that did not."""

    variant: str
    variable: str
    limit: float | None
    fail: float | None  # the load of ``set_by`` (None: every level held)
    limit_level: str | None
    set_by: str | None
    complete: bool
    steps: int


@dataclass(frozen=True)
class SearchComparison:
    variable: str
    attainment: float
    objectives: dict[str, float]
    limits: list[SearchLimit]
    ratios: list[float | None]  # per variant after the first
    brackets: list[tuple[float | None, float | None]]  # (low, high) per variant after the first


def _load_of(step: str | None) -> float | None:
    if not step:
        return None
    try:
        return float(step[1:])
    except ValueError:
        return None


def _limit(label: str, summary: Summary) -> SearchLimit | None:
    block = summary.search
    if block is None:
        return None
    return SearchLimit(
        label,
        block.variable,
        block.limit,
        _load_of(block.set_by),
        block.limit_level,
        block.set_by,
        block.complete,
        len(block.steps),
    )


def _objectives(summary: Summary) -> dict[str, float]:
    return parse_slo(summary.options.get("slo")).as_dict()


def compare_searches(
    runs: Sequence[tuple[str, Summary]],
) -> tuple[SearchComparison | None, list[str]]:
    """The searches of ``(label, summary)`` runs compared (None unless every run searched),
    and the comparison's warnings."""
    limits = [_limit(label, summary) for label, summary in runs]
    searched = [lim for lim in limits if lim is not None]
    if not searched:
        return None, []
    if len(searched) != len(runs):
        alone = ", ".join(label for (label, _), lim in zip(runs, limits, strict=True) if not lim)
        return None, [f"search limits not compared: {alone} did not search (--search slo)"]
    found = [lim for lim in limits if lim is not None]
    warnings: list[str] = []
    for what, values in (
        ("variable", [lim.variable for lim in found]),
        (
            "attainment",
            [summary.search.attainment if summary.search else None for _, summary in runs],
        ),
        ("objectives", [_objectives(summary) for _, summary in runs]),
    ):
        if any(v != values[0] for v in values[1:]):
            shown = "; ".join(f"{lim.variant}: {v}" for lim, v in zip(found, values, strict=True))
            return None, [f"search limits not compared: different {what} ({shown})"]
    for lim in found:
        if not lim.complete:
            warnings.append(f"{lim.variant}'s search did not finish: its limit is a lower bound")
        if lim.limit is None:
            warnings.append(f"{lim.variant}: no searched level held the objectives")
    ref = found[0]
    ratios: list[float | None] = []
    brackets: list[tuple[float | None, float | None]] = []
    for lim in found[1:]:
        if lim.limit is None or ref.limit is None:
            ratios.append(None)
            brackets.append((None, None))
            continue
        ratios.append(lim.limit / ref.limit)
        low = lim.limit / ref.fail if ref.fail is not None else None
        high = lim.fail / ref.limit if lim.fail is not None else None
        brackets.append((low, high))
    first = runs[0][1]
    attainment = (first.search.attainment if first.search else None) or 0.0
    return (
        SearchComparison(ref.variable, attainment, _objectives(first), found, ratios, brackets),
        warnings,
    )


def _load(value: float | None, variable: str) -> str:
    if value is None:
        return "-"
    return f"{value:g} req/s" if variable == "request_rate" else f"{value:g} users"


def search_headline(comp: SearchComparison) -> list[str]:
    """One line per variant: the load it sustains against the reference's, and the ratio."""
    ref = comp.limits[0]
    lines = []
    for lim, ratio in zip(comp.limits[1:], comp.ratios, strict=True):
        figures = f"{_load(lim.limit, comp.variable)} vs {_load(ref.limit, comp.variable)}"
        if ratio is None:
            lines.append(f"{lim.variant} vs {ref.variant} under the objectives: {figures}")
        else:
            lines.append(
                f"{lim.variant} sustains {ratio:.2f}x the load of {ref.variant} under the "
                f"objectives ({figures})"
            )
    return lines


def search_markdown(comp: SearchComparison) -> list[str]:
    """The "Highest load under the objectives" section of comparison.md."""
    objectives = ", ".join(f"{k} ≤ {v * 1000:g} ms" for k, v in comp.objectives.items())
    lines = [
        "## Highest load under the objectives",
        "",
        f"Searched ({comp.variable}): the highest level at which at least "
        f"{comp.attainment * 100:g}% of completed requests met every objective ({objectives}). "
        "The true limit lies between the level that held and the one that fell short; the "
        "ratio's bracket follows from those ends.",
        "",
        "| variant | limit | held at | fell short at | levels tried | ratio | bracket |",
        "|---|---|---|---|---|---|---|",
    ]
    for i, lim in enumerate(comp.limits):
        ratio, bracket = "reference", ""
        if i:
            value, (low, high) = comp.ratios[i - 1], comp.brackets[i - 1]
            ratio = "-" if value is None else f"{value:.2f}x"
            if value is not None:
                bracket = (
                    f"{'-' if low is None else f'{low:.2f}'}.."
                    f"{'open' if high is None else f'{high:.2f}'}"
                )
        lines.append(
            f"| {lim.variant} | {_load(lim.limit, comp.variable)} | {lim.limit_level or '-'} | "
            f"{lim.set_by or 'never'} | {lim.steps} | {ratio} | {bracket} |"
        )
    lines.append("")
    return lines


def search_json(comp: SearchComparison) -> dict[str, Any]:
    return {
        "variable": comp.variable,
        "attainment": comp.attainment,
        "objectives_s": comp.objectives,
        "limits": [
            {
                "variant": lim.variant,
                "limit": lim.limit,
                "limit_level": lim.limit_level,
                "set_by": lim.set_by,
                "complete": lim.complete,
                "levels_tried": lim.steps,
            }
            for lim in comp.limits
        ],
        "ratios": comp.ratios,
        "brackets": [list(b) for b in comp.brackets],
    }
