"""Every figure the demo reads out of a sweep's ``summary.json``, in one place: the chapters
take them from here and never read the summary's dicts themselves (when the demo moves to
:mod:`specload.results.model`'s typed reader, only this module changes).

Each figure keeps the fallback the demo has always applied: counts missing are 0, a median
or a rate that is missing or not finite is None, a level's concurrency is as written.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from specload.compare.baseline import baseline_from_summary
from specload.results.model import finite_number, level_window
from specload.results.writer import read_summary


@dataclass(frozen=True)
class CategoryFigures:
    """One prompt type at one level."""

    completed: int
    reasoning_truncated: int
    median_tpot_ms: float | None
    median_ttfct_ms: float | None


@dataclass(frozen=True)
class LevelFigures:
    concurrency: Any  # as summary.json has it (None where it has none)
    completed: int
    reasoning_truncated: int
    median_tpot_ms: float | None
    output_throughput: float | None
    warnings: list[str]
    #: The measured window (unix seconds), either end None where the summary has none.
    window: tuple[float | None, float | None]
    categories: dict[str, CategoryFigures]
    #: The server's speculative-decoding counters over the level, as written (None: absent).
    accepted_tokens: Any
    draft_tokens: Any


@dataclass(frozen=True)
class SweepFigures:
    path: Path
    summary: Mapping[str, Any]
    #: The simulator's time scale as it reported it (None: not a positive number).
    time_scale: float | None
    levels: list[LevelFigures]

    @property
    def completed(self) -> int:
        return sum(lv.completed for lv in self.levels)

    @property
    def reasoning_truncated(self) -> int:
        return sum(lv.reasoning_truncated for lv in self.levels)

    @property
    def warnings(self) -> list[str]:
        return [w for lv in self.levels for w in lv.warnings]

    def acceptance(self) -> float | None:
        """Accepted / drafted tokens over the levels whose server counters drafted any (the
        sweep's /metrics scrapes over the measured windows)."""
        accepted = drafted = 0.0
        for lv in self.levels:
            a, d = lv.accepted_tokens, lv.draft_tokens
            if a is not None and d:
                accepted, drafted = accepted + float(a), drafted + float(d)
        return accepted / drafted if drafted else None

    def baseline_export(self) -> dict[str, Any]:
        """``specload baseline export`` of this sweep (the exporter's baseline file)."""
        return baseline_from_summary(self.summary, str(self.path))


def _category(stats: Mapping[str, Any]) -> CategoryFigures:
    return CategoryFigures(
        completed=int(stats.get("completed") or 0),
        reasoning_truncated=int(stats.get("reasoning_truncated") or 0),
        median_tpot_ms=finite_number(stats.get("median_tpot_ms")),
        median_ttfct_ms=finite_number(stats.get("median_ttfct_ms")),
    )


def _level(level: Mapping[str, Any]) -> LevelFigures:
    categories = level.get("categories") or {}
    server = level.get("server") or {}
    return LevelFigures(
        concurrency=level.get("concurrency"),
        completed=int(level.get("completed") or 0),
        reasoning_truncated=int(level.get("reasoning_truncated") or 0),
        median_tpot_ms=finite_number(level.get("median_tpot_ms")),
        output_throughput=finite_number(level.get("output_throughput")),
        warnings=list(level.get("warnings") or []),
        window=level_window(level),
        categories={n: _category(s) for n, s in categories.items() if isinstance(s, dict)},
        accepted_tokens=server.get("spec_decode_num_accepted_tokens"),
        draft_tokens=server.get("spec_decode_num_draft_tokens"),
    )


def read(results_dir: Path) -> SweepFigures:
    """The figures of the sweep in ``results_dir`` (UsageError: no summary.json there)."""
    summary = read_summary(results_dir)
    scale = finite_number(summary.get("server_time_scale"))
    return SweepFigures(
        path=results_dir,
        summary=summary,
        time_scale=scale if scale is not None and scale > 0 else None,
        levels=[_level(level) for level in summary.get("levels", [])],
    )
