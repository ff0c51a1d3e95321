"""The simulator's /metrics text against vLLM 0.32's captured exposition, and its values."""

from __future__ import annotations

import random
from pathlib import Path

import pytest

from simulator.costmodel import CostModel
from simulator.engine import EngineCore, Sequence
from simulator.metrics import EngineMetrics, buckets_1_2_5, cache_config_labels, process_families
from simulator.variants import PRESETS
from specload import promtext
from specload import vllm_metrics as vm
from tests.fixtures.vllm_families import (
    EMULATED_FAMILIES,
    SPEC_DECODE_FAMILIES,
    family_shape,
)

pytestmark = pytest.mark.unit

DATA = Path(__file__).resolve().parents[1] / "data" / "vllm-0.32.0"


def sim_metrics(max_model_len: int = 2048, positions: int = 3) -> EngineMetrics:
    return EngineMetrics(
        model_name="tiny-plain",
        max_model_len=max_model_len,
        speculative_positions=positions,
        cache_info=cache_config_labels(block_size=128, num_gpu_blocks=8192, max_concurrency=512.0),
    )


def test_emulated_families_match_captured_vllm_0_32() -> None:
    real = promtext.parse((DATA / "metrics_ngram.txt").read_text())
    m = sim_metrics()
    sim = promtext.parse((process_families(m.start_time) + m.render()).decode())
    emulated = [n for n in sim if n.startswith("vllm:") or n.startswith("process_")]
    assert len(emulated) >= 40
    for name in emulated:
        assert name in real, f"{name} is not a vLLM 0.32 family"
        assert family_shape(sim, name) == family_shape(real, name), name
        assert sim[name].help == real[name].help, name
    # Every family specload reads, and the others listed, is emulated.
    for name in (*EMULATED_FAMILIES, *SPEC_DECODE_FAMILIES):
        assert name in sim, name
    # _created series as vLLM 0.32 shows them: their own gauge families.
    assert sim["vllm:prompt_tokens_created"].type == "gauge"
    assert sim["vllm:time_to_first_token_seconds_created"].type == "gauge"


def test_baseline_has_no_spec_decode_families() -> None:
    text = sim_metrics(positions=0).render().decode()
    assert "spec_decode" not in text


def test_token_buckets_follow_max_model_len() -> None:
    assert buckets_1_2_5(2048) == (1, 2, 5, 10, 20, 50, 100, 200, 500, 1000, 2000)
    assert buckets_1_2_5(262144)[-1] == 200000


def test_values_agree_with_what_the_engine_did() -> None:
    metrics = sim_metrics(max_model_len=8192, positions=5)
    core = EngineCore(CostModel(), PRESETS["ngram"], metrics, random.Random(3))
    sent: dict[int, int] = {}
    finished: list[str] = []

    def emit(seq: Sequence, r: int, c: int, finish: str | None, now: float) -> None:
        sent[seq.rid] = sent.get(seq.rid, 0) + r + c
        if finish:
            finished.append(finish)

    for rid in range(6):
        core.add(
            Sequence(
                rid,
                category="math",
                prompt_tokens=100 + rid,
                reasoning_tokens=40,
                content_tokens=30,
                max_tokens=50 if rid % 2 else 500,
                arrival=0.0,
                emit=emit,
            )
        )
    now = 0.0
    while not core.idle:
        plan = core.plan(now)
        assert plan is not None
        now += plan.duration_s
        core.complete(plan, now)
    expo = promtext.parse(metrics.render().decode())
    assert expo[vm.GENERATION_TOKENS].total() == sum(sent.values())
    assert expo[vm.PROMPT_TOKENS].total() == sum(100 + r for r in range(6))
    success = expo[vm.REQUEST_SUCCESS].by_label("finished_reason")
    assert success["length"] == 3 and success["stop"] == 3
    assert sent == {r: 50 if r % 2 else 70 for r in range(6)}
    for name in (
        vm.TIME_TO_FIRST_TOKEN,
        vm.E2E_LATENCY,
        "vllm:request_num_preemptions",
        "vllm:request_prefill_kv_computed_tokens",
        "vllm:request_generation_tokens",
    ):
        hist = expo[name].histogram()
        assert hist is not None and hist.count == 6, name
    generation = expo["vllm:request_generation_tokens"].histogram()
    assert generation is not None and generation.sum == sum(sent.values())
    drafts = expo[vm.DRAFTS].total()
    draft_tokens = expo[vm.DRAFT_TOKENS].total()
    accepted = expo[vm.ACCEPTED].total()
    per_pos = expo[vm.ACCEPTED_PER_POS].by_label("position")
    # n-gram drafts hold at most k = 5 tokens (fewer when the match is near the context's end)
    assert drafts and draft_tokens is not None and drafts <= draft_tokens <= 5 * drafts
    assert accepted is not None and 0 < accepted < draft_tokens
    assert sum(per_pos.values()) == accepted
    assert per_pos["0"] >= per_pos["1"] >= per_pos["4"]


def test_aborts_release_the_kv_cache_wherever_the_request_is() -> None:
    metrics = sim_metrics(max_model_len=8192, positions=0)
    core = EngineCore(CostModel(), PRESETS["baseline"], metrics, random.Random(1))
    seqs = [
        Sequence(r, category="math", prompt_tokens=50, reasoning_tokens=20, content_tokens=0,
                 max_tokens=100, arrival=0.0, emit=lambda *a: None)
        for r in range(3)
    ]  # fmt: skip
    core.add(seqs[0])
    plan = core.plan(0.0)
    assert plan is not None
    core.complete(plan, 0.01)  # seqs[0] is running
    core.add(seqs[1])
    plan = core.plan(0.01)  # seqs[1] admitted by the step in flight
    core.add(seqs[2])  # seqs[2] waiting
    for seq in seqs:
        core.abort(seq, 0.02)
        core.abort(seq, 0.02)  # twice: counted once
    assert plan is not None
    core.complete(plan, 0.03)
    assert core.idle and core.kv_tokens == 0
    assert metrics.request_success["abort"].value == 3
