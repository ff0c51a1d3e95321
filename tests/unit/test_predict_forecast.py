"""The forecast against known truth.

Synthetic baselines (``specload.predict.synthetic``) get their median TPOTs from a known
step cost through the same batch engine; the forecast, which sees only those medians and
the token ids, must recover the variant's TPOT that the known cost gives.
"""

from __future__ import annotations

import json

import numpy as np
import pytest

from simulator.ngram import RequestReplay, StepSequence
from specload.predict.baseline import load_baseline
from specload.predict.closedloop import ClosedLoopReplay
from specload.predict.forecast import (
    Options,
    batch_size_bands,
    break_even_acceptance_rate,
    default_plan,
    forecast,
    median,
    verdict,
)
from specload.predict.synthetic import LinearCost, make_records, write_synthetic_baseline

LEVELS = [1, 2, 4, 8]


def seq(steps: int, output_len: int | None = None, prompt_len: int = 10) -> StepSequence:
    z = np.zeros(steps, dtype=np.int64)
    return StepSequence(
        prompt_len=prompt_len,
        output_len=output_len or steps,
        position=np.arange(steps),
        drafted=z,
        accepted=z,
        emitted=np.ones(steps, dtype=np.int64),
        answer=np.zeros(steps, dtype=bool),
    )


def test_closed_loop_by_hand():
    eng = ClosedLoopReplay()
    one = eng.schedule([seq(3), seq(2)], 1, fill=False)
    assert one.n_seqs.tolist() == [1, 1, 1, 1, 1]
    assert one.first.tolist() == [0, 3] and one.last.tolist() == [2, 4]
    two = eng.schedule([seq(3), seq(2)], 2, fill=False)
    assert two.n_seqs.tolist() == [2, 2, 1]
    # --duration: the freed user takes the first request again; the batch stays full.
    full = eng.schedule([seq(3), seq(2)], 2, fill=True)
    assert full.n_seqs.tolist() == [2, 2, 2]
    assert full.first.tolist() == [0, 0]  # only the listed requests are measured
    assert full.context.tolist() == [10.0, 11.0, 11.0]  # the filler starts at position 0


def test_tpot_of_a_schedule_by_hand():
    eng = ClosedLoopReplay()
    sched = eng.schedule([seq(3), seq(2)], 2, fill=False)
    # T = 1 ms per sequence in the step: request 0's decode steps 1, 2 cost 2 + 1 ms.
    span = sched.decode_sums(sched.n_tokens)
    assert span.tolist() == [3.0, 2.0]


def _baseline(tmp_path, *, n=40, requests_mode=False, cost=None, levels=LEVELS, seed=1):
    recs = make_records(n, levels=levels, seed=seed, min_tokens=100, max_tokens=600)
    write_synthetic_baseline(
        tmp_path, recs, levels=levels, cost=cost or LinearCost(), requests_mode=requests_mode
    )
    return recs


def _load(tmp_path, opts):
    return load_baseline(tmp_path, need_tokens=True, hint=lambda m: default_plan(m, opts).summary())


def _truth(recs, opts, c, cost, *, fill=True):
    seqs = [
        RequestReplay(
            r.prompt_ids,
            r.output_ids,
            lookup_min=opts.prompt_lookup_min,
            lookup_max=opts.prompt_lookup_max,
            max_k=8,
        ).steps(opts.num_speculative_tokens)
        for r in recs
        if r.step == f"c{c}"
    ]
    sched = ClosedLoopReplay().schedule(seqs, c, fill=fill)
    span = sched.decode_sums(cost(sched.n_tokens, sched.context))
    keep = sched.output_len > 1
    return median(span[keep] / (sched.output_len[keep] - 1))


@pytest.mark.parametrize("requests_mode", [False, True])
def test_forecast_recovers_the_known_cost(tmp_path, requests_mode):
    cost = LinearCost(12.0, 0.6, 0.0008)
    recs = _baseline(tmp_path, requests_mode=requests_mode, cost=cost)
    opts = Options(
        num_speculative_tokens=3,
        prompt_lookup_min=2,
        prompt_lookup_max=4,
        n_boot=200,
        schedule_ks=(1, 3, 5),
    )
    base = _load(tmp_path, opts)
    assert base.problems == []
    fc = forecast(base, opts, plan=default_plan([1, 2, 4, 8], opts))
    assert [lf.concurrency for lf in fc.levels] == LEVELS
    for lf in fc.levels:
        r = lf.results[3]
        want = _truth(recs, opts, lf.concurrency, cost, fill=not requests_mode)
        assert r.predicted_ms == pytest.approx(want, rel=0.03)
        assert r.low_ms <= r.predicted_ms <= r.high_ms
        # The k = 0 replay through the fitted curve reproduces the measured baseline.
        assert lf.replayed_baseline_ms == pytest.approx(lf.baseline_ms, rel=0.03)
        assert r.speedup == pytest.approx(lf.baseline_ms / r.predicted_ms)
    # Totals: every recorded request once, as the variant's counters would count them.
    drafts = tokens = accepted = 0
    for r in recs:
        s = RequestReplay(r.prompt_ids, r.output_ids, lookup_min=2, lookup_max=4).steps(3)
        drafts, tokens, accepted = (
            drafts + s.drafts,
            tokens + s.draft_tokens,
            accepted + s.accepted_tokens,
        )
    assert (fc.totals.drafts, fc.totals.draft_tokens, fc.totals.accepted_tokens) == (
        drafts,
        tokens,
        accepted,
    )
    assert fc.totals_by_phase["reasoning"].drafts + fc.totals_by_phase["answer"].drafts == drafts


