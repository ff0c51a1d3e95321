"""Client metrics on ``/metrics``, served by the master (or the single process).

Every family is built fresh on each scrape from counts kept here (fed with
:meth:`ClientMetrics.observe` for every completed request), labelled with
``variant``, ``model``, ``category`` and ``step``; the backoffs of users whose requests
failed come with :meth:`ClientMetrics.observe_backoff`. Bucket boundaries:
:data:`specload.histogram.LATENCY_BUCKETS_S` for TTFT, TTFCT and E2E,
:data:`specload.histogram.ITL_BUCKETS_S` for TPOT and ITL.
"""

from __future__ import annotations

import logging
from collections import defaultdict
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

from prometheus_client import CollectorRegistry, start_http_server
from prometheus_client.core import (
    CounterMetricFamily,
    GaugeMetricFamily,
    HistogramMetricFamily,
    Metric,
)

from specload.errors import UsageError
from specload.histogram import ITL_BUCKETS_S, LATENCY_BUCKETS_S, BucketCounts
from specload.records.clientload import ClientLoadFigures
from specload.records.request import ERROR_KINDS, RequestRecord
from specload.records.servertiming import itl_minus_server_s, ttft_minus_server_s
from specload.records.stats import stream_held

#: Error classes with a fixed name (HTTP statuses are ``http_<code>``, created on use).
FIXED_ERROR_KINDS = tuple(k for k in ERROR_KINDS if not k.startswith("http_") and k != "unfinished")

log = logging.getLogger(__name__)

LABELS = ("variant", "model", "category", "step")
SPEC_CHANNELS = ("reasoning", "content", "unknown")
_LATENCY = ("ttft", "ttfct", "e2e")
_PER_TOKEN = ("tpot", "itl")
# Client minus server (vLLM --enable-per-request-metrics; specload.records.servertiming):
# tens of microseconds to a second, either sign (the ITL's can be a little negative).
MINUS_SERVER_BUCKETS_S: tuple[float, ...] = (
    -0.01,
    -0.001,
    -0.0001,
    0.0,
    0.00005,
    0.0001,
    0.00025,
    0.0005,
    0.001,
    0.0025,
    0.005,
    0.01,
    0.025,
    0.05,
    0.1,
    0.25,
    0.5,
    1.0,
)
_MINUS_SERVER = ("ttft_minus_server", "itl_minus_server")
ClientLoadSource = Callable[[str], ClientLoadFigures | None]


@dataclass
class _Series:
    hists: dict[str, BucketCounts] = field(
        default_factory=lambda: {
            **{n: BucketCounts(LATENCY_BUCKETS_S) for n in _LATENCY},
            **{n: BucketCounts(ITL_BUCKETS_S) for n in _PER_TOKEN},
            **{n: BucketCounts(MINUS_SERVER_BUCKETS_S) for n in _MINUS_SERVER},
        }
    )
    tokens: dict[str, int] = field(
        default_factory=lambda: {"reasoning": 0, "content": 0, "tool": 0}
    )
    outcomes: dict[str, int] = field(default_factory=lambda: {"ok": 0, "failed": 0})
    errors: dict[str, int] = field(default_factory=lambda: defaultdict(int))
    truncated: int = 0
    chunks: int = 0
    coalesced: int = 0
    held: int = 0  # completed streams that arrived in one burst (stats.stream_held)
    backoffs: int = 0
    backoff_s: float = 0.0
    # Speculative decoding by channel (reasoning, content, unknown): [drafts, draft
    # tokens, accepted tokens], from the server's per-request counts; None: none seen.
    spec: dict[str, list[int]] | None = None
    # Objectives (--slo): completed requests judged, meeting all, and missing each measure.
    slo_judged: int = 0
    slo_met: int = 0
    slo_failing: dict[str, int] = field(default_factory=lambda: defaultdict(int))


