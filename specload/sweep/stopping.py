"""What ends a level before its budget: ``--precision`` and ``--against`` (with ``--margin``).

The rules themselves (intervals, boundaries, verdicts) are :mod:`specload.results.stopping`;
here they are planned from the command line and fed a level's requests by the driver.
``--against DIR`` reads the baseline once at the start and refuses, in one line, a baseline
that cannot be compared: no such directory, a level it lacks, too few requests with the
metric, and (:func:`comparable`) the checks ``compare`` makes on two runs' settings.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from specload.compare.model import Run, comparability_warnings, load_run
from specload.errors import UsageError
from specload.records.request import RequestRecord
from specload.results.model import from_dict, median
from specload.results.stopping import (
    MIN_REQUESTS_DEFAULT,
    THROUGHPUT,
    Metric,
    PrecisionRule,
    SequentialRule,
    ThroughputPrecision,
    metric,
)
from specload.sweep.plan import Level, SweepPlan

#: How close a level may be asked to get (``--precision``) and how wide a margin may be.
MIN_PRECISION = 0.001
MAX_SHARE = 0.5


def parse_share(text: str, *, name: str) -> float:
    """``2%`` or ``0.02`` as a ratio in (0, :data:`MAX_SHARE`]; a one-line error otherwise."""
    raw = str(text).strip()
    try:
        value = float(raw[:-1]) / 100.0 if raw.endswith("%") else float(raw)
    except ValueError:
        raise UsageError(f"{name}: {text!r} is not a share (e.g. 2% or 0.02)") from None
    if not math.isfinite(value) or not MIN_PRECISION <= value <= MAX_SHARE:
        raise UsageError(
            f"{name}: {text!r} out of range ({MIN_PRECISION * 100:g}% to {MAX_SHARE * 100:g}%)"
        )
    return value


@dataclass(frozen=True)
class Against:
    """The baseline a variant's levels are judged against, read once."""

    path: Path
    run: Run
    samples: Mapping[str, Sequence[float]]  # level name -> the metric's values, start order


@dataclass(frozen=True)
class StopPlan:
    """The stopping rules of a sweep's levels (none: every level runs its budget)."""

    metric: Metric = field(default_factory=lambda: metric("tpot"))
    precision: float | None = None
    min_requests: int = MIN_REQUESTS_DEFAULT
    margin: float | None = None
    against: Against | None = None

    @property
    def active(self) -> bool:
        return self.precision is not None or self.against is not None

    def rules(
        self, level: Level
    ) -> tuple[PrecisionRule | ThroughputPrecision | None, SequentialRule | None]:
        """A level's fresh rules (its concurrency sets the bootstrap's blocks)."""
        users = max(1, level.users)
        precision: PrecisionRule | ThroughputPrecision | None = None
        if self.precision is not None and self.metric.key == THROUGHPUT:
            precision = ThroughputPrecision(self.precision, self.min_requests)
        elif self.precision is not None:
            precision = PrecisionRule(self.precision, users, self.min_requests)
        sequential = None
        if self.against is not None and self.margin is not None:
            sequential = SequentialRule(
                self.against.samples[level.name],
                self.margin,
                budget=level.requests,
                concurrency=users,
                min_requests=self.min_requests,
                lower_is_better=self.metric.lower_is_better,
            )
        return precision, sequential

    def describe(self) -> dict[str, Any] | None:
        """summary.json's ``stopping`` block (None: no rule)."""
        if not self.active:
            return None
        return {
            "metric": self.metric.key,
            "precision": self.precision,
            "min_requests": self.min_requests,
            "against": str(self.against.path) if self.against is not None else None,
            "margin": self.margin,
            "confidence": 0.95,
            "method": "repeated confidence intervals, Lan-DeMets error spending (Pocock type)"
            if self.against is not None
            else None,
        }


def load_against(path: str, plan: SweepPlan, key: Metric, min_requests: int) -> Against:
    """Read ``--against DIR``: its levels must include every planned one, each with at least
    ``min_requests`` requests that have the metric."""
    run = load_run(path)  # a one-line error when it is not there
    if run.status == "running":
        raise UsageError(
            f"--against {path}: its summary.json was never finalized (status running); "
            f"`specload results repair {path}` rebuilds it"
        )
    records: list[RequestRecord] = run.records
    samples: dict[str, list[float]] = {}
    for level in plan.levels:
        if run.level(level.name) is None:
            have = ",".join(run.level_names()) or "none"
            raise UsageError(f"--against {path}: no level {level.name} (it has {have})")
        values = key.samples(records, level.name)
        if len(values) < min_requests:
            raise UsageError(
                f"--against {path}: level {level.name} has {len(values)} requests with a "
                f"{key.label}, fewer than --min-requests {min_requests}"
            )
        if (median(values) or 0.0) <= 0:
            raise UsageError(
                f"--against {path}: level {level.name}'s {key.label} is 0 (most of its "
                "requests arrived in one read): no ratio can be taken of it"
            )
        samples[level.name] = values
    return Against(Path(path), run, samples)


def comparable(against: Against, summary: Mapping[str, Any], plan: SweepPlan) -> None:
    """Refuse (one line) when this run's settings differ from the baseline's: ``compare``'s
    own checks, on this run's summary as it will be written (its planned levels)."""
    raw = dict(summary)
    raw["levels"] = [
        {
            "name": lv.name,
            "concurrency": lv.concurrency,
            "request_rate": lv.request_rate,
            "warmup_s": lv.warmup_s,
            "planned_duration_s": lv.duration_s,
            "planned_requests": lv.requests,
        }
        for lv in plan.levels
    ]
    mine = Run(Path("."), from_dict(raw), [], label="this run")
    base = Run(against.path, against.run.result, [], label=str(against.path))
    problems = [
        p for p in comparability_warnings([base, mine]) if not p.startswith("levels differ")
    ]
    if problems:
        raise UsageError(f"--against {against.path}: not comparable: " + "; ".join(problems))
