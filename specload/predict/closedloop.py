"""The batch engine: a level's step sequences placed in engine steps, closed loop.

:class:`SimEngine` (the forecast's default) runs the simulator's engine
(:class:`simulator.engine.EngineCore`) with a speculator that replays each request's recorded
steps; :class:`ClosedLoopReplay` computes the same placement directly in step counts. Either
gives a :class:`Schedule`, which :mod:`specload.predict.forecast` evaluates the step-cost
curve on.
"""

from __future__ import annotations

import heapq
import math
import random
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol

import numpy as np

from simulator.costmodel import StepCost
from simulator.engine import EngineCore, SchedulerLimits
from simulator.engine import Sequence as EngineSequence
from simulator.metrics import EngineMetrics
from simulator.ngram import StepSequence
from simulator.variants import Variant
from specload.predict.stepcost import StepCostFit


@dataclass(frozen=True, eq=False)
class Schedule:
    """Where a level's step sequences fall in the engine's steps.

    Per engine step: tokens verified (Σ 1 + drafted), sequences, mean context per sequence,
    tokens emitted. Per measured request: its prefill step, its last step, its output length.
    The engine path's terms (:mod:`specload.predict.terms`) also need, per step, the draft
    tokens, the fewest and the most tokens one sequence brought (a prefill brings its prompt:
    whether the step is a uniform decode step of 1 + k tokens each) and the prefills.
    """

    n_tokens: np.ndarray
    n_seqs: np.ndarray
    context: np.ndarray
    emitted: np.ndarray
    first: np.ndarray
    last: np.ndarray
    output_len: np.ndarray
    requests: tuple[StepSequence, ...] = ()
    drafted: np.ndarray | None = None
    q_min: np.ndarray | None = None
    q_max: np.ndarray | None = None
    prefills: np.ndarray | None = None

    @property
    def steps(self) -> int:
        return len(self.n_tokens)

    def decode_sums(self, per_step: np.ndarray) -> np.ndarray:
        """Σ of ``per_step`` over each measured request's decode steps (after its prefill)."""
        c = np.concatenate([[0.0], np.cumsum(per_step, dtype=float)])
        return np.asarray(c[self.last + 1] - c[self.first + 1])


class BatchEngine(Protocol):
    """Places step sequences in engine steps (:class:`SimEngine`, :class:`ClosedLoopReplay`)."""

    def schedule(
        self, requests: Sequence[StepSequence], concurrency: int, *, fill: bool
    ) -> Schedule: ...


