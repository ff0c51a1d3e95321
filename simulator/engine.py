"""Continuous batching: the scheduler and what one step produces, independent of any clock.

:class:`EngineCore` is pure logic. A driver asks it for the next step
(:meth:`EngineCore.plan`), waits the step's duration (real time scaled, or
virtual time in calibration), then calls :meth:`EngineCore.complete`, which
hands each sequence the tokens the step produced (one chunk per sequence per
step) and records vLLM's metrics.

Two parts plug in:

* ``cost`` — anything with :class:`CostModel`'s ``step(...) -> StepCost``
  (:class:`StepCostModel`): the simulator's cost model, or a fitted curve
  (``specload predict``);
* ``speculator`` — a :class:`Speculator`: how many draft tokens a running sequence
  verifies this step (``draft``, called in :meth:`EngineCore.plan`) and how many of them
  the target accepts (``accept``, in :meth:`EngineCore.complete`). None for a
  speculative variant means its own (:func:`simulator.speculation.speculator_for`:
  vLLM's n-gram rule over the sequence's text, or EAGLE-3's acceptance draws);
  ``specload predict`` replays recorded step sequences through it;
* ``prefix_cache`` — a :class:`~simulator.prefix_cache.PrefixCache` (the server's; None in
  calibration and ``specload predict``): on admission a prompt's leading cached blocks are
  counted as vLLM counts them and only the rest is prefilled.

A sequence with ``spec`` set (:class:`~simulator.spec_metrics.RequestSpecDecode`, by the API
under ``--per-request-spec-decode-metrics``) observes each of its verify steps.
"""

from __future__ import annotations

import random
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Protocol

from simulator.costmodel import StepCost
from simulator.metrics import EngineMetrics
from simulator.prefix_cache import PrefixCache, block_hashes
from simulator.spec_metrics import RequestSpecDecode
from simulator.speculation import speculator_for
from simulator.text import TextStream, synthetic_prompt_ids
from simulator.variants import Variant

# emit(seq, reasoning_tokens, content_tokens, finish_reason or None, now)
EmitFn = Callable[["Sequence", int, int, str | None, float], None]


class StepCostModel(Protocol):
    """What the engine asks of a cost model (:class:`simulator.costmodel.CostModel`)."""

    def step(
        self,
        *,
        decode_tokens: int,
        num_seqs: int,
        context_tokens: float,
        query_extra_context: float = 0.0,
        prefill_tokens: int = 0,
        draft_s: float = 0.0,
        expert_tokens: float | None = None,
    ) -> StepCost: ...


class Speculator(Protocol):
    """Speculative decoding, per running sequence and step."""

    def draft(self, seq: Sequence) -> int:
        """Draft tokens ``seq`` verifies in the step being planned (0: none)."""
        ...

    def accept(self, seq: Sequence, drafts: int) -> int:
        """Of the ``drafts`` verified, how many the target accepted (a prefix)."""
        ...


