"""Predictions beside the runs: ``prediction.json`` (``specload predict --out``) read back.

A report shows a prediction found as ``DIR/prediction.json`` in any of its results
directories, or given with ``--prediction FILE``. Its measured side is, in this order:
the run the prediction was checked against (``measured.variant``, from ``predict
--measured``) when that directory is in the report; the run whose directory holds the
file when that is not the prediction's baseline; the one run in the report that is not
the baseline. Otherwise the prediction's own measured rows (if any) are shown, or the
prediction alone.

An n-gram prediction gives per concurrency a median TPOT with an interval and an
acceptance rate, set beside the measured run's median TPOT (``summary.json``) and
acceptance (:attr:`specload.results.model.Level.acceptance`: the server's counters, else
the client's), the probability that the variant is
faster, the break-even step overhead beside the engine path's estimated one, and the cost
breakdown (baseline step, padding, each term); a draft prediction gives the break-even mean
acceptance length, set beside the measured one.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import orjson

from specload.compare.model import Run
from specload.errors import UsageError
from specload.results.model import Level, finite_number

PREDICTION_FILE = "prediction.json"
PREDICTION_FORMAT = "specload-predict/1"


@dataclass
class Prediction:
    path: Path
    data: dict[str, Any]
    measured: Run | None = None  # the run set beside it (None: none in the report)
    note: str = ""  # how the measured side was chosen, or why there is none

    @property
    def method(self) -> str:
        return str(self.data.get("method") or "ngram")

    @property
    def k(self) -> int | None:
        k = self.data.get("num_speculative_tokens")
        return k if isinstance(k, int) and not isinstance(k, bool) else None

    @property
    def confidence(self) -> float:
        return finite_number(self.data.get("confidence")) or 0.95

    @property
    def baseline(self) -> str:
        return str(self.data.get("baseline") or "")

    @property
    def title(self) -> str:
        k = f" k={self.k}" if self.k is not None else ""
        return f"{self.method}{k} from {Path(self.baseline).name or self.baseline}"

    def levels(self) -> list[dict[str, Any]]:
        out = [lv for lv in self.data.get("levels") or [] if isinstance(lv, dict)]
        return sorted(out, key=lambda lv: finite_number(lv.get("concurrency")) or 0.0)

    def warnings(self) -> list[str]:
        return [str(w) for w in self.data.get("warnings") or []]

    def engine_path(self) -> dict[str, Any] | None:
        """The engine path the forecast priced (None: not known, or an older file)."""
        path = self.data.get("engine_path")
        return path if isinstance(path, dict) else None

    def terms(self) -> list[dict[str, Any]]:
        """The extra terms the engine path implies (name, value, low, high, unit, source,
        why); empty: none priced (or an older file)."""
        return [t for t in self.data.get("terms") or [] if isinstance(t, dict)]

    @property
    def padding(self) -> str | None:
        pad = self.data.get("padding")
        return pad if isinstance(pad, str) else None


def read_prediction(path: Path, *, name: str = "--prediction") -> Prediction:
    """A ``specload-predict/1`` file, or a one-line error naming it."""
    try:
        data = orjson.loads(path.read_bytes())
    except FileNotFoundError:
        raise UsageError(f"{name} {path}: no such file") from None
    except IsADirectoryError:
        raise UsageError(f"{name} {path}: a directory, not a prediction.json") from None
    except OSError as exc:
        raise UsageError(f"{name} {path}: cannot read ({exc.strerror})") from None
    except orjson.JSONDecodeError as exc:
        raise UsageError(f"{name} {path}: not valid JSON ({exc})") from None
    if not isinstance(data, dict) or data.get("format") != PREDICTION_FORMAT:
        raise UsageError(
            f"{name} {path}: not a `specload predict` result (format {PREDICTION_FORMAT})"
        )
    if not isinstance(data.get("levels"), list):
        raise UsageError(f"{name} {path}: no levels")
    return Prediction(path, data)


def find_predictions(
    runs: Sequence[Run], given: Sequence[Path] = ()
) -> tuple[list[Prediction], list[str]]:
    """The predictions of a report (given ones, then each directory's), and the warnings
    about files found that could not be read (a given file that cannot is an error)."""
    found = [read_prediction(p) for p in given]
    warnings: list[str] = []
    seen = {p.path.resolve() for p in found}
    for run in runs:
        path = run.path / PREDICTION_FILE
        if not path.is_file() or path.resolve() in seen:
            continue
        try:
            found.append(read_prediction(path, name="prediction"))
        except UsageError as exc:
            warnings.append(f"{exc} (left out of the report)")
        seen.add(path.resolve())
    for pred in found:
        pred.measured, pred.note = _measured_side(pred, runs)
    return found, warnings


def _same(a: Path, b: Path) -> bool:
    try:
        return a.resolve() == b.resolve()
    except OSError:
        return False


def _measured_side(pred: Prediction, runs: Sequence[Run]) -> tuple[Run | None, str]:
    baseline = Path(pred.baseline) if pred.baseline else None
    checked = (pred.data.get("measured") or {}).get("variant")
    if isinstance(checked, str) and checked:
        for run in runs:
            if _same(run.path, Path(checked)):
                return run, f"checked against {run.label} (`specload predict --measured`)"
    others = [r for r in runs if baseline is None or not _same(r.path, baseline)]
    for run in others:
        if _same(run.path, pred.path.parent):
            return run, f"measured: {run.label}, whose results directory holds the prediction"
    if len(others) == 1 and len(runs) > 1:
        return others[0], f"measured: {others[0].label}, the one run here besides the baseline"
    if isinstance(checked, str) and checked:
        return None, f"measured figures from the prediction file ({checked})"
    return None, "no measured run of this variant in the report"


def _measured_level(run: Run, concurrency: Any) -> Level | None:
    return next((lv for lv in run.result.levels if lv.concurrency == concurrency), None)


@dataclass(frozen=True)
class Versus:
    """One concurrency of an n-gram prediction beside the measured run."""

    concurrency: float
    baseline_ms: float | None
    predicted_ms: float | None
    low_ms: float | None
    high_ms: float | None
    measured_ms: float | None
    predicted_acceptance: float | None
    measured_acceptance: float | None
    predicted_throughput: float | None
    measured_throughput: float | None
    verdict: str | None
    extrapolated: bool = False
    # the share of the interval's draws faster than the baseline; the per-step overhead at
    # which the variant stops paying beside the engine path's terms per step (low, high)
    p_faster: float | None = None
    break_even_ms: float | None = None
    overhead_ms: float | None = None
    overhead_low_ms: float | None = None
    overhead_high_ms: float | None = None
    # the median request's TPOT part by part: (name, ms per output token, ms per step)
    breakdown: tuple[tuple[str, float | None, float | None], ...] = ()

    @property
    def error(self) -> float | None:
        if self.predicted_ms is None or not self.measured_ms:
            return None
        return self.predicted_ms / self.measured_ms - 1.0

    @property
    def within(self) -> bool | None:
        if None in (self.low_ms, self.high_ms, self.measured_ms):
            return None
        assert self.low_ms is not None and self.high_ms is not None
        assert self.measured_ms is not None
        return self.low_ms <= self.measured_ms <= self.high_ms


def _forecast_levels(
    pred: Prediction,
) -> Iterator[tuple[Mapping[str, Any], Any, float, Level | None]]:
    """Each forecast level with a concurrency: the level, its concurrency as given and as a
    number, and the measured run's level at that concurrency (None: not measured)."""
    for lv in pred.levels():
        c = lv.get("concurrency")
        x = finite_number(c)
        if x is None:
            continue
        yield lv, c, x, _measured_level(pred.measured, c) if pred.measured is not None else None


def ngram_rows(pred: Prediction) -> list[Versus]:
    own = {
        row.get("concurrency"): row
        for row in (pred.data.get("measured") or {}).get("levels") or []
        if isinstance(row, dict)
    }
    out = []
    for lv, c, x, level in _forecast_levels(pred):
        measured_ms = acc = tok = None
        if level is not None:
            measured_ms = level.figures.median_tpot_ms
            acc = level.acceptance.rate
            tok = level.figures.output_throughput
        elif pred.measured is None and c in own:
            measured_ms = finite_number(own[c].get("measured_median_tpot_ms"))
            acc = finite_number(own[c].get("measured_acceptance_rate"))
        out.append(
            Versus(
                concurrency=x,
                baseline_ms=finite_number(lv.get("baseline_median_tpot_ms")),
                predicted_ms=finite_number(lv.get("predicted_median_tpot_ms")),
                low_ms=finite_number(lv.get("predicted_low_ms")),
                high_ms=finite_number(lv.get("predicted_high_ms")),
                measured_ms=measured_ms,
                predicted_acceptance=finite_number(lv.get("acceptance_rate")),
                measured_acceptance=acc,
                predicted_throughput=finite_number(lv.get("predicted_output_throughput")),
                measured_throughput=tok,
                verdict=str(lv["verdict"]) if lv.get("verdict") else None,
                extrapolated=bool(lv.get("extrapolated")),
                p_faster=finite_number(lv.get("p_faster")),
                break_even_ms=finite_number(lv.get("break_even_step_overhead_ms")),
                overhead_ms=finite_number(lv.get("estimated_step_overhead_ms")),
                overhead_low_ms=finite_number(lv.get("estimated_step_overhead_low_ms")),
                overhead_high_ms=finite_number(lv.get("estimated_step_overhead_high_ms")),
                breakdown=tuple(
                    (
                        str(part.get("name") or "?"),
                        finite_number(part.get("per_token_ms")),
                        finite_number(part.get("per_step_ms")),
                    )
                    for part in lv.get("breakdown") or []
                    if isinstance(part, dict)
                ),
            )
        )
    return out


@dataclass(frozen=True)
class DraftRow:
    """One concurrency of a draft prediction: the break-even acceptance beside the measured."""

    concurrency: float
    baseline_ms: float | None
    break_even_length: float | None
    break_even_rate: float | None
    possible: bool | None
    measured_length: float | None = None
    measured_rate: float | None = None

    @property
    def above(self) -> bool | None:
        if self.break_even_length is None or self.measured_length is None:
            return None
        return self.measured_length > self.break_even_length


def draft_rows(pred: Prediction) -> list[DraftRow]:
    out = []
    for lv, _, x, level in _forecast_levels(pred):
        possible = lv.get("possible")
        out.append(
            DraftRow(
                concurrency=x,
                baseline_ms=finite_number(lv.get("baseline_median_tpot_ms")),
                break_even_length=finite_number(lv.get("break_even_mean_acceptance_length")),
                break_even_rate=finite_number(lv.get("break_even_acceptance_rate")),
                possible=possible if isinstance(possible, bool) else None,
                measured_length=level.acceptance.mean_length if level else None,
                measured_rate=level.acceptance.rate if level else None,
            )
        )
    return out
