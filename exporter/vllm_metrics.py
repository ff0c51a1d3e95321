"""What the exporter reads from a vLLM ``/metrics`` page, and what it derives.

:func:`extract` pulls the raw counters and gauges out of a parsed page into a
:class:`Reading`; :func:`derive` turns the lifetime values of one reading and
the deltas between two into :class:`Derived` values:

- acceptance ratio = accepted tokens / drafted tokens (V1 counters);
- mean acceptance length = 1 + accepted tokens / drafts;
- position acceptance ratio = accepted at position p / drafts;
- mean TPOT / ITL = Δsum / Δcount of the histograms;
- rates = Δcounter / Δt.

vLLM ≤0.9 (V0) exported ``vllm:spec_decode_draft_acceptance_rate`` as a gauge
instead; it is used for the lifetime ratio when the V1 counters are absent.
A counter that went backwards (a restart) counts its current value as the
increase, so deltas never go negative.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field

from specload.promtext import Exposition, Family

# Names as vLLM writes them (the counters' TYPE lines carry ``_total``).
DRAFTS = "vllm:spec_decode_num_drafts_total"
DRAFT_TOKENS = "vllm:spec_decode_num_draft_tokens_total"
ACCEPTED = "vllm:spec_decode_num_accepted_tokens_total"
ACCEPTED_PER_POS = "vllm:spec_decode_num_accepted_tokens_per_pos_total"
V0_ACCEPTANCE_RATE = "vllm:spec_decode_draft_acceptance_rate"
GENERATION_TOKENS = "vllm:generation_tokens_total"
TPOT_HISTOGRAMS = ("vllm:request_time_per_output_token_seconds",)
ITL_HISTOGRAMS = ("vllm:inter_token_latency_seconds", "vllm:time_per_output_token_seconds")
RUNNING = "vllm:num_requests_running"
WAITING = "vllm:num_requests_waiting"
KV_USAGE = ("vllm:kv_cache_usage_perc", "vllm:gpu_cache_usage_perc")
PROCESS_START = "process_start_time_seconds"

WANTED: frozenset[str] = frozenset(
    {
        DRAFTS,
        DRAFT_TOKENS,
        ACCEPTED,
        ACCEPTED_PER_POS,
        V0_ACCEPTANCE_RATE,
        GENERATION_TOKENS,
        RUNNING,
        WAITING,
        PROCESS_START,
        *TPOT_HISTOGRAMS,
        *ITL_HISTOGRAMS,
        *KV_USAGE,
    }
)
# prometheus_client before 0.?? and some exporters type counters without _total.
_WANTED_ALL = WANTED | {n[:-6] for n in WANTED if n.endswith("_total")}


def keep(family_name: str) -> bool:
    """The parser's filter: only the families the exporter reads get their labels parsed."""
    return family_name in _WANTED_ALL


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


def _total(fams: Exposition, name: str) -> float | None:
    fam = fams.get_family(name)
    return None if fam is None else fam.total()


def _first(fams: Exposition, names: tuple[str, ...]) -> Family | None:
    for name in names:
        fam = fams.get_family(name)
        if fam is not None and fam.samples:
            return fam
    return None


def _model_name(fams: Exposition) -> str | None:
    for name in (GENERATION_TOKENS, RUNNING, DRAFTS, *ITL_HISTOGRAMS, *KV_USAGE):
        fam = fams.get_family(name)
        if fam is None:
            continue
        for s in fam.samples:
            model = s.labels.get("model_name")
            if model:
                return model
    return None