def test_expensive_tokens_mean_do_not_speculate(tmp_path):
    # No fixed part, only tokens: rejected drafts cost, accepted ones save nothing.
    _baseline(tmp_path, cost=LinearCost(0.1, 5.0, 0.0))
    opts = Options(
        num_speculative_tokens=3,
        prompt_lookup_min=2,
        prompt_lookup_max=4,
        n_boot=200,
        schedule_ks=(1, 2, 3),
    )
    fc = forecast(_load(tmp_path, opts), opts, plan=default_plan(LEVELS, opts))
    sched = fc.k_schedule()
    assert sched["speculative_config"] is None
    assert sched["do_not_speculate"] == LEVELS
    assert all(lf.results[k].verdict != "faster" for lf in fc.levels for k in (1, 2, 3))
    assert fc.levels[0].results[3].verdict == "slower"


def test_cheap_tokens_give_a_schedule(tmp_path):
    _baseline(tmp_path, cost=LinearCost(20.0, 0.01, 0.0))
    opts = Options(num_speculative_tokens=3, prompt_lookup_min=2, prompt_lookup_max=4, n_boot=200)
    fc = forecast(_load(tmp_path, opts), opts, plan=default_plan(LEVELS, opts))
    sched = fc.k_schedule()
    cfg = sched["speculative_config"]
    assert cfg is not None and cfg["method"] == "ngram"
    table = cfg["num_speculative_tokens_per_batch_size"]
    assert table[0][0] == 1 and table[-1][1] == 256
    assert all(lo <= hi for lo, hi, _ in table)
    assert all(table[i][1] + 1 == table[i + 1][0] for i in range(len(table) - 1))
    assert cfg["num_speculative_tokens"] == max(k for _, _, k in table) >= 1
    assert all(lf.results[3].verdict == "faster" for lf in fc.levels)


def test_unmeasured_concurrency_uses_every_request(tmp_path):
    _baseline(tmp_path)
    opts = Options(
        num_speculative_tokens=2,
        prompt_lookup_min=2,
        prompt_lookup_max=4,
        n_boot=200,
        schedule_ks=(2,),
        concurrencies=[3],
    )
    fc = forecast(_load(tmp_path, opts), opts, plan=default_plan(LEVELS, opts))
    (lf,) = fc.levels
    assert not lf.baseline_measured and lf.requests == 40
    assert lf.baseline_ms == lf.replayed_baseline_ms
    assert any("concurrency 3 was not measured" in w for w in fc.warnings)


def test_levels_whose_streams_were_held_or_short_of_requests_are_named(tmp_path):
    _baseline(tmp_path)
    summary = json.loads((tmp_path / "summary.json").read_text())
    summary["levels"][0]["flags"] = ["streams_held"]
    summary["levels"][1]["flags"] = ["in_flight_short"]
    (tmp_path / "summary.json").write_text(json.dumps(summary))
    opts = Options(num_speculative_tokens=2, prompt_lookup_min=2, prompt_lookup_max=4, n_boot=50)
    fc = forecast(_load(tmp_path, opts), opts, plan=default_plan(LEVELS, opts))
    named = [w for w in fc.warnings if "streams_held" in w]
    first = summary["levels"][0]["name"]
    assert len(named) == 1 and f"level {first}'s tokens arrived in bursts" in named[0], named
    second = summary["levels"][1]["name"]
    short = [w for w in fc.warnings if "in_flight_short" in w]
    assert len(short) == 1 and f"level {second} had fewer requests in flight" in short[0], short


def test_draft_break_even(tmp_path):
    cost = LinearCost(10.0, 0.5, 0.0)
    _baseline(tmp_path, cost=cost)
    opts = Options(
        method="draft",
        num_speculative_tokens=3,
        draft_cost_ratio=0.1,
        n_boot=200,
        curve="linear",
        schedule_ks=(3,),
    )
    base = load_baseline(tmp_path, need_tokens=False, hint=lambda m: "")
    fc = forecast(base, opts, plan=default_plan(LEVELS, opts))
    assert fc.draft is not None
    for row in fc.draft:
        c = row["concurrency"]
        # a baseline step (its prefills included) costs the measured median TPOT; the
        # variant's step verifies 3 more tokens per sequence (0.5 ms each) and drafts 3 times
        t1 = row["baseline_median_tpot_ms"]
        assert row["baseline_step_ms"] == pytest.approx(t1, rel=0.01)
        want = (t1 + 0.5 * 3 * c + 3 * 0.1 * t1) / t1
        assert row["break_even_mean_acceptance_length"] == pytest.approx(want, rel=0.02)
        alpha = row["break_even_acceptance_rate"]
        length = row["break_even_mean_acceptance_length"]
        assert sum(alpha**i for i in range(4)) == pytest.approx(length, rel=1e-6)


def test_break_even_rate_edges():
    assert break_even_acceptance_rate(1.0, 3) == 0.0
    assert break_even_acceptance_rate(5.0, 3) is None
    assert break_even_acceptance_rate(4.0, 3) == pytest.approx(1.0)


def test_bands():
    assert batch_size_bands([1, 4, 16], 256) == [(1, 2), (3, 8), (9, 256)]
    assert batch_size_bands([1, 2], 256) == [(1, 1), (2, 256)]
    assert batch_size_bands([8], 4) == [(1, 8)]


def test_verdicts():
    assert verdict(10.0, 8.0, 7.5, 8.5, 0.05) == "faster"
    assert verdict(10.0, 12.0, 11.0, 13.0, 0.05) == "slower"
    assert verdict(10.0, 9.8, 9.5, 9.9, 0.05) == "within noise"  # below the floor
    assert verdict(10.0, 8.0, 7.0, 10.5, 0.05) == "within noise"  # interval crosses
