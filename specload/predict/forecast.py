"""The forecast: a speculative variant's acceptance and TPOT, from the baseline alone.

1. Every recorded request is replayed through the proposer (:mod:`simulator.ngram`):
   its step sequence under the variant (drafted, accepted, emitted per step).
2. A **batch engine** (:mod:`specload.predict.closedloop`) places the step sequences of a
   level's requests in the engine's steps — closed loop, ``c`` users, each sending its next
   request when the last ends.
   :class:`SimEngine` (the default) is the simulator's own continuous-batching engine
   (:class:`simulator.engine.EngineCore`) with a speculator that replays each request's
   recorded steps; :class:`ClosedLoopReplay` computes the same placement directly in step
   counts (the reference the tests compare the engine with, and what
   :mod:`specload.predict.synthetic` builds baselines with). In a closed loop the placement
   does not depend on how long a step takes, only on how many steps each request needs, so
   it is computed once and every cost curve is then evaluated on it.
3. The step-cost curve (:mod:`specload.predict.stepcost`) is fitted to the baseline's own
   levels, each level placed by the same engine with no speculation (k = 0), so the curve
   and the forecast share every convention.
4. Per level: each request's TPOT = the cost of its decode steps / (tokens - 1); the median
   with an interval from the fit's error (coefficients drawn from their covariance) and the
   request sample (a bootstrap over requests), and a verdict against the baseline's measured
   median.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from simulator.ngram import MAX_K, RequestReplay, StepSequence, Totals
from specload.predict.baseline import PREFIX_HIT_WARN_RATIO, Baseline
from specload.predict.closedloop import BatchEngine, ClosedLoopReplay, Schedule, SimEngine
from specload.predict.engine_path import EnginePath
from specload.predict.moe import MoeModel
from specload.predict.stepcost import (
    CostPoint,
    Plan,
    StepCostFit,
    fit_step_cost,
    plan_levels,
)
from specload.predict.terms import HOST, Given, Padding, Term, draw, padding_for, terms_for
from specload.records.tokens import TokenRecord
from specload.results.bootstrap import block_indices, block_length
from specload.results.model import SAME
from specload.results.model import median as lower_median
from specload.results.model import verdict as one_verdict

DEFAULT_MIN_DIFFERENCE = 0.05
# Fewest requests of one category at concurrency 1 for a point of its own in the fit.
MIN_CATEGORY_REQUESTS = 3


# --------------------------------------------------------------------------- TPOT


@dataclass(frozen=True)
class Component:
    """One line of a level's cost breakdown at its median request: ms per output token and
    ms per step (that request's mean over its decode steps)."""

    name: str
    per_token_ms: float
    per_step_ms: float
    source: str = ""


@dataclass(frozen=True, eq=False)
class TpotModel:
    """Each measured request's TPOT as a linear function of the curve's coefficients and of
    the engine path's term values.

    TPOT_i = (steps_i·a + Σn_i·b + Σctx_i·c + Σcorrection_i            (the curve at n)
              + Σ(pad - n)_i·b + Σ(correction(pad) - correction(n))_i   (padding)
              + Σ_t value_t · Σunit_t,i) / (tokens_i - 1)               (each term)

    so the interval redraws the coefficients, the requests and the terms' values without
    placing anything again.
    """

    features: np.ndarray  # (R, 3): decode steps, Σ tokens, Σ mean context
    extra: np.ndarray  # (R,): Σ of the interp curve's correction
    tokens: np.ndarray  # (R,): output tokens - 1
    total_ms_features: np.ndarray  # (3,) the same sums over all steps (throughput)
    total_extra_ms: float
    emitted_tokens: float
    # Padding (None: the path pads nothing): Σ(padded - n) and Σ of the correction's change,
    # per request, and over all steps.
    pad_tokens: np.ndarray | None = None
    pad_extra: np.ndarray | None = None
    total_pad: tuple[float, float] = (0.0, 0.0)
    padding_source: str = ""
    # The terms, and per request (R, T) / over all steps (T,) the Σ of each one's unit_ms.
    terms: tuple[Term, ...] = ()
    term_units: np.ndarray | None = None
    total_term_units: np.ndarray | None = None

    @classmethod
    def of(
        cls,
        schedule: Schedule,
        fit: StepCostFit,
        *,
        terms: Sequence[Term] = (),
        padding: Padding | None = None,
        k: int = 0,
    ) -> TpotModel:
        keep = schedule.output_len > 1
        correction = fit.correction_ms(schedule.n_tokens)
        ones = np.ones(schedule.steps)
        feats = np.column_stack(
            [
                schedule.decode_sums(ones),
                schedule.decode_sums(schedule.n_tokens),
                schedule.decode_sums(schedule.context),
            ]
        )[keep]
        pad_tokens = pad_extra = None
        total_pad = (0.0, 0.0)
        if padding is not None:
            padded = padding.padded(schedule, k)
            more = padded - schedule.n_tokens
            change = fit.correction_ms(padded) - correction
            pad_tokens = schedule.decode_sums(more)[keep]
            pad_extra = schedule.decode_sums(change)[keep]
            total_pad = (float(more.sum()), float(change.sum()))
        term_units = total_units = None
        if terms:
            units = [np.asarray(t.unit_ms(schedule), dtype=float) for t in terms]
            term_units = np.column_stack([schedule.decode_sums(u) for u in units])[keep]
            total_units = np.array([float(u.sum()) for u in units])
        return cls(
            features=feats,
            extra=schedule.decode_sums(correction)[keep],
            tokens=(schedule.output_len - 1)[keep].astype(float),
            total_ms_features=np.array(
                [float(schedule.steps), schedule.n_tokens.sum(), schedule.context.sum()]
            ),
            total_extra_ms=float(correction.sum()),
            emitted_tokens=float(schedule.emitted.sum()),
            pad_tokens=pad_tokens,
            pad_extra=pad_extra,
            total_pad=total_pad,
            padding_source=padding.source if padding is not None else "",
            terms=tuple(terms),
            term_units=term_units,
            total_term_units=total_units,
        )

    @property
    def requests(self) -> int:
        return len(self.tokens)

    @property
    def values(self) -> np.ndarray:
        """The terms' estimates."""
        return np.array([t.value for t in self.terms], dtype=float)

    def curve_ms(self, coef: np.ndarray) -> np.ndarray:
        """Per request: the curve at each step's own token count (no padding, no terms)."""
        return np.asarray((self.features @ coef + self.extra) / self.tokens)

    def padding_ms(self, coef: np.ndarray) -> np.ndarray:
        if self.pad_tokens is None or self.pad_extra is None:
            return np.zeros(self.requests)
        return np.asarray((coef[1] * self.pad_tokens + self.pad_extra) / self.tokens)

    def terms_ms(self, values: np.ndarray | None = None) -> np.ndarray:
        if self.term_units is None:
            return np.zeros(self.requests)
        v = self.values if values is None else values
        return np.asarray((self.term_units @ v) / self.tokens)

    def tpot_ms(self, coef: np.ndarray) -> np.ndarray:
        """Per request: the curve at each step's padded size (the terms left out)."""
        return np.asarray(self.curve_ms(coef) + self.padding_ms(coef))

    def predicted_ms(self, coef: np.ndarray, values: np.ndarray | None = None) -> np.ndarray:
        """Per request: the variant's TPOT, the terms at ``values`` (their estimates)."""
        return np.asarray(self.tpot_ms(coef) + self.terms_ms(values))

    def overhead_for(self, coef: np.ndarray, target_ms: float) -> float:
        """The per-step overhead X (ms, any sign) at which the median TPOT with every step
        costing X more than the curve at its padded size (no terms) equals ``target_ms``:
        TPOT_i(X) = TPOT_i(0) + X·steps_i/tokens_i."""
        if self.requests == 0 or not math.isfinite(target_ms):
            return math.nan
        t0 = self.tpot_ms(coef)
        per = self.features[:, 0] / self.tokens
        lo, hi = -1e4, 1e4
        for _ in range(80):
            mid = (lo + hi) / 2
            lo, hi = (mid, hi) if median(t0 + mid * per) < target_ms else (lo, mid)
        return (lo + hi) / 2

    def throughput(self, coef: np.ndarray, values: np.ndarray | None = None) -> float:
        """Output tokens per second over the whole placed span (terms at their estimates)."""
        total_ms = float(self.total_ms_features @ coef) + self.total_extra_ms
        total_ms += float(coef[1]) * self.total_pad[0] + self.total_pad[1]
        if self.total_term_units is not None:
            total_ms += float(self.total_term_units @ (self.values if values is None else values))
        return self.emitted_tokens / (total_ms / 1000.0) if total_ms > 0 else math.nan

    def median_request(self, coef: np.ndarray) -> int:
        """The index of the request whose predicted TPOT is the median (rank ⌊0.5·(n-1)⌋)."""
        order = np.argsort(self.predicted_ms(coef), kind="stable")
        return int(order[(self.requests - 1) // 2])

    def breakdown(self, coef: np.ndarray) -> list[Component]:
        """The median request's TPOT, part by part: the curve at each step's own size, the
        padding (where the path pads), each term at its estimate. The per-token parts sum to
        the predicted median."""
        if self.requests == 0:
            return []
        i = self.median_request(coef)
        tok, steps = float(self.tokens[i]), float(self.features[i, 0])
        per_step = tok / steps if steps > 0 else math.nan

        def part(name: str, ms_sum: float, source: str) -> Component:
            return Component(name, ms_sum / tok, ms_sum / tok * per_step, source)

        out = [
            part(
                "baseline step",
                float(self.features[i] @ coef + self.extra[i]),
                "the baseline's curve at the step's tokens",
            )
        ]
        if self.pad_tokens is not None and self.pad_extra is not None:
            out.append(
                part(
                    "padding",
                    float(coef[1] * self.pad_tokens[i] + self.pad_extra[i]),
                    self.padding_source,
                )
            )
        if self.term_units is not None:
            for j, t in enumerate(self.terms):
                out.append(part(t.name, float(self.term_units[i, j] * t.value), t.source))
        return out

    def overhead_per_step(self, coef: np.ndarray) -> tuple[float, float, float]:
        """The terms' cost per step at the median request: (estimate, all at their low, all
        at their high) — beside the break-even overhead."""
        if self.requests == 0 or self.term_units is None:
            return 0.0, 0.0, 0.0
        i = self.median_request(coef)
        steps = float(self.features[i, 0])
        if steps <= 0:
            return math.nan, math.nan, math.nan
        units = self.term_units[i]
        lows = np.array([t.low for t in self.terms])
        highs = np.array([t.high for t in self.terms])
        return (
            float(units @ self.values) / steps,
            float(units @ lows) / steps,
            float(units @ highs) / steps,
        )

    def interval(
        self,
        fit: StepCostFit,
        *,
        n_boot: int,
        confidence: float,
        rng: np.random.Generator,
        baseline_ms: float | None = None,
        concurrency: int = 1,
    ) -> tuple[float, float, float, float | None]:
        """(median, low, high, p_faster) of the TPOT median: the fit's error x the request
        sample x the terms' ranges (each drawn triangular over low..high, its mode at the
        estimate); p_faster: the share of draws whose median is below ``baseline_ms``.

        The requests ran ``concurrency`` at a time and shared their batches, so they are
        resampled in blocks of consecutive requests (placement order), the moving-block
        bootstrap of ``compare`` (:mod:`specload.results.bootstrap`): one by one, the
        interval would be too narrow for a closed loop."""
        est = median(self.predicted_ms(fit.coef))
        r = self.requests
        if r == 0:
            return est, est, est, None
        coefs = fit.sample_coefs(rng, n_boot)  # (B, 3)
        pick = block_indices(r, block_length(r, concurrency), n_boot, rng)
        feats = self.features[pick]  # (B, R, 3)
        num = np.einsum("brk,bk->br", feats, coefs) + self.extra[pick]
        if self.pad_tokens is not None and self.pad_extra is not None:
            num += coefs[:, 1:2] * self.pad_tokens[pick] + self.pad_extra[pick]
        if self.term_units is not None:
            values = np.column_stack([draw(t, rng, n_boot) for t in self.terms])  # (B, T)
            per_req = (self.term_units @ values.T).T  # (B, R)
            num += np.take_along_axis(per_req, pick, axis=1)
        tp = num / self.tokens[pick]
        tp.sort(axis=1)
        meds = tp[:, (r - 1) // 2]
        alpha = (1.0 - confidence) / 2.0
        low, high = (float(x) for x in np.quantile(meds, [alpha, 1.0 - alpha]))
        p_faster = (
            float(np.mean(meds < baseline_ms))
            if baseline_ms is not None and math.isfinite(baseline_ms)
            else None
        )
        return est, min(low, est), max(high, est), p_faster


def median(values: np.ndarray) -> float:
    """The lower median (:func:`specload.results.model.median`), NaN when empty."""
    m = lower_median(np.asarray(values, dtype=float).tolist())
    return math.nan if m is None else m


# The forecast's word for the model's SAME (its JSON and Markdown say "within noise").
WITHIN_NOISE = "within noise"


def verdict(baseline_ms: float, est: float, low: float, high: float, floor: float) -> str:
    """The one rule (:func:`specload.results.model.verdict`) on the predicted median against
    the baseline's: faster / slower when the interval excludes the baseline and the
    difference is at least ``floor`` (relative), else within noise."""
    rel = est / baseline_ms - 1.0
    said = one_verdict(rel, low / baseline_ms - 1.0, high / baseline_ms - 1.0, min_difference=floor)
    return WITHIN_NOISE if said == SAME else said


# --------------------------------------------------------------------------- the forecast


@dataclass
class Options:
    method: str = "ngram"
    num_speculative_tokens: int = 3
    prompt_lookup_min: int = 2
    prompt_lookup_max: int = 4
    max_model_len: int | None = None
    concurrencies: list[int] | None = None
    curve: str = "interp"
    n_boot: int = 1000
    confidence: float = 0.95
    min_difference: float = DEFAULT_MIN_DIFFERENCE
    seed: int = 0
    schedule_ks: tuple[int, ...] = tuple(range(1, MAX_K + 1))
    max_num_seqs: int = 256
    draft_cost_ratio: float | None = None
    # The variant's own cost per step that no baseline shows, given (--step-overhead-ms):
    # one flat term "override" in place of every term the engine path implies. None: the
    # engine path's terms (specload.predict.terms).
    step_overhead_ms: float | None = None
    # The engine path the variant and the baseline run on (None: not known: no terms, no
    # padding — the baseline's curve alone).
    engine_path: EnginePath | None = None
    # The synchronous host work per step, given (--host-step-ms; else the baseline's profile
    # in term_values, else the prior).
    host_step_ms: float | None = None
    # Figures for terms by name (specload.predict.terms.TERM_NAMES) from the baseline's
    # profile or the server's log, in place of the priors.
    term_values: dict[str, Given] = field(default_factory=dict)
    # An MoE model's expert-read correction (specload.predict.moe); None: a dense model.
    moe: MoeModel | None = None


@dataclass
class KResult:
    k: int
    predicted_ms: float
    low_ms: float
    high_ms: float
    speedup: float
    verdict: str
    output_throughput: float
    totals: Totals
    by_phase: dict[str, Totals]
    by_category: dict[str, Totals]
    # The per-step overhead at which this k stops paying (predicted = baseline); <= 0: it
    # does not pay even with none.
    break_even_overhead_ms: float = math.nan
    model: TpotModel | None = field(default=None, repr=False)
    # The share of the interval's draws (coefficients x requests x terms) whose median is
    # below the baseline's median (None: no request to draw).
    p_faster: float | None = None
    # The median request's TPOT part by part (baseline step, padding, each term).
    breakdown: list[Component] = field(default_factory=list)
    # The terms' cost per step at the median request: estimate, all low, all high.
    overhead_ms: tuple[float, float, float] = (0.0, 0.0, 0.0)
    terms: tuple[Term, ...] = ()
    padding: str | None = None  # where the padded sizes came from (None: no padding)


@dataclass
class LevelForecast:
    concurrency: int
    level: str | None  # the baseline level it stands for (None: not measured)
    requests: int
    fill: bool
    baseline_ms: float  # measured median TPOT (or the k = 0 replay where not measured)
    baseline_measured: bool
    replayed_baseline_ms: float  # the k = 0 replay through the fitted curve (a self-check)
    baseline_throughput: float | None
    replayed_baseline_throughput: float
    results: dict[int, KResult]
    n_tokens: float  # mean tokens per step at k = 0
    context: float

    def best(self, ks: Sequence[int]) -> KResult | None:
        cands = [self.results[k] for k in ks if k in self.results]
        return min(cands, key=lambda r: r.predicted_ms) if cands else None


@dataclass
class Forecast:
    options: Options
    baseline: Baseline
    fit: StepCostFit
    levels: list[LevelForecast]
    totals: Totals
    totals_by_phase: dict[str, Totals]
    totals_by_category: dict[str, Totals]
    plan: Plan
    warnings: list[str] = field(default_factory=list)
    draft: list[dict[str, Any]] | None = None

    def k_schedule(self) -> dict[str, Any]:
        return k_schedule(self)


def _phase_totals(seqs: Sequence[StepSequence], k: int) -> dict[str, Totals]:
    out = {"reasoning": Totals(k), "answer": Totals(k)}
    for s in seqs:
        out["reasoning"].add(s, ~s.answer)
        out["answer"].add(s, s.answer)
    return out


def _category_totals(seqs: Sequence[StepSequence], k: int) -> dict[str, Totals]:
    out: dict[str, Totals] = {}
    for s in seqs:
        out.setdefault(s.category, Totals(k)).add(s)
    return dict(sorted(out.items()))


def _totals(seqs: Sequence[StepSequence], k: int) -> Totals:
    t = Totals(k)
    for s in seqs:
        t.add(s)
    return t


class _Replays:
    """Every recorded request's replay, built once; step sequences cached per k."""

    def __init__(self, records: Sequence[TokenRecord], opts: Options) -> None:
        max_k = max(MAX_K, opts.num_speculative_tokens)
        self.records = list(records)
        # The engine path's n-gram rule (simulator.ngram.RULES); v1 where not known.
        rule = opts.engine_path.replay_rule if opts.engine_path is not None else "v1"
        self.replays = [
            RequestReplay(
                r.prompt_ids,
                r.output_ids,
                lookup_min=opts.prompt_lookup_min,
                lookup_max=opts.prompt_lookup_max,
                max_k=max_k,
                content_start=r.content_start,
                category=r.category,
                level=r.step,
                rule=rule,
            )
            for r in self.records
        ]
        self.max_model_len = opts.max_model_len
        self._cache: dict[tuple[int, int], StepSequence] = {}

    def steps(self, i: int, k: int) -> StepSequence:
        key = (i, k)
        seq = self._cache.get(key)
        if seq is None:
            seq = self._cache[key] = self.replays[i].steps(k, self.max_model_len)
        return seq

    def pool(self, indices: Sequence[int], k: int) -> list[StepSequence]:
        return [self.steps(i, k) for i in indices]


def one_step_ms(baseline: Baseline, fit: StepCostFit) -> float:
    """The baseline's one-sequence decode step: its concurrency-1 level's median TPOT where
    measured (no other request's prefill falls in its decode), else the curve at one token
    and the fit points' smallest context. The unit of the CPU build's terms."""
    c1 = baseline.level(1)
    if c1 is not None and c1.median_tpot_ms is not None and c1.median_tpot_ms > 0:
        return float(c1.median_tpot_ms)
    ctx = min((p.context for p in fit.points), default=0.0)
    return float(fit.step_ms(1.0, ctx))


def variant_terms(
    opts: Options, k: int, fit: StepCostFit | None = None, one_step_ms: float | None = None
) -> tuple[tuple[Term, ...], Padding | None]:
    """The variant's extra terms and padding at ``k`` on ``opts.engine_path``
    (:mod:`specload.predict.terms`); ``--step-overhead-ms`` replaces the terms, not the
    padding. A figure given for a term the path does not have is an error (ValueError)."""
    path = opts.engine_path
    given = dict(opts.term_values)
    if opts.host_step_ms is not None:
        if path is None or not (path.baseline_async is True and path.variant_async is False):
            raise ValueError(
                f"--host-step-ms {opts.host_step_ms:g}: the engine path has no synchronous host "
                "term (only where the baseline schedules async and the variant does not)"
            )
        given[HOST] = Given(opts.host_step_ms, "flag --host-step-ms")
    curve = None
    if opts.moe is not None and fit is not None:
        b = float(fit.coef[1])

        def curve(n: np.ndarray) -> np.ndarray:
            # the curve's token part: its context part cancels in curve(x) - curve(n)
            return np.asarray(b * np.asarray(n, dtype=float) + fit.correction_ms(n))

    terms = terms_for(
        path,
        k,
        given=given,
        override_ms=opts.step_overhead_ms,
        moe=opts.moe,
        curve=curve,
        one_step_ms=one_step_ms,
    )
    padding = padding_for(path, k) if path is not None else None
    return terms, padding


def _fit_points(
    baseline: Baseline,
    replays: _Replays | None,
    engine: BatchEngine,
    index_of: dict[str, list[int]],
) -> list[CostPoint]:
    points: list[CostPoint] = []
    for lv in baseline.levels:
        assert lv.median_tpot_ms is not None
        fill = lv.planned_requests is None
        idx = index_of.get(lv.name, [])
        if replays is None or not idx:
            points.append(
                CostPoint(
                    lv.name,
                    lv.concurrency,
                    float(lv.concurrency),
                    0.0,
                    lv.median_tpot_ms,
                    lv.completed,
                )
            )
            continue
        sched = engine.schedule(replays.pool(idx, 0), lv.concurrency, fill=fill)
        steps = sched.decode_sums(np.ones(sched.steps))
        ok = steps > 0
        n_eff = (
            median(sched.decode_sums(sched.n_tokens)[ok] / steps[ok])
            if ok.any()
            else float(lv.concurrency)
        )
        ctx_eff = median(sched.decode_sums(sched.context)[ok] / steps[ok]) if ok.any() else 0.0
        level_point = CostPoint(
            lv.name, lv.concurrency, n_eff, ctx_eff, lv.median_tpot_ms, lv.completed
        )
        cat_points: list[CostPoint] = []
        if lv.concurrency == 1:
            for cat, (completed, med) in sorted(lv.categories.items()):
                cidx = [i for i in idx if replays.records[i].category == cat]
                seqs = [s for s in replays.pool(cidx, 0) if s.output_len > 1]
                if (
                    med is None
                    or completed < MIN_CATEGORY_REQUESTS
                    or len(seqs) < MIN_CATEGORY_REQUESTS
                ):
                    continue
                ctx = float(np.mean([np.mean(s.prompt_len + s.position[1:]) for s in seqs]))
                cat_points.append(
                    CostPoint(f"{lv.name}/{cat}", 1, 1.0, ctx, med, completed, level=False)
                )
        if len(cat_points) >= 2:
            total = sum(p.requests for p in cat_points)
            points.append(
                CostPoint(
                    level_point.label,
                    1,
                    level_point.n_tokens,
                    level_point.context,
                    level_point.tpot_ms,
                    level_point.requests,
                    level=True,
                    weight=0.0,
                )
            )
            points.extend(
                CostPoint(
                    p.label,
                    1,
                    p.n_tokens,
                    p.context,
                    p.tpot_ms,
                    p.requests,
                    False,
                    p.requests / total,
                )
                for p in cat_points
            )
        else:
            points.append(level_point)
    return points


def forecast(
    baseline: Baseline,
    opts: Options,
    *,
    engine: BatchEngine | None = None,
    plan: Plan,
) -> Forecast:
    """The whole forecast (the baseline's problems must have been checked)."""
    engine = engine or SimEngine(fast_path=ClosedLoopReplay())
    # The k schedule's extra placements may take the engine's fast path (SimEngine.explore).
    explore = engine.explore if isinstance(engine, SimEngine) else engine.schedule
    rng = np.random.default_rng(opts.seed)
    warnings: list[str] = []
    records = baseline.measured_records
    replays = _Replays(records, opts) if records else None
    index_of: dict[str, list[int]] = {}
    for i, r in enumerate(records):
        index_of.setdefault(r.step, []).append(i)
    fit = fit_step_cost(_fit_points(baseline, replays, engine, index_of), curve=opts.curve)
    warnings.extend(f"step-cost fit: {n}" for n in fit.notes)
    for info in baseline.levels:
        if "streams_held" in info.flags:
            warnings.append(
                f"level {info.name}'s tokens arrived in bursts (streams_held: streams held back "
                "and sent at once): its median TPOT is not a step cost; rerun it or leave it out"
            )
        if "users_short" in info.flags:
            warnings.append(
                f"level {info.name} held fewer users than its concurrency (users_short): its "
                "steps held fewer sequences than the fit assumes"
            )
        elif "in_flight_short" in info.flags:
            warnings.append(
                f"level {info.name} had fewer requests in flight than its concurrency "
                "(in_flight_short: users starting or waiting; a warm-up keeps the spawn out of "
                "the window): its steps held fewer sequences than the fit assumes"
            )
    cached = [
        f"{info.name} {info.prefix_cache_hit_ratio:.0%}"
        for info in baseline.levels
        if (info.prefix_cache_hit_ratio or 0.0) > PREFIX_HIT_WARN_RATIO
    ]
    if cached:
        warnings.append(
            "the baseline's prompts hit the server's prefix cache ("
            + ", ".join(cached)
            + " of prompt tokens): a cached token costs no prefill, and the forecast counts "
            "every prompt token as computed (its prefill steps come out dear)"
        )
    wanted = opts.concurrencies or [info.concurrency for info in baseline.levels]
    k = opts.num_speculative_tokens
    if opts.method == "draft":
        draft = _draft_break_even(baseline, fit, wanted=wanted, opts=opts)
        return Forecast(opts, baseline, fit, [], Totals(k), {}, {}, plan, warnings, draft)
    assert replays is not None
    ks = sorted({k, *opts.schedule_ks})
    all_idx = list(range(len(records)))
    one_step = one_step_ms(baseline, fit)
    levels: list[LevelForecast] = []
    for c in wanted:
        lv = baseline.level(c)
        if lv is not None and index_of.get(lv.name):
            idx, fill = index_of[lv.name], lv.planned_requests is None
        else:
            idx, fill = all_idx, True
        sched0 = engine.schedule(replays.pool(idx, 0), c, fill=fill)
        model0 = TpotModel.of(sched0, fit)
        base_est = median(model0.tpot_ms(fit.coef))
        steps0 = sched0.decode_sums(np.ones(sched0.steps))
        ok = steps0 > 0
        n_eff = (
            median(sched0.decode_sums(sched0.n_tokens)[ok] / steps0[ok]) if ok.any() else float(c)
        )
        ctx_eff = median(sched0.decode_sums(sched0.context)[ok] / steps0[ok]) if ok.any() else 0.0
        measured = lv is not None and lv.median_tpot_ms is not None
        baseline_ms = lv.median_tpot_ms if measured and lv is not None else base_est
        assert baseline_ms is not None
        results: dict[int, KResult] = {}
        for kk in ks:
            seqs = replays.pool(idx, kk)
            place = engine.schedule if kk == k else explore
            terms, padding = variant_terms(opts, kk, fit, one_step)
            model = TpotModel.of(place(seqs, c, fill=fill), fit, terms=terms, padding=padding, k=kk)
            est, low, high, p_faster = model.interval(
                fit,
                n_boot=opts.n_boot,
                confidence=opts.confidence,
                rng=rng,
                baseline_ms=baseline_ms,
                concurrency=c,
            )
            results[kk] = KResult(
                k=kk,
                predicted_ms=est,
                low_ms=low,
                high_ms=high,
                speedup=baseline_ms / est if est > 0 else math.nan,
                verdict=verdict(baseline_ms, est, low, high, opts.min_difference),
                output_throughput=model.throughput(fit.coef),
                totals=_totals(seqs, kk),
                by_phase=_phase_totals(seqs, kk),
                by_category=_category_totals(seqs, kk),
                break_even_overhead_ms=model.overhead_for(fit.coef, baseline_ms),
                model=model,
                p_faster=p_faster,
                breakdown=model.breakdown(fit.coef),
                overhead_ms=model.overhead_per_step(fit.coef),
                terms=terms,
                padding=padding.source if padding is not None else None,
            )
        levels.append(
            LevelForecast(
                concurrency=c,
                level=lv.name if lv is not None else None,
                requests=len(idx),
                fill=fill,
                baseline_ms=baseline_ms,
                baseline_measured=measured,
                replayed_baseline_ms=base_est,
                baseline_throughput=lv.output_throughput if lv is not None else None,
                replayed_baseline_throughput=model0.throughput(fit.coef),
                results=results,
                n_tokens=n_eff,
                context=ctx_eff,
            )
        )
        if not measured:
            warnings.append(
                f"concurrency {c} was not measured: its baseline TPOT is the replay's "
                f"({base_est:.2f} ms) and its requests are all {len(idx)} recorded ones"
            )
    seqs_all = replays.pool(all_idx, k)
    return Forecast(
        opts,
        baseline,
        fit,
        levels,
        _totals(seqs_all, k),
        _phase_totals(seqs_all, k),
        _category_totals(seqs_all, k),
        plan,
        warnings,
    )


# --------------------------------------------------------------------------- k schedule


def batch_size_bands(concurrencies: Sequence[int], max_num_seqs: int) -> list[tuple[int, int]]:
    """Batch-size ranges [lo, hi] around each concurrency: boundaries at geometric midpoints,
    the first from 1, the last to ``max_num_seqs`` (or the largest concurrency)."""
    cs = sorted(set(concurrencies))
    bands: list[tuple[int, int]] = []
    lo = 1
    for i, c in enumerate(cs):
        if i + 1 < len(cs):
            hi = max(c, math.floor(math.sqrt(c * cs[i + 1])))
            hi = min(hi, cs[i + 1] - 1)
        else:
            hi = max(c, max_num_seqs)
        bands.append((lo, hi))
        lo = hi + 1
    return bands


def k_schedule(fc: Forecast) -> dict[str, Any]:
    """The best k per concurrency over ``schedule_ks`` and vLLM's
    ``num_speculative_tokens_per_batch_size`` ([[batch_lo, batch_hi, k], …], k = 0: none)."""
    opts = fc.options
    rows: list[dict[str, Any]] = []
    chosen: dict[int, int] = {}
    for lf in fc.levels:
        best = lf.best(opts.schedule_ks)
        if best is None:
            continue
        pays = best.verdict == "faster"
        chosen[lf.concurrency] = best.k if pays else 0
        rows.append(
            {
                "concurrency": lf.concurrency,
                "best_k": best.k if pays else 0,
                "fastest_k": best.k,
                "predicted_median_tpot_ms": best.predicted_ms,
                "speedup": best.speedup,
                "verdict": best.verdict,
                "p_faster": best.p_faster,
                "advice": f"k={best.k}" if pays else "do not speculate",
                "by_k": {
                    str(kk): {
                        "predicted_median_tpot_ms": r.predicted_ms,
                        "predicted_low_ms": r.low_ms,
                        "predicted_high_ms": r.high_ms,
                        "speedup": r.speedup,
                        "verdict": r.verdict,
                        "p_faster": r.p_faster,
                        "acceptance_rate": r.totals.acceptance_rate,
                        "mean_acceptance_length": r.totals.mean_acceptance_length,
                    }
                    for kk, r in sorted(lf.results.items())
                    if kk in opts.schedule_ks
                },
            }
        )
    table: list[list[int]] = []
    if chosen:
        for (lo, hi), c in zip(
            batch_size_bands(list(chosen), opts.max_num_seqs), sorted(chosen), strict=True
        ):
            kk = chosen[c]
            if table and table[-1][2] == kk:
                table[-1][1] = hi
            else:
                table.append([lo, hi, kk])
    config: dict[str, Any] | None = None
    if any(v > 0 for v in chosen.values()):
        config = {
            "method": "ngram",
            "num_speculative_tokens": max(chosen.values()),
            "prompt_lookup_min": opts.prompt_lookup_min,
            "prompt_lookup_max": opts.prompt_lookup_max,
            "num_speculative_tokens_per_batch_size": table,
        }
    return {
        "ks": list(opts.schedule_ks),
        "per_concurrency": rows,
        "num_speculative_tokens_per_batch_size": table if config else None,
        "speculative_config": config,
        "do_not_speculate": [c for c, v in sorted(chosen.items()) if v == 0],
        "advice": "do not speculate at any forecast concurrency" if not config else None,
    }


# --------------------------------------------------------------------------- draft methods


def break_even_acceptance_rate(length: float, k: int) -> float | None:
    """The per-token acceptance alpha with mean acceptance length (1 - alpha^(k+1)) / (1 - alpha) =
    ``length`` (positions accepted independently); None when even alpha = 1 falls short."""
    if length <= 1.0:
        return 0.0
    if length > k + 1:
        return None
    lo, hi = 0.0, 1.0
    for _ in range(60):
        mid = (lo + hi) / 2
        val = sum(mid**i for i in range(k + 1))
        lo, hi = (mid, hi) if val < length else (lo, mid)
    return (lo + hi) / 2


def _draft_break_even(
    baseline: Baseline,
    fit: StepCostFit,
    *,
    wanted: Sequence[int],
    opts: Options,
) -> list[dict[str, Any]]:
    """Per concurrency: the mean acceptance length at which a draft method breaks even.

    A step of the variant verifies c·(1+k) tokens and first runs k draft forward passes,
    each ``R`` x a baseline step, plus the per-step overhead X:
    TPOT = (T(c(1+k)) + k·R·T(c) + X) / L, so L* = that sum / T(c).
    """
    ratio = opts.draft_cost_ratio or 0.0
    out: list[dict[str, Any]] = []
    ks = sorted({opts.num_speculative_tokens, *opts.schedule_ks})
    for c in wanted:
        lv = baseline.level(c)
        n_eff, ctx_eff = float(c), 0.0
        for p in fit.points:
            if p.level and p.concurrency == c:
                n_eff, ctx_eff = p.n_tokens, p.context
        if ctx_eff == 0.0 and fit.uses_context:
            ctx_eff = float(np.mean([p.context for p in fit.points if p.level]))
        t1 = float(fit.step_ms(n_eff, ctx_eff))
        by_k: dict[str, Any] = {}
        for kk in ks:
            # every decoding sequence verifies k more tokens; the prefills in the step stay
            tv = float(fit.step_ms(n_eff + kk * c, ctx_eff))
            overhead = opts.step_overhead_ms or 0.0
            length = (tv + kk * ratio * t1 + overhead) / t1
            by_k[str(kk)] = {
                "verify_step_ms": tv,
                "step_overhead_ms": overhead,
                "draft_ms": kk * ratio * t1,
                "break_even_mean_acceptance_length": length,
                "break_even_acceptance_rate": break_even_acceptance_rate(length, kk),
                "possible": length <= kk + 1,
            }
        main = by_k[str(opts.num_speculative_tokens)]
        out.append(
            {
                "concurrency": c,
                "baseline_median_tpot_ms": lv.median_tpot_ms if lv is not None else t1,
                "baseline_measured": lv is not None,
                "baseline_step_ms": t1,
                "break_even_mean_acceptance_length": main["break_even_mean_acceptance_length"],
                "break_even_acceptance_rate": main["break_even_acceptance_rate"],
                "possible": main["possible"],
                "by_k": by_k,
            }
        )
    return out


def default_plan(measured: Sequence[int], opts: Options, *, all_ks: bool = True) -> Plan:
    ks = [opts.num_speculative_tokens, *(opts.schedule_ks if all_ks else ())]
    wanted = opts.concurrencies or list(measured) or [1, 2, 4, 8, 16]
    return plan_levels(measured, wanted, ks, max_num_seqs=opts.max_num_seqs)