class ClientMetrics:
    """A Prometheus collector of the client's view (a ``collect()`` per scrape)."""

    def __init__(
        self,
        users: Callable[[], int] = lambda: 0,
        lost_requests: Callable[[], int] = lambda: 0,
        objectives: Callable[[], tuple[str, ...]] = tuple,
    ) -> None:
        self._series: dict[tuple[str, str, str, str], _Series] = {}
        self._users = users
        self._lost = lost_requests
        self._objectives = objectives  # the --slo measures, in order
        # --precision: (variant, step, metric) -> the half-width of the level's interval at
        # its last look, a ratio of the estimate (the sweep sets it; its levels bound it).
        self._precision: dict[tuple[str, str, str], float] = {}
        # The client's own lag and CPU per step (specload.load.lag), when wired.
        self._client_load: ClientLoadSource | None = None
        self._client_steps: Callable[[], list[str]] = list
        self._client_variant = ""

    def set_client_load(
        self, source: ClientLoadSource, steps: Callable[[], list[str]], variant: str = ""
    ) -> None:
        """Where the client's lag and busy share per step come from (the process's book)."""
        self._client_load = source
        self._client_steps = steps
        self._client_variant = variant

    def set_precision(self, variant: str, step: str, metric: str, half_width: float) -> None:
        """The sweep's latest look at a level's precision (``specload run --precision``)."""
        self._precision[(variant, step, metric)] = half_width

    def _get(self, r: RequestRecord) -> _Series:
        key = (r.variant, r.model, r.category, r.step)
        s = self._series.get(key)
        if s is None:
            s = self._series[key] = _Series()
        return s

    def observe_backoff(self, r: RequestRecord, seconds: float) -> None:
        """A user waits ``seconds`` after the failed request ``r`` (its labels)."""
        self.observe_backoff_at((r.variant, r.model, r.category, r.step), seconds)

    def observe_backoff_at(self, labels: tuple[str, str, str, str], seconds: float) -> None:
        """The same, by the request's ``(variant, model, category, step)``: a worker's
        backoffs reach the master this way (``RecordsMessage.backoffs``)."""
        s = self._series.get(labels)
        if s is None:
            s = self._series[labels] = _Series()
        s.backoffs += 1
        s.backoff_s += seconds

    def observe(self, r: RequestRecord) -> None:
        s = self._get(r)
        s.tokens["reasoning"] += r.tokens_reasoning
        s.tokens["content"] += r.tokens_content
        s.tokens["tool"] += r.tokens_tool
        s.chunks += r.chunks
        s.coalesced += r.chunks_coalesced
        if r.ok:
            s.outcomes["ok"] += 1
            if stream_held(r):
                s.held += 1
            h = s.hists
            if r.ttft_s is not None:
                h["ttft"].add(r.ttft_s)
            if r.ttfct_s is not None:
                h["ttfct"].add(r.ttfct_s)
            if r.e2e_s is not None:
                h["e2e"].add(r.e2e_s)
            if r.tpot_s is not None:
                h["tpot"].add(r.tpot_s)
            gap = ttft_minus_server_s(r)
            if gap is not None:
                h["ttft_minus_server"].add(gap)
            gap = itl_minus_server_s(r)
            if gap is not None:
                h["itl_minus_server"].add(gap)
            if r.itl_token_hist is not None:
                itl = h["itl"]
                for value, count in r.itl_token_hist.buckets():
                    itl.add(value, count)
            sd = r.spec_decode
            if sd is not None and sd.get("source") == "server" and sd.get("error") is None:
                _add_spec(s, sd)
            if r.slo_met is not None:
                s.slo_judged += 1
                s.slo_met += bool(r.slo_met)
                for key in r.slo_failed or ():
                    s.slo_failing[key] += 1
        elif r.error_kind == "unfinished":
            # Stopped by the run, not failed by the target: its own outcome, not an error.
            s.outcomes["unfinished"] = s.outcomes.get("unfinished", 0) + 1
        else:
            s.outcomes["failed"] += 1
            s.errors[r.error_kind or "unknown"] += 1
        if r.reasoning_truncated:
            s.truncated += 1

    def describe(self) -> list[Metric]:
        return []

    def collect(self) -> Iterator[Metric]:
        hist_help = {
            "ttft": "Time to first token of any channel (reasoning or content).",
            "ttfct": "Time to first content token (after reasoning).",
            "e2e": "End-to-end request latency.",
            "tpot": "Time per output token: (e2e - ttft) / (output tokens - 1), per request.",
            "itl": "Inter-token latency per token: each chunk gap divided by its tokens.",
            "ttft_minus_server": "Client TTFT minus the server's queue time and TTFT (vLLM "
            "--enable-per-request-metrics): network, HTTP front end and client, per request.",
            "itl_minus_server": "Client TPOT minus the server's mean ITL (vLLM "
            "--enable-per-request-metrics), per request.",
        }
        for name, doc in hist_help.items():
            fam = HistogramMetricFamily(f"specload_client_{name}_seconds", doc, labels=LABELS)
            for key, s in self._series.items():
                b = s.hists[name]
                if b.count or name not in _MINUS_SERVER:  # those: only with server timing
                    fam.add_metric(list(key), b.cumulative(), b.sum)
            yield fam
        tok = CounterMetricFamily(
            "specload_client_output_tokens",
            "Output tokens received, by channel (reasoning, content, tool calls).",
            labels=(*LABELS, "channel"),
        )
        req = CounterMetricFamily(
            "specload_client_requests",
            "Requests finished, by outcome (ok, failed, unfinished: stopped by the run).",
            labels=(*LABELS, "outcome"),
        )
        err = CounterMetricFamily(
            "specload_client_errors", "Failed requests by error class.", labels=(*LABELS, "kind")
        )
        trunc = CounterMetricFamily(
            "specload_client_reasoning_truncated",
            "Requests that hit their token limit with zero content tokens.",
            labels=LABELS,
        )
        chunks = CounterMetricFamily(
            "specload_client_chunks",
            "Stream chunks carrying tokens (tokens per chunk = output tokens / chunks).",
            labels=LABELS,
        )
        coalesced = CounterMetricFamily(
            "specload_client_coalesced_chunk_gaps",
            "Gaps between chunks of 0 s (several events "
            "read at once): there, per-chunk ITL is not measurable (TPOT is).",
            labels=LABELS,
        )
        held = CounterMetricFamily(
            "specload_client_streams_held",
            "Completed streams that arrived in one burst (held back before the client: chunks "
            "read together, first to last token under a tenth of TTFT): their TPOT and ITL "
            "are not the decode pace.",
            labels=LABELS,
        )
        backoffs = CounterMetricFamily(
            "specload_client_backoffs",
            "Waits of users after a failed request (backoff, "
            "Retry-After), labelled as that request.",
            labels=LABELS,
        )
        backoff_s = CounterMetricFamily(
            "specload_client_backoff_seconds",
            "Time users waited after failed requests "
            "(backoff, Retry-After), labelled as the request before the wait.",
            labels=LABELS,
        )
        spec_help = {
            "drafts": "Verify steps (steps with draft tokens), from the server's per-request "
            "counts; channel: where the step's first token went (unknown: split not known).",
            "draft_tokens": "Draft tokens proposed, from the server's per-request counts.",
            "accepted_tokens": "Draft tokens accepted, from the server's per-request counts.",
        }
        spec_fams = [
            CounterMetricFamily(
                f"specload_client_spec_decode_{n}", doc, labels=(*LABELS, "channel")
            )
            for n, doc in spec_help.items()
        ]
        objectives = self._objectives()
        slo_labels = (*LABELS, "objective")
        slo_met = CounterMetricFamily(
            "specload_client_slo_met_requests",
            "Completed requests that met an objective (--slo; objective=all: every one).",
            labels=slo_labels,
        )
        slo_ratio = GaugeMetricFamily(
            "specload_client_slo_attainment_ratio",
            "Share of the completed requests since the start that met an objective "
            "(objective=all: every one); rates: the recording rules.",
            labels=slo_labels,
        )
        for key, s in self._series.items():
            labels = list(key)
            if objectives and s.slo_judged:
                met = {"all": s.slo_met} | {k: s.slo_judged - s.slo_failing[k] for k in objectives}
                for objective, n in met.items():
                    slo_met.add_metric([*labels, objective], n)
                    slo_ratio.add_metric([*labels, objective], n / s.slo_judged)
            for channel, counts in (s.spec or {}).items():
                for spec_fam, n in zip(spec_fams, counts, strict=True):
                    spec_fam.add_metric([*labels, channel], n)
            coalesced.add_metric(labels, s.coalesced)
            held.add_metric(labels, s.held)
            backoffs.add_metric(labels, s.backoffs)
            backoff_s.add_metric(labels, s.backoff_s)
            for channel, n in s.tokens.items():
                tok.add_metric([*labels, channel], n)
            for outcome, n in s.outcomes.items():
                req.add_metric([*labels, outcome], n)
            # The fixed error classes exist from the first scrape at 0, so the first
            # error of a kind is a visible increase to rate()/increase().
            errors = dict.fromkeys(FIXED_ERROR_KINDS, 0) | dict(s.errors)
            for kind, n in sorted(errors.items()):
                err.add_metric([*labels, kind], n)
            trunc.add_metric(labels, s.truncated)
            chunks.add_metric(labels, s.chunks)
        yield from (tok, req, err, trunc, chunks, coalesced, held, backoffs, backoff_s)
        yield from spec_fams
        yield from (slo_met, slo_ratio)
        yield GaugeMetricFamily(
            "specload_client_users", "Locust users running.", value=self._users()
        )
        if self._precision:
            precision = GaugeMetricFamily(
                "specload_client_precision_half_width_ratio",
                "Half-width of the 95% interval of the level's median (--precision-metric) "
                "over the median, at the sweep's last look (--precision).",
                labels=("variant", "step", "metric"),
            )
            for (variant, step, metric), value in sorted(self._precision.items()):
                precision.add_metric([variant, step, metric], value)
            yield precision
        yield from self._client_load_families()
        yield CounterMetricFamily(
            "specload_client_requests_lost",
            "Requests started on workers that went missing, never reported.",
            value=self._lost(),
        )

    def _client_load_families(self) -> Iterator[Metric]:
        """The client's own lag and busy share per step (its processes merged)."""
        source = self._client_load
        if source is None:
            return
        labels = ("variant", "step")
        lag = GaugeMetricFamily(
            "specload_client_lag_p99_seconds",
            "p99 of how late the client's event loop woke (every load process merged), "
            "over the step so far.",
            labels=labels,
        )
        busy = GaugeMetricFamily(
            "specload_client_busy_ratio",
            "CPU time (user + system) over wall time of the busiest load process, over the "
            "step so far (1: a whole core).",
            labels=labels,
        )
        for step in self._client_steps():
            figures = source(step)
            if figures is None:
                continue
            key = [self._client_variant, step]
            if figures.lag_p99_s is not None:
                lag.add_metric(key, figures.lag_p99_s)
            if figures.busy_ratio is not None:
                busy.add_metric(key, figures.busy_ratio)
        yield from (lag, busy)


