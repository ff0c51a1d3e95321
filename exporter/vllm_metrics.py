"""What the exporter reads from a vLLM ``/metrics`` page, and what it derives.

:func:`extract` pulls the raw counters and gauges out of a parsed page into a
:class:`Reading`; :func:`derive` turns the lifetime values of one reading and
the deltas between two into :class:`Derived` values. The family names (current
and legacy), the reset-safe deltas and the formulas are
:mod:`specload.vllm_metrics`'s, shared with the sweep's server block:

- acceptance ratio = accepted tokens / drafted tokens (V1 counters);
- mean acceptance length = 1 + accepted tokens / drafts;
- position acceptance ratio = accepted at position p / drafts;
- mean TPOT / ITL = Δsum / Δcount of the histograms;
- prefix-cache hit ratio = hit tokens / queried tokens;
- rates = Δcounter / Δt.

Some values are passed on as they are: the prefix-cache and preemption counters
(for rate() over them where Prometheus cannot scrape vLLM itself), and the
engines' sleep state (the share of the server's engines in each state of
:data:`SLEEP_STATES`; 1 for the one engine of a server without data parallelism).
A family the page lacks (an older vLLM, the simulator of another version) leaves
its values ``None`` or empty: its series are absent, never an error.

What is the exporter's own: vLLM ≤0.9 (V0) exported
``vllm:spec_decode_draft_acceptance_rate`` as a gauge instead, used for the
lifetime ratio when the V1 counters are absent; V0 had no drafts counter, so
with the speculative tokens per draft (k) known, drafts = draft tokens / k. An
interval needs both polls to have the value (a counter that appears between two
polls has no interval value); a restart between them (a counter went backwards,
or the caller saw a new process start) counts each counter's current value as
its increase, so deltas never go negative.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field

from specload import vllm_metrics as vm
from specload.promtext import Exposition

# vLLM 0.32's preemptions and sleep state, named in the shared reader.
PREEMPTIONS = vm.PREEMPTIONS
ENGINE_SLEEP_STATE = vm.ENGINE_SLEEP_STATE
SLEEP_STATES = vm.SLEEP_STATES

WANTED: frozenset[str] = frozenset(
    {
        vm.DRAFTS,
        vm.DRAFT_TOKENS,
        vm.ACCEPTED,
        vm.ACCEPTED_PER_POS,
        vm.V0_DRAFT_ACCEPTANCE_RATE,
        vm.GENERATION_TOKENS,
        vm.REQUESTS_RUNNING,
        vm.REQUESTS_WAITING,
        vm.PROCESS_START,
        PREEMPTIONS,
        ENGINE_SLEEP_STATE,
        *vm.PREFIX_CACHE_QUERIES_NAMES,
        *vm.PREFIX_CACHE_HITS_NAMES,
        *vm.TPOT_NAMES,
        *vm.ITL_NAMES,
        *vm.KV_CACHE_USAGE_NAMES,
    }
)

#: The parser's filter: only the families the exporter reads get their labels parsed.
keep = vm.family_filter(WANTED)

# Where the served model's name is looked for (the first sample with a model_name label).
_MODEL_NAME_FAMILIES = (
    vm.GENERATION_TOKENS,
    vm.REQUESTS_RUNNING,
    vm.DRAFTS,
    *vm.ITL_NAMES,
    *vm.KV_CACHE_USAGE_NAMES,
)


@dataclass(frozen=True)
class Reading:
    """Raw values from one successful poll of one server (``None``: not on the page)."""

    time_s: float
    model: str | None = None
    process_start_s: float | None = None
    drafts: float | None = None
    draft_tokens: float | None = None
    accepted: float | None = None
    accepted_per_pos: Mapping[int, float] = field(default_factory=dict)
    v0_acceptance_rate: float | None = None
    generation_tokens: float | None = None
    tpot_sum_count: tuple[float, float] | None = None
    itl_sum_count: tuple[float, float] | None = None
    running: float | None = None
    waiting: float | None = None
    kv_usage_ratio: float | None = None
    prefix_cache_queries: float | None = None  # tokens looked up
    prefix_cache_hits: float | None = None  # tokens found cached
    preemptions: float | None = None
    sleep_state: Mapping[str, float] = field(default_factory=dict)  # state -> share of engines

    @property
    def has_spec_decode(self) -> bool:
        return (
            self.drafts is not None
            or self.draft_tokens is not None
            or self.v0_acceptance_rate is not None
        )

    @property
    def num_positions(self) -> int:
        return len(self.accepted_per_pos)


def _model_name(fams: Exposition) -> str | None:
    for name in _MODEL_NAME_FAMILIES:
        fam = fams.get_family(name)
        if fam is None:
            continue
        for s in fam.samples:
            model = s.labels.get("model_name")
            if model:
                return model
    return None


def _sleep_state(fams: Exposition) -> dict[str, float]:
    """Per known state, the mean over engines of its 0/1 sample (the share of engines in it)."""
    fam = fams.get_family(ENGINE_SLEEP_STATE)
    if fam is None:
        return {}
    sums: dict[str, float] = {}
    counts: dict[str, int] = {}
    for s in fam.samples:
        state = s.labels.get("sleep_state")
        if state in SLEEP_STATES and math.isfinite(s.value):
            sums[state] = sums.get(state, 0.0) + s.value
            counts[state] = counts.get(state, 0) + 1
    return {state: sums[state] / counts[state] for state in SLEEP_STATES if state in counts}


def extract(fams: Exposition, time_s: float) -> Reading:
    per_pos: dict[int, float] = {}
    pos_fam = fams.get_family(vm.ACCEPTED_PER_POS)
    if pos_fam is not None:
        for key, value in pos_fam.by_label("position").items():
            try:
                per_pos[int(key)] = value
            except ValueError:
                continue
    kv = vm.first_family(fams, vm.KV_CACHE_USAGE_NAMES)
    kv_value: float | None = None
    if kv is not None:
        # One engine per data-parallel rank: the mean is the server's usage.
        values = [s.value for s in kv.samples]
        kv_value = sum(values) / len(values) if values else None
    start = fams.get_family(vm.PROCESS_START)
    return Reading(
        time_s=time_s,
        model=_model_name(fams),
        process_start_s=start.samples[0].value if start is not None and start.samples else None,
        drafts=vm.counter_total(fams, vm.DRAFTS),
        draft_tokens=vm.counter_total(fams, vm.DRAFT_TOKENS),
        accepted=vm.counter_total(fams, vm.ACCEPTED),
        accepted_per_pos=per_pos,
        v0_acceptance_rate=vm.counter_total(fams, vm.V0_DRAFT_ACCEPTANCE_RATE),
        generation_tokens=vm.counter_total(fams, vm.GENERATION_TOKENS),
        tpot_sum_count=vm.sum_count(fams, vm.TPOT_NAMES),
        itl_sum_count=vm.sum_count(fams, vm.ITL_NAMES),
        running=vm.counter_total(fams, vm.REQUESTS_RUNNING),
        waiting=vm.counter_total(fams, vm.REQUESTS_WAITING),
        kv_usage_ratio=kv_value,
        prefix_cache_queries=vm.counter_total(fams, vm.PREFIX_CACHE_QUERIES_NAMES),
        prefix_cache_hits=vm.counter_total(fams, vm.PREFIX_CACHE_HITS_NAMES),
        preemptions=vm.counter_total(fams, PREEMPTIONS),
        sleep_state=_sleep_state(fams),
    )


def _count(pair: tuple[float, float] | None) -> float | None:
    return pair[1] if pair is not None else None


def went_backwards(prev: Reading, cur: Reading) -> bool:
    """Any counter smaller than before: the server restarted between the polls."""
    return vm.any_went_down(
        [
            (prev.drafts, cur.drafts),
            (prev.draft_tokens, cur.draft_tokens),
            (prev.accepted, cur.accepted),
            (prev.generation_tokens, cur.generation_tokens),
            (prev.prefix_cache_queries, cur.prefix_cache_queries),
            (prev.prefix_cache_hits, cur.prefix_cache_hits),
            (prev.preemptions, cur.preemptions),
            (_count(prev.tpot_sum_count), _count(cur.tpot_sum_count)),
            (_count(prev.itl_sum_count), _count(cur.itl_sum_count)),
        ]
    )


@dataclass(frozen=True)
class Derived:
    """Values the exporter serves for one target; ``window`` is ``lifetime`` or ``interval``."""

    acceptance_ratio: Mapping[str, float] = field(default_factory=dict)
    mean_acceptance_length: Mapping[str, float] = field(default_factory=dict)
    position_acceptance_ratio: Mapping[tuple[str, int], float] = field(default_factory=dict)
    drafted_tokens_per_s: float | None = None
    accepted_tokens_per_s: float | None = None
    tpot_mean_s: Mapping[str, float] = field(default_factory=dict)
    itl_mean_s: Mapping[str, float] = field(default_factory=dict)
    generation_tokens_per_s: float | None = None
    running: float | None = None
    waiting: float | None = None
    kv_usage_ratio: float | None = None
    prefix_cache_hit_ratio: Mapping[str, float] = field(default_factory=dict)
    # Passed on as read (lifetime counters, summed over engines; the sleep state by state).
    prefix_cache_queries: float | None = None
    prefix_cache_hits: float | None = None
    preemptions: float | None = None
    sleep_state: Mapping[str, float] = field(default_factory=dict)


def _delta(prev: float | None, cur: float | None, reset: bool) -> float | None:
    """An interval's increase; ``None`` unless both polls have the counter."""
    if prev is None or cur is None:
        return None
    return vm.increase(prev, cur, restarted=reset)[0]


