"""The n-gram variant predicted from the baseline (stage 4) and set beside what was measured
(stage 7)."""

from __future__ import annotations

import threading
import time
from collections.abc import Mapping
from concurrent.futures import Future
from pathlib import Path
from typing import Any

from simulator.variants import PRESETS
from specload.commands.demo.constants import RELOAD_AS
from specload.commands.demo.context import DemoContext, PredictOutcome
from specload.errors import UsageError
from specload.results.model import finite_number
from specload.results.writer import prepare_out_dir

# --- 4. the n-gram variant predicted from the baseline ------------------------------------------


def _ngram_preset() -> tuple[int, int, int]:
    """k and the lookup window of the simulator's n-gram variant (what the reload serves)."""
    v = PRESETS[RELOAD_AS]
    return v.num_speculative_tokens, v.prompt_lookup_min, v.prompt_lookup_max


def _prediction(baseline: Path, out: Path, measured: Path | None = None) -> dict[str, Any] | str:
    """``specload predict BASELINE --method ngram`` with the k and lookup window the reload
    serves (``--measured``: beside the variant's own sweep), written to ``out`` as the command
    writes it: the prediction's JSON, or one line saying why not."""
    # numpy and matplotlib load when the prediction runs, not for `specload demo --help`
    from specload.predict import engine_path, forecast, pipeline  # noqa: PLC0415

    k, lo, hi = _ngram_preset()
    try:
        path, notes = engine_path.choose(baseline, method="ngram")
        # the command's defaults: --bootstrap 1000, --confidence 0.95, --min-difference 5 …
        opts = forecast.Options(
            method="ngram",
            num_speculative_tokens=k,
            prompt_lookup_min=lo,
            prompt_lookup_max=hi,
            engine_path=path,
        )
        baseline_run, plan = pipeline.load(baseline, opts)
        prediction = pipeline.predict(baseline_run, plan, opts, notes=notes, measured_dir=measured)
        pipeline.write(prepare_out_dir(out), prediction)
    except UsageError as exc:
        return f"specload predict failed (exit {exc.exit_code}): specload: error: {exc}"
    except (OSError, ValueError) as exc:
        return f"specload predict failed: {type(exc).__name__}: {exc}"
    return prediction.data


def _start_predict(ctx: DemoContext) -> tuple[Future[PredictOutcome], float]:
    """The prediction of the baseline sweep as the n-gram variant, writing
    ``OUT/prediction``, started beside the next sweep: a thread (the forecast holds the GIL
    only while the demo waits for the sweep's process)."""
    baseline, out = ctx.results["baseline"], ctx.out / "prediction"
    job: Future[PredictOutcome] = Future()

    def work() -> None:
        t0 = time.monotonic()
        try:
            outcome = _prediction(baseline, out)
        except BaseException as exc:  # a bug: raised again where the demo collects the job
            job.set_exception(exc)
        else:
            job.set_result((outcome, time.monotonic() - t0))

    threading.Thread(target=work, name="specload predict", daemon=True).start()
    return job, time.monotonic()


def _finish_predict(job: tuple[Future[PredictOutcome], float]) -> PredictOutcome:
    """The prediction's JSON, or one line saying why not; and how long it took."""
    future, t0 = job
    try:
        return future.result(timeout=max(1.0, 120 - (time.monotonic() - t0)))
    except TimeoutError:
        return "specload predict did not finish within 120s", time.monotonic() - t0


def _predict(ctx: DemoContext, measured: Path | None = None) -> dict[str, Any] | str:
    return _prediction(ctx.results["baseline"], ctx.out / "prediction", measured)


def _signed_pct(value: Any) -> str:
    v = finite_number(value)
    return "-" if v is None else f"{100 * v:+.1f}%"


def _change(level: Mapping[str, Any]) -> str:
    """``14% slower`` / ``8% faster`` from the predicted and the baseline median."""
    base, pred = (
        finite_number(level.get("baseline_median_tpot_ms")),
        finite_number(level.get("predicted_median_tpot_ms")),
    )
    if base is None or pred is None or base <= 0:
        return "-"
    diff = pred / base - 1
    return f"{abs(diff):.0%} {'slower' if diff > 0 else 'faster'}"


