"""The one typed reader of a result: ``summary.json`` as frozen dataclasses.

:func:`read` (a results directory or the file) and :func:`from_dict` (a summary already in
memory) give a :class:`Summary`: the run's metadata and its :class:`Level` s, each with its
:class:`Figures` (the level's, and per category), its server block (:class:`Server`, vLLM
/metrics deltas over the level) and the client's per-request speculative-decoding counts
(:class:`SpecDecode`). Every reader of a result — ``compare``, ``predict``, the HTML report,
``baseline export``, ``summary.md`` and the plots — takes its figures from here; every
fallback is decided once, here:

- the **truncated share** of a level or category (:attr:`Figures.truncated_share`): the
  written ``reasoning_truncated_ratio``, else ``reasoning_truncated / completed``
  (:func:`specload.records.stats.truncated_share`); above :data:`TRUNCATED_SHARE_LIMIT`
  (:attr:`Figures.truncated`) the level is flagged by every reader;
- a level's **acceptance** (:attr:`Level.acceptance`): the server block's counters when
  they hold a rate, else the client's per-request counts, else None with the reason;
- the **measured window** (:attr:`Level.window`): the sweep's own floats, else the ISO
  times; and the planned window of a run (:attr:`Summary.planned_window`): its options,
  else its first level;
- the **median** (:func:`median`, the lower median) and the **verdict** (:func:`verdict`).
  The median's interval is :mod:`specload.results.bootstrap` (the moving-block bootstrap);
- **how a level stopped** (``specload run --precision``/``--against``): the level's
  ``stop_reason``, ``precision_*`` and ``verdict_*`` fields and, in words, :attr:`Level.stopped`
  (``precise ±1.8% after 64 requests``, ``decided after 48 requests: slower``); the run's
  rules are :attr:`Summary.stopping` (:class:`Stopping`). Summaries written before them have
  none: every such field reads None and every reader shows what it showed before.

A figure that is not a finite number reads as None (:func:`finite_number`). Nothing here
imports numpy: the model is light.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

from specload.errors import UsageError
from specload.histogram import exact_quantile
from specload.records.clientload import CLIENT_SATURATED
from specload.records.stats import (
    MINUS_SERVER_NAMES,
    MINUS_SERVER_STATS,
    TRUNCATED_SHARE_LIMIT,
    truncated_share,
)

__all__ = [
    "FASTER",
    "SAME",
    "SLOWER",
    "TOO_FEW",
    "TRUNCATED_SHARE_LIMIT",
    "Acceptance",
    "Figures",
    "Level",
    "Outage",
    "Search",
    "SearchStep",
    "Server",
    "Slo",
    "SpecDecode",
    "SpecPart",
    "Stopping",
    "Summary",
    "as_summary",
    "finite_number",
    "from_dict",
    "iso_seconds",
    "level_window",
    "median",
    "read",
    "truncated_share",
    "verdict",
]

SUMMARY_FILE = "summary.json"


# -- the scalar rules ------------------------------------------------------------------------


def finite_number(value: Any) -> float | None:
    """A JSON value as a float when it is a finite number (not a bool), else None: how every
    reader of ``summary.json`` and the prediction's JSON takes a figure."""
    if isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value):
        return float(value)
    return None


