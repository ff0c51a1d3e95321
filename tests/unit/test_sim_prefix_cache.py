"""The simulator's prefix cache: vLLM's counting (16-token full blocks, chained hashes, at most
``prompt - 1`` tokens), LRU eviction, and what the engine counts and computes with it."""

from __future__ import annotations

import random

import pytest

from simulator.costmodel import CostModel
from simulator.engine import EngineCore, Sequence
from simulator.metrics import EngineMetrics
from simulator.prefix_cache import BLOCK_TOKENS, PrefixCache, block_hashes
from simulator.text import TEMPLATE_HEAD, prompt_token_ids
from simulator.variants import PRESETS
from specload import promtext

pytestmark = pytest.mark.unit


def _ids(n: int, start: int = 1000) -> list[int]:
    return list(range(start, start + n))


def test_leading_full_blocks_hit_and_a_miss_ends_the_chain() -> None:
    cache = PrefixCache(1000)
    base = _ids(100)  # 6 full blocks and 4 tokens
    assert len(block_hashes(base)) == 6
    assert cache.cached_tokens(block_hashes(base), len(base)) == 0
    cache.insert(block_hashes(base))
    assert cache.cached_tokens(block_hashes(base), len(base)) == 96
    # Same first 40 tokens, then different: two full blocks in common.
    other = base[:40] + _ids(60, 5000)
    assert cache.cached_tokens(block_hashes(other), len(other)) == 32
    # A different first block: nothing after it can hit, even identical blocks (chained).
    changed = [7, *base[1:]]
    assert cache.cached_tokens(block_hashes(changed), len(changed)) == 0
    # Block 2 of base is cached, but only after base's block 1: after another's, it misses.
    head = _ids(16, 7000)
    cache.insert(block_hashes(head))
    mixed = head + base[16:40]
    assert cache.cached_tokens(block_hashes(mixed), len(mixed)) == 16
    # A prompt of exactly two blocks: the last token is always computed, so one block hits.
    two = base[:32]
    assert cache.cached_tokens(block_hashes(two), 32) == 16
    cache.reset()
    assert len(cache) == 0 and cache.cached_tokens(block_hashes(base), len(base)) == 0


def test_least_recently_used_blocks_go_first_tail_before_head() -> None:
    cache = PrefixCache(4)
    a, b = _ids(48), _ids(48, 9000)  # three blocks each
    cache.insert(block_hashes(a))
    cache.insert(block_hashes(b))  # six blocks > 4: a's last two leave
    assert len(cache) == 4
    assert cache.cached_tokens(block_hashes(a), 49) == 16
    assert cache.cached_tokens(block_hashes(b), 49) == 48
    cache.insert(block_hashes(a))  # a again: b's tail is now the oldest
    assert cache.cached_tokens(block_hashes(a), 49) == 48
    assert cache.cached_tokens(block_hashes(b), 49) == 16


def _metrics() -> EngineMetrics:
    return EngineMetrics(
        model_name="m", max_model_len=8192, speculative_positions=0, cache_info={}, start_time=0.0
    )


def _one(core: EngineCore, rid: int, prompt: list[int]) -> int:
    """Serve one request; return the prompt tokens its prefill step computed."""
    core.add(
        Sequence(
            rid,
            category="math",
            prompt_tokens=len(prompt),
            reasoning_tokens=5,
            content_tokens=5,
            max_tokens=100,
            arrival=0.0,
            emit=lambda *a: None,
            prompt_ids=prompt,
        )
    )
    now, computed = 0.0, -1
    while not core.idle:
        plan = core.plan(now)
        assert plan is not None
        if plan.prefill:
            computed = plan.prefill_tokens
        now += plan.duration_s
        core.complete(plan, now)
    return computed


def test_the_engine_counts_hits_and_computes_only_the_rest() -> None:
    metrics = _metrics()
    cache = PrefixCache(25_000)
    core = EngineCore(
        CostModel(), PRESETS["baseline"], metrics, random.Random(0), prefix_cache=cache
    )
    prompt = prompt_token_ids("Explain how a B-tree splits a full node. " * 20)
    n = len(prompt)
    hit = (n - 1) // BLOCK_TOKENS * BLOCK_TOKENS
    assert _one(core, 1, prompt) == n
    assert _one(core, 2, prompt) == n - hit  # the same text: the same ids, cached
    cache.reset()
    assert _one(core, 3, prompt) == n
    other = prompt_token_ids("Something else entirely, with other words.")
    shared = len(TEMPLATE_HEAD) // BLOCK_TOKENS * BLOCK_TOKENS  # the chat template's blocks
    assert shared == 64
    assert _one(core, 4, other) == len(other) - shared
    expo = promtext.parse(metrics.render().decode())
    total = 3 * n + len(other)
    hits = hit + shared
    assert expo["vllm:prefix_cache_queries_total"].total() == total
    assert expo["vllm:prefix_cache_hits_total"].total() == hits
    assert expo["vllm:prompt_tokens_total"].total() == total
    assert expo["vllm:prompt_tokens_cached_total"].total() == hits
    by_source = expo["vllm:prompt_tokens_by_source_total"].by_label("source")
    assert by_source == {
        "local_compute": total - hits,
        "local_cache_hit": hits,
        "external_kv_transfer": 0,
    }
    cached_by = expo["vllm:prompt_tokens_cached_by_source_total"].by_label("source")
    assert cached_by["device"] == hits and sum(cached_by.values()) == hits
    computed = expo["vllm:request_prefill_kv_computed_tokens"].histogram()
    assert computed is not None and computed.sum == total - hits


def test_prefill_of_cached_tokens_is_cheaper() -> None:
    cost = CostModel()
    prompt = prompt_token_ids("Describe the life of a request in the scheduler. " * 30)
    times = []
    core = EngineCore(CostModel(), PRESETS["baseline"], _metrics(), random.Random(0),
                      prefix_cache=PrefixCache(25_000))  # fmt: skip
    for rid in (1, 2):
        core.add(
            Sequence(rid, category="math", prompt_tokens=len(prompt), reasoning_tokens=1,
                     content_tokens=0, max_tokens=10, arrival=0.0, emit=lambda *a: None,
                     prompt_ids=prompt)
        )  # fmt: skip
        plan = core.plan(0.0)
        assert plan is not None and plan.prefill
        times.append(plan.cost.total_s)
        core.complete(plan, 1.0)

    def step_s(prefill: int) -> float:  # a prefill-only step, as the engine asks for it
        return cost.step(
            decode_tokens=0,
            num_seqs=1,
            context_tokens=0,
            prefill_tokens=prefill,
            expert_tokens=prefill,
        ).total_s

    assert times == [step_s(len(prompt)), step_s(len(prompt) % BLOCK_TOKENS or BLOCK_TOKENS)]
    assert times[1] < times[0]


def test_without_a_cache_nothing_hits() -> None:
    metrics = _metrics()
    core = EngineCore(CostModel(), PRESETS["baseline"], metrics, random.Random(0))
    prompt = prompt_token_ids("The same prompt, twice.")
    assert _one(core, 1, prompt) == _one(core, 2, prompt) == len(prompt)
    assert metrics.prefix_cache_hits.value == 0
    assert metrics.prefix_cache_queries.value == 2 * len(prompt)