def _add_spec(s: _Series, sd: dict[str, Any]) -> None:
    spec = s.spec
    if spec is None:
        spec = s.spec = {c: [0, 0, 0] for c in SPEC_CHANNELS}
    parts = [(c, sd[c]) for c in ("reasoning", "content") if isinstance(sd.get(c), dict)]
    if not parts:
        parts = [("unknown", sd)]
    for channel, part in parts:
        tally = spec[channel]
        for i, key in enumerate(("drafts", "draft_tokens", "accepted_tokens")):
            tally[i] += int(part.get(key) or 0)


def parse_address(text: str) -> tuple[str, int] | None:
    """``HOST:PORT``, ``:PORT`` or ``PORT`` (loopback) -> (host, port); ``off``/empty -> None."""
    t = text.strip()
    if t.lower() in ("", "off", "none", "0"):
        return None
    host, sep, port = t.rpartition(":")
    if not sep:
        host, port = "127.0.0.1", t
    host = host.strip("[]") or "127.0.0.1"  # loopback unless told: 0.0.0.0:PORT
    try:
        number = int(port)
    except ValueError:
        raise UsageError(f"--metrics-address: {text!r} is not HOST:PORT") from None
    if not 0 <= number <= 65535:
        raise UsageError(f"--metrics-address: port {number} out of range")
    return host, number


def serve(metrics: ClientMetrics, address: tuple[str, int]) -> tuple[Any, int]:
    """Serve ``metrics`` on ``address`` in a background thread; return (server, port)."""
    registry = CollectorRegistry(auto_describe=False)
    registry.register(metrics)
    server, _thread = start_http_server(address[1], addr=address[0], registry=registry)
    return server, int(server.server_address[1])
