"""Predicted beside measured: a forecast checked against the variant's own run.

``specload predict BASELINE --measured VARIANT_DIR`` reads the variant's summary
(:func:`specload.results.model.read`: the same levels, run after the reload) and puts beside
each predicted level its measured median TPOT, its acceptance (the model's
:attr:`~specload.results.model.Level.acceptance`: the server's counters, else the requests'
own), the error, and the per-step overhead that would close the gap (the variant's
own cost per step no baseline shows; give it back as ``--step-overhead-ms`` to carry it to
other k and concurrencies); beside the predicted totals the server's speculative-decoding
counter deltas, summed over the variant's levels.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from specload.errors import UsageError
from specload.predict.forecast import Forecast
from specload.results.model import median, read

COUNTERS = (
    ("drafts", "spec_decode_num_drafts"),
    ("draft_tokens", "spec_decode_num_draft_tokens"),
    ("accepted_tokens", "spec_decode_num_accepted_tokens"),
)


@dataclass(frozen=True)
class MeasuredLevel:
    concurrency: int
    median_tpot_ms: float | None
    acceptance_rate: float | None  # the level's (Level.acceptance: server, else client)
    truncated_share: float | None = None  # the level's (Figures.truncated_share)
    flags: tuple[str, ...] = ()  # the level's (a streams_held level measured no decode pace)


@dataclass
class Measured:
    path: Path
    levels: dict[int, MeasuredLevel]
    counters: dict[str, float] = field(default_factory=dict)  # summed over the levels

    def level(self, concurrency: int) -> MeasuredLevel | None:
        return self.levels.get(concurrency)


def load_measured(path: str | Path) -> Measured:
    p = Path(path)
    if not p.is_dir():
        raise UsageError(f"--measured {path}: no such results directory")
    summary = read(p)
    levels: dict[int, MeasuredLevel] = {}
    counters: dict[str, float] = {}
    for level in summary.levels:
        conc = level.concurrency
        if conc is None or conc < 1:
            continue
        if level.server is not None:
            for ours, theirs in COUNTERS:
                v = getattr(level.server, theirs)
                if v is not None:
                    counters[ours] = counters.get(ours, 0.0) + v
        levels[conc] = MeasuredLevel(
            concurrency=conc,
            median_tpot_ms=level.figures.median_tpot_ms,
            acceptance_rate=level.acceptance.rate,
            truncated_share=level.truncated_share,
            flags=level.flags,
        )
    if not levels:
        raise UsageError(f"--measured {path}: summary.json has no closed-loop levels")
    if len(counters) < len(COUNTERS):
        counters = {}
    return Measured(p, levels, counters)


def comparison(fc: Forecast, measured: Measured) -> dict[str, Any]:
    """``{"variant", "levels": [...], "totals": {...}}`` for the JSON and the Markdown."""
    k = fc.options.num_speculative_tokens
    rows: list[dict[str, Any]] = []
    for lf in fc.levels:
        ml = measured.level(lf.concurrency)
        r = lf.results[k]
        if ml is None or ml.median_tpot_ms is None:
            continue
        err = r.predicted_ms / ml.median_tpot_ms - 1.0 if ml.median_tpot_ms > 0 else math.nan
        implied = (
            r.model.overhead_for(fc.fit.coef, ml.median_tpot_ms)
            if r.model is not None
            else math.nan
        )
        rows.append(
            {
                "concurrency": lf.concurrency,
                "predicted_median_tpot_ms": r.predicted_ms,
                "measured_median_tpot_ms": ml.median_tpot_ms,
                "error_ratio": err,
                "within_interval": r.low_ms <= ml.median_tpot_ms <= r.high_ms,
                "predicted_acceptance_rate": r.totals.acceptance_rate,
                "measured_acceptance_rate": ml.acceptance_rate,
                # the share of the level's completed requests cut inside reasoning
                "measured_truncated_share": ml.truncated_share,
                # what its reader must know first (docs/sweep.md: streams_held, ...)
                "measured_flags": list(ml.flags),
                "measured_speedup": lf.baseline_ms / ml.median_tpot_ms
                if ml.median_tpot_ms > 0
                else None,
                "predicted_speedup": r.speedup,
                # the per-step overhead (from none, whatever --step-overhead-ms was) at
                # which the prediction meets the measured median
                "implied_step_overhead_ms": implied,
            }
        )
    totals: dict[str, Any] = {}
    if measured.counters:
        for ours, _ in COUNTERS:
            pred = float(getattr(fc.totals, ours))
            m = measured.counters[ours]
            totals[ours] = {
                "predicted": pred,
                "measured": m,
                "error_ratio": pred / m - 1.0 if m else None,
            }
        totals["accepted_tokens"]["predicted_max"] = fc.totals.accepted_tokens_max
    overheads = [
        float(row["implied_step_overhead_ms"])
        for row in rows
        if math.isfinite(row["implied_step_overhead_ms"])
    ]
    return {
        "variant": str(measured.path),
        "levels": rows,
        "totals": totals,
        "implied_step_overhead_ms": median(overheads) if overheads else None,
    }
