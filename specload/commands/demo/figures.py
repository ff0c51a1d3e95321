"""Every figure the demo reads out of a sweep's summary, in one place: the chapters take them
from here and never read the summary themselves. The summary is read by
:func:`specload.results.model.read`, the one typed reader of a result.

Each figure keeps the fallback the demo has always applied: counts missing are 0, a median
or a rate that is missing or not finite is None.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from specload.compare.baseline import baseline_from_summary
from specload.results import model
from specload.results.model import Figures, Level, Summary


@dataclass(frozen=True)
class CategoryFigures:
    """One prompt type at one level."""

    completed: int
    reasoning_truncated: int
    median_tpot_ms: float | None
    median_ttfct_ms: float | None


@dataclass(frozen=True)
class LevelFigures:
    concurrency: int | None  # None: an open-loop level
    completed: int
    reasoning_truncated: int
    median_tpot_ms: float | None
    output_throughput: float | None
    warnings: list[str]
    #: The measured window (unix seconds), either end None where the summary has none.
    window: tuple[float | None, float | None]
    categories: dict[str, CategoryFigures]
    #: The server's speculative-decoding counters over the level (None: absent).
    accepted_tokens: float | None
    draft_tokens: float | None
    #: How the window ended (``specload run --against``; None where the summary does not
    #: say): ``stop_reason`` (decided, budget…), the verdict, the requests it took, the
    #: median ratio variant/baseline and its 95% repeated interval; the planned window.
    stop_reason: str | None = None
    verdict: str | None = None
    verdict_requests: int | None = None
    verdict_ratio: float | None = None
    verdict_interval: tuple[float, float] | None = None
    planned_duration_s: float | None = None

    @property
    def window_s(self) -> float | None:
        """The measured window's length in seconds (None: an end is missing)."""
        start, end = self.window
        return None if start is None or end is None else end - start


@dataclass(frozen=True)
class SweepFigures:
    path: Path
    summary: Summary
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
                accepted, drafted = accepted + a, drafted + d
        return accepted / drafted if drafted else None

    def baseline_export(self) -> dict[str, Any]:
        """``specload baseline export`` of this sweep (the exporter's baseline file)."""
        return baseline_from_summary(self.summary, str(self.path))


def _category(stats: Figures) -> CategoryFigures:
    return CategoryFigures(
        completed=stats.completed,
        reasoning_truncated=stats.reasoning_truncated or 0,
        median_tpot_ms=stats.median_tpot_ms,
        median_ttfct_ms=stats.ms("median", "ttfct"),
    )


def _level(level: Level) -> LevelFigures:
    server = level.server
    return LevelFigures(
        concurrency=level.concurrency,
        completed=level.figures.completed,
        reasoning_truncated=level.figures.reasoning_truncated or 0,
        median_tpot_ms=level.figures.median_tpot_ms,
        output_throughput=level.figures.output_throughput,
        warnings=list(level.warnings),
        window=level.window,
        categories={n: _category(s) for n, s in level.categories.items()},
        accepted_tokens=None if server is None else server.spec_decode_num_accepted_tokens,
        draft_tokens=None if server is None else server.spec_decode_num_draft_tokens,
        stop_reason=level.stop_reason,
        verdict=level.verdict,
        verdict_requests=level.verdict_requests,
        verdict_ratio=level.verdict_ratio,
        verdict_interval=level.verdict_interval,
        planned_duration_s=level.planned_duration_s,
    )


def read(results_dir: Path) -> SweepFigures:
    """The figures of the sweep in ``results_dir`` (UsageError: no summary.json there)."""
    summary = model.read(results_dir)
    scale = summary.server_time_scale
    return SweepFigures(
        path=results_dir,
        summary=summary,
        time_scale=scale if scale is not None and scale > 0 else None,
        levels=[_level(level) for level in summary.levels],
    )
