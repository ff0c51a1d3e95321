"""The cost model's throughput in virtual time: what calibration tests and docs quote.

:func:`run_virtual` drives the real :class:`~simulator.engine.EngineCore` with a
virtual clock (no sleeping): ``concurrency`` closed-loop clients, each sending
the next request when its previous one finished. Per category it reports
decode throughput = sum (generated - 1) / sum (time from first to last token), i.e.
1 / TPOT — how the reference table's tok/s were measured (single stream,
``max_tokens`` 4096, reasoning counted).
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field

from simulator.costmodel import CostModel
from simulator.engine import EngineCore, SchedulerLimits, Sequence
from simulator.metrics import EngineMetrics
from simulator.variants import Variant
from simulator.workload import CATEGORIES, draw_workload

PROMPT_TOKENS: dict[str, int] = {
    "coding": 420,
    "math": 140,
    "structured": 320,
    "explanation": 90,
    "long_reasoning": 180,
}


@dataclass
class CategoryResult:
    requests: int = 0
    tokens: int = 0
    decode_tokens: int = 0
    decode_s: float = 0.0
    length_finishes: int = 0
    content_zero: int = 0

    @property
    def tok_s(self) -> float:
        return self.decode_tokens / self.decode_s if self.decode_s > 0 else 0.0

    @property
    def tpot_s(self) -> float:
        return self.decode_s / self.decode_tokens if self.decode_tokens else 0.0


@dataclass
class VirtualRun:
    by_category: dict[str, CategoryResult] = field(default_factory=dict)
    steps: int = 0
    elapsed_s: float = 0.0
    allreduce_s: float = 0.0
    decode_step_s: float = 0.0
    output_tokens: int = 0
    step_tokens: int = 0

    @property
    def allreduce_share(self) -> float:
        return self.allreduce_s / self.decode_step_s if self.decode_step_s else 0.0

    @property
    def throughput_tok_s(self) -> float:
        """Tokens generated per virtual second over the whole run."""
        return self.step_tokens / self.elapsed_s if self.elapsed_s else 0.0


def run_virtual(
    variant: Variant,
    *,
    categories: tuple[str, ...],
    requests_per_category: int,
    concurrency: int = 1,
    cost: CostModel | None = None,
    max_tokens: int = 4096,
    seed: int = 0,
    duration_s: float | None = None,
) -> VirtualRun:
    """Serve ``requests_per_category`` requests of each category (interleaved) in virtual time.

    With ``duration_s`` the clients keep sending (cycling through the categories) and the
    run stops at that virtual time: a steady-state throughput without the ramp-down tail.
    """
    cost = cost or CostModel()
    rng = random.Random(seed)
    metrics = EngineMetrics(
        model_name="sim",
        max_model_len=max_tokens * 4,
        speculative_positions=variant.num_speculative_tokens if variant.speculative else 0,
        cache_info={},
        start_time=0.0,
    )
    core = EngineCore(
        cost, variant, metrics, random.Random(seed + 1), SchedulerLimits(max_num_seqs=1024)
    )
    queue = [c for _ in range(requests_per_category) for c in categories]
    out = VirtualRun(by_category={c: CategoryResult() for c in categories})
    now = 0.0
    next_index = 0

    def on_emit(seq: Sequence, r: int, c: int, finish: str | None, t: float) -> None:
        if finish is None:
            return
        res = out.by_category[seq.category]
        res.requests += 1
        res.tokens += seq.generated
        res.decode_tokens += seq.generated - 1
        res.decode_s += t - seq.first_token
        res.length_finishes += finish == "length"
        res.content_zero += seq.generated <= seq.reasoning_target
        out.output_tokens += seq.generated
        finished.append(seq)

    finished: list[Sequence] = []

    def submit(t: float) -> None:
        nonlocal next_index
        category = queue[next_index % len(queue)]
        next_index += 1
        work = draw_workload(category, rng)
        core.add(
            Sequence(
                next_index,
                category=category,
                prompt_tokens=PROMPT_TOKENS[category],
                reasoning_tokens=work.reasoning_tokens,
                content_tokens=work.content_tokens,
                max_tokens=max_tokens,
                arrival=t,
                emit=on_emit,
                # The text has its own seeds: the workload draws stay what they were.
                text_seed=seed * 1_000_003 + next_index,
            )
        )

    for _ in range(concurrency if duration_s is not None else min(concurrency, len(queue))):
        submit(now)
    while not core.idle:
        plan = core.plan(now)
        if plan is None:
            break
        now += plan.duration_s
        out.steps += 1
        if not plan.prefill:
            out.decode_step_s += plan.duration_s
            out.allreduce_s += plan.cost.allreduce_s * core.step_factor
        core.complete(plan, now)
        out.step_tokens += plan.decode_tokens_out
        if duration_s is not None and now >= duration_s:
            break
        for _ in finished:
            if next_index < len(queue) or duration_s is not None:
                submit(now)
        finished.clear()
    out.elapsed_s = now
    return out


def single_stream_table(
    variant: Variant,
    *,
    requests_per_category: int = 30,
    cost: CostModel | None = None,
    seed: int = 0,
) -> dict[str, float]:
    """tok/s per category at concurrency 1, one category at a time."""
    table: dict[str, float] = {}
    for category in CATEGORIES:
        run = run_virtual(
            variant,
            categories=(category,),
            requests_per_category=requests_per_category,
            cost=cost,
            seed=seed,
        )
        table[category] = run.by_category[category].tok_s
    return table
