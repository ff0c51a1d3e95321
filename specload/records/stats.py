"""The one aggregate of request records: every figure specload reports is defined here.

:class:`Stats` summarises any set of :class:`RequestRecord` objects and merges
exactly (counters add, value lists concatenate, histograms merge), so a Locust
master merging its workers' records, ``specload run``'s levels, ``results
repair`` reading ``requests.jsonl`` and the Locust CSV/UI all get the same
numbers from the same records. :meth:`Stats.result` writes them with
``vllm bench serve``'s key names where they overlap (``completed``,
``failed``, ``duration``, ``request_throughput``, ``output_throughput``,
``{mean,median,p90,p99}_{ttft,tpot,itl,e2el}_ms``).

Definitions:

- Per-request figures (TTFT, TTFCT, TPOT, E2E) are exact sample quantiles of
  the completed requests (:func:`specload.histogram.exact_quantile`); ITL is
  per token, from mergeable histograms (within 0.5%).
- Token totals and means are over completed requests, per channel (reasoning,
  content, tool calls) and in all. Failed and unfinished requests are counted by
  class; their tokens are in ``tokens_received``.
- Client minus server (TTFT, ITL): per completed request with the server's own timing
  (:mod:`specload.records.servertiming`), exact sample quantiles (median, p10, p90).
- Throughput is over a window: the tokens that *arrived* inside it (of any
  request, whenever it started or ended: :meth:`RequestRecord.tokens_between`)
  divided by its length, so requests long against the window bias nothing.
  Without a window (plain Locust), the span from the first send to the last
  end of the records, the same span for every category.

:class:`Aggregator` keeps one :class:`Stats` per ``(step, category)``.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from specload.histogram import Histogram, exact_quantile
from specload.records.request import RequestRecord
from specload.records.servertiming import itl_minus_server_s, ttft_minus_server_s
from specload.records.specdecode import SpecTally

# Per-request values kept exactly; the two ITL views are histograms. The client-minus-server
# values (vLLM --enable-per-request-metrics) are kept exactly too.
MINUS_SERVER_NAMES = ("ttft_minus_server", "itl_minus_server")
VALUE_NAMES = ("ttft", "ttfct", "tpot", "e2el", *MINUS_SERVER_NAMES)
# Their quantiles in a level's numbers: the median and its spread.
MINUS_SERVER_STATS = (("median", 0.5), ("p10", 0.1), ("p90", 0.9))
HISTOGRAM_NAMES = ("itl", "itl_chunk")
METRICS = ("ttft", "ttfct", "tpot", "itl", "e2el")
UNFINISHED = "unfinished"

# A completed request "ended inside reasoning" when it hit max_tokens with no answer token.
# Above this share of a level's (or category's) completed requests, the level is flagged
# everywhere: the truncation guard warns (summary.json's warnings, summary.md), ``compare``
# does not compare its content measures (TTFCT), ``baseline export`` warns. One threshold:
# when more than a fifth of the requests never reached their answer, the TTFCT median is the
# median of a selected few, whichever reader shows it.
TRUNCATED_SHARE_LIMIT = 0.2


def truncated_share(truncated: int | None, completed: int | None) -> float | None:
    """The truncated share: completed requests that ended inside reasoning at max_tokens /
    completed (None: nothing completed, or a count unknown). The one definition: the sweep
    writes it (``reasoning_truncated_ratio``), :mod:`specload.results.model` reads it."""
    if truncated is None or not completed:
        return None
    return truncated / completed


# A completed stream "arrived in one burst" (was held back before it reached the client) when
# (1) at least HELD_GAP_SHARE of the gaps between its HELD_MIN_CHUNKS or more token-bearing
# chunks were 0 s (its events read together) and (2) its first to last token took less than
# HELD_SPAN_RATIO of its TTFT: the first token came late and the rest at once, so its TPOT and
# ITL are ~0 and its TTFT holds its decode. Seen on this 2-core VM from vLLM's own front end
# (tests/vllm, two servers or a busy client beside the engine): 198 of 199 gaps 0 s, 0.02 ms
# from first to last token against a TTFT of 0.32 s (a stream that flowed: 0.33 s against
# 0.007 s). A client reading late also reads chunks together (up to 186 of 199 gaps were 0 s
# at a flowing stream's pace: its last token still came 0.33 s after its first), hence (2).
HELD_GAP_SHARE = 0.9
HELD_MIN_CHUNKS = 8
HELD_SPAN_RATIO = 0.1
# Above this share of a level's completed streams arriving in one burst, the level is flagged
# ``streams_held``: its TPOT and ITL are not the server's decode pace, its TTFT holds decode.
HELD_STREAM_LIMIT = 0.1


def stream_held(r: RequestRecord) -> bool:
    """``r`` arrived in one burst (the rule above): the one definition."""
    if r.chunks < HELD_MIN_CHUNKS or r.chunks_coalesced < HELD_GAP_SHARE * (r.chunks - 1):
        return False
    if r.ttft_s is None or r.e2e_s is None:
        return False
    return r.e2e_s - r.ttft_s < HELD_SPAN_RATIO * r.ttft_s


# Channel splits exact enough to state a finished reasoning's length as a fact.
EXACT_SPLITS = frozenset({"exact", "usage-details"})


@dataclass
class Stats:
    """Counts, exact per-request values and ITL histograms of a set of requests."""

    completed: int = 0
    failed: int = 0
    unfinished: int = 0
    errors: Counter[str] = field(default_factory=Counter)
    tokens_reasoning: int = 0
    tokens_content: int = 0
    tokens_tool: int = 0
    tokens_received: int = 0  # every request's tokens, failed and unfinished included
    reasoning_truncated: int = 0
    tokens_estimated: int = 0
    chunks: int = 0
    chunks_coalesced: int = 0
    chunked_tokens: int = 0
    streams_held: int = 0  # completed streams that arrived in one burst (stream_held)
    token_sources: Counter[str] = field(default_factory=Counter)
    first_start_s: float | None = None
    last_end_s: float | None = None
    values: dict[str, list[float]] = field(
        default_factory=lambda: {name: [] for name in VALUE_NAMES}
    )
    itl: Histogram = field(default_factory=Histogram)  # per token
    itl_chunk: Histogram = field(default_factory=Histogram)  # per chunk (raw gaps)
    _sorted: bool = field(default=True, repr=False)
    # The truncation guard's facts, per category: the truncated requests, their budgets
    # ((category, max_tokens) pairs; None: the request set none), the most reasoning one
    # of them showed, and the longest reasoning a completed request finished (an answer
    # or a call after it, with an exact split): what is known, never a guess of how long
    # a cut reasoning would have been.
    truncated_categories: Counter[str] = field(default_factory=Counter)
    truncated_budgets: set[tuple[str, int | None]] = field(default_factory=set)
    truncated_reasoning: dict[str, int] = field(default_factory=dict)
    finished_reasoning: dict[str, int] = field(default_factory=dict)
    spec: SpecTally = field(default_factory=SpecTally)  # completed requests' spec_decode
    # Objectives (--slo): completed requests judged, those meeting all, their output tokens,
    # and per measure the completed requests that missed it.
    slo_judged: int = 0
    slo_met: int = 0
    slo_met_tokens: int = 0
    slo_failing: Counter[str] = field(default_factory=Counter)
    # Open loop: how late each request was sent after it was due (s), every outcome.
    lateness: list[float] = field(default_factory=list, repr=False)
    # Completed requests carrying the server's own timing (vLLM --enable-per-request-metrics).
    server_timed: int = 0

    @property
    def tokens_output(self) -> int:
        return self.tokens_reasoning + self.tokens_content + self.tokens_tool

    @property
    def requests(self) -> int:
        return self.completed + self.failed + self.unfinished

    @property
    def tokens_per_chunk(self) -> float | None:
        return self.chunked_tokens / self.chunks if self.chunks else None

    @property
    def coalesced_share(self) -> float | None:
        """Share of chunk gaps that were 0 s (events read together): per-chunk ITL unreliable."""
        gaps = self.itl_chunk.count
        return self.chunks_coalesced / gaps if gaps else None

    @property
    def coalesced_chunk_share(self) -> float | None:
        """0-s chunk gaps over token-bearing chunks (``coalesced_chunk_share``; the client's
        reads holding several chunks: ``client_saturated`` reads it)."""
        return self.chunks_coalesced / self.chunks if self.chunks else None

    @property
    def held_stream_ratio(self) -> float | None:
        """Completed streams that arrived in one burst (:func:`stream_held`) / completed."""
        return self.streams_held / self.completed if self.completed else None

    @property
    def slo_attainment_ratio(self) -> float | None:
        """Completed requests meeting every objective / completed (None: none judged)."""
        return self.slo_met / self.completed if self.completed and self.slo_judged else None

    @property
    def reasoning_truncated_ratio(self) -> float | None:
        return truncated_share(self.reasoning_truncated, self.completed)

    # -- adding ---------------------------------------------------------------
    def add(self, r: RequestRecord) -> None:
        if r.ok:
            self.completed += 1
        elif r.error_kind == UNFINISHED:
            self.unfinished += 1
        else:
            self.failed += 1
            self.errors[r.error_kind or "unknown"] += 1
        self.tokens_received += r.tokens_output
        if self.first_start_s is None or r.start_s < self.first_start_s:
            self.first_start_s = r.start_s
        if self.last_end_s is None or r.end_s > self.last_end_s:
            self.last_end_s = r.end_s
        if r.scheduled_s is not None:
            self.lateness.append(r.start_s - r.scheduled_s)
        if not r.ok:
            return
        self.tokens_reasoning += r.tokens_reasoning
        self.tokens_content += r.tokens_content
        self.tokens_tool += r.tokens_tool
        self.token_sources[r.token_count_source] += 1
        if r.token_count_source == "chunks-estimate":
            self.tokens_estimated += 1
        if r.chunks:
            self.chunks += r.chunks
            self.chunks_coalesced += r.chunks_coalesced
            self.chunked_tokens += r.tokens_output
            if stream_held(r):
                self.streams_held += 1
        if r.reasoning_truncated:
            self.reasoning_truncated += 1
            self.truncated_categories[r.category] += 1
            self.truncated_budgets.add((r.category, r.max_tokens))
            _keep_max(self.truncated_reasoning, r.category, r.tokens_reasoning)
        elif (
            r.tokens_reasoning > 0
            and r.tokens_content + r.tokens_tool > 0
            and r.channel_split_source in EXACT_SPLITS
        ):
            _keep_max(self.finished_reasoning, r.category, r.tokens_reasoning)
        values = self.values
        if (
            r.server_ttft_s is not None
            or r.server_queue_s is not None
            or r.server_generation_s is not None
            or r.server_itl_s is not None
        ):
            self.server_timed += 1
        for name, value in (
            ("ttft", r.ttft_s),
            ("ttfct", r.ttfct_s),
            ("tpot", r.tpot_s),
            ("e2el", r.e2e_s),
            ("ttft_minus_server", ttft_minus_server_s(r)),
            ("itl_minus_server", itl_minus_server_s(r)),
        ):
            if value is not None:
                values[name].append(value)
        self._sorted = False
        if r.spec_decode is not None:
            self.spec.add(r.spec_decode, r.tokens_output)
        if r.slo_met is not None:
            self.slo_judged += 1
            if r.slo_met:
                self.slo_met += 1
                self.slo_met_tokens += r.tokens_output
            self.slo_failing.update(r.slo_failed or ())
        if r.itl_token_hist is not None:
            self.itl.merge(r.itl_token_hist)
        if r.itl_chunk_hist is not None:
            self.itl_chunk.merge(r.itl_chunk_hist)

    def extend(self, records: Iterable[RequestRecord]) -> None:
        for r in records:
            self.add(r)

    def merge(self, other: Stats) -> None:
        for name in (
            "completed",
            "failed",
            "unfinished",
            "tokens_reasoning",
            "tokens_content",
            "tokens_tool",
            "tokens_received",
            "reasoning_truncated",
            "tokens_estimated",
            "chunks",
            "chunks_coalesced",
            "chunked_tokens",
            "streams_held",
            "slo_judged",
            "slo_met",
            "slo_met_tokens",
            "server_timed",
        ):
            setattr(self, name, getattr(self, name) + getattr(other, name))
        self.errors.update(other.errors)
        self.token_sources.update(other.token_sources)
        self.truncated_categories.update(other.truncated_categories)
        self.truncated_budgets |= other.truncated_budgets
        for category, tokens in other.truncated_reasoning.items():
            _keep_max(self.truncated_reasoning, category, tokens)
        for category, tokens in other.finished_reasoning.items():
            _keep_max(self.finished_reasoning, category, tokens)
        if other.first_start_s is not None and (
            self.first_start_s is None or other.first_start_s < self.first_start_s
        ):
            self.first_start_s = other.first_start_s
        if other.last_end_s is not None and (
            self.last_end_s is None or other.last_end_s > self.last_end_s
        ):
            self.last_end_s = other.last_end_s
        for name in VALUE_NAMES:
            self.values[name].extend(other.values[name])
        self._sorted = False
        self.itl.merge(other.itl)
        self.itl_chunk.merge(other.itl_chunk)
        self.spec.merge(other.spec)
        self.slo_failing.update(other.slo_failing)
        self.lateness.extend(other.lateness)

    # -- reading --------------------------------------------------------------
    def _sorted_values(self) -> dict[str, list[float]]:
        if not self._sorted:
            for v in self.values.values():
                v.sort()
            self._sorted = True
        return self.values

    def quantile(self, metric: str, q: float) -> float | None:
        """Seconds at quantile ``q`` of ``metric`` (``ttft``, ``ttfct``, ``tpot``, ``e2el``,
        ``itl``, ``itl_chunk``)."""
        if metric in HISTOGRAM_NAMES:
            hist: Histogram = getattr(self, metric)
            return hist.quantile(q)
        return exact_quantile(self._sorted_values()[metric], q)

    def mean(self, metric: str) -> float | None:
        if metric in HISTOGRAM_NAMES:
            hist: Histogram = getattr(self, metric)
            return hist.mean
        values = self.values[metric]
        return sum(values) / len(values) if values else None

    @property
    def span_s(self) -> float:
        """From the first send to the last end (seconds; 0 without records)."""
        if self.first_start_s is None or self.last_end_s is None:
            return 0.0
        return max(0.0, self.last_end_s - self.first_start_s)

    def reasoning_needed(self) -> dict[str, int]:
        """Per category with truncated requests, the least its reasoning needs: the most a
        truncated request spent without finishing, or its budget when larger. How much
        more it needs, no truncated request showed."""
        out: dict[str, int] = {}
        for category in self.truncated_categories:
            out[category] = self.truncated_reasoning.get(category, 0)
        for category, budget in self.truncated_budgets:
            if budget is not None:
                _keep_max(out, category, budget)
        return out

    def result(
        self,
        duration_s: float,
        window_tokens: float | None = None,
        objectives: Mapping[str, float] | None = None,
    ) -> dict[str, Any]:
        """The numbers (vLLM-bench style keys; ``None`` where there is nothing to report).

        ``window_tokens``: the tokens that arrived in the ``duration_s`` window; without
        it, throughput is the completed requests' tokens over ``duration_s``.
        ``objectives`` (``--slo``, seconds by measure): goodput and attainment of the
        judged requests (``slo_met`` on the records).
        """
        tokens = self.tokens_output if window_tokens is None else window_tokens
        out: dict[str, Any] = {
            "completed": self.completed,
            "failed": self.failed,
            "unfinished": self.unfinished,
            "duration": duration_s,
            "request_throughput": self.completed / duration_s if duration_s > 0 else None,
            "output_throughput": tokens / duration_s if duration_s > 0 else None,
            "total_output_tokens": self.tokens_output,
            "total_reasoning_tokens": self.tokens_reasoning,
            "total_content_tokens": self.tokens_content,
            "total_tool_tokens": self.tokens_tool,
            "tokens_received": self.tokens_received,
        }
        for metric in METRICS:
            qs = [self.quantile(metric, q) for q in (0.5, 0.9, 0.99)]
            for stat, value in zip(
                ("mean", "median", "p90", "p99"), [self.mean(metric), *qs], strict=True
            ):
                out[f"{stat}_{metric}_ms"] = None if value is None else value * 1000.0
        n = self.completed
        out["mean_output_tokens"] = self.tokens_output / n if n else None
        out["mean_reasoning_tokens"] = self.tokens_reasoning / n if n else None
        out["mean_content_tokens"] = self.tokens_content / n if n else None
        out["mean_tool_tokens"] = self.tokens_tool / n if n else None
        out["reasoning_truncated"] = self.reasoning_truncated
        out["reasoning_truncated_ratio"] = self.reasoning_truncated_ratio
        out["mean_tokens_per_chunk"] = self.tokens_per_chunk
        out["coalesced_chunk_share"] = self.coalesced_chunk_share
        out["streams_held"] = self.streams_held
        out["held_stream_ratio"] = self.held_stream_ratio
        out["tokens_estimated"] = self.tokens_estimated
        out["errors"] = dict(sorted(self.errors.items()))
        out.update(self.minus_server_result())
        out["spec_decode"] = self.spec.result()
        if self.lateness:
            late = sorted(self.lateness)
            for stat, q in (("median", 0.5), ("p99", 0.99)):
                value = exact_quantile(late, q)
                out[f"{stat}_send_lateness_ms"] = None if value is None else value * 1000.0
            out["max_send_lateness_ms"] = late[-1] * 1000.0
        if objectives:
            out.update(self.slo_result(duration_s, objectives))
        return out

    def minus_server_result(self) -> dict[str, Any]:
        """``server_timing_requests`` (completed requests with the server's own timing) and
        the client-minus-server TTFT and ITL (:mod:`specload.records.servertiming`) of those:
        ``{median,p10,p90}_{ttft,itl}_minus_server_ms`` (None: no such request)."""
        out: dict[str, Any] = {"server_timing_requests": self.server_timed}
        for name in MINUS_SERVER_NAMES:
            for stat, q in MINUS_SERVER_STATS:
                value = self.quantile(name, q)
                out[f"{stat}_{name}_ms"] = None if value is None else value * 1000.0
        return out

    def slo_result(self, duration_s: float, objectives: Mapping[str, float]) -> dict[str, Any]:
        """``request_goodput`` (requests/s meeting every objective), ``output_goodput``
        (their output tokens/s), ``slo_attainment_ratio`` (their share of the completed
        requests) and ``slo`` (the objectives; per measure, the share that missed it)."""
        n = self.completed
        judged = self.slo_judged
        return {
            "request_goodput": self.slo_met / duration_s if duration_s > 0 else None,
            "output_goodput": self.slo_met_tokens / duration_s if duration_s > 0 else None,
            "slo_attainment_ratio": self.slo_attainment_ratio,
            "slo": {
                "objectives_s": dict(objectives),
                "failing_ratio": {
                    k: (self.slo_failing.get(k, 0) / n if n and judged else None)
                    for k in objectives
                },
            },
        }


def _keep_max(values: dict[str, int], key: str, value: int) -> None:
    if value > values.get(key, -1):
        values[key] = value


class Aggregator:
    """One :class:`Stats` per ``(step, category)``; feed records with :meth:`add`."""

    def __init__(self) -> None:
        self.stats: dict[tuple[str, str], Stats] = {}

    def add(self, record: RequestRecord) -> None:
        key = (record.step, record.category)
        s = self.stats.get(key)
        if s is None:
            s = self.stats[key] = Stats()
        s.add(record)

    def extend(self, records: Iterable[RequestRecord]) -> None:
        for r in records:
            self.add(r)

    def total(self, step: str | None = None, category: str | None = None) -> Stats:
        """Merged stats of every key matching ``step`` and ``category`` (None: any)."""
        out = Stats()
        for (s, c), stats in self.stats.items():
            if (step is None or s == step) and (category is None or c == category):
                out.merge(stats)
        return out

    @property
    def steps(self) -> list[str]:
        return sorted({s for s, _ in self.stats})

    @property
    def categories(self) -> list[str]:
        return sorted({c for _, c in self.stats})

    def step_result(self, step: str) -> dict[str, Any]:
        """A step's numbers with a ``categories`` part, over the step's span (no window):
        every category divided by the same span, so categories sum to the whole."""
        whole = self.total(step=step)
        span = whole.span_s
        out = whole.result(span)
        out["categories"] = {
            c: s.result(span) for (st, c), s in sorted(self.stats.items()) if st == step
        }
        return out
