"""The forecast's batch engine is the simulator's engine (SimEngine): its placements equal
ClosedLoopReplay's in every step, so forecasts through either are the same; driven by the
fitted curve, the engine's own clock gives the TPOTs the forecast computes."""

from __future__ import annotations

import numpy as np
import pytest

from simulator.ngram import RequestReplay, StepSequence
from specload.predict.baseline import load_baseline
from specload.predict.closedloop import ClosedLoopReplay, CurveStepCost, Schedule, SimEngine
from specload.predict.forecast import Options, TpotModel, default_plan, forecast
from specload.predict.synthetic import LinearCost, make_records, write_synthetic_baseline

pytestmark = pytest.mark.unit

FIELDS = (
    "n_tokens", "n_seqs", "context", "emitted", "first", "last", "output_len",
    "drafted", "q_min", "q_max", "prefills",
)  # fmt: skip
LEVELS = [1, 2, 4, 8]


def _same(a: Schedule, b: Schedule) -> None:
    for name in FIELDS:
        x, y = getattr(a, name), getattr(b, name)
        assert x.shape == y.shape and np.array_equal(x, y), name


def _replays(n: int = 40, seed: int = 1) -> list[RequestReplay]:
    recs = make_records(n, levels=LEVELS, seed=seed, min_tokens=100, max_tokens=600)
    return [RequestReplay(r.prompt_ids, r.output_ids, lookup_min=2, lookup_max=4) for r in recs]


def _seq(steps: int, prompt_len: int = 10) -> StepSequence:
    z = np.zeros(steps, dtype=np.int64)
    return StepSequence(prompt_len, steps, np.arange(steps), z, z, np.ones(steps, dtype=np.int64),
                        np.zeros(steps, dtype=bool))  # fmt: skip


def test_by_hand() -> None:
    eng = SimEngine()
    one = eng.schedule([_seq(3), _seq(2)], 1, fill=False)
    assert one.n_seqs.tolist() == [1, 1, 1, 1, 1]
    assert one.first.tolist() == [0, 3] and one.last.tolist() == [2, 4]
    assert eng.schedule([_seq(3), _seq(2)], 2, fill=False).n_seqs.tolist() == [2, 2, 1]
    full = eng.schedule([_seq(3), _seq(2)], 2, fill=True)
    assert full.n_seqs.tolist() == [2, 2, 2] and full.first.tolist() == [0, 0]
    assert full.context.tolist() == [10.0, 11.0, 11.0]


@pytest.mark.parametrize("k", [0, 1, 3, 8])
def test_placements_equal_the_closed_loop_replay(k: int) -> None:
    seqs = [r.steps(k) for r in _replays()]
    for c in (1, 2, 3, 5, 16, 64):
        for fill in (False, True):
            _same(SimEngine().schedule(seqs, c, fill=fill), ClosedLoopReplay().schedule(
                seqs, c, fill=fill))  # fmt: skip


def _baseline(tmp_path, requests_mode: bool):  # type: ignore[no-untyped-def]
    recs = make_records(40, levels=LEVELS, seed=1, min_tokens=100, max_tokens=600)
    write_synthetic_baseline(
        tmp_path, recs, levels=LEVELS, cost=LinearCost(12.0, 0.6, 0.0008),
        requests_mode=requests_mode,
    )  # fmt: skip
    opts = Options(num_speculative_tokens=3, prompt_lookup_min=2, prompt_lookup_max=4,
                   n_boot=200, schedule_ks=(1, 3, 5))  # fmt: skip
    base = load_baseline(tmp_path, need_tokens=True, hint=lambda m: "")
    return base, opts


@pytest.mark.parametrize("requests_mode", [False, True])
def test_forecasts_through_either_engine_are_the_same(tmp_path, requests_mode: bool) -> None:
    base, opts = _baseline(tmp_path, requests_mode)
    plan = default_plan(LEVELS, opts)
    engine = SimEngine(fast_path=ClosedLoopReplay())
    runs = [
        forecast(base, opts, plan=plan),  # the default: the engine, its fast path checked
        forecast(base, opts, engine=engine, plan=plan),
        forecast(base, opts, engine=SimEngine(), plan=plan),  # the engine for every placement
        forecast(base, opts, engine=ClosedLoopReplay(), plan=plan),
    ]
    assert engine.checked == 2 * len(LEVELS)  # k = 0 and k = 3 per level agreed
    first = runs[0]
    for fc in runs[1:]:
        assert fc.fit.coef.tolist() == first.fit.coef.tolist()
        for a, b in zip(fc.levels, first.levels, strict=True):
            assert a.replayed_baseline_ms == b.replayed_baseline_ms
            for kk, r in a.results.items():
                s = b.results[kk]
                assert (r.predicted_ms, r.low_ms, r.high_ms, r.verdict) == (
                    s.predicted_ms, s.low_ms, s.high_ms, s.verdict)  # fmt: skip
                assert r.output_throughput == s.output_throughput
        assert fc.totals.to_dict() == first.totals.to_dict()


def test_the_engine_clock_on_the_fitted_curve_gives_the_forecast_tpots(tmp_path) -> None:
    base, opts = _baseline(tmp_path, False)
    fc = forecast(base, opts, plan=default_plan(LEVELS, opts))
    seqs = [r.steps(3) for r in _replays()]
    eng = SimEngine()
    for c in (1, 4):
        model = TpotModel.of(eng.schedule(seqs, c, fill=True), fc.fit)
        timed = eng.timed(seqs, c, fill=True, cost=CurveStepCost(fc.fit))
        assert timed == pytest.approx(model.tpot_ms(fc.fit.coef), rel=1e-9)


def test_a_fast_path_that_disagrees_is_caught() -> None:
    class Off(ClosedLoopReplay):
        def schedule(self, requests, concurrency, *, fill):  # type: ignore[no-untyped-def]
            s = super().schedule(requests, concurrency, fill=fill)
            return Schedule(s.n_tokens + 1, s.n_seqs, s.context, s.emitted, s.first, s.last,
                            s.output_len, s.requests)  # fmt: skip

    seqs = [r.steps(2) for r in _replays(8)]
    with pytest.raises(RuntimeError, match="differs from the engine's"):
        SimEngine(fast_path=Off()).schedule(seqs, 2, fill=False)
