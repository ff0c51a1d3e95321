"""Comparison of result directories: per level and category, each variant against the first."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

import numpy as np

from specload.compare.stats import Difference, block_length, bootstrap_difference, median
from specload.errors import UsageError
from specload.results.aggregate import RecordView
from specload.results.writer import read_requests, read_summary

ALL = "all"
FASTER, SLOWER, SAME = "faster", "slower", "no significant difference"


@dataclass(frozen=True)
class Measure:
    key: str
    title: str
    unit: str
    lower_is_better: bool


MEASURES = (
    Measure("tpot", "median TPOT", "ms", True),
    Measure("ttft", "median TTFT", "ms", True),
    Measure("ttfct", "median TTFCT", "ms", True),
    Measure("output_throughput", "output tok/s", "tok/s", False),
)


@dataclass
class Run:
    path: Path
    summary: dict[str, Any]
    records: list[dict[str, Any]]

    @property
    def variant(self) -> str:
        return str(self.summary.get("variant") or self.path.name)

    def level(self, name: str) -> dict[str, Any] | None:
        for level in self.summary.get("levels", []):
            if level.get("name") == name:
                return dict(level)
        return None


def load_run(path: str | Path) -> Run:
    p = Path(path)
    if not p.exists():
        raise UsageError(f"{path}: no such results directory")
    summary = read_summary(p)
    return Run(p, summary, read_requests(p))


@dataclass
class Cell:
    """One measure at one level and category: each variant's value, and differences to the first."""

    values: list[float | None]
    diffs: list[Difference | None]  # index 0 is None (the reference)
    verdicts: list[str | None]


@dataclass
class LevelComparison:
    name: str
    label: str
    load: float
    cells: dict[tuple[str, str], Cell] = field(default_factory=dict)  # (category, measure)
    acceptance: list[float | None] = field(default_factory=list)
    mean_acceptance_length: list[float | None] = field(default_factory=list)
    categories: list[str] = field(default_factory=list)


@dataclass
class Comparison:
    variants: list[str]
    paths: list[Path]
    levels: list[LevelComparison]
    confidence: float
    n_boot: int
    min_difference: float

    def regressions(self, pct: float) -> list[str]:
        """Where a variant's median TPOT is worse than the first's by more than ``pct``%.

        "With confidence": the interval's lower bound is above ``pct``.
        """
        found: list[str] = []
        for level in self.levels:
            cell = level.cells.get((ALL, "tpot"))
            if cell is None:
                continue
            for i, diff in enumerate(cell.diffs):
                if diff is not None and diff.ci_low * 100.0 > pct:
                    found.append(
                        f"{self.variants[i]} at {level.label}: median TPOT {diff.rel * 100:+.1f}% "
                        f"(CI {diff.ci_low * 100:+.1f}%..{diff.ci_high * 100:+.1f}%) "
                        f"vs {self.variants[0]}"
                    )
        return found


def _label(level: Mapping[str, Any]) -> tuple[str, float]:
    if level.get("concurrency") is not None:
        return f"concurrency {level['concurrency']}", float(level["concurrency"])
    rate = float(level.get("request_rate") or 0.0)
    return f"rate {rate:g}/s", rate


THROUGHPUT_BINS = 10