class Sequence:
    """One request inside the engine.

    Its tokens: ``prompt_ids`` (given, or made up to ``prompt_tokens`` on first use) and the
    output's ids from a :class:`~simulator.text.TextStream` seeded by ``text_seed``
    (:meth:`token_ids`, generated as far as asked). ``replay`` is the speculator's state.
    """

    __slots__ = (
        "_prompt_ids",
        "aborted",
        "arrival",
        "block_hashes",
        "cached_tokens",
        "category",
        "content_target",
        "emit",
        "first_token",
        "generated",
        "last_token",
        "max_tokens",
        "prompt_tokens",
        "reasoning_target",
        "replay",
        "rid",
        "scheduled",
        "spec",
        "target",
        "text",
        "text_seed",
    )

    def __init__(
        self,
        rid: int,
        *,
        category: str,
        prompt_tokens: int,
        reasoning_tokens: int,
        content_tokens: int,
        max_tokens: int,
        arrival: float,
        emit: EmitFn,
        prompt_ids: list[int] | None = None,
        text_seed: int | None = None,
    ) -> None:
        self.rid = rid
        self.category = category
        self.prompt_tokens = prompt_tokens if prompt_ids is None else len(prompt_ids)
        self._prompt_ids = prompt_ids
        self.text_seed = rid if text_seed is None else text_seed
        self.text: TextStream | None = None
        self.replay: object | None = None
        self.reasoning_target = reasoning_tokens
        self.content_target = content_tokens
        self.max_tokens = max_tokens
        self.target = max(1, min(reasoning_tokens + content_tokens, max_tokens))
        self.generated = 0
        self.arrival = arrival
        self.scheduled = -1.0
        self.first_token = -1.0
        self.last_token = -1.0
        self.emit = emit
        self.aborted = False
        # Per-request speculative-decoding metrics (set by the API when asked for).
        self.spec: RequestSpecDecode | None = None
        self.block_hashes: list[int] | None = None  # the prompt's, for the prefix cache
        self.cached_tokens = 0  # prompt tokens found in the prefix cache on admission

    @property
    def finish_reason(self) -> str:
        return "length" if self.reasoning_target + self.content_target > self.max_tokens else "stop"

    def prompt_ids(self) -> list[int]:
        ids = self._prompt_ids
        if ids is None:
            ids = self._prompt_ids = synthetic_prompt_ids(self.prompt_tokens, self.text_seed)
        return ids

    def token_ids(self, n: int) -> list[int]:
        """The output's ids, at least ``n`` of them (more may follow: what the model would
        write past ``max_tokens``)."""
        text = self.text
        if text is None:
            text = self.text = TextStream(self.category, self.reasoning_target, self.text_seed)
        return text.ensure(n)

    def split(self, n: int) -> tuple[int, int]:
        """How the next ``n`` tokens divide into (reasoning, content): reasoning first."""
        reasoning_left = max(0, self.reasoning_target - self.generated)
        r = min(n, reasoning_left)
        return r, n - r


@dataclass(slots=True)
class StepPlan:
    prefill: list[Sequence]
    decode: list[tuple[Sequence, int]]  # (sequence, draft tokens this step)
    cost: StepCost
    duration_s: float  # virtual seconds, after the degradation factor
    prefill_tokens: int
    decode_tokens: int
    decode_tokens_out: int = 0  # tokens the step produced (set by complete)
    context_tokens: int = 0  # Σ context over the decoding sequences


@dataclass
class SchedulerLimits:
    max_num_seqs: int = 256
    max_num_batched_tokens: int = 8192
    kv_cache_tokens: int = 400_000


