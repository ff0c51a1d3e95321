"""The engine's hooks: a cost model and a speculator stand in; the n-gram variant speculates
by vLLM's rule over the text it generates, so ``specload predict``'s replay of that text gives
its counters."""

from __future__ import annotations

import random

import pytest

from simulator.costmodel import CostModel, StepCost
from simulator.engine import EngineCore, SchedulerLimits, Sequence
from simulator.metrics import EngineMetrics
from simulator.ngram import RequestReplay
from simulator.speculation import NgramSpeculator, ProbabilisticSpeculator, speculator_for
from simulator.variants import PRESETS
from specload.errors import UsageError

pytestmark = pytest.mark.unit


def _metrics(k: int) -> EngineMetrics:
    return EngineMetrics(
        model_name="m", max_model_len=8192, speculative_positions=k, cache_info={}, start_time=0.0
    )


def _run(core: EngineCore, seqs: list[Sequence]) -> float:
    for seq in seqs:
        core.add(seq)
    now = 0.0
    while not core.idle:
        plan = core.plan(now)
        assert plan is not None
        now += plan.duration_s
        core.complete(plan, now)
    return now


def _seqs(n: int, emit=lambda *a: None, **kw) -> list[Sequence]:  # type: ignore[no-untyped-def]
    base = {"category": "coding", "prompt_tokens": 120, "reasoning_tokens": 300,
            "content_tokens": 200, "max_tokens": 400, "arrival": 0.0}  # fmt: skip
    return [Sequence(i, emit=emit, **{**base, **kw}) for i in range(n)]


def test_the_variants_own_speculators() -> None:
    rng = random.Random(0)
    assert speculator_for(PRESETS["baseline"], rng) is None
    ngram = speculator_for(PRESETS["ngram"], rng, max_model_len=4096)
    assert isinstance(ngram, NgramSpeculator)
    assert (ngram.k, ngram.lookup_min, ngram.lookup_max, ngram.max_model_len) == (5, 2, 4, 4096)
    assert isinstance(speculator_for(PRESETS["eagle3"], rng), ProbabilisticSpeculator)
    # Asking for the probability tables selects them; text drafting is n-gram's only.
    tables = PRESETS["ngram"].with_overrides({"acceptance": "0.3"})
    assert isinstance(speculator_for(tables, rng), ProbabilisticSpeculator)
    with pytest.raises(UsageError, match="acceptance_model=text: only for method ngram"):
        PRESETS["eagle3"].with_overrides({"acceptance_model": "text"})
    with pytest.raises(UsageError, match="must be one of text, probabilistic"):
        PRESETS["ngram"].with_overrides({"acceptance_model": "magic"})


class _TwoOfThree:
    """Drafts 3 tokens every step and the target accepts 2."""

    def draft(self, seq: Sequence) -> int:
        return 3

    def accept(self, seq: Sequence, drafts: int) -> int:
        return 2


class _FlatCost:
    """Not a CostModel: 2 ms per step plus 1 ms per verified token."""

    def step(self, *, decode_tokens: int, num_seqs: int, context_tokens: float,
             query_extra_context: float = 0.0, prefill_tokens: int = 0, draft_s: float = 0.0,
             expert_tokens: float | None = None) -> StepCost:  # fmt: skip
        return StepCost(0.002 + 0.001 * decode_tokens, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0)


def test_a_speculator_and_a_cost_model_stand_in() -> None:
    metrics = _metrics(3)
    core = EngineCore(
        _FlatCost(), PRESETS["baseline"], metrics, random.Random(0), speculator=_TwoOfThree()
    )
    (seq,) = _seqs(1, max_tokens=10)
    end = _run(core, [seq])
    # Prefill (1 token, 2 ms), then 3 steps of 3 tokens verifying 4 each (6 ms each).
    assert seq.generated == 10 and core.steps == 4
    assert end == pytest.approx(0.002 + 3 * 0.006)
    assert metrics.spec_drafts.value == 3 and metrics.spec_draft_tokens.value == 9
    assert metrics.spec_accepted_tokens.value == 6
    assert [p.value for p in metrics.spec_accepted_per_pos] == [3, 3, 0]


def test_ngram_counters_are_the_replay_of_the_generated_text() -> None:
    metrics = _metrics(5)
    core = EngineCore(CostModel(), PRESETS["ngram"], metrics, random.Random(1),
                      SchedulerLimits(max_num_seqs=3))  # fmt: skip
    seqs = [
        *_seqs(4, category="structured", reasoning_tokens=250, content_tokens=300),
        *_seqs(2, category="explanation", max_tokens=4000),  # ends with "stop"
    ]
    for i, seq in enumerate(seqs):
        seq.text_seed = 100 + i
    _run(core, seqs)
    drafts = tokens = accepted = accepted_max = 0
    for seq in seqs:
        out = seq.token_ids(seq.generated)[: seq.generated]
        steps = RequestReplay(seq.prompt_ids(), out, lookup_min=2, lookup_max=4, max_k=5).steps(5)
        drafts += steps.drafts
        tokens += steps.draft_tokens
        accepted += steps.accepted_tokens
        accepted_max += steps.accepted_max
    # Drafting depends on the context only: exact. Like vLLM, the engine also counts draft
    # tokens accepted past the output's end, which the recorded output cannot show.
    assert (metrics.spec_drafts.value, metrics.spec_draft_tokens.value) == (drafts, tokens)
    assert accepted <= metrics.spec_accepted_tokens.value <= accepted_max
    assert 0 < accepted < tokens


def test_ngram_drafts_stop_short_of_max_model_len() -> None:
    free, capped = NgramSpeculator(5, 2, 4), NgramSpeculator(5, 2, 4)
    a, b = _seqs(2, prompt_tokens=120)
    b.text_seed = a.text_seed
    longer = 0
    for g in range(1, 300):
        a.generated = b.generated = g
        capped.max_model_len = 120 + g + 2  # the scheduler's cap: max_model_len - N - 1 = 1
        d_free, d_capped = free.draft(a), capped.draft(b)
        assert d_capped == min(d_free, 1)
        longer += d_free > 1
    assert longer > 10