def _spec_window(
    drafts: float | None,
    draft_tokens: float | None,
    accepted: float | None,
    per_pos: Mapping[int, float],
    k: int | None,
) -> tuple[float | None, float | None, dict[int, float]]:
    """(acceptance ratio, mean acceptance length, per-position ratio) from counter values."""
    if drafts is None:
        drafts = vm.drafts_from_draft_tokens(draft_tokens, k)
    return (
        vm.acceptance_rate(accepted, draft_tokens),
        vm.mean_acceptance_length(accepted, drafts),
        vm.position_acceptance(per_pos, drafts),
    )


def derive(
    prev: Reading | None, cur: Reading, *, reset: bool = False, k: int | None = None
) -> Derived:
    """Lifetime values from ``cur``; interval values from ``prev`` → ``cur``.

    ``reset``: the server restarted between the two readings (then each counter's
    current value is its increase). ``k``: speculative tokens per draft, if known.
    """
    acc: dict[str, float] = {}
    length: dict[str, float] = {}
    pos: dict[tuple[str, int], float] = {}
    tpot: dict[str, float] = {}
    itl: dict[str, float] = {}
    hit: dict[str, float] = {}

    k_eff = k or (cur.num_positions or None)
    r, ln, pp = _spec_window(
        cur.drafts, cur.draft_tokens, cur.accepted, cur.accepted_per_pos, k_eff
    )
    v0 = cur.v0_acceptance_rate
    if r is None and v0 is not None and math.isfinite(v0):
        r = v0
    if r is not None:
        acc["lifetime"] = r
    if ln is not None:
        length["lifetime"] = ln
    for p, v in pp.items():
        pos[("lifetime", p)] = v
    for pair, out in ((cur.tpot_sum_count, tpot), (cur.itl_sum_count, itl)):
        m = vm.histogram_mean(pair)
        if m is not None:
            out["lifetime"] = m
    h = vm.hit_ratio(cur.prefix_cache_hits, cur.prefix_cache_queries)
    if h is not None:
        hit["lifetime"] = h

    drafted_tps = accepted_tps = gen_tps = None
    if prev is not None and cur.time_s > prev.time_s:
        dt = cur.time_s - prev.time_s
        reset = reset or went_backwards(prev, cur)
        d_drafts = _delta(prev.drafts, cur.drafts, reset)
        d_tokens = _delta(prev.draft_tokens, cur.draft_tokens, reset)
        d_acc = _delta(prev.accepted, cur.accepted, reset)
        d_pos: dict[int, float] = {}
        for p, v in cur.accepted_per_pos.items():
            # A position new since the last poll counts from zero only after a restart.
            d = _delta(prev.accepted_per_pos.get(p, 0.0 if reset else None), v, reset)
            if d is not None:
                d_pos[p] = d
        r, ln, pp = _spec_window(d_drafts, d_tokens, d_acc, d_pos, k_eff)
        if r is not None:
            acc["interval"] = r
        if ln is not None:
            length["interval"] = ln
        for p, v in pp.items():
            pos[("interval", p)] = v
        if d_tokens is not None:
            drafted_tps = d_tokens / dt
        if d_acc is not None:
            accepted_tps = d_acc / dt
        d_gen = _delta(prev.generation_tokens, cur.generation_tokens, reset)
        if d_gen is not None:
            gen_tps = d_gen / dt
        for p_sc, c_sc, out in (
            (prev.tpot_sum_count, cur.tpot_sum_count, tpot),
            (prev.itl_sum_count, cur.itl_sum_count, itl),
        ):
            if p_sc is None or c_sc is None:
                continue
            m = vm.histogram_mean(vm.histogram_increase(p_sc, c_sc, restarted=reset)[0])
            if m is not None:
                out["interval"] = m
        h = vm.hit_ratio(
            _delta(prev.prefix_cache_hits, cur.prefix_cache_hits, reset),
            _delta(prev.prefix_cache_queries, cur.prefix_cache_queries, reset),
        )
        if h is not None:
            hit["interval"] = h
    return Derived(
        acceptance_ratio=acc,
        mean_acceptance_length=length,
        position_acceptance_ratio=pos,
        drafted_tokens_per_s=drafted_tps,
        accepted_tokens_per_s=accepted_tps,
        tpot_mean_s=tpot,
        itl_mean_s=itl,
        generation_tokens_per_s=gen_tps,
        running=cur.running,
        waiting=cur.waiting,
        kv_usage_ratio=cur.kv_usage_ratio,
        prefix_cache_hit_ratio=hit,
        prefix_cache_queries=cur.prefix_cache_queries,
        prefix_cache_hits=cur.prefix_cache_hits,
        preemptions=cur.preemptions,
        sleep_state=cur.sleep_state,
    )