def _throughput_bins(
    records: Sequence[RecordView], duration_s: float, window_start: float | None
) -> list[float]:
    """Output tok/s in equal time bins of the window, by request start: their mean is the
    level's throughput, and their spread (a slow stretch, a lucky one) is its uncertainty."""
    if duration_s <= 0 or not records:
        return []
    width = duration_s / THROUGHPUT_BINS
    bins = [0.0] * THROUGHPUT_BINS
    start = window_start
    if start is None:
        start = min(float(r.raw.get("start_s") or 0.0) for r in records)
    for r in records:
        if not r.ok:
            continue
        offset = float(r.raw.get("start_s") or start) - start
        index = min(THROUGHPUT_BINS - 1, max(0, int(offset // width)))
        bins[index] += r.tokens_output / width
    return bins


def _window_start(level: Mapping[str, Any]) -> float | None:
    text = level.get("window_started_at")
    if not text:
        return None
    try:
        return datetime.fromisoformat(str(text)).timestamp()
    except ValueError:
        return None


def _samples(records: Sequence[RecordView], measure: str) -> list[float]:
    out = []
    for r in records:
        if r.ok:
            value = r.seconds(measure)
            if value is not None:
                out.append(value * 1000.0)
    return out


def _verdict(diff: Difference | None, lower_is_better: bool, min_difference: float) -> str | None:
    if diff is None:
        return None
    if not diff.excludes_zero or abs(diff.rel) < min_difference:
        return SAME
    worse = diff.rel > 0 if lower_is_better else diff.rel < 0
    return SLOWER if worse else FASTER


def compare_runs(
    runs: Sequence[Run],
    *,
    n_boot: int = 2000,
    confidence: float = 0.95,
    min_difference: float = 0.05,
    seed: int = 0,
) -> Comparison:
    if len(runs) < 2:
        raise UsageError("compare: give at least two results directories")
    names = [str(level.get("name")) for level in runs[0].summary.get("levels", [])]
    common = [n for n in names if all(run.level(n) is not None for run in runs[1:])]
    if not common:
        raise UsageError(
            f"compare: no level in common between {', '.join(str(r.path) for r in runs)}"
        )
    by_run: list[dict[str, list[RecordView]]] = []
    for run in runs:
        steps: dict[str, list[RecordView]] = {}
        # in start order: the bootstrap resamples blocks of requests that ran together
        for raw in sorted(run.records, key=lambda r: float(r.get("start_s") or 0.0)):
            view = RecordView(raw)
            steps.setdefault(view.step, []).append(view)
        by_run.append(steps)

    levels: list[LevelComparison] = []
    for name in common:
        first = runs[0].level(name)
        assert first is not None
        label, load = _label(first)
        lc = LevelComparison(name, label, load)
        cats: set[str] = set()
        for steps in by_run:
            cats.update(r.category for r in steps.get(name, []))
        lc.categories = [ALL, *sorted(cats)]
        for run in runs:
            server = (run.level(name) or {}).get("server") or {}
            lc.acceptance.append(server.get("spec_decode_acceptance_rate"))
            lc.mean_acceptance_length.append(server.get("spec_decode_mean_acceptance_length"))
        for cat in lc.categories:
            for measure in MEASURES:
                per_run = []
                blocks: list[int] = []
                points: list[float | None] = []
                for run, steps in zip(runs, by_run, strict=True):
                    recs = steps.get(name, [])
                    if cat != ALL:
                        recs = [r for r in recs if r.category == cat]
                    info = run.level(name) or {}
                    if measure.key == "output_throughput":
                        duration = float(info.get("duration") or 0.0)
                        samples = _throughput_bins(recs, duration, _window_start(info))
                        blocks.append(1)
                        points.append(sum(samples) / len(samples) if samples else None)
                    else:
                        samples = _samples(recs, measure.key)
                        users = int(info.get("concurrency") or info.get("max_concurrency") or 1)
                        blocks.append(block_length(len(samples), users))
                        points.append(median(samples) if samples else None)
                    per_run.append(samples)
                diffs: list[Difference | None] = [None]
                for i in range(1, len(runs)):
                    pa, pb = points[0], points[i]
                    if pa is None or pb is None:
                        diffs.append(None)
                        continue
                    stat = _mean_stat if measure.key == "output_throughput" else None
                    kwargs: dict[str, Any] = {} if stat is None else {"stat": stat}
                    diffs.append(
                        bootstrap_difference(
                            per_run[0],
                            per_run[i],
                            point_a=pa,
                            point_b=pb,
                            n_boot=n_boot,
                            confidence=confidence,
                            seed=seed + i,
                            block_a=blocks[0],
                            block_b=blocks[i],
                            **kwargs,
                        )
                    )
                verdicts = [None] + [
                    _verdict(d, measure.lower_is_better, min_difference) for d in diffs[1:]
                ]
                lc.cells[(cat, measure.key)] = Cell(points, diffs, verdicts)
        levels.append(lc)
    return Comparison(
        [run.variant for run in runs],
        [run.path for run in runs],
        levels,
        confidence,
        n_boot,
        min_difference,
    )


def _mean_stat(matrix: Any) -> Any:
    return np.mean(matrix, axis=1)