class ClosedLoopReplay:
    """Continuous batching of a closed loop, in step counts.

    ``concurrency`` users take the requests in order; a request's prefill joins the step
    after its user's previous request ended and each later step advances it by one step of
    its sequence. ``fill=False`` is a ``--requests N`` level: exactly these requests, the
    batch thins out at the end; ``fill=True`` is a ``--duration`` level: users keep taking
    requests (the list again, in order) until the last of the listed ones has ended, so the
    batch stays full. No admission limits (``max_num_seqs``, the token budget, the KV cache).
    A prefill step counts its prompt's tokens: a token costs the same whether it is prefilled,
    decoded or verified (the other requests' prefills inside a request's decode are what make
    a short-request level's TPOT high, and they do not shrink with speculation).
    """

    def schedule(
        self, requests: Sequence[StepSequence], concurrency: int, *, fill: bool
    ) -> Schedule:
        pool = [r for r in requests if r.steps > 0]
        if not pool:
            raise ValueError("no request with output tokens to place")
        heap = [(0, u) for u in range(max(1, concurrency))]
        placed: list[tuple[int, int]] = []  # (pool index, first step)
        for i, r in enumerate(pool):
            t, u = heapq.heappop(heap)
            placed.append((i, t))
            heapq.heappush(heap, (t + r.steps, u))
        end = max(t + pool[i].steps - 1 for i, t in placed)
        measured = len(placed)
        if fill:
            j = 0
            while True:
                t, u = heapq.heappop(heap)
                if t > end:
                    break
                i = j % len(pool)
                j += 1
                placed.append((i, t))
                heapq.heappush(heap, (t + pool[i].steps, u))
        size = end + 1
        idx_parts: list[np.ndarray] = []
        tok_parts: list[np.ndarray] = []
        ctx_parts: list[np.ndarray] = []
        emit_parts: list[np.ndarray] = []
        draft_parts: list[np.ndarray] = []
        for i, t in placed:
            r = pool[i]
            cut = min(r.steps, size - t)
            idx_parts.append(np.arange(t, t + cut))
            tok = 1 + r.drafted[:cut]
            if cut:
                tok[0] = max(1, r.prompt_len)  # the prefill step
            tok_parts.append(tok)
            ctx_parts.append(r.prompt_len + r.position[:cut])
            emit_parts.append(r.emitted[:cut])
            draft_parts.append(r.drafted[:cut])
        idx = np.concatenate(idx_parts)
        toks = np.concatenate(tok_parts)
        n_seqs = np.bincount(idx, minlength=size).astype(float)
        n_tokens = np.bincount(idx, weights=toks, minlength=size)
        drafted = np.bincount(idx, weights=np.concatenate(draft_parts), minlength=size)
        q_min = np.full(size, np.inf)
        q_max = np.zeros(size)
        np.minimum.at(q_min, idx, toks)
        np.maximum.at(q_max, idx, toks)
        q_min[n_seqs == 0] = 0.0
        prefills = np.bincount(
            np.array([t for i, t in placed if t < size], dtype=np.int64), minlength=size
        ).astype(float)
        ctx_sum = np.bincount(idx, weights=np.concatenate(ctx_parts), minlength=size)
        emitted = np.bincount(idx, weights=np.concatenate(emit_parts), minlength=size)
        context = ctx_sum / np.maximum(n_seqs, 1.0)
        first = np.array([t for _, t in placed[:measured]], dtype=np.int64)
        last = np.array([t + pool[i].steps - 1 for i, t in placed[:measured]], dtype=np.int64)
        out_len = np.array([pool[i].output_len for i, _ in placed[:measured]], dtype=np.int64)
        return Schedule(
            n_tokens,
            n_seqs,
            context,
            emitted,
            first,
            last,
            out_len,
            tuple(pool),
            drafted,
            q_min,
            q_max,
            prefills,
        )


class _Cursor:
    """Where a replayed request is in its step sequence (the engine sequence's ``replay``)."""

    __slots__ = ("accepted", "drafted", "step")

    def __init__(self, seq: StepSequence) -> None:
        self.drafted: list[int] = seq.drafted.tolist()
        self.accepted: list[int] = seq.accepted.tolist()
        self.step = 1  # step 0 is the prefill: the engine asks nothing of it


class ReplaySpeculator:
    """A :class:`simulator.engine.Speculator` that replays recorded step sequences: step j of
    a request drafts ``drafted[j]`` tokens and accepts ``accepted[j]`` of them."""

    def draft(self, seq: EngineSequence) -> int:
        cur = seq.replay
        assert isinstance(cur, _Cursor)
        j = cur.step
        cur.step = j + 1
        return cur.drafted[j]

    def accept(self, seq: EngineSequence, drafts: int) -> int:
        cur = seq.replay
        assert isinstance(cur, _Cursor)
        return cur.accepted[cur.step - 1]


_UNIT_STEP = StepCost(1.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0)


class UnitStepCost:
    """Every step costs one virtual second: a closed loop's placement needs no more."""

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
    ) -> StepCost:
        return _UNIT_STEP


class CurveStepCost:
    """The fitted curve as the engine's cost model (virtual seconds): a step of n tokens
    (decoded, verified and prefilled, as in the fit) over sequences of mean context ctx costs
    ``coef · (1, n, ctx)`` + the interp correction at n, in milliseconds — the sum
    :class:`~specload.predict.forecast.TpotModel` takes."""

    def __init__(self, fit: StepCostFit, coef: np.ndarray | None = None) -> None:
        self.fit = fit
        self.coef = [float(x) for x in (fit.coef if coef is None else coef)]

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
    ) -> StepCost:
        n = decode_tokens + prefill_tokens
        ctx = (context_tokens + prefill_tokens) / max(num_seqs, 1)
        a, b, c = self.coef
        ms = a + b * n + c * ctx + float(self.fit.correction_ms(float(n)))
        return StepCost(ms / 1000.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0)