def predict_variant(ctx: DemoContext) -> None:
    k, lo, hi = _ngram_preset()
    ctx.say(
        f"== 4. specload predict {ctx.results['baseline']} --method ngram "
        f"--num-speculative-tokens {k} --prompt-lookup-min {lo} --prompt-lookup-max {hi}: "
        f"the {RELOAD_AS} variant forecast from the baseline sweep alone, before the reload "
        "(~30 min on the reference model)"
    )
    job, ctx.predict_job = ctx.predict_job, None
    data, took_s = _finish_predict(job or _start_predict(ctx))
    if isinstance(data, str):
        ctx.say(f"   no prediction: {data}; going on without it")
        ctx.record("prediction", {"ok": False, "error": data, "took_s": round(took_s, 1)})
        return
    levels = [lv for lv in data["levels"] if isinstance(lv, dict)]
    conf = finite_number(data.get("confidence")) or 0.95
    for lv in levels:
        speedup, acceptance = (
            finite_number(lv.get("speedup")),
            finite_number(lv.get("acceptance_rate")),
        )
        low, high = (
            finite_number(lv.get("predicted_low_ms")),
            finite_number(lv.get("predicted_high_ms")),
        )
        interval = (
            ""
            if low is None or high is None
            else f"{conf:.0%} interval {ctx.both(low)}..{ctx.both(high)}, "
        )
        ctx.say(
            f"   n-gram k={k} at concurrency {lv.get('concurrency')}: predicted {_change(lv)} "
            f"(TPOT {ctx.both(lv.get('predicted_median_tpot_ms'))}, {interval}vs "
            f"{ctx.both(lv.get('baseline_median_tpot_ms'))} measured baseline; speedup "
            f"{'-' if speedup is None else f'{speedup:.3f}x'}, acceptance "
            f"{'-' if acceptance is None else f'{acceptance:.3f}'}): {lv.get('verdict', '-')}"
        )
        if lv.get("extrapolated"):
            ctx.say(
                f"     extrapolated: a step there holds up to {lv.get('step_tokens_max')} tokens, "
                "more than any baseline level measured (`specload predict --plan` names the "
                "levels to add)"
            )
    for warning in data.get("warnings") or []:
        ctx.say(f"   specload predict: warning: {' '.join(str(warning).split())}")
    faster = [lv.get("concurrency") for lv in levels if lv.get("verdict") == "faster"]
    if faster:
        decision = (
            "worth the reload (predicted faster at concurrency "
            + ", ".join(str(c) for c in faster)
            + ")"
        )
    else:
        decision = "not worth a 30-minute reload"
    per_level = []
    for i, lv in enumerate(levels):
        where = (
            f"at concurrency {lv.get('concurrency')}" if i == 0 else f"at {lv.get('concurrency')}"
        )
        change = (
            _change(lv) if lv.get("verdict") != "within noise" else f"within noise ({_change(lv)})"
        )
        figures = (
            f" (TPOT {ctx.both(lv.get('predicted_median_tpot_ms'))} vs "
            f"{ctx.both(lv.get('baseline_median_tpot_ms'))} measured baseline)"
            if i == 0
            else ""
        )
        per_level.append(f"{change} {where}{figures}")
    ctx.say(
        f"   n-gram k={k} predicted {', '.join(per_level) or 'nothing'}: {decision} "
        f"(predicted in {took_s:.1f}s; the demo reloads anyway, to check)"
    )
    ctx.record(
        "prediction",
        {
            "ok": True,
            "dir": str(ctx.out / "prediction"),
            "num_speculative_tokens": k,
            "prompt_lookup_min": lo,
            "prompt_lookup_max": hi,
            "levels": [
                {
                    key: lv.get(key)
                    for key in (
                        "concurrency",
                        "baseline_median_tpot_ms",
                        "predicted_median_tpot_ms",
                        "predicted_low_ms",
                        "predicted_high_ms",
                        "speedup",
                        "verdict",
                        "acceptance_rate",
                    )
                }
                | {
                    "extrapolated": bool(lv.get("extrapolated")),
                    "ref_predicted_median_tpot_ms": ctx.ref_ms(lv.get("predicted_median_tpot_ms")),
                    "ref_baseline_median_tpot_ms": ctx.ref_ms(lv.get("baseline_median_tpot_ms")),
                }
                for lv in levels
            ],
            "worth_reload": bool(faster),
            "decision": decision,
            "took_s": round(took_s, 1),
        },
    )


def predicted_against_measured(ctx: DemoContext, measured: Path) -> None:
    """Stage 4's prediction beside the sweep just measured (``specload predict --measured``)."""
    ctx.say(
        f"   predicted (stage 4, from the baseline alone) against measured ({RELOAD_AS} sweep), "
        "median TPOT per level:"
    )
    data = _predict(ctx, measured=measured)
    versus = data.get("measured") if isinstance(data, dict) else None
    if not isinstance(versus, dict) or not isinstance(versus.get("levels"), list):
        error = data if isinstance(data, str) else "specload predict gave no measured levels"
        ctx.say(f"   no comparison with the prediction: {error}; going on without it")
        ctx.record("predicted_vs_measured", {"ok": False, "error": error})
        return
    levels = [
        {
            key: row.get(key)
            for key in (
                "concurrency",
                "predicted_median_tpot_ms",
                "measured_median_tpot_ms",
                "error_ratio",
                "within_interval",
                "predicted_acceptance_rate",
                "measured_acceptance_rate",
            )
        }
        for row in versus["levels"]
        if isinstance(row, dict)
    ]
    for row in levels:
        ctx.say(
            f"   c{row['concurrency']}: predicted {ctx.both(row['predicted_median_tpot_ms'])}, "
            f"measured {ctx.both(row['measured_median_tpot_ms'])} "
            f"({_signed_pct(row['error_ratio'])}"
            f"{', inside the interval' if row['within_interval'] else ''})"
        )
    totals = versus.get("totals") if isinstance(versus.get("totals"), dict) else {}
    assert isinstance(totals, dict)
    counters = []
    for name in ("drafts", "draft_tokens", "accepted_tokens"):
        v = totals.get(name)
        if isinstance(v, dict) and finite_number(v.get("predicted")) is not None:
            measured_v = finite_number(v.get("measured"))
            counters.append(
                f"{name.replace('_', ' ')} {v['predicted']:.0f} predicted, "
                f"{'-' if measured_v is None else f'{measured_v:.0f}'} measured "
                f"({_signed_pct(v.get('error_ratio'))})"
            )
    if counters:
        ctx.say(
            "   speculative-decoding counters (predicted over the baseline's requests; measured: "
            "the server's, summed over the level windows): " + "; ".join(counters)
        )
    ctx.record(
        "predicted_vs_measured",
        {
            "ok": True,
            "dir": str(ctx.out / "prediction"),
            "levels": levels,
            "totals": {
                n: totals[n] for n in ("drafts", "draft_tokens", "accepted_tokens") if n in totals
            },
            "implied_step_overhead_ms": versus.get("implied_step_overhead_ms"),
        },
    )