@dataclass
class EngineCore:
    cost: StepCostModel
    variant: Variant
    metrics: EngineMetrics
    rng: random.Random
    limits: SchedulerLimits = field(default_factory=SchedulerLimits)
    step_factor: float = 1.0
    waiting: deque[Sequence] = field(default_factory=deque)
    running: list[Sequence] = field(default_factory=list)
    kv_tokens: int = 0
    steps: int = 0
    last_step_end: float = -1.0  # when the previous step ended (its sequences' last token)
    on_step: Callable[[StepPlan, float], None] | None = None
    # None: the variant's own (none without speculation).
    speculator: Speculator | None = None
    # None: no prefix caching (every prompt token is computed; calibration, predict).
    prefix_cache: PrefixCache | None = None

    def __post_init__(self) -> None:
        if self.speculator is None and self.variant.speculative:
            self.speculator = speculator_for(self.variant, self.rng)

    def add(self, seq: Sequence) -> None:
        self.waiting.append(seq)
        self.metrics.waiting = len(self.waiting)

    def abort(self, seq: Sequence, now: float) -> None:
        """A client went away: drop the sequence and count it as aborted."""
        if seq.aborted or seq.generated >= seq.target:
            return  # already gone, or finished
        seq.aborted = True
        if seq in self.running:
            self.running.remove(seq)
            self.kv_tokens -= seq.prompt_tokens + seq.generated
        elif seq in self.waiting:
            self.waiting.remove(seq)
        else:  # admitted by the step now running: its prompt is in the KV cache
            self.kv_tokens -= seq.prompt_tokens
        self.metrics.request_success["abort"].inc()
        self._gauges()

    @property
    def idle(self) -> bool:
        return not self.running and not self.waiting

    def _gauges(self) -> None:
        m = self.metrics
        m.running = len(self.running)
        m.waiting = len(self.waiting)
        m.kv_cache_usage = min(1.0, self.kv_tokens / max(1, self.limits.kv_cache_tokens))

    def plan(self, now: float) -> StepPlan | None:
        """Admit waiting requests and describe the next step; None when idle."""
        limits = self.limits
        prefill: list[Sequence] = []
        prefill_tokens = 0  # prompt tokens computed this step: the uncached ones
        cache = self.prefix_cache
        m = self.metrics
        while self.waiting and len(self.running) + len(prefill) < limits.max_num_seqs:
            seq = self.waiting[0]
            cached = 0
            hashes = seq.block_hashes
            if cache is not None:
                if hashes is None:
                    hashes = seq.block_hashes = block_hashes(seq.prompt_ids(), cache.block_tokens)
                cached = cache.cached_tokens(hashes, seq.prompt_tokens)
            computed = seq.prompt_tokens - cached
            budget_ok = prefill_tokens + computed <= limits.max_num_batched_tokens
            kv_ok = self.kv_tokens + seq.prompt_tokens <= limits.kv_cache_tokens
            if prefill and not (budget_ok and kv_ok):
                break
            if not prefill and not kv_ok and self.running:
                break
            self.waiting.popleft()
            seq.scheduled = now
            seq.cached_tokens = cached
            if cache is not None and hashes is not None:
                cache.insert(hashes)
            m.add_prefix_lookup(seq.prompt_tokens, cached)  # vLLM counts on admission
            prefill.append(seq)
            prefill_tokens += computed
            self.kv_tokens += seq.prompt_tokens
        variant = self.variant
        decode: list[tuple[Sequence, int]] = []
        decode_tokens = 0
        context = 0
        extra = 0
        spec = self.speculator
        if spec is None:
            for seq in self.running:
                decode.append((seq, 0))
                context += seq.prompt_tokens + seq.generated
            decode_tokens = len(decode)
        else:
            draft = spec.draft
            for seq in self.running:
                drafts = draft(seq)
                ctx = seq.prompt_tokens + seq.generated
                decode.append((seq, drafts))
                decode_tokens += 1 + drafts
                context += ctx
                extra += ctx * drafts
        if not prefill and not decode:
            return None
        n_decode = len(decode)
        cost = self.cost.step(
            decode_tokens=decode_tokens,
            num_seqs=n_decode + len(prefill),
            context_tokens=context,
            query_extra_context=extra,
            prefill_tokens=prefill_tokens,
            draft_s=variant.draft_cost_s(n_decode) if variant.speculative else 0.0,
            expert_tokens=decode_tokens
            + prefill_tokens
            - (1.0 - variant.draft_expert_novelty) * (decode_tokens - n_decode),
        )
        if prefill:  # admission moved sequences out of the queue and into the KV cache
            self._gauges()
        return StepPlan(
            prefill,
            decode,
            cost,
            cost.total_s * self.step_factor,
            prefill_tokens,
            decode_tokens,
            context_tokens=context,
        )

    def complete(self, plan: StepPlan, now: float) -> None:
        """The step ended at ``now``: hand out tokens, record metrics, retire finished requests."""
        m = self.metrics
        self.steps += 1
        generated = 0
        finished: list[Sequence] = []
        spec = self.speculator
        accept = spec.accept if spec is not None else None
        per_pos = m.spec_accepted_per_pos
        n_drafts = n_draft_tokens = n_accepted = 0
        common_last = self.last_step_end
        common_n = 0
        for seq, drafts in plan.decode:
            if seq.aborted:
                continue
            done = seq.generated
            if drafts and accept is not None:
                accepted = accept(seq, drafts)
                n_drafts += 1
                n_draft_tokens += drafts
                n_accepted += accepted
                for i in range(accepted):
                    per_pos[i].value += 1
                spec_seq = seq.spec
                if spec_seq is not None:  # the step's first token decides its channel
                    spec_seq.observe(drafts, accepted, done < seq.reasoning_target)
                n = 1 + accepted
                if n > seq.target - done:  # noqa: PLR1730 (cheaper than min() here)
                    n = seq.target - done
            else:
                n = 1  # a running sequence has at least one token to go
            # Sequence.split, inlined: reasoning first.
            reasoning_left = seq.reasoning_target - done
            r = n if reasoning_left >= n else (reasoning_left if reasoning_left > 0 else 0)
            seq.generated = done + n
            generated += n
            # Sequences decoded in the previous step share one inter-token gap: count them
            # and observe once (the histogram is the same as one observation each).
            last = seq.last_token
            if last == common_last:
                common_n += 1
            else:
                m.h_itl.observe(now - last)
            seq.last_token = now
            if done + n >= seq.target:
                finished.append(seq)
                seq.emit(seq, r, n - r, seq.finish_reason, now)
            else:
                seq.emit(seq, r, n - r, None, now)
        for seq in plan.prefill:
            if seq.aborted:
                continue
            m.add_prompt_tokens(seq.prompt_tokens, seq.cached_tokens)
            m.h_ttft.observe(now - seq.arrival)
            seq.first_token = seq.last_token = now
            seq.generated = 1
            generated += 1
            r, c = seq.split(1)
            self.running.append(seq)
            if seq.target <= 1:
                finished.append(seq)
                seq.emit(seq, r, c, seq.finish_reason, now)
            else:
                seq.emit(seq, r, c, None, now)
        if n_drafts:
            m.spec_drafts.value += n_drafts
            m.spec_draft_tokens.value += n_draft_tokens
            m.spec_accepted_tokens.value += n_accepted
        if common_n:
            m.h_itl.observe_many(now - common_last, common_n)
        self.kv_tokens += generated
        self.last_step_end = now
        m.generation_tokens.value += generated
        plan.decode_tokens_out = generated
        m.h_iteration_tokens.observe(plan.prefill_tokens + generated)
        for seq in finished:
            self.running.remove(seq)
            self.kv_tokens -= seq.prompt_tokens + seq.generated
            record_finished(m, seq, now)
        self._gauges()
        if self.on_step is not None:
            self.on_step(plan, now)


def record_finished(m: EngineMetrics, seq: Sequence, now: float) -> None:
    """vLLM's per-request histograms and the success counter for a finished request."""
    m.request_success[seq.finish_reason].inc()
    m.h_e2e.observe(now - seq.arrival)
    m.h_queue.observe(seq.scheduled - seq.arrival)
    m.h_prefill.observe(seq.first_token - seq.scheduled)
    m.h_inference.observe(now - seq.scheduled)
    decode_s = now - seq.first_token
    m.h_decode.observe(decode_s)
    if seq.generated > 1:
        m.h_request_tpot.observe(decode_s / (seq.generated - 1))
    m.h_prompt_tokens.observe(seq.prompt_tokens)
    m.h_generation_tokens.observe(seq.generated)
    m.h_max_generation_tokens.observe(seq.max_tokens)
    m.h_params_n.observe(1)
    m.h_params_max_tokens.observe(seq.max_tokens)
    m.h_num_preemptions.observe(0)
    m.h_prefill_kv_computed.observe(seq.prompt_tokens - seq.cached_tokens)
