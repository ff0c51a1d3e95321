"""The HTML report's predictions section: each prediction (:mod:`.prediction`) beside the
measured run, with its chart and cost breakdown."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from specload.compare.model import ALL
from specload.report.markup import (
    Markup,
    _yes_no,
    chart_figure,
    join,
    ms,
    rate,
    ratio,
    table,
    tag,
    tok_s,
)
from specload.report.prediction import Prediction, Versus, draft_rows, ngram_rows
from specload.results.plots import Chart, Point, Series


def prediction_chart(pred: Prediction) -> Chart:
    """Median TPOT against concurrency: the baseline, the forecast with its interval, the
    measured variant (as the plots' :class:`Chart`, drawn by :mod:`.svg`)."""
    rows = ngram_rows(pred)
    base = tuple(Point(r.concurrency, r.baseline_ms) for r in rows if r.baseline_ms is not None)
    predicted = tuple(
        Point(r.concurrency, r.predicted_ms, low=r.low_ms, high=r.high_ms)
        for r in rows
        if r.predicted_ms is not None
    )
    measured = tuple(Point(r.concurrency, r.measured_ms) for r in rows if r.measured_ms is not None)
    who = pred.measured.label if pred.measured is not None else "variant"
    series = [
        Series("baseline", ALL, base),
        Series(f"predicted {pred.method} k={pred.k}", ALL, predicted),
        Series(f"{who} (measured)", ALL, measured),
    ]
    levels = tuple(sorted({r.concurrency for r in rows}))
    return Chart(
        name="prediction",
        ylabel="median TPOT (ms)",
        xlabel="concurrency",
        levels=levels,
        log2=bool(levels) and all(x > 0 for x in levels),
        series=tuple(s for s in series if s.points),
        line="median per level",
        band=f"band: the forecast's {pred.confidence * 100:g}% interval",
    )


def _prediction_block(pred: Prediction) -> Markup:
    conf = f"{pred.confidence * 100:g}%"
    out: list[object] = [
        tag("h3", f"Prediction: {pred.title}"),
        tag("p", f"{pred.path} — {pred.note}.", class_="note"),
    ]
    if pred.method == "draft":
        rows = [
            [
                f"{r.concurrency:g}",
                ms(r.baseline_ms),
                ratio(r.break_even_length),
                rate(r.break_even_rate),
                _yes_no(r.possible),
                ratio(r.measured_length),
                rate(r.measured_rate),
                "-" if r.above is None else "above: faster" if r.above else "below: slower",
            ]
            for r in draft_rows(pred)
        ]
        header = [
            "concurrency",
            "baseline TPOT (ms)",
            "break-even mean acceptance length",
            "break-even acceptance rate",
            "possible",
            "measured mean acceptance length",
            "measured acceptance rate",
            "measured against break-even",
        ]
        return join([*out, table(header, rows)])
    rows_v = ngram_rows(pred)
    rows = [
        [
            f"{r.concurrency:g}",
            ms(r.baseline_ms),
            ms(r.predicted_ms),
            f"{ms(r.low_ms)} .. {ms(r.high_ms)}",
            ms(r.measured_ms),
            "-" if r.error is None else f"{r.error * 100:+.1f}%",
            _yes_no(r.within),
            rate(r.predicted_acceptance),
            rate(r.measured_acceptance),
            tok_s(r.predicted_throughput),
            tok_s(r.measured_throughput),
            (r.verdict or "-") + (" (extrapolated)" if r.extrapolated else ""),
            "-" if r.p_faster is None else f"{r.p_faster:.2f}",
            ms(None if r.break_even_ms is None else max(r.break_even_ms, 0.0)),
            _estimated(r),
        ]
        for r in rows_v
    ]
    header = [
        "concurrency",
        "baseline TPOT (ms)",
        "predicted TPOT (ms)",
        f"{conf} interval",
        "measured TPOT (ms)",
        "error (predicted/measured)",
        "measured inside interval",
        "predicted acceptance",
        "measured acceptance",
        "predicted tok/s",
        "measured tok/s",
        "predicted verdict",
        "p faster",
        "break-even step overhead (ms)",
        "estimated step overhead (ms)",
    ]
    out.append(table(header, rows))
    out.append(
        tag(
            "p",
            "p faster: the share of the forecast's draws (curve x requests x the terms' "
            "ranges) below the baseline's median. Break-even: the extra cost per step at which "
            "the variant stops paying; estimated: the engine path's terms per step (low .. "
            "high).",
            class_="note",
        )
    )
    out.append(_breakdown_block(pred, rows_v))
    if rows_v:
        out.append(chart_figure(prediction_chart(pred), "Predicted against measured TPOT"))
    return join(out)


def _estimated(r: Versus) -> str:
    if r.overhead_ms is None:
        return "-"
    if r.overhead_low_ms is None or r.overhead_high_ms in (None, r.overhead_low_ms):
        return ms(r.overhead_ms)
    return f"{ms(r.overhead_ms)} ({ms(r.overhead_low_ms)} .. {ms(r.overhead_high_ms)})"


def _engine_path_text(path: Mapping[str, Any] | None) -> str:
    if path is None:
        return "engine path: not known (no terms priced: the baseline's curve alone)"

    def onoff(x: Any) -> str:
        return "unknown" if x is None else "on" if x else "off"

    sizes = ", ".join(str(n) for n in path.get("capture_sizes") or []) or "none"
    return (
        f"engine path: {path.get('name', '?')} (vLLM {path.get('vllm_version') or 'unknown'}, "
        f"{path.get('device', '?')}), runner {path.get('runner', '?')}, proposer "
        f"{path.get('proposer', '?')}, replay rule {path.get('replay_rule', '?')}; async "
        f"scheduling: baseline {onoff(path.get('baseline_async'))}, variant "
        f"{onoff(path.get('variant_async'))}; graph mode {path.get('graph_mode', '?')}, "
        f"capture sizes {sizes}"
    )


def _breakdown_block(pred: Prediction, rows_v: Sequence[Versus]) -> Markup:
    """The median request's TPOT part by part per level (ms per output token, per step in
    brackets), the engine path and each term's figure and source."""
    names: list[str] = []
    for r in rows_v:
        for name, _, _ in r.breakdown:
            if name not in names:
                names.append(name)
    if not names:
        return Markup("")
    rows = []
    for r in rows_v:
        by = {name: (tok, step) for name, tok, step in r.breakdown}
        rows.append(
            [
                f"c{r.concurrency:g}",
                *(f"{rate(by[n][0])} [{rate(by[n][1])}]" if n in by else "-" for n in names),
                ms(r.predicted_ms),
            ]
        )
    items = []
    if pred.padding:
        items.append(
            f"padding: the curve at the padded size minus at the step's own; {pred.padding}"
        )
    for t in pred.terms():
        lo, hi, val = t.get("low"), t.get("high"), t.get("value")
        span = (
            ""
            if lo == hi
            else f" (range {lo:g}-{hi:g})"
            if lo is not None and hi is not None
            else ""
        )
        items.append(
            f"{t.get('name', '?')}: {val:g} {t.get('unit', '')}{span}, "
            f"{t.get('source', '?')}: {t.get('why', '')}"
            if isinstance(val, int | float)
            else f"{t.get('name', '?')}: -"
        )
    return join(
        [
            tag(
                "h4",
                "Cost breakdown (ms per output token at the median request; per step in brackets)",
            ),
            tag("p", _engine_path_text(pred.engine_path()), class_="note"),
            table(["level", *names, "predicted TPOT (ms)"], rows),
            tag("ul", join(tag("li", i) for i in items)) if items else "",
        ]
    )


def _predictions_section(predictions: Sequence[Prediction]) -> Markup:
    if not predictions:
        return Markup("")
    return join(
        [tag("h2", "Predictions", id="predictions")] + [_prediction_block(p) for p in predictions]
    )
