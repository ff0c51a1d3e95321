"""The variant's step priced term by term (specload.predict.terms) against hand-worked cases:
vLLM's capture-size rounding and padding, each term's value on a tiny schedule, the
breakdown summing to the predicted median, p_faster, and --step-overhead-ms replacing the
terms."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

import numpy as np
import orjson
import pytest

from simulator.ngram import StepSequence
from specload.predict.baseline import Baseline, load_baseline
from specload.predict.closedloop import ClosedLoopReplay, Schedule
from specload.predict.engine_path import CPU_032, EnginePath
from specload.predict.forecast import Forecast, Options, TpotModel, default_plan, forecast
from specload.predict.report import forecast_json, forecast_markdown
from specload.predict.stepcost import StepCostFit
from specload.predict.synthetic import LinearCost, make_records, write_synthetic_baseline
from specload.predict.terms import (
    CALL,
    GRAPH,
    HOST,
    OVERRIDE,
    PRIORS,
    PROPOSER_CTX,
    PROPOSER_SEQ,
    PROPOSER_STEP,
    REJECTION,
    SPEC_INPUTS,
    THREAD_POOL,
    Given,
    Term,
    padded_tokens,
    padding_for,
    spec_capture_sizes,
    terms_for,
    uniform_steps,
)

pytestmark = pytest.mark.unit

SIZES = (1, 2, 4, 8, 16)
# A GPU server on the V1 runner: the baseline async, the n-gram variant not (the CPU
# proposer), full decode graphs and piecewise mixed ones.
GPU_V1 = EnginePath(
    name="gpu-v1-test",
    vllm_version="0.32.0",
    device="gpu",
    runner="v1",
    proposer="ngram-numba",
    replay_rule="v1",
    baseline_async=True,
    variant_async=False,
    graph_mode="full_and_piecewise",
    capture_sizes=SIZES,
)


# --------------------------------------------------------------------------- padding


@pytest.mark.parametrize(
    ("sizes", "k", "want"),
    [
        # checked against vLLM 0.32's own CompilationConfig.adjust_cudagraph_sizes_for_spec_decode
        (SIZES, 3, (4, 8, 16)),
        (SIZES, 2, (3, 6, 9)),  # 16 -> 18 is above the largest size: dropped
        ((1, 2, 4, 8, 16, 24, 32, 40, 48, 56, 64), 4, (5, 10, 20, 25, 35, 40, 50, 60)),
        ((3,), 1, (2,)),  # none left after rounding, but 1 + k fits: [1 + k]
        ((1, 5), 3, (4,)),
    ],
)
def test_capture_sizes_round_to_multiples_of_k_plus_1_as_vllm_does(
    sizes: tuple[int, ...], k: int, want: tuple[int, ...]
) -> None:
    assert spec_capture_sizes(sizes, k) == want


def test_no_capture_size_left_is_vllms_error() -> None:
    with pytest.raises(ValueError, match="no CUDA-graph capture size left"):
        spec_capture_sizes((1, 2), 3)


def test_a_step_pads_to_the_smallest_size_that_holds_it() -> None:
    sizes = spec_capture_sizes(SIZES, 3)  # (4, 8, 16)
    n = np.array([1, 4, 5, 9, 16, 17])
    # n = 5 -> 8; above the largest size (17) the step runs eager, unpadded
    assert padded_tokens(n, sizes).tolist() == [4, 4, 8, 16, 16, 17]
    assert padded_tokens(n, ()).tolist() == n.tolist()


def test_padding_per_graph_mode_and_runner() -> None:
    assert padding_for(CPU_032, 3) is None  # no graphs on the CPU build
    assert padding_for(dataclasses.replace(GPU_V1, capture_sizes=()), 3) is None
    pad = padding_for(GPU_V1, 3)
    assert pad is not None and pad.uniform == (4, 8, 16) and pad.mixed == (4, 8, 16)
    full = padding_for(dataclasses.replace(GPU_V1, graph_mode="full"), 3)
    assert full is not None and full.mixed is None  # mixed steps run eager, unpadded
    pw = padding_for(dataclasses.replace(GPU_V1, graph_mode="piecewise"), 3)
    assert pw is not None and pw.uniform == SIZES and pw.mixed == SIZES  # no rounding
    v2 = padding_for(dataclasses.replace(GPU_V1, runner="v2"), 3)
    assert v2 is not None and v2.uniform == (4, 8, 16) and v2.mixed == SIZES


# --------------------------------------------------------------------------- the terms


def _tiny() -> Schedule:
    """Four steps at k = 3 (two sequences each):
    0: a prefill of 10 tokens beside a decode of 1 + 3 (mixed: a prefill in it)
    1: two decodes of 1 + 3 (uniform)
    2: decodes of 1 + 3 and 1 + 0 (not uniform)
    3: two decodes of 1 + 0 (not uniform, no draft)."""
    f = np.array
    return Schedule(
        n_tokens=f([14.0, 8.0, 5.0, 2.0]),
        n_seqs=f([2.0, 2.0, 2.0, 2.0]),
        context=f([15.0, 20.0, 24.0, 26.0]),
        emitted=f([2.0, 8.0, 5.0, 2.0]),
        first=f([0]),
        last=f([3]),
        output_len=f([11]),
        drafted=f([3.0, 6.0, 3.0, 0.0]),
        q_min=f([4.0, 4.0, 1.0, 1.0]),
        q_max=f([10.0, 4.0, 4.0, 1.0]),
        prefills=f([1.0, 0.0, 0.0, 0.0]),
    )


def test_uniform_steps_are_every_sequence_exactly_1_plus_k() -> None:
    assert uniform_steps(_tiny(), 3).tolist() == [False, True, False, False]


def test_each_terms_value_on_a_tiny_schedule() -> None:
    s = _tiny()
    terms = {t.name: t for t in terms_for(GPU_V1, 3)}
    assert list(terms) == [HOST, CALL, PROPOSER_CTX, PROPOSER_SEQ, GRAPH, REJECTION]
    ms = {name: t.per_step_ms(s).tolist() for name, t in terms.items()}
    assert ms[HOST] == pytest.approx([1.05] * 4)  # the prior 0.6-1.5 ms
    assert terms[HOST].low == 0.6 and terms[HOST].high == 1.5
    assert "third-party" in terms[HOST].source
    assert ms[CALL] == pytest.approx([0.05] * 4)
    # 1 ns per context token: Σ context = 2 x mean context
    assert ms[PROPOSER_CTX] == pytest.approx([30e-6, 40e-6, 48e-6, 52e-6])
    assert ms[PROPOSER_SEQ] == pytest.approx([0.02] * 4)
    # piecewise: decode-only steps that are not uniform (2 and 3); the prefill step is
    # piecewise in the baseline too
    assert ms[GRAPH] == pytest.approx([0.0, 0.0, 0.3, 0.3])
    assert ms[REJECTION] == pytest.approx([0.05, 0.05, 0.05, 0.0])  # steps with a draft
    pad = padding_for(GPU_V1, 3)
    assert pad is not None
    assert pad.padded(s, 3).tolist() == [16.0, 8.0, 8.0, 4.0]


def test_terms_a_path_does_not_imply_are_absent() -> None:
    names = [t.name for t in terms_for(CPU_032, 3)]
    # both sides synchronous (no host term), no graphs (no graph-mode term): the CPU build's
    # measured terms
    assert names == [CALL, PROPOSER_STEP, PROPOSER_CTX, REJECTION, SPEC_INPUTS, THREAD_POOL]
    assert terms_for(None, 3) == ()
    v2 = dataclasses.replace(GPU_V1, runner="v2", proposer="ngram-triton-v2", variant_async=True)
    assert [t.name for t in terms_for(v2, 3)] == ["proposer: kernel", GRAPH, REJECTION]


def test_a_given_figure_replaces_the_prior_and_an_unknown_one_is_an_error() -> None:
    given = {GRAPH: Given(0.5, "baseline profile", 0.4, 0.7)}
    t = next(t for t in terms_for(GPU_V1, 3, given=given) if t.name == GRAPH)
    assert (t.value, t.low, t.high, t.source) == (0.5, 0.4, 0.7, "baseline profile")
    with pytest.raises(ValueError, match="does not have: graph mode"):
        terms_for(CPU_032, 3, given=given)


def test_cpu_terms_are_fractions_of_the_baselines_one_sequence_step() -> None:
    # Hand-worked: T1 = 2.0 ms; the CPU priors 0.01 + 0.055 + 0.09 + 0.31 + 0.3 = 0.765 of
    # it per step (1.53 ms), plus 1 ns per context token (Σ context 2 x mean = 30e3 -> 30e-6).
    s = _tiny()
    terms = {t.name: t for t in terms_for(CPU_032, 3, one_step_ms=2.0)}
    per_step = {n: t.per_step_ms(s).tolist() for n, t in terms.items()}
    assert per_step[SPEC_INPUTS] == pytest.approx([0.62] * 4)
    assert per_step[THREAD_POOL] == pytest.approx([0.6] * 4)
    flat = sum(per_step[n][0] for n in (CALL, PROPOSER_STEP, REJECTION, SPEC_INPUTS, THREAD_POOL))
    assert flat == pytest.approx(0.765 * 2.0)
    assert per_step[PROPOSER_CTX][0] == pytest.approx(30e-6)
    assert terms[THREAD_POOL].low == 0.0 and terms[THREAD_POOL].high == 0.7
    assert "measured here" in terms[SPEC_INPUTS].source
    # doubling the baseline's step doubles every relative term
    twice = {t.name: t for t in terms_for(CPU_032, 3, one_step_ms=4.0)}
    assert twice[REJECTION].per_step_ms(s)[0] == pytest.approx(2 * per_step[REJECTION][0])


def test_the_override_replaces_every_term() -> None:
    (t,) = terms_for(GPU_V1, 3, override_ms=2.5)
    assert (t.name, t.value, t.low, t.high, t.source) == (
        OVERRIDE, 2.5, 2.5, 2.5, "flag --step-overhead-ms")  # fmt: skip
    assert t.per_step_ms(_tiny()).tolist() == [2.5] * 4


def test_every_prior_has_a_range_around_it_and_a_source() -> None:
    for p in PRIORS.values():
        assert p.low <= p.value <= p.high and p.source


# --------------------------------------------------------------------------- the fast path


def _seq(drafted: list[int], prompt_len: int = 10) -> StepSequence:
    d = np.array(drafted, dtype=np.int64)
    n = len(d)
    return StepSequence(prompt_len, int(n + d.sum()), np.arange(n), d, d, 1 + d,
                        np.zeros(n, dtype=bool))  # fmt: skip


def test_the_placement_carries_what_the_terms_need() -> None:
    s = ClosedLoopReplay().schedule([_seq([0, 3, 3, 0]), _seq([0, 3, 1])], 2, fill=False)
    # step 0: two prefills of 10; step 1: 1+3, 1+3; step 2: 1+3, 1+1; step 3: 1+0
    assert s.n_tokens.tolist() == [20, 8, 6, 1]
    assert s.drafted is not None and s.q_min is not None and s.q_max is not None
    assert s.prefills is not None
    assert s.drafted.tolist() == [0, 6, 4, 0]
    assert s.q_min.tolist() == [10, 4, 2, 1] and s.q_max.tolist() == [10, 4, 4, 1]
    assert s.prefills.tolist() == [2, 0, 0, 0]


# --------------------------------------------------------------------------- p_faster


def _one_request(term: Term) -> tuple[TpotModel, StepCostFit]:
    """One request of 10 decode steps, 10 tokens after the first; every step 4 ms on the
    curve (no error: the fit's covariance unknown) plus ``term``."""
    fit = StepCostFit(np.array([4.0, 0.0, 0.0]), None, None, None, (), np.zeros(0), False,
                      curve="linear")  # fmt: skip
    sched = Schedule(
        n_tokens=np.ones(11),
        n_seqs=np.ones(11),
        context=np.zeros(11),
        emitted=np.ones(11),
        first=np.array([0]),
        last=np.array([10]),
        output_len=np.array([11]),
    )
    return TpotModel.of(sched, fit, terms=[term]), fit


@pytest.mark.parametrize(
    ("baseline", "want"),
    # TPOT = 4 + v, v triangular over 0..2 with its mode at 1: P(v < x) = x²/2 for x <= 1
    [(7.0, 1.0), (4.0, 0.0), (4.5, 0.125), (5.0, 0.5)],
)
def test_p_faster_is_the_share_of_draws_below_the_baseline(baseline: float, want: float) -> None:
    term = Term(
        "t", 1.0, 0.0, 2.0, "ms per step", "test", "why", lambda s: np.ones(len(s.n_tokens))
    )
    model, fit = _one_request(term)
    est, low, high, p = model.interval(
        fit, n_boot=20000, confidence=0.95, rng=np.random.default_rng(0), baseline_ms=baseline
    )
    assert est == pytest.approx(5.0)
    assert p == pytest.approx(want, abs=0.01)
    # the interval is the triangular's 2.5%..97.5% quantiles: sqrt(2 x 0.025) = 0.2236
    assert low == pytest.approx(4.2236, abs=0.02) and high == pytest.approx(5.7764, abs=0.02)


# --------------------------------------------------------------------------- the forecast


LEVELS = [1, 2, 4, 8]


@pytest.fixture(scope="module")
def baseline(tmp_path_factory: pytest.TempPathFactory) -> Baseline:
    tmp = tmp_path_factory.mktemp("terms")
    recs = make_records(40, levels=LEVELS, seed=1, min_tokens=100, max_tokens=600)
    write_synthetic_baseline(tmp, recs, levels=LEVELS, cost=LinearCost(12.0, 0.6, 0.0008))
    return load_baseline(tmp, need_tokens=True, hint=lambda m: "")


def _fc(baseline: Baseline, **kw: Any) -> Forecast:
    opts = Options(num_speculative_tokens=3, n_boot=200, schedule_ks=(1, 3), **kw)
    return forecast(baseline, opts, plan=default_plan(LEVELS, opts))


def test_the_breakdown_sums_to_the_predicted_median(baseline: Baseline) -> None:
    fc = _fc(baseline, engine_path=GPU_V1)
    for lf in fc.levels:
        r = lf.results[3]
        names = [b.name for b in r.breakdown]
        assert names == ["baseline step", "padding", HOST, CALL, PROPOSER_CTX, PROPOSER_SEQ,
                         GRAPH, REJECTION]  # fmt: skip
        assert sum(b.per_token_ms for b in r.breakdown) == pytest.approx(r.predicted_ms)
        by = {b.name: b for b in r.breakdown}
        assert by["padding"].per_step_ms >= 0 and by[HOST].per_step_ms == pytest.approx(1.05)
        est, lo, hi = r.overhead_ms
        terms = sum(b.per_step_ms for b in r.breakdown[2:])
        assert est == pytest.approx(terms) and lo < est < hi


def test_no_engine_path_is_the_curve_alone_and_the_self_check_is_unchanged(
    baseline: Baseline,
) -> None:
    plain, gpu = _fc(baseline), _fc(baseline, engine_path=GPU_V1)
    for a, b in zip(plain.levels, gpu.levels, strict=True):
        assert a.replayed_baseline_ms == b.replayed_baseline_ms
        r = a.results[3]
        assert [x.name for x in r.breakdown] == ["baseline step"] and r.terms == ()
        assert r.breakdown[0].per_token_ms == pytest.approx(r.predicted_ms)
        assert b.results[3].predicted_ms > r.predicted_ms  # padding and terms cost


def test_p_faster_in_the_forecast(baseline: Baseline) -> None:
    cheap = _fc(baseline)  # cheap tokens: the variant pays
    assert cheap.levels[0].results[3].p_faster == 1.0
    for lf in cheap.levels:
        r = lf.results[3]
        p = r.p_faster
        assert p is not None
        # the whole interval below the baseline: at least 97.5% of the draws are
        assert r.verdict != "faster" or p >= 0.975
    dear = _fc(baseline, step_overhead_ms=1000.0)
    assert all(lf.results[3].p_faster == 0.0 for lf in dear.levels)
    # at the break-even overhead the estimate meets the baseline: draws fall on both sides
    lf = cheap.levels[0]
    x = lf.results[3].break_even_overhead_ms
    even = _fc(baseline, step_overhead_ms=x).levels[0].results[3]
    assert even.predicted_ms == pytest.approx(lf.baseline_ms)
    assert even.p_faster is not None and 0.0 < even.p_faster < 1.0


def test_the_override_replaces_the_terms_but_not_the_padding(baseline: Baseline) -> None:
    fc = _fc(baseline, engine_path=GPU_V1, step_overhead_ms=2.0)
    for lf in fc.levels:
        r = lf.results[3]
        assert [b.name for b in r.breakdown] == ["baseline step", "padding", OVERRIDE]
        assert r.breakdown[2].per_step_ms == pytest.approx(2.0)
        assert r.overhead_ms == (2.0, 2.0, 2.0)
    with pytest.raises(ValueError, match="--host-step-ms 1: the engine path has no"):
        _fc(baseline, engine_path=CPU_032, host_step_ms=1.0)
    host = _fc(baseline, engine_path=GPU_V1, host_step_ms=0.8).levels[0].results[3]
    t = next(t for t in host.terms if t.name == HOST)
    assert (t.value, t.low, t.high, t.source) == (0.8, 0.8, 0.8, "flag --host-step-ms")


def test_breakdown_break_even_and_p_in_the_json_and_the_markdown(baseline: Baseline) -> None:
    fc = _fc(baseline, engine_path=GPU_V1)
    data = orjson.loads(orjson.dumps(forecast_json(fc), option=orjson.OPT_SERIALIZE_NUMPY))
    assert data["engine_path"]["graph_mode"] == "full_and_piecewise"
    assert [t["name"] for t in data["terms"]][:2] == [HOST, CALL]
    assert "rounded to multiples of 4: [4, 8, 16]" in data["padding"]
    for lv, lf in zip(data["levels"], fc.levels, strict=True):
        r = lf.results[3]
        assert lv["p_faster"] == r.p_faster
        assert lv["estimated_step_overhead_ms"] == pytest.approx(r.overhead_ms[0])
        parts = lv["breakdown"]
        assert sum(p["per_token_ms"] for p in parts) == pytest.approx(
            lv["predicted_median_tpot_ms"]
        )
    text = forecast_markdown(fc)
    assert "## Cost breakdown (k=3" in text
    r = fc.levels[0].results[3]
    est, lo, hi = r.overhead_ms
    assert (
        f"- c1: faster with p={r.p_faster:.2f}; break-even "
        f"{r.break_even_overhead_ms:.2f} ms/step vs estimated {est:.2f} ({lo:.2f}-{hi:.2f})"
    ) in text


def test_breakdown_break_even_and_p_in_the_html_report(baseline: Baseline, tmp_path: Path) -> None:
    from specload.report.prediction import Prediction, ngram_rows  # noqa: PLC0415
    from specload.report.prediction_html import _prediction_block  # noqa: PLC0415

    fc = _fc(baseline, engine_path=GPU_V1)
    data = orjson.loads(orjson.dumps(forecast_json(fc), option=orjson.OPT_SERIALIZE_NUMPY))
    pred = Prediction(tmp_path / "prediction.json", data)
    rows = ngram_rows(pred)
    r = fc.levels[0].results[3]
    assert rows[0].p_faster == r.p_faster and rows[0].overhead_ms == pytest.approx(r.overhead_ms[0])
    assert [b[0] for b in rows[0].breakdown] == [b.name for b in r.breakdown]
    html = str(_prediction_block(pred))
    est, lo, hi = r.overhead_ms
    assert f"<td>{r.p_faster:.2f}</td><td>{r.break_even_overhead_ms:.2f}</td>" in html
    assert f"<td>{est:.2f} ({lo:.2f} .. {hi:.2f})</td>" in html
    by = r.breakdown
    cells = "".join(f"<td>{b.per_token_ms:.3f} [{b.per_step_ms:.3f}]</td>" for b in by)
    assert f"<td>c1</td>{cells}<td>{r.predicted_ms:.2f}</td>" in html
    assert "graph mode full_and_piecewise, capture sizes 1, 2, 4, 8, 16" in html
    assert "host work (sync): 1.05 ms per step (range 0.6-1.5)" in html


def test_the_moe_correction_is_a_term_only_for_an_moe() -> None:
    from specload.predict.moe import MoeModel, MoeShape  # noqa: PLC0415

    moe = MoeModel.default(MoeShape(experts=256, top_k=8))
    rho = moe.overlap
    assert 0 < moe.overlap_low < rho < moe.overlap_high < 1

    def curve(n: np.ndarray) -> np.ndarray:
        return np.asarray(0.1 * np.asarray(n, dtype=float))

    terms = terms_for(CPU_032, 3, moe=moe, curve=curve)
    assert [t.name for t in terms][-1] == "MoE expert reads"
    t = terms[-1]
    assert (t.value, t.low, t.high) == (rho, moe.overlap_low, moe.overlap_high)
    # row cost 0: charged n - rho x drafts, on a curve of 0.1 ms per token
    assert t.per_step_ms(_tiny()).tolist() == pytest.approx([-0.1 * rho * d for d in (3, 6, 3, 0)])
    # the override replaces the extra terms, not the MoE correction (a correction of the curve)
    assert [x.name for x in terms_for(CPU_032, 3, override_ms=1.0, moe=moe, curve=curve)] == [
        OVERRIDE,
        "MoE expert reads",
    ]
    assert "MoE expert reads" not in [x.name for x in terms_for(CPU_032, 3)]  # dense: absent


def test_an_moe_forecast_charges_verification_less(baseline: Baseline) -> None:
    from specload.predict.moe import MoeModel, MoeShape  # noqa: PLC0415

    moe = MoeModel.default(MoeShape(experts=256, top_k=8))
    dense, sparse = _fc(baseline, engine_path=CPU_032), _fc(baseline, engine_path=CPU_032, moe=moe)
    for a, b in zip(dense.levels, sparse.levels, strict=True):
        assert a.replayed_baseline_ms == b.replayed_baseline_ms
        r = b.results[3]
        assert r.predicted_ms < a.results[3].predicted_ms
        assert r.breakdown[-1].name == "MoE expert reads" and r.breakdown[-1].per_token_ms < 0
        assert sum(x.per_token_ms for x in r.breakdown) == pytest.approx(r.predicted_ms)
