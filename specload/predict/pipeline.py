"""A prediction from a baseline's results directory, for ``specload predict`` and the demo:
the baseline and the plan of its levels, the forecast (with the variant's own run beside it,
``--measured``), and its files.

    baseline, plan = load(baseline_dir, opts)
    prediction = predict(baseline, plan, opts, notes=notes, measured_dir=variant_dir)
    write(out, prediction)  # prediction.json, prediction.md, prediction.png
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from specload.errors import UsageError
from specload.predict.baseline import Baseline, load_baseline
from specload.predict.forecast import Forecast, Options, default_plan, forecast
from specload.predict.measured import comparison, load_measured
from specload.predict.report import dumps, forecast_json, forecast_markdown
from specload.predict.stepcost import Plan
from specload.results.plots import write_prediction_plot
from specload.results.writer import atomic_write_bytes, atomic_write_text

PREDICTION_JSON = "prediction.json"
PREDICTION_MD = "prediction.md"
PREDICTION_PNG = "prediction.png"


@dataclass
class Prediction:
    forecast: Forecast
    #: Predicted beside the variant's measured run (None: no ``measured_dir``).
    measured: dict[str, Any] | None
    #: ``prediction.json``'s content and ``prediction.md``'s text.
    data: dict[str, Any]
    text: str
    #: The forecast's own warnings (the notes given to :func:`predict` come before them in
    #: ``forecast.warnings`` and ``data``, not here).
    warnings: list[str]


def load(baseline_dir: str | Path, opts: Options) -> tuple[Baseline, Plan]:
    """The baseline (its token ids with ``--method ngram``) and the plan of the levels that
    would cover the step sizes the variant needs."""

    def hint(measured: Sequence[int]) -> str:
        return default_plan(measured, opts).summary()

    baseline = load_baseline(baseline_dir, need_tokens=opts.method == "ngram", hint=hint)
    return baseline, default_plan([lv.concurrency for lv in baseline.levels], opts)


def predict(
    baseline: Baseline,
    plan: Plan,
    opts: Options,
    *,
    notes: Sequence[str] = (),
    measured_dir: str | Path | None = None,
) -> Prediction:
    """The forecast of ``baseline`` with ``opts``; ``notes`` (the engine path's) travel with
    its outputs; ``measured_dir``: the variant's own results, set beside it."""
    if baseline.problems:
        raise UsageError(baseline.problems[0])
    measured_run = None
    if measured_dir is not None:
        if opts.method != "ngram":
            raise UsageError("--measured: only with --method ngram")
        measured_run = load_measured(measured_dir)
    try:
        fc = forecast(baseline, opts, plan=plan)
    except ValueError as exc:
        raise UsageError(f"predict: {exc}") from None
    own = list(fc.warnings)
    fc.warnings[:0] = notes
    versus = comparison(fc, measured_run) if measured_run is not None else None
    return Prediction(fc, versus, forecast_json(fc, versus), forecast_markdown(fc, versus), own)


def write(out: Path, prediction: Prediction, *, plot: bool = True) -> None:
    """``prediction.json`` and ``prediction.md`` in the folder ``out`` (which exists), and
    ``prediction.png`` for an n-gram forecast unless ``plot`` is false."""
    atomic_write_bytes(out / PREDICTION_JSON, dumps(prediction.data))
    atomic_write_text(out / PREDICTION_MD, prediction.text)
    if prediction.forecast.options.method == "ngram" and plot:
        write_prediction_plot(prediction.data, out / PREDICTION_PNG)
