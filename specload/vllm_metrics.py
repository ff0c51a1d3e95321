"""vLLM's ``/metrics``: the family names (current and legacy), reset-safe deltas, the formulas.

The one reader of what vLLM's metrics mean. The sweep's server block
(:mod:`specload.sweep.server_metrics`), the exporter (:mod:`exporter.vllm_metrics`)
and the simulator's metric tests take their names and formulas from here, so a
renamed family or a corrected formula is changed once.

Formulas (vLLM V1 counters, on lifetime values or on deltas alike):

- acceptance rate = accepted tokens / draft tokens (:func:`acceptance_rate`);
- mean acceptance length = 1 + accepted tokens / drafts, the tokens one
  verification step yields (:func:`mean_acceptance_length`);
- per-position acceptance = accepted at draft position p / drafts
  (:func:`position_acceptance`);
- server-side mean TPOT (and ITL, TTFT, E2E) = Δsum / Δcount of the histogram
  (:func:`histogram_mean`);
- prefix-cache hit ratio = Δhits / Δqueries, both in tokens (:func:`hit_ratio`).

A counter that went down means the server restarted (its counters begin again
at zero): its current value is then its increase, the delta never goes
negative, and the caller is told so (:func:`increase`, :func:`histogram_increase`).

Names are written as vLLM writes them; counters carry ``_total`` (their
``# TYPE`` line does too), and :meth:`specload.promtext.Exposition.get_family`
finds a counter by either spelling. Where vLLM renamed a family, the ``*_NAMES``
tuples list the current name first, then the older ones; :func:`first_family`
takes the first one the page has.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from typing import TypeVar

from specload.promtext import Exposition, Family

MODEL_LABEL = "model_name"  # vLLM labels every family with the served model

__all__ = [
    "ACCEPTED",
    "ACCEPTED_PER_POS",
    "DRAFTS",
    "DRAFT_TOKENS",
    "E2E_LATENCY",
    "GENERATION_TOKENS",
    "GPU_CACHE_USAGE_LEGACY",
    "GPU_PREFIX_CACHE_HITS_LEGACY",
    "GPU_PREFIX_CACHE_QUERIES_LEGACY",
    "INTER_TOKEN_LATENCY",
    "ITL_NAMES",
    "KV_CACHE_USAGE",
    "KV_CACHE_USAGE_NAMES",
    "PREFIX_CACHE_HITS",
    "PREFIX_CACHE_HITS_NAMES",
    "PREFIX_CACHE_QUERIES",
    "PREFIX_CACHE_QUERIES_NAMES",
    "PROCESS_START",
    "PROMPT_TOKENS",
    "REQUESTS_RUNNING",
    "REQUESTS_WAITING",
    "REQUEST_SUCCESS",
    "REQUEST_TPOT",
    "SPEC_DECODE_COUNTERS",
    "TIME_PER_OUTPUT_TOKEN_LEGACY",
    "TIME_TO_FIRST_TOKEN",
    "TPOT_NAMES",
    "V0_DRAFT_ACCEPTANCE_RATE",
    "V0_EFFICIENCY",
    "acceptance_rate",
    "any_went_down",
    "counter_total",
    "drafts_from_draft_tokens",
    "family_filter",
    "first_family",
    "histogram_increase",
    "histogram_mean",
    "hit_ratio",
    "increase",
    "mean_acceptance_length",
    "position_acceptance",
    "sum_count",
]

# -- names ---------------------------------------------------------------------------------
# Every name below is on the real vLLM 0.32 pages in tests/data/vllm-0.32.0 unless it says
# "legacy" (tests/unit/test_vllm_metrics.py checks both ways).

# Token and request counters.
GENERATION_TOKENS = "vllm:generation_tokens_total"
PROMPT_TOKENS = "vllm:prompt_tokens_total"
REQUEST_SUCCESS = "vllm:request_success_total"  # label finished_reason

# Speculative decoding, V1 engine (present only with speculation on). V0 had the draft and
# accepted token counters too, but no drafts counter and no per-position one.
DRAFTS = "vllm:spec_decode_num_drafts_total"
DRAFT_TOKENS = "vllm:spec_decode_num_draft_tokens_total"
ACCEPTED = "vllm:spec_decode_num_accepted_tokens_total"
ACCEPTED_PER_POS = "vllm:spec_decode_num_accepted_tokens_per_pos_total"  # label position
SPEC_DECODE_COUNTERS = (DRAFTS, DRAFT_TOKENS, ACCEPTED, ACCEPTED_PER_POS)
# Legacy: the V0 engine's gauges (vLLM <= 0.9), what a V0 server has instead of the ratios.
V0_DRAFT_ACCEPTANCE_RATE = "vllm:spec_decode_draft_acceptance_rate"
V0_EFFICIENCY = "vllm:spec_decode_efficiency"

# Latency histograms (seconds).
# Per request: (decode time) / (output tokens - 1) — TPOT as specload's client measures it.
REQUEST_TPOT = "vllm:request_time_per_output_token_seconds"
INTER_TOKEN_LATENCY = "vllm:inter_token_latency_seconds"
TIME_TO_FIRST_TOKEN = "vllm:time_to_first_token_seconds"
E2E_LATENCY = "vllm:e2e_request_latency_seconds"
# Legacy: vLLM <= 0.10 called its only per-token histogram TPOT under this name (the time
# between a request's successive outputs); 0.11 renamed it inter_token_latency_seconds and
# added the per-request TPOT above, and kept this name, deprecated, until it was removed.
# So on an old server it is the nearest thing to both TPOT and ITL.
TIME_PER_OUTPUT_TOKEN_LEGACY = "vllm:time_per_output_token_seconds"
TPOT_NAMES = (REQUEST_TPOT, TIME_PER_OUTPUT_TOKEN_LEGACY)
ITL_NAMES = (INTER_TOKEN_LATENCY, TIME_PER_OUTPUT_TOKEN_LEGACY)

# Scheduler and KV cache gauges.
REQUESTS_RUNNING = "vllm:num_requests_running"
REQUESTS_WAITING = "vllm:num_requests_waiting"
KV_CACHE_USAGE = "vllm:kv_cache_usage_perc"  # 0-1 despite the name; one sample per engine
# Legacy: V0 and V1 before the gpu_ prefix was dropped (deprecated from about vLLM 0.10,
# which serves both names; removed around 0.12).
GPU_CACHE_USAGE_LEGACY = "vllm:gpu_cache_usage_perc"
KV_CACHE_USAGE_NAMES = (KV_CACHE_USAGE, GPU_CACHE_USAGE_LEGACY)

# Prefix cache, V1, in tokens: queried (prompt tokens looked up) and hit (found cached).
# Not vllm:external_prefix_cache_* (a KV connector's cross-instance cache).
PREFIX_CACHE_QUERIES = "vllm:prefix_cache_queries_total"
PREFIX_CACHE_HITS = "vllm:prefix_cache_hits_total"
# Legacy: the same counters with the gpu_ prefix (renamed with gpu_cache_usage_perc). V0
# had only a hit-rate gauge, which cannot be turned into a window's ratio: not read.
GPU_PREFIX_CACHE_QUERIES_LEGACY = "vllm:gpu_prefix_cache_queries_total"
GPU_PREFIX_CACHE_HITS_LEGACY = "vllm:gpu_prefix_cache_hits_total"
PREFIX_CACHE_QUERIES_NAMES = (PREFIX_CACHE_QUERIES, GPU_PREFIX_CACHE_QUERIES_LEGACY)
PREFIX_CACHE_HITS_NAMES = (PREFIX_CACHE_HITS, GPU_PREFIX_CACHE_HITS_LEGACY)
PREEMPTIONS = "vllm:num_preemptions_total"  # requests preempted (KV cache full), all engines
# One sample per engine and state: 1 for the engine's current state, 0 for the others.
ENGINE_SLEEP_STATE = "vllm:engine_sleep_state"  # label sleep_state
#: The states of ``vllm:engine_sleep_state`` (awake; sleep level 1: weights offloaded;
#: level 2: weights and KV cache discarded). Any other value is not exported (a bounded label).
SLEEP_STATES = ("awake", "weights_offloaded", "discard_all")

# prometheus_client's process collector (a restart shows as a new value).
PROCESS_START = "process_start_time_seconds"


# -- reading a parsed page -----------------------------------------------------------------


def family_filter(names: Iterable[str]) -> Callable[[str], bool]:
    """A ``keep`` for :func:`specload.promtext.parse` that wants exactly these families.

    A counter is wanted under both spellings: vLLM's ``# TYPE`` lines carry ``_total``,
    but older prometheus_client releases and other exporters type counters without it.
    """
    wanted = set(names)
    wanted |= {n[:-6] for n in wanted if n.endswith("_total")}
    return frozenset(wanted).__contains__


def first_family(fams: Exposition, names: str | Iterable[str]) -> Family | None:
    """The first of ``names`` the page has samples of (a renamed family: current name first).

    A family that is known but empty (typed without samples, or skipped by the parser's
    ``keep`` filter) does not count, so the next name is tried.
    """
    for name in (names,) if isinstance(names, str) else names:
        fam = fams.get_family(name)
        if fam is not None and fam.samples:
            return fam
    return None


def model_match(fam: Family, model: str | None) -> dict[str, str] | None:
    """``{"model_name": model}`` where the family has series of that model (a server of
    several models: only the run's), else None (every series)."""
    if model and model in fam.label_values(MODEL_LABEL):
        return {MODEL_LABEL: model}
    return None


def counter_total(
    fams: Exposition, names: str | Iterable[str], model: str | None = None
) -> float | None:
    """A counter's (or gauge's) value summed over its label sets (of ``model`` where the
    family names it: :func:`model_match`); ``None`` if absent."""
    fam = first_family(fams, names)
    return None if fam is None else fam.total(model_match(fam, model))


def sum_count(
    fams: Exposition, names: str | Iterable[str], model: str | None = None
) -> tuple[float, float] | None:
    """A histogram's ``(_sum, _count)`` summed over its label sets (of ``model``, as
    :func:`counter_total`); ``None`` if absent."""
    fam = first_family(fams, names)
    return None if fam is None else fam.sum_count(model_match(fam, model))


# -- reset-safe deltas ---------------------------------------------------------------------


def increase(start: float | None, end: float, *, restarted: bool = False) -> tuple[float, bool]:
    """How much a counter grew from ``start`` to ``end``, and whether it counted from zero.

    A counter only goes down when the server restarted: it began again at zero, so its
    current value is its increase (never a negative delta) and the flag says so.
    ``start=None`` (not on the earlier page) counts from zero too, without the flag.
    ``restarted``: the caller knows of a restart (a new process start time) even though
    the counter is higher than before.
    """
    if start is None:
        return end, False
    if restarted or end < start:
        return end, True
    return end - start, False


def histogram_increase(
    start: tuple[float, float] | None, end: tuple[float, float], *, restarted: bool = False
) -> tuple[tuple[float, float], bool]:
    """``(Δsum, Δcount)`` of a histogram, and whether it counted from zero.

    The count is the histogram's counter: when it went down (or ``restarted``) both sum
    and count start from zero. ``start=None`` counts from zero without the flag.
    """
    if start is None:
        return end, False
    if restarted or end[1] < start[1]:
        return end, True
    return (end[0] - start[0], end[1] - start[1]), False


def any_went_down(pairs: Iterable[tuple[float | None, float | None]]) -> bool:
    """Any ``(before, after)`` counter pair smaller after: the server restarted in between."""
    return any(b is not None and a is not None and a < b for b, a in pairs)


# -- formulas ------------------------------------------------------------------------------


def _ratio(num: float | None, den: float | None) -> float | None:
    if num is None or den is None or den <= 0:
        return None
    return num / den


def acceptance_rate(accepted: float | None, draft_tokens: float | None) -> float | None:
    """Accepted / draft tokens; ``None`` without drafted tokens (an idle window: absent)."""
    return _ratio(accepted, draft_tokens)


def mean_acceptance_length(accepted: float | None, drafts: float | None) -> float | None:
    """1 + accepted tokens / drafts: tokens per verification step (the bonus token + hits)."""
    share = _ratio(accepted, drafts)
    return None if share is None else 1.0 + share


K = TypeVar("K")


def position_acceptance(per_pos: Mapping[K, float], drafts: float | None) -> dict[K, float]:
    """Accepted at each draft position / drafts (keys as given); empty without drafts."""
    if drafts is None or drafts <= 0:
        return {}
    return {p: v / drafts for p, v in per_pos.items()}


def drafts_from_draft_tokens(draft_tokens: float | None, k: int | None) -> float | None:
    """Drafts when the server has no drafts counter (V0): every draft has ``k`` tokens."""
    if draft_tokens is None or not k:
        return None
    return draft_tokens / k


def histogram_mean(pair: tuple[float, float] | None) -> float | None:
    """Sum / count of a histogram (lifetime or a window's deltas); ``None`` without samples."""
    return None if pair is None else _ratio(pair[0], pair[1])


def hit_ratio(hits: float | None, queries: float | None) -> float | None:
    """Prefix-cache hits / queries (tokens found cached / tokens looked up); ``None`` idle."""
    return _ratio(hits, queries)
