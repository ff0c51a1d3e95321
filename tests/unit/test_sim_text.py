"""The simulator's text model: token ids, words, the tokenizer, and repetition per category.

Acceptance of vLLM's n-gram rule (k 5, lookup 2..4) over the generated texts must land where
the seed's probabilistic model had it per category, and the reasoning channel must repeat less
than the answer (docs/simulator.md, "Text").
"""

from __future__ import annotations

import random
import re

import pytest

from simulator import text
from simulator.calibration import PROMPT_TOKENS
from simulator.ngram import RequestReplay, Totals
from simulator.variants import NGRAM
from simulator.workload import CATEGORIES, draw_workload, prompt_tokens_of

pytestmark = pytest.mark.unit


def test_every_emitted_id_is_one_json_safe_word() -> None:
    assert len(set(text.WORDS)) == len(text.WORDS) == text.N_WORDS
    assert all(re.fullmatch(r"[a-z]+", w) for w in text.WORDS)
    ids = text.output_token_ids("coding", 500, 900, seed=3)
    assert all(0 <= i < text.N_WORDS for i in ids)
    assert len(text.words_of(ids).split()) == len(ids) == 900


def test_the_tokenizer_is_deterministic_and_counts_what_usage_says() -> None:
    prompt = "Write a Python function that merges overlapping intervals, and explain it."
    ids = text.prompt_token_ids(prompt)
    assert ids == text.prompt_token_ids(prompt)
    assert len(ids) == prompt_tokens_of(prompt)
    assert ids[: len(text.TEMPLATE_HEAD)] == list(text.TEMPLATE_HEAD)
    assert ids[-len(text.TEMPLATE_TAIL) :] == list(text.TEMPLATE_TAIL)
    assert ids[len(text.TEMPLATE_HEAD) : -len(text.TEMPLATE_TAIL)] == text.word_token_ids(prompt)
    # Core words (case and punctuation aside) are their own ids; others hash per 4 characters.
    core = text.CORE_WORDS.index
    assert text.word_token_ids("a And, (it).") == [core("a"), core("and"), core("it")]
    assert len(text.word_token_ids("Python")) == 2 and len(text.word_token_ids("intervals,")) == 3
    assert all(text.N_WORDS <= i < text.VOCAB_SIZE for i in text.word_token_ids("Python"))
    assert len(text.synthetic_prompt_ids(300, seed=1)) == 300


def test_a_stream_is_the_same_however_it_is_asked_for() -> None:
    whole = text.TextStream("structured", 200, seed=11).ensure(700)[:700]
    stream = text.TextStream("structured", 200, seed=11)
    for n in (1, 2, 65, 199, 200, 201, 333, 700):
        stream.ensure(n)
    assert stream.ids[:700] == whole
    assert text.TextStream("structured", 200, seed=12).ensure(700)[:700] != whole


def _replay(category: str, requests: int = 24) -> tuple[Totals, Totals, Totals]:
    rng = random.Random(5)
    k = 5
    every, reasoning, answer = Totals(k), Totals(k), Totals(k)
    for i in range(requests):
        work = draw_workload(category, rng)
        n = min(4096, work.reasoning_tokens + work.content_tokens)
        out = text.output_token_ids(category, work.reasoning_tokens, n, seed=1000 + i)
        prompt = text.synthetic_prompt_ids(PROMPT_TOKENS[category], seed=i)
        steps = RequestReplay(
            prompt,
            out,
            lookup_min=2,
            lookup_max=4,
            max_k=k,
            content_start=work.reasoning_tokens if work.reasoning_tokens < n else None,
        ).steps(k)
        every.add(steps)
        reasoning.add(steps, ~steps.answer)
        answer.add(steps, steps.answer)
    return every, reasoning, answer


def _probabilistic_rate(category: str) -> float:
    """The seed's model: acceptance rate = E[accepted] / k per draft."""
    cum = expected = 0.0
    cum = 1.0
    for p in NGRAM.position_acceptance(category):
        cum *= p
        expected += cum
    return expected / NGRAM.num_speculative_tokens


@pytest.mark.parametrize("category", CATEGORIES)
def test_acceptance_emerges_where_the_probabilistic_model_had_it(category: str) -> None:
    every, reasoning, answer = _replay(category)
    assert every.acceptance_rate is not None and reasoning.acceptance_rate is not None
    assert abs(every.acceptance_rate / _probabilistic_rate(category) - 1) < 0.2, (
        category,
        every.acceptance_rate,
    )
    assert 0.7 <= every.drafts / every.steps <= 0.95  # a draft in most steps, mostly wrong
    if answer.draft_tokens > 1000:  # long_reasoning often never answers
        assert answer.acceptance_rate is not None
        assert reasoning.acceptance_rate < answer.acceptance_rate  # reasoning repeats less


def test_code_and_structured_answers_repeat_more_than_explanations() -> None:
    rates = {c: _replay(c, 12)[2].acceptance_rate for c in ("coding", "structured", "explanation")}
    assert rates["coding"] is not None and rates["structured"] is not None
    assert rates["explanation"] is not None
    assert rates["coding"] > rates["explanation"] and rates["structured"] > rates["explanation"]