class SimEngine:
    """:class:`BatchEngine` on the simulator's engine (:class:`simulator.engine.EngineCore`).

    ``concurrency`` closed-loop users each submit their next request when the previous one
    finished (it is prefilled in the next step); the engine batches continuously, and the
    :class:`ReplaySpeculator` makes every decode step of a request verify and accept what its
    recorded step sequence says. No admission limits bind (``max_num_seqs`` = the concurrency,
    the token budget and the KV cache unbounded). Every step costs one virtual second
    (:class:`UnitStepCost`): in a closed loop the placement does not depend on step times, and
    the fitted curve is evaluated on the placement afterwards
    (:class:`~specload.predict.forecast.TpotModel`, linear in the curve's coefficients, so the
    interval never places anything again). :meth:`timed` runs the
    engine's clock on the curve itself (:class:`CurveStepCost`) — the same TPOTs, a check.
    Identical placements (a level's k = 0 pool is placed for the fit and for its forecast) are
    computed once per engine.

    **Fast path.** The engine costs ~5-10 µs per step in Python; the k schedule needs eight
    more placements per level. With ``fast_path`` (the forecast's default:
    :class:`ClosedLoopReplay`, the same placement computed in step counts with numpy)
    :meth:`explore` places through it, and every :meth:`schedule` also asks the fast path and
    raises if the two placements differ in any step — so in a forecast the fast path is trusted
    for the k schedule only while it agrees with the engine on that run's own placements
    (k = 0 at every level, and the asked-for k).
    """

    def __init__(self, fast_path: BatchEngine | None = None) -> None:
        self.fast_path = fast_path
        self.checked = 0  # placements on which the fast path agreed with the engine
        self._cache: dict[tuple[int, int, bool], tuple[tuple[StepSequence, ...], Schedule]] = {}

    def schedule(
        self, requests: Sequence[StepSequence], concurrency: int, *, fill: bool
    ) -> Schedule:
        pool = self._pool(requests)
        c = max(1, concurrency)
        key = (hash(tuple(id(r) for r in pool)), c, fill)
        hit = self._cache.get(key)
        if (
            hit is not None
            and len(hit[0]) == len(pool)
            and all(a is b for a, b in zip(hit[0], pool, strict=True))
        ):
            return hit[1]
        sched, _ = self._run(pool, c, fill, None)
        if self.fast_path is not None:
            _check_same(sched, self.fast_path.schedule(pool, c, fill=fill), c, fill)
            self.checked += 1
        self._cache[key] = (pool, sched)
        return sched

    def explore(
        self, requests: Sequence[StepSequence], concurrency: int, *, fill: bool
    ) -> Schedule:
        """A placement for the k schedule: through the fast path if there is one."""
        if self.fast_path is None:
            return self.schedule(requests, concurrency, fill=fill)
        return self.fast_path.schedule(requests, concurrency, fill=fill)

    def timed(
        self, requests: Sequence[StepSequence], concurrency: int, *, fill: bool, cost: CurveStepCost
    ) -> np.ndarray:
        """Each placed request's TPOT (ms) from the engine's virtual clock under ``cost``:
        (last token - first token) / (tokens - 1), requests of one token left out."""
        _, tpot = self._run(self._pool(requests), max(1, concurrency), fill, cost)
        return tpot

    @staticmethod
    def _pool(requests: Sequence[StepSequence]) -> tuple[StepSequence, ...]:
        pool = tuple(r for r in requests if r.steps > 0)
        if not pool:
            raise ValueError("no request with output tokens to place")
        return pool

    @staticmethod
    def _run(
        pool: tuple[StepSequence, ...],
        concurrency: int,
        fill: bool,
        curve: CurveStepCost | None,
    ) -> tuple[Schedule, np.ndarray]:
        k = max([1, *(int(r.drafted.max()) for r in pool)])
        metrics = EngineMetrics(
            model_name="replay",
            max_model_len=1 << 24,
            speculative_positions=k,
            cache_info={},
            start_time=0.0,
        )
        unbounded = 1 << 62
        core = EngineCore(
            curve if curve is not None else UnitStepCost(),
            Variant(name="replay"),
            metrics,
            random.Random(0),
            SchedulerLimits(
                max_num_seqs=concurrency,
                max_num_batched_tokens=unbounded,
                kv_cache_tokens=unbounded,
            ),
            speculator=ReplaySpeculator(),
        )
        measured = len(pool)
        first = [0] * measured
        last = [0] * measured
        tpot = [math.nan] * measured
        unfinished = measured
        finished: list[EngineSequence] = []

        def emit(seq: EngineSequence, r: int, c: int, finish: str | None, now: float) -> None:
            if finish is not None:
                finished.append(seq)

        def submit(i: int) -> None:
            r = pool[i % measured]
            seq = EngineSequence(
                i,
                category=r.category,
                prompt_tokens=r.prompt_len,
                reasoning_tokens=r.output_len,
                content_tokens=0,
                max_tokens=r.output_len,
                arrival=0.0,
                emit=emit,
            )
            seq.replay = _Cursor(r)
            core.add(seq)

        # Every user starts at once; with fill, users beyond the listed requests take the
        # list again from its start.
        placed = concurrency if fill else min(concurrency, measured)
        for i in range(placed):
            submit(i)
        n_tokens: list[int] = []
        n_seqs: list[int] = []
        ctx_sum: list[int] = []
        emitted: list[int] = []
        drafted: list[int] = []
        q_min: list[int] = []
        q_max: list[int] = []
        prefills: list[int] = []
        now = 0.0
        while unfinished:
            plan = core.plan(now)
            assert plan is not None, "the closed loop ran dry"
            step = len(n_tokens)
            prefill = plan.prefill
            ctx = plan.context_tokens
            for seq in prefill:
                ctx += seq.prompt_tokens
                if seq.rid < measured:
                    first[seq.rid] = step
            n_tokens.append(plan.decode_tokens + sum(max(1, q.prompt_tokens) for q in prefill))
            n_seqs.append(len(plan.decode) + len(prefill))
            queries = [1 + d for _, d in plan.decode] + [max(1, q.prompt_tokens) for q in prefill]
            drafted.append(plan.decode_tokens - len(plan.decode))
            q_min.append(min(queries))
            q_max.append(max(queries))
            prefills.append(len(prefill))
            ctx_sum.append(ctx)
            now += plan.duration_s
            core.complete(plan, now)
            emitted.append(plan.decode_tokens_out)
            for seq in finished:
                if seq.rid < measured:
                    last[seq.rid] = step
                    unfinished -= 1
                    if seq.generated > 1:
                        tpot[seq.rid] = 1000.0 * (now - seq.first_token) / (seq.generated - 1)
            for _ in finished:
                if placed < measured or (fill and unfinished):
                    submit(placed)
                    placed += 1
            finished.clear()
        seqs = np.asarray(n_seqs, dtype=float)
        sched = Schedule(
            np.asarray(n_tokens, dtype=float),
            seqs,
            np.asarray(ctx_sum, dtype=float) / np.maximum(seqs, 1.0),
            np.asarray(emitted, dtype=float),
            np.asarray(first, dtype=np.int64),
            np.asarray(last, dtype=np.int64),
            np.asarray([r.output_len for r in pool], dtype=np.int64),
            pool,
            np.asarray(drafted, dtype=float),
            np.asarray(q_min, dtype=float),
            np.asarray(q_max, dtype=float),
            np.asarray(prefills, dtype=float),
        )
        t = np.asarray(tpot, dtype=float)
        return sched, t[~np.isnan(t)]


def _check_same(engine: Schedule, fast: Schedule, concurrency: int, fill: bool) -> None:
    for name in (
        "n_tokens",
        "n_seqs",
        "context",
        "emitted",
        "first",
        "last",
        "output_len",
        "drafted",
        "q_min",
        "q_max",
        "prefills",
    ):
        a, b = getattr(engine, name), getattr(fast, name)
        if (
            a is None
            or b is None
            or a.shape != b.shape
            or not np.allclose(a, b, rtol=1e-12, atol=1e-9)
        ):
            raise RuntimeError(
                f"the fast path's placement differs from the engine's ({name}, concurrency "
                f"{concurrency}, fill {fill}): a bug — report it"
            )