def extract(fams: Exposition, time_s: float) -> Reading:
    per_pos: dict[int, float] = {}
    pos_fam = fams.get_family(ACCEPTED_PER_POS)
    if pos_fam is not None:
        for key, value in pos_fam.by_label("position").items():
            try:
                per_pos[int(key)] = value
            except ValueError:
                continue
    tpot = _first(fams, TPOT_HISTOGRAMS)
    itl = _first(fams, ITL_HISTOGRAMS)
    kv = _first(fams, KV_USAGE)
    kv_value: float | None = None
    if kv is not None:
        # One engine per data-parallel rank: the mean is the server's usage.
        values = [s.value for s in kv.samples]
        kv_value = sum(values) / len(values) if values else None
    start = fams.get_family(PROCESS_START)
    return Reading(
        time_s=time_s,
        model=_model_name(fams),
        process_start_s=start.samples[0].value if start is not None and start.samples else None,
        drafts=_total(fams, DRAFTS),
        draft_tokens=_total(fams, DRAFT_TOKENS),
        accepted=_total(fams, ACCEPTED),
        accepted_per_pos=per_pos,
        v0_acceptance_rate=_total(fams, V0_ACCEPTANCE_RATE),
        generation_tokens=_total(fams, GENERATION_TOKENS),
        tpot_sum_count=tpot.sum_count() if tpot is not None else None,
        itl_sum_count=itl.sum_count() if itl is not None else None,
        running=_total(fams, RUNNING),
        waiting=_total(fams, WAITING),
        kv_usage_ratio=kv_value,
    )


def went_backwards(prev: Reading, cur: Reading) -> bool:
    """Any counter smaller than before: the server restarted between the polls."""
    pairs = [
        (prev.drafts, cur.drafts),
        (prev.draft_tokens, cur.draft_tokens),
        (prev.accepted, cur.accepted),
        (prev.generation_tokens, cur.generation_tokens),
        (
            prev.tpot_sum_count[1] if prev.tpot_sum_count else None,
            cur.tpot_sum_count[1] if cur.tpot_sum_count else None,
        ),
        (
            prev.itl_sum_count[1] if prev.itl_sum_count else None,
            cur.itl_sum_count[1] if cur.itl_sum_count else None,
        ),
    ]
    return any(p is not None and c is not None and c < p for p, c in pairs)


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


def _delta(prev: float | None, cur: float | None, reset: bool) -> float | None:
    if cur is None:
        return None
    if prev is None:
        return None
    if reset or cur < prev:
        return cur
    return cur - prev


def _ratio(num: float | None, den: float | None) -> float | None:
    if num is None or den is None or den <= 0:
        return None
    return num / den


def _spec_window(
    drafts: float | None,
    draft_tokens: float | None,
    accepted: float | None,
    per_pos: Mapping[int, float],
    k: int | None,
) -> tuple[float | None, float | None, dict[int, float]]:
    """(acceptance ratio, mean acceptance length, per-position ratio) from counter values."""
    ratio = _ratio(accepted, draft_tokens)
    if drafts is None and draft_tokens is not None and k:
        drafts = draft_tokens / k  # V0 had no drafts counter; every draft has k tokens
    length = None
    if accepted is not None and drafts is not None and drafts > 0:
        length = 1.0 + accepted / drafts
    positions: dict[int, float] = {}
    if drafts is not None and drafts > 0:
        positions = {p: v / drafts for p, v in per_pos.items()}
    return ratio, length, positions


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
    if cur.tpot_sum_count is not None:
        m = _ratio(*cur.tpot_sum_count)
        if m is not None:
            tpot["lifetime"] = m
    if cur.itl_sum_count is not None:
        m = _ratio(*cur.itl_sum_count)
        if m is not None:
            itl["lifetime"] = m

    drafted_tps = accepted_tps = gen_tps = None
    if prev is not None and cur.time_s > prev.time_s:
        dt = cur.time_s - prev.time_s
        reset = reset or went_backwards(prev, cur)
        d_drafts = _delta(prev.drafts, cur.drafts, reset)
        d_tokens = _delta(prev.draft_tokens, cur.draft_tokens, reset)
        d_acc = _delta(prev.accepted, cur.accepted, reset)
        d_pos: dict[int, float] = {}
        for p, v in cur.accepted_per_pos.items():
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
            d_sum = _delta(p_sc[0], c_sc[0], reset)
            d_count = _delta(p_sc[1], c_sc[1], reset)
            m = _ratio(d_sum, d_count)
            if m is not None:
                out["interval"] = m
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
    )