def _int(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def _count(value: Any) -> int:
    """A count: an int, else 0."""
    return _int(value) or 0


def _str(value: Any) -> str | None:
    return None if value is None else str(value)


def _bool(value: Any) -> bool | None:
    return value if isinstance(value, bool) else None


def _map(value: Any) -> Mapping[str, Any]:
    return value if isinstance(value, Mapping) else {}


def iso_seconds(text: Any) -> float | None:
    """An ISO 8601 timestamp as POSIX seconds (None: empty or not a timestamp)."""
    if not text:
        return None
    try:
        return datetime.fromisoformat(str(text)).timestamp()
    except ValueError:
        return None


def level_window(level: Mapping[str, Any]) -> tuple[float | None, float | None]:
    """A ``summary.json`` level's measured window in wall-clock seconds: the sweep's own
    floats (``window_start_s``/``window_end_s``) when the summary has them, else the ISO
    ``window_started_at``/``window_ended_at`` (milliseconds); None where neither is known."""
    start = finite_number(level.get("window_start_s"))
    if start is None:
        start = iso_seconds(level.get("window_started_at"))
    end = finite_number(level.get("window_end_s"))
    if end is None:
        end = iso_seconds(level.get("window_ended_at"))
    return start, end


def median(values: Sequence[float]) -> float | None:
    """The lower median: the value of rank ``floor(0.5 * (n - 1))`` in sorted order (None:
    empty) — the rule of :func:`specload.histogram.exact_quantile` that ``summary.json``
    uses, so a median is one number in the summary, compare, predict and the report."""
    return exact_quantile(sorted(float(v) for v in values), 0.5)


# -- the verdict -----------------------------------------------------------------------------

FASTER, SLOWER, SAME = "faster", "slower", "no significant difference"
TOO_FEW = "n too small"


def verdict(
    rel: float,
    ci_low: float | None,
    ci_high: float | None,
    *,
    min_difference: float,
    lower_is_better: bool = True,
) -> str:
    """The one rule: a relative difference ``rel`` (``b / a - 1``) and its interval.

    No interval: :data:`TOO_FEW`. Faster or slower only when the interval excludes zero *and*
    the difference is at least ``min_difference`` (relative); otherwise :data:`SAME`.
    ``lower_is_better``: a negative ``rel`` is faster (times); else it is slower (tok/s).
    """
    if ci_low is None or ci_high is None:
        return TOO_FEW
    excludes_zero = ci_low > 0 or ci_high < 0
    if not excludes_zero or abs(rel) < min_difference:
        return SAME
    worse = rel > 0 if lower_is_better else rel < 0
    return SLOWER if worse else FASTER


# -- figures ---------------------------------------------------------------------------------

MEASURES = ("ttft", "ttfct", "tpot", "itl", "e2el")
STATS = ("mean", "median", "p90", "p99")
# Client minus server (specload.records.servertiming), of the requests with the server's timing.
MINUS_SERVER_KEYS = tuple(
    f"{stat}_{name}_ms" for name in MINUS_SERVER_NAMES for stat, _ in MINUS_SERVER_STATS
)


@dataclass(frozen=True)
class SpecPart:
    """Counts and ratios of a set of verify steps (the client's, per request summed)."""

    drafts: int | None = None
    draft_tokens: int | None = None
    accepted_tokens: int | None = None
    acceptance_rate: float | None = None
    mean_acceptance_length: float | None = None
    requests: int = 0
    acceptance_rate_request_mean: float | None = None
    mean_acceptance_length_request_mean: float | None = None

    @classmethod
    def from_dict(cls, raw: Mapping[str, Any]) -> SpecPart:
        return cls(
            drafts=_int(raw.get("drafts")),
            draft_tokens=_int(raw.get("draft_tokens")),
            accepted_tokens=_int(raw.get("accepted_tokens")),
            acceptance_rate=finite_number(raw.get("acceptance_rate")),
            mean_acceptance_length=finite_number(raw.get("mean_acceptance_length")),
            requests=_count(raw.get("requests")),
            acceptance_rate_request_mean=finite_number(raw.get("acceptance_rate_request_mean")),
            mean_acceptance_length_request_mean=finite_number(
                raw.get("mean_acceptance_length_request_mean")
            ),
        )


@dataclass(frozen=True)
class SpecDecode(SpecPart):
    """A level's (or category's) ``spec_decode``: the client's per-request counts."""

    source: Mapping[str, int] = field(default_factory=dict)  # requests per source
    split: Mapping[str, int] = field(default_factory=dict)  # requests per channel split
    invalid: int = 0
    ideal_speedup: float | None = None
    acceptance_per_position: tuple[float, ...] | None = None
    reasoning: SpecPart | None = None
    content: SpecPart | None = None

    @classmethod
    def from_dict(cls, raw: Mapping[str, Any]) -> SpecDecode:
        base = SpecPart.from_dict(raw)
        per = raw.get("acceptance_per_position")
        reasoning, content = raw.get("reasoning"), raw.get("content")
        return cls(
            **base.__dict__,
            source={str(k): _count(v) for k, v in _map(raw.get("source")).items()},
            split={str(k): _count(v) for k, v in _map(raw.get("split")).items()},
            invalid=_count(raw.get("invalid")),
            ideal_speedup=finite_number(raw.get("ideal_speedup")),
            acceptance_per_position=(
                tuple(float(v) for v in per if finite_number(v) is not None)
                if isinstance(per, list)
                else None
            ),
            reasoning=SpecPart.from_dict(reasoning) if isinstance(reasoning, Mapping) else None,
            content=SpecPart.from_dict(content) if isinstance(content, Mapping) else None,
        )


@dataclass(frozen=True)
class Figures:
    """The client's figures of a set of requests: a level, or one category of it."""

    completed: int = 0
    failed: int = 0
    unfinished: int = 0
    duration: float | None = None
    request_throughput: float | None = None
    output_throughput: float | None = None
    total_output_tokens: int = 0
    total_reasoning_tokens: int = 0
    total_content_tokens: int = 0
    total_tool_tokens: int = 0
    mean_output_tokens: float | None = None
    mean_reasoning_tokens: float | None = None
    mean_content_tokens: float | None = None
    mean_tool_tokens: float | None = None
    mean_tokens_per_chunk: float | None = None
    reasoning_truncated: int | None = None
    truncated_share: float | None = None  # decided once: see the module doc
    tokens_estimated: int = 0
    errors: Mapping[str, int] = field(default_factory=dict)
    latency_ms: Mapping[str, float | None] = field(default_factory=dict)  # "median_tpot_ms"…
    slo_attainment_ratio: float | None = None
    request_goodput: float | None = None
    output_goodput: float | None = None
    spec_decode: SpecDecode | None = None
    # completed requests with the server's own timing, and the client-minus-server figures
    # of those: "median_ttft_minus_server_ms", "p10_…", "p90_…", the same for "itl"
    server_timing_requests: int = 0
    minus_server_ms: Mapping[str, float | None] = field(default_factory=dict)

    def ms(self, stat: str, measure: str) -> float | None:
        """``stat`` (mean, median, p90, p99) of ``measure`` (ttft, ttfct, tpot, itl, e2el)."""
        return self.latency_ms.get(f"{stat}_{measure}_ms")

    def minus_server(self, stat: str, measure: str) -> float | None:
        """``stat`` (median, p10, p90) of the client's ``measure`` (ttft, itl) minus the
        server's, in ms (None: no request carried the server's timing)."""
        return self.minus_server_ms.get(f"{stat}_{measure}_minus_server_ms")

    def figure(self, key: str) -> float | None:
        """A figure by its ``summary.json`` key (a latency, a throughput, a ratio)."""
        if key in self.latency_ms:
            return self.latency_ms[key]
        value = getattr(self, key, None)
        return finite_number(value)

    @property
    def median_tpot_ms(self) -> float | None:
        return self.ms("median", "tpot")

    @property
    def p90_tpot_ms(self) -> float | None:
        return self.ms("p90", "tpot")

    @property
    def truncated(self) -> bool:
        """More than :data:`TRUNCATED_SHARE_LIMIT` of the completed requests ended inside
        reasoning at max_tokens: flagged by every reader (warned; TTFCT not compared)."""
        return self.truncated_share is not None and self.truncated_share > TRUNCATED_SHARE_LIMIT

    @classmethod
    def from_dict(cls, raw: Mapping[str, Any]) -> Figures:
        completed = _count(raw.get("completed"))
        count = _int(raw.get("reasoning_truncated"))
        share = finite_number(raw.get("reasoning_truncated_ratio"))
        if share is None:
            share = truncated_share(count, completed)
        spec = raw.get("spec_decode")
        return cls(
            completed=completed,
            failed=_count(raw.get("failed")),
            unfinished=_count(raw.get("unfinished")),
            duration=finite_number(raw.get("duration")),
            request_throughput=finite_number(raw.get("request_throughput")),
            output_throughput=finite_number(raw.get("output_throughput")),
            total_output_tokens=_count(raw.get("total_output_tokens")),
            total_reasoning_tokens=_count(raw.get("total_reasoning_tokens")),
            total_content_tokens=_count(raw.get("total_content_tokens")),
            total_tool_tokens=_count(raw.get("total_tool_tokens")),
            mean_output_tokens=finite_number(raw.get("mean_output_tokens")),
            mean_reasoning_tokens=finite_number(raw.get("mean_reasoning_tokens")),
            mean_content_tokens=finite_number(raw.get("mean_content_tokens")),
            mean_tool_tokens=finite_number(raw.get("mean_tool_tokens")),
            mean_tokens_per_chunk=finite_number(raw.get("mean_tokens_per_chunk")),
            reasoning_truncated=count,
            truncated_share=share,
            tokens_estimated=_count(raw.get("tokens_estimated")),
            errors={str(k): _count(v) for k, v in _map(raw.get("errors")).items()},
            latency_ms={
                f"{s}_{m}_ms": finite_number(raw.get(f"{s}_{m}_ms"))
                for m in MEASURES
                for s in STATS
            },
            slo_attainment_ratio=finite_number(raw.get("slo_attainment_ratio")),
            request_goodput=finite_number(raw.get("request_goodput")),
            output_goodput=finite_number(raw.get("output_goodput")),
            spec_decode=SpecDecode.from_dict(spec) if isinstance(spec, Mapping) else None,
            server_timing_requests=_count(raw.get("server_timing_requests")),
            minus_server_ms={key: finite_number(raw.get(key)) for key in MINUS_SERVER_KEYS},
        )


@dataclass(frozen=True)
class Server:
    """A level's server block: vLLM /metrics counter deltas over the level (or its error)."""

    error: str | None = None
    source: str | None = None
    generation_tokens: float | None = None
    prompt_tokens: float | None = None
    requests_success: float | None = None
    spec_decode_num_drafts: float | None = None
    spec_decode_num_draft_tokens: float | None = None
    spec_decode_num_accepted_tokens: float | None = None
    spec_decode_acceptance_rate: float | None = None
    spec_decode_mean_acceptance_length: float | None = None
    spec_decode_acceptance_per_position: Mapping[str, float] = field(default_factory=dict)
    prefix_cache_hit_ratio: float | None = None
    reliable: bool = True  # False: the pages were not one server's (figures withheld)
    reason: str | None = None

    @classmethod
    def from_dict(cls, raw: Mapping[str, Any]) -> Server:
        def num(key: str) -> float | None:
            return finite_number(raw.get(key))

        per = _map(raw.get("spec_decode_acceptance_per_position"))
        return cls(
            error=_str(raw.get("error")),
            source=_str(raw.get("source")),
            generation_tokens=num("generation_tokens"),
            prompt_tokens=num("prompt_tokens"),
            requests_success=num("requests_success"),
            spec_decode_num_drafts=num("spec_decode_num_drafts"),
            spec_decode_num_draft_tokens=num("spec_decode_num_draft_tokens"),
            spec_decode_num_accepted_tokens=num("spec_decode_num_accepted_tokens"),
            spec_decode_acceptance_rate=num("spec_decode_acceptance_rate"),
            spec_decode_mean_acceptance_length=num("spec_decode_mean_acceptance_length"),
            spec_decode_acceptance_per_position={
                str(k): v for k, v0 in per.items() if (v := finite_number(v0)) is not None
            },
            prefix_cache_hit_ratio=num("prefix_cache_hit_ratio"),
            reliable=raw.get("reliable") is not False,
            reason=_str(raw.get("reason")),
        )


SOURCE_SERVER = "server"  # the server block's counters over the level
SOURCE_CLIENT = "client"  # the client's per-request spec-decode counts


@dataclass(frozen=True)
class Acceptance:
    """A level's acceptance: rate (accepted / draft tokens) and mean acceptance length
    (1 + accepted / drafts), both from one source; None with ``reason`` when neither has it."""

    rate: float | None
    mean_length: float | None
    source: str | None  # SOURCE_SERVER, SOURCE_CLIENT or None
    reason: str | None = None


def acceptance(server: Server | None, client: SpecDecode | None) -> Acceptance:
    """The one rule: the server block's counters when they hold a rate, else the client's
    per-request counts (requests that carried them), else None with the reason."""
    if server is not None and server.spec_decode_acceptance_rate is not None:
        return Acceptance(
            server.spec_decode_acceptance_rate,
            server.spec_decode_mean_acceptance_length,
            SOURCE_SERVER,
        )
    if client is not None and client.requests > 0 and client.acceptance_rate is not None:
        return Acceptance(client.acceptance_rate, client.mean_acceptance_length, SOURCE_CLIENT)
    if server is not None and server.error:
        why = f"the server's /metrics were not read ({server.error}) and no request carried "
        why += "spec-decode counts"
    elif server is not None and not server.reliable:
        why = "the server's counters were withheld (not one server's) and no request carried "
        why += "spec-decode counts"
    else:
        why = "no speculative decoding counted (server counters or per-request counts)"
    return Acceptance(None, None, None, why)


@dataclass(frozen=True)
class Slo:
    """A level's ``slo`` block (``--slo``): each objective in seconds and the share of the
    completed requests failing each (None: not a number)."""

    objectives_s: Mapping[str, float] = field(default_factory=dict)
    failing_ratio: Mapping[str, float | None] = field(default_factory=dict)

    @classmethod
    def from_dict(cls, raw: Mapping[str, Any]) -> Slo:
        return cls(
            objectives_s={
                str(k): v
                for k, v0 in _map(raw.get("objectives_s")).items()
                if (v := finite_number(v0)) is not None
            },
            failing_ratio={
                str(k): finite_number(v) for k, v in _map(raw.get("failing_ratio")).items()
            },
        )


@dataclass(frozen=True)
class Outage:
    start: str | None
    end: str | None
    duration_s: float | None
    phase: str | None = None


# -- how a level stopped (--precision, --against) -----------------------------------------------

STOP_PRECISE, STOP_DECIDED, STOP_BUDGET, STOP_INTERRUPTED = (
    "precise",
    "decided",
    "budget",
    "interrupted",
)
VERDICT_UNDECIDED = "undecided"
# summary.json's keys of a level's stopping, in the order Level.stop_fields gives them
STOP_KEYS = (
    "stop_reason",
    "precision_half_width",
    "precision_requests",
    "verdict",
    "verdict_requests",
    "verdict_ratio",
    "verdict_interval",
    "verdict_looks",
)


def _after(requests: int | None) -> str:
    return "" if requests is None else f" after {requests} requests"


def _interval(value: Any) -> tuple[float, float] | None:
    """``[low, high]`` as a pair of finite numbers (None: anything else)."""
    if not isinstance(value, list | tuple) or len(value) != 2:
        return None
    low, high = finite_number(value[0]), finite_number(value[1])
    return None if low is None or high is None else (low, high)


@dataclass(frozen=True)
class Stopping:
    """A run's ``stopping`` block: the rules that could end its levels before their budget
    (``--precision``, ``--against`` with ``--margin``; :mod:`specload.results.stopping`)."""

    metric: str = "tpot"
    precision: float | None = None  # a share of the estimate (0.02: ±2%)
    min_requests: int | None = None
    against: str | None = None  # the baseline's results directory
    margin: float | None = None  # a share of the baseline's median
    confidence: float | None = None
    method: str | None = None

    @property
    def label(self) -> str:
        """The figure the rules watch: ``median TPOT``."""
        return f"median {self.metric.upper()}"

    @property
    def text(self) -> str:
        """The rules in one line (summary.md, the HTML report, compare): ``a level ends once
        the 95% interval of its median TPOT is within ±2% (precise), never before 20
        requests``."""
        conf = "" if self.confidence is None else f"{self.confidence * 100:g}% "
        parts = []
        if self.precision is not None:
            parts.append(
                f"the {conf}interval of its {self.label} is within "
                f"±{self.precision * 100:g}% (precise)"
            )
        if self.against is not None:
            margin = "the same" if self.margin is None else f"within ±{self.margin * 100:g}%"
            parts.append(
                f"its {self.label} is known faster, slower or {margin} against {self.against} "
                "(decided)"
            )
        if not parts:
            return "every level runs its budget"
        text = "a level ends once " + " or once ".join(parts)
        if self.min_requests is not None:
            text += f", never before {self.min_requests} requests"
        return text + ", else at its budget"

    @classmethod
    def from_dict(cls, raw: Mapping[str, Any]) -> Stopping:
        return cls(
            metric=str(raw.get("metric") or "tpot"),
            precision=finite_number(raw.get("precision")),
            min_requests=_int(raw.get("min_requests")),
            against=_str(raw.get("against")),
            margin=finite_number(raw.get("margin")),
            confidence=finite_number(raw.get("confidence")),
            method=_str(raw.get("method")),
        )


@dataclass(frozen=True)
class Level:
    """One level of a sweep: its load, its figures (all requests and per category), its
    server block, flags and warnings, and how its window ended."""

    name: str
    concurrency: int | None
    request_rate: float | None
    max_concurrency: int | None
    complete: bool
    figures: Figures
    categories: Mapping[str, Figures]
    server: Server | None
    flags: tuple[str, ...] = ()
    warnings: tuple[str, ...] = ()
    outages: tuple[Outage, ...] = ()
    window: tuple[float | None, float | None] = (None, None)  # decided once: module doc
    warmup_s: float | None = None
    planned_duration_s: float | None = None
    planned_requests: int | None = None
    prefix_cache_reset: bool | None = None
    spec_decode_reconciled: bool | None = None
    tokens_reconciled: bool | None = None
    users_held: float | None = None
    search_step: int | None = None
    search_cut_short: str | None = None  # --search: why the window ended early
    slo: Slo | None = None  # --slo: the objectives and the share failing each
    # how the window ended (summary.json since --precision/--against; older ones: None)
    stop_reason: str | None = None  # precise, decided, budget, interrupted
    precision_half_width: float | None = None  # --precision: ratio of the estimate (0.018)
    precision_requests: int | None = None  # requests at its last look
    verdict: str | None = None  # --against: faster, slower, equivalent, undecided
    verdict_requests: int | None = None
    verdict_ratio: float | None = None  # variant / baseline median
    verdict_interval: tuple[float, float] | None = None  # [low, high] ratios
    verdict_looks: int | None = None
    # the client's own load over the window (specload.records.clientload; None: not measured)
    client_lag_p50_s: float | None = None
    client_lag_p99_s: float | None = None
    client_lag_max_s: float | None = None
    client_busy_ratio: float | None = None
    client_processes: int | None = None

    @property
    def client_saturated(self) -> bool:
        """Flagged ``client_saturated`` by the sweep (its lag or busy share beyond the
        limits of :mod:`specload.records.clientload`): TTFT and ITL may be the client's."""
        return CLIENT_SATURATED in self.flags

    @property
    def acceptance(self) -> Acceptance:
        """The level's acceptance by the one rule (:func:`acceptance`)."""
        return acceptance(self.server, self.figures.spec_decode)

    @property
    def truncated_share(self) -> float | None:
        return self.figures.truncated_share

    @property
    def load(self) -> float | None:
        """The load of the level: its concurrency (closed loop), else its request rate."""
        return float(self.concurrency) if self.concurrency is not None else self.request_rate

    @property
    def label(self) -> str:
        """``concurrency 4`` or ``rate 2.5/s``."""
        if self.concurrency is not None:
            return f"concurrency {self.concurrency}"
        return f"rate {self.request_rate or 0.0:g}/s"

    @property
    def users(self) -> int:
        """The users a request ran with: the concurrency, else the open loop's cap, else 1."""
        return int(self.concurrency or self.max_concurrency or 1)

    @property
    def prefix_cache_hit_ratio(self) -> float | None:
        return None if self.server is None else self.server.prefix_cache_hit_ratio

    def category(self, name: str) -> Figures | None:
        """A category's figures (``all``: the level's)."""
        return self.figures if name == "all" else self.categories.get(name)

    @property
    def stopped(self) -> str | None:
        """How the level's window ended, in words, as every reader shows it (None: the
        summary does not say — written before ``stop_reason``, or the level still runs):

        - ``precise ±1.8% after 64 requests`` (``--precision`` reached),
        - ``decided after 48 requests: slower`` (``--against``'s verdict known),
        - ``decided by the search: missed`` (``--search`` cut it short),
        - ``budget``, ``interrupted``;

        what the other rule knew by then follows in parentheses: ``budget (±3.1% after 200
        requests; undecided after 200 requests)``. A precision that could not be measured
        (too few requests) is left out.
        """
        reason = self.stop_reason
        if reason is None:
            return None
        precision = None
        if self.precision_half_width is not None:
            precision = f"±{self.precision_half_width * 100:.1f}%{_after(self.precision_requests)}"
        judged = None
        if self.verdict is not None:
            judged = f"{self.verdict}{_after(self.verdict_requests)}"
        rest: list[str | None]
        if reason == STOP_PRECISE and precision is not None:
            head, rest = f"{reason} {precision}", [judged]
        elif reason == STOP_DECIDED and self.verdict not in (None, VERDICT_UNDECIDED):
            head, rest = f"{reason}{_after(self.verdict_requests)}: {self.verdict}", [precision]
        elif reason == STOP_DECIDED and self.search_cut_short:
            head, rest = f"{reason} by the search: {self.search_cut_short}", [precision, judged]
        else:
            head, rest = reason, [precision, judged]
        extra = "; ".join(r for r in rest if r)
        return f"{head} ({extra})" if extra else head

    def stop_fields(self) -> dict[str, Any] | None:
        """The level's stopping as ``summary.json`` keys (:data:`STOP_KEYS`), as read here
        (None: the summary does not say how the level ended)."""
        if self.stop_reason is None:
            return None
        out = {key: getattr(self, key) for key in STOP_KEYS}
        if self.verdict_interval is not None:
            out["verdict_interval"] = list(self.verdict_interval)
        return out

    @classmethod
    def from_dict(cls, raw: Mapping[str, Any]) -> Level:
        server, slo = raw.get("server"), raw.get("slo")
        conc = _int(raw.get("concurrency"))
        return cls(
            name=str(raw.get("name") or (f"c{conc}" if conc is not None else "")),
            concurrency=conc,
            request_rate=finite_number(raw.get("request_rate")),
            max_concurrency=_int(raw.get("max_concurrency")),
            complete=raw.get("complete", True) is not False,
            figures=Figures.from_dict(raw),
            categories={
                str(k): Figures.from_dict(v)
                for k, v in _map(raw.get("categories")).items()
                if isinstance(v, Mapping)
            },
            server=Server.from_dict(server) if isinstance(server, Mapping) else None,
            flags=tuple(str(f) for f in raw.get("flags") or ()),
            warnings=tuple(str(w) for w in raw.get("warnings") or ()),
            outages=tuple(
                Outage(
                    _str(o.get("start")),
                    _str(o.get("end")),
                    finite_number(o.get("duration_s")),
                    _str(o.get("phase")),
                )
                for o in raw.get("outages") or ()
                if isinstance(o, Mapping)
            ),
            window=level_window(raw),
            warmup_s=finite_number(raw.get("warmup_s")),
            planned_duration_s=finite_number(raw.get("planned_duration_s")),
            planned_requests=_int(raw.get("planned_requests")),
            prefix_cache_reset=_bool(raw.get("prefix_cache_reset")),
            spec_decode_reconciled=_bool(raw.get("spec_decode_reconciled")),
            tokens_reconciled=_bool(raw.get("tokens_reconciled")),
            users_held=finite_number(raw.get("users_held")),
            search_step=_int(raw.get("search_step")),
            search_cut_short=_str(raw.get("search_cut_short")),
            slo=Slo.from_dict(slo) if isinstance(slo, Mapping) else None,
            stop_reason=_str(raw.get("stop_reason")),
            precision_half_width=finite_number(raw.get("precision_half_width")),
            precision_requests=_int(raw.get("precision_requests")),
            verdict=_str(raw.get("verdict")),
            verdict_requests=_int(raw.get("verdict_requests")),
            verdict_ratio=finite_number(raw.get("verdict_ratio")),
            verdict_interval=_interval(raw.get("verdict_interval")),
            verdict_looks=_int(raw.get("verdict_looks")),
            client_lag_p50_s=finite_number(raw.get("client_lag_p50_s")),
            client_lag_p99_s=finite_number(raw.get("client_lag_p99_s")),
            client_lag_max_s=finite_number(raw.get("client_lag_max_s")),
            client_busy_ratio=finite_number(raw.get("client_busy_ratio")),
            client_processes=_int(raw.get("client_processes")),
        )


@dataclass(frozen=True)
class SearchStep:
    level: str | None
    concurrency: int | None
    request_rate: float | None
    attainment: float | None
    held: bool | None
    cut_short: str | None = None

    def load(self, variable: str) -> float | None:
        return self.request_rate if variable == "request_rate" else finite_number(self.concurrency)


@dataclass(frozen=True)
class Search:
    """``--search slo``: the highest load at which the attainment held."""

    variable: str  # concurrency or request_rate
    attainment: float | None
    limit: float | None
    set_by: str | None  # the lowest level that fell short
    limit_level: str | None
    complete: bool
    steps: tuple[SearchStep, ...]
    note: str | None = None

    @classmethod
    def from_dict(cls, raw: Mapping[str, Any]) -> Search:
        limit = finite_number(raw.get("limit"))
        return cls(
            variable=str(raw.get("variable") or "concurrency"),
            attainment=finite_number(raw.get("attainment")),
            limit=limit,
            set_by=_str(raw.get("set_by")),
            limit_level=_str(raw.get("limit_level"))
            or (f"c{limit:g}" if limit is not None else None),
            complete=raw.get("complete", True) is not False,
            steps=tuple(
                SearchStep(
                    _str(st.get("level")),
                    _int(st.get("concurrency")),
                    finite_number(st.get("request_rate")),
                    finite_number(st.get("attainment")),
                    _bool(st.get("held")),
                    _str(st.get("cut_short")),
                )
                for st in raw.get("steps") or ()
                if isinstance(st, Mapping)
            ),
            note=_str(raw.get("note")),
        )


@dataclass(frozen=True)
class Summary:
    """A results directory's ``summary.json``, typed. ``raw``: the dict as read (the
    writers that rewrite it — ``results repair`` — and the search block's readers)."""

    status: str
    variant: str | None
    host: str | None
    model: str | None
    mode: str
    options: Mapping[str, Any]
    levels: tuple[Level, ...]
    server_version: str | None = None
    started_at: str | None = None
    ended_at: str | None = None
    stop_reason: str | None = None
    server_time_scale: float | None = None
    repaired_from: str | None = None  # repair.from_status
    search: Search | None = None
    server_info: Mapping[str, Any] | None = None
    stopping: Stopping | None = None  # --precision/--against (None: none, or an older run)
    path: Path | None = None
    raw: Mapping[str, Any] = field(default_factory=dict, repr=False, compare=False)

    def level(self, name: str) -> Level | None:
        return next((lv for lv in self.levels if lv.name == name), None)

    def level_at(self, concurrency: int) -> Level | None:
        return next((lv for lv in self.levels if lv.concurrency == concurrency), None)

    @property
    def level_names(self) -> list[str]:
        return [lv.name for lv in self.levels]

    @property
    def categories(self) -> list[str]:
        return sorted({c for lv in self.levels for c in lv.categories})

    @property
    def planned_window(self) -> tuple[float | None, float | None, int | None]:
        """(warm-up s, duration s, requests) as planned: the run's options (``--warmup``,
        ``--duration`` — 60 s when neither it nor ``--requests`` was given —, ``--requests``);
        a summary without options: its first level's."""
        from specload.durations import parse_duration  # noqa: PLC0415 (light; core floor)

        def seconds(value: Any) -> float | None:
            if value is None or value == "":
                return None
            try:
                return parse_duration(value)
            except UsageError:
                return None

        if not self.options:
            first = self.levels[0] if self.levels else None
            if first is None:
                return None, None, None
            return first.warmup_s, first.planned_duration_s, first.planned_requests
        requests = self.options.get("requests")
        duration = seconds(self.options.get("duration"))
        if duration is None and requests is None:
            duration = 60.0
        return seconds(self.options.get("warmup")), duration, requests


def from_dict(raw: Mapping[str, Any], path: str | Path | None = None) -> Summary:
    """A summary already in memory (a ``summary.json`` dict)."""
    levels = tuple(Level.from_dict(lv) for lv in raw.get("levels") or () if isinstance(lv, Mapping))
    search = raw.get("search")
    info = raw.get("server_info")
    stopping = raw.get("stopping")
    return Summary(
        status=str(raw.get("status") or "unknown"),
        variant=_str(raw.get("variant")),
        host=_str(raw.get("host")),
        model=_str(raw.get("model")),
        mode=str(raw.get("mode") or "closed"),
        options=dict(_map(raw.get("options"))),
        levels=levels,
        server_version=_str(raw.get("server_version")),
        started_at=_str(raw.get("started_at")),
        ended_at=_str(raw.get("ended_at")),
        stop_reason=_str(raw.get("stop_reason")),
        server_time_scale=finite_number(raw.get("server_time_scale")),
        repaired_from=_str(_map(raw.get("repair")).get("from_status")),
        search=Search.from_dict(search) if isinstance(search, Mapping) and search else None,
        server_info=info if isinstance(info, Mapping) else None,
        stopping=Stopping.from_dict(stopping) if isinstance(stopping, Mapping) else None,
        path=None if path is None else Path(path),
        raw=raw,
    )


def read(path: str | Path) -> Summary:
    """Read a results directory's ``summary.json`` (or the file itself)."""
    from specload.results.writer import read_summary  # noqa: PLC0415 (orjson, only to read)

    p = Path(path)
    return from_dict(read_summary(p), p if p.is_dir() else p.parent)


def as_summary(summary: Summary | Mapping[str, Any]) -> Summary:
    """A :class:`Summary` from itself or from its dict (callers holding the dict)."""
    return summary if isinstance(summary, Summary) else from_dict(summary)
