"""Calibration: the cost model reproduces the reference deployment's figures (virtual time).

Reference (docs/simulator.md, /work/shared/REFERENCE.md): baseline single stream
coding 62.6, math 78.0, structured 76.1, explanation 79.5 tok/s (average ~74,
TPOT ~13.6 ms), each within +-10%; n-gram 9-26% slower in every category;
EAGLE-3 faster at concurrency 1 with a shrinking advantage; all-reduce 51.5%
(+-5 points) of decode time at batch 1.
"""

from __future__ import annotations

import pytest

from simulator.calibration import run_virtual, single_stream_table
from simulator.costmodel import CostModel
from simulator.variants import PRESETS
from simulator.workload import CATEGORIES, REFERENCE_CATEGORIES

pytestmark = pytest.mark.unit

REFERENCE_TOK_S = {"coding": 62.6, "math": 78.0, "structured": 76.1, "explanation": 79.5}
REQUESTS = 16


@pytest.fixture(scope="module")
def baseline() -> dict[str, float]:
    return single_stream_table(PRESETS["baseline"], requests_per_category=REQUESTS)


@pytest.mark.parametrize("category", sorted(REFERENCE_TOK_S))
def test_baseline_single_stream_matches_reference(
    baseline: dict[str, float], category: str
) -> None:
    expected = REFERENCE_TOK_S[category]
    assert abs(baseline[category] / expected - 1) <= 0.10, (category, baseline[category], expected)


def test_baseline_average_coding_slowest_explanation_fastest(baseline: dict[str, float]) -> None:
    four = [baseline[c] for c in REFERENCE_CATEGORIES]
    average = sum(four) / 4
    assert abs(average / 74.0 - 1) <= 0.10, average
    tpot_ms = 1000 * sum(1 / v for v in four) / 4
    assert abs(tpot_ms / 13.6 - 1) <= 0.10, tpot_ms
    assert min(REFERENCE_CATEGORIES, key=lambda c: baseline[c]) == "coding"
    assert max(REFERENCE_CATEGORIES, key=lambda c: baseline[c]) == "explanation"


def test_ngram_is_9_to_26_percent_slower_in_every_category(baseline: dict[str, float]) -> None:
    ngram = single_stream_table(PRESETS["ngram"], requests_per_category=REQUESTS)
    for category in CATEGORIES:
        slower = 1 - ngram[category] / baseline[category]
        assert 0.09 <= slower <= 0.26, (category, round(slower, 3))


def test_eagle3_advantage_shrinks_with_concurrency() -> None:
    ratio: dict[int, float] = {}
    for concurrency in (1, 4, 16, 64):
        tok_s = {}
        for name in ("baseline", "eagle3"):
            run = run_virtual(
                PRESETS[name],
                categories=REFERENCE_CATEGORIES,
                requests_per_category=1,
                concurrency=concurrency,
                duration_s=60.0 if concurrency == 1 else 30.0,
            )
            tok_s[name] = run.throughput_tok_s
        ratio[concurrency] = tok_s["eagle3"] / tok_s["baseline"]
    assert ratio[1] >= 1.25, ratio
    assert ratio[1] > ratio[4] > ratio[16], ratio
    assert ratio[64] < ratio[4], ratio


def test_allreduce_is_half_of_decode_time_at_batch_1() -> None:
    run = run_virtual(PRESETS["baseline"], categories=REFERENCE_CATEGORIES, requests_per_category=6)
    assert abs(run.allreduce_share - 0.515) <= 0.05, run.allreduce_share


def test_some_long_reasoning_prompts_exhaust_4096_tokens_in_reasoning() -> None:
    run = run_virtual(PRESETS["baseline"], categories=("long_reasoning",), requests_per_category=30)
    result = run.by_category["long_reasoning"]
    assert result.length_finishes >= 5
    assert 1 <= result.content_zero < result.requests


def test_step_cost_terms() -> None:
    cost = CostModel()
    assert cost.allreduces_per_step == 122
    # Latency-bound at batch 1: alpha = 14 hops; bytes add little.
    one = cost.allreduce_s(1)
    assert 14 * cost.allreduce_hop_latency_s <= one < 1.05 * 14 * cost.allreduce_hop_latency_s
    assert cost.allreduce_s(256) > 2 * one
    assert CostModel(tp=1).step(decode_tokens=1, num_seqs=1, context_tokens=100).allreduce_s == 0
    # k+1 verified tokens hit more distinct experts.
    assert cost.distinct_experts(1) == pytest.approx(9.0)
    assert 40 < cost.distinct_experts(6) < 50
    short = cost.step(decode_tokens=1, num_seqs=1, context_tokens=200).total_s
    long = cost.step(decode_tokens=1, num_seqs=1, context_tokens=3000).total_s
    assert long > short
    step = cost.step(decode_tokens=1, num_seqs=1, context_tokens=1000)
    assert 0.012 < step.total_s < 0.016
