"""The per-request record: what one chat request measured."""

from __future__ import annotations

from dataclasses import dataclass, field, fields
from typing import Any

from specload.histogram import Histogram

# Where a record's token counts came from, best first.
TOKEN_SOURCES = ("exact", "usage", "tokenizer", "chunks-estimate")

# Error classes (``error_kind``); HTTP statuses appear as ``http_<code>``.
# ``malformed_usage``: a usage object or token count the meter cannot believe;
# ``unfinished``: still in flight at the drain deadline (partial tokens kept);
# ``client_error``: a fault inside specload's own meter (never the target's);
# ``bad_request``: a request whose body could not be built, never sent (the prompt loaders
# refuse what cannot be sent: only a bug, or a model name the server gave, gets there);
# ``content_encoding``: a 2xx answer with a content coding (gzip...), never asked for;
# ``content_type``: a 2xx answer that is not text/event-stream (streamed) or JSON;
# ``server_error``: the server's own error event inside the stream (or a 2xx error object),
# its message the detail.
ERROR_KINDS = (
    "refused",
    "reset",
    "timeout",
    "malformed",
    "malformed_usage",
    "server_error",
    "no_done",
    "protocol",
    "content_type",
    "content_encoding",
    "unfinished",
    "client_error",
    "bad_request",
    "http_<code>",
)

# Fields of the token ids (``--record-token-ids``), kept out of requests.jsonl.
TOKEN_ID_FIELDS = frozenset({"prompt_ids", "output_ids", "content_start"})

# Spacing (s) of the token-arrival samples a record keeps (``arrivals``).
ARRIVAL_SAMPLE_S = 0.5


@dataclass(slots=True)
class RequestRecord:
    """One request, as measured by the client. Times in seconds.

    Output tokens come in three channels: ``tokens_reasoning``, ``tokens_content``
    (the answer's text) and ``tokens_tool`` (tool calls: their function names and
    argument fragments); ``tokens_output`` is their sum.
    ``ttft_s``: first token of any channel; ``ttfct_s``: first content token
    (after reasoning); ``tpot_s = (e2e_s - ttft_s) / (tokens_output - 1)``, ``e2e_s``
    ending at the last token of any channel.
    ``token_count_source``: ``exact`` (cumulative usage on every chunk),
    ``usage`` (final usage), ``tokenizer`` (local tokenizer on the text) or
    ``chunks-estimate`` (chunks counted — an estimate). ``channel_split_source``
    says how reasoning/content were told apart (same values, plus
    ``single-channel`` and ``usage-details``). ``step`` is the step in force
    when the request *started*. ``itl_*_hist`` are per-request histograms
    (per token: each gap divided by the tokens its chunk carried; per chunk:
    raw gaps) and are not part of :meth:`to_dict` unless asked.
    """

    category: str
    step: str
    variant: str
    model: str
    start_s: float  # wall clock (time.time) at send
    end_s: float  # wall clock at the end (last byte, or the error)
    ok: bool = False
    error_kind: str | None = None
    error_detail: str | None = None
    http_status: int | None = None
    stream: bool = True
    max_tokens: int | None = None
    ttft_s: float | None = None
    ttfct_s: float | None = None
    e2e_s: float | None = None
    tpot_s: float | None = None
    tokens_reasoning: int = 0
    tokens_content: int = 0
    tokens_tool: int = 0
    tokens_output: int = 0
    prompt_tokens: int | None = None
    chunks: int = 0  # chunks carrying at least one token
    chunks_coalesced: int = 0  # chunk gaps of exactly 0 s (several events in one socket read)
    finish_reason: str | None = None
    reasoning_truncated: bool = False
    token_count_source: str = "exact"
    channel_split_source: str = "exact"
    worker: str = ""
    # Token arrivals: ``[offset_s, cumulative_tokens]`` pairs, offsets from ``start_s``:
    # the first token-bearing chunk, then about one pair per ARRIVAL_SAMPLE_S, then the
    # last chunk. Window throughput counts the tokens that arrived inside the window.
    arrivals: list[list[float]] | None = None
    itl_token_hist: Histogram | None = field(default=None, repr=False)
    itl_chunk_hist: Histogram | None = field(default=None, repr=False)
    # Token ids (``--record-token-ids``; None otherwise or when the server sent none):
    # the prompt's, the output's, and how many output ids came before the first chunk of
    # the answer, content or tool calls (None: no answer). Not part of :meth:`to_dict`
    # unless asked (tokens.jsonl).
    # Speculative decoding (specload.records.specdecode): the server's per-request counts,
    # split by channel where known; None when the server sent none.
    spec_decode: dict[str, Any] | None = None
    # The server's own timing of the request (vLLM --enable-per-request-metrics: the
    # ``metrics`` of the last chunk or the response; specload.records.servertiming), seconds:
    # first token - scheduled (the queue is not in it), scheduled - queued, last - first
    # token, and that over (tokens - 1). None: the server did not send it.
    server_ttft_s: float | None = None
    server_queue_s: float | None = None
    server_generation_s: float | None = None
    server_itl_s: float | None = None
    # Service-level objectives (``--slo``, specload.slo): whether the request met every one,
    # and the measures it missed; None without objectives.
    slo_met: bool | None = None
    slo_failed: list[str] | None = None
    # Open loop: when the request was due (wall clock, like start_s); start_s - scheduled_s
    # is how late it was sent. None in a closed loop.
    scheduled_s: float | None = None
    prompt_ids: list[int] | None = field(default=None, repr=False)
    output_ids: list[int] | None = field(default=None, repr=False)
    content_start: int | None = None

    @property
    def tokens_per_chunk(self) -> float | None:
        return self.tokens_output / self.chunks if self.chunks else None

    @property
    def itl_token_median_s(self) -> float | None:
        return self.itl_token_hist.quantile(0.5) if self.itl_token_hist else None

    def tokens_between(self, lo_s: float, hi_s: float) -> float:
        """Output tokens that arrived in ``[lo_s, hi_s]`` (wall clock, like ``start_s``).

        Read from :attr:`arrivals` (linear between samples; a chunk's tokens arrive at
        its time); without them, the first token at TTFT and the rest evenly until E2E.
        """
        if hi_s <= lo_s:
            return 0.0
        return self._tokens_until(hi_s) - self._tokens_until(lo_s)

    def _tokens_until(self, t_s: float) -> float:
        points = self.arrivals
        if not points:
            total = self.tokens_output
            if total <= 0 or self.e2e_s is None:
                return 0.0
            first = self.ttft_s if self.ttft_s is not None else self.e2e_s
            points = [[first, 1.0 if total > 1 else float(total)], [self.e2e_s, float(total)]]
        offset = t_s - self.start_s
        if offset < points[0][0]:
            return 0.0
        if offset >= points[-1][0]:
            return float(points[-1][1])
        lo, hi = 0, len(points) - 1  # points[lo][0] <= offset < points[hi][0]
        while hi - lo > 1:
            mid = (lo + hi) // 2
            if points[mid][0] <= offset:
                lo = mid
            else:
                hi = mid
        (t0, c0), (t1, c1) = points[lo], points[hi]
        return float(c0 + (c1 - c0) * (offset - t0) / (t1 - t0)) if t1 > t0 else float(c1)

    def to_dict(
        self, *, include_histograms: bool = False, include_token_ids: bool = False
    ) -> dict[str, Any]:
        """Plain data (JSON-ready). Histograms go as :meth:`Histogram.to_dict` if asked;
        the token ids (``prompt_ids``, ``output_ids``, ``content_start``) only if asked
        (the worker -> master message carries them; ``requests.jsonl`` does not)."""
        out: dict[str, Any] = {}
        for f in fields(self):
            value = getattr(self, f.name)
            if isinstance(value, Histogram) or f.name in ("itl_token_hist", "itl_chunk_hist"):
                if include_histograms and value is not None:
                    out[f.name] = value.to_dict()
                continue
            if f.name in TOKEN_ID_FIELDS and not include_token_ids:
                continue
            out[f.name] = value
        return out

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> RequestRecord:
        known = {f.name for f in fields(cls)}
        kwargs = {k: v for k, v in data.items() if k in known}
        for name in ("itl_token_hist", "itl_chunk_hist"):
            if kwargs.get(name) is not None:
                kwargs[name] = Histogram.from_dict(kwargs[name])
        return cls(**kwargs)
