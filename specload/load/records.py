"""The per-request record: what one chat request measured."""

from __future__ import annotations

from dataclasses import dataclass, field, fields
from typing import Any

from specload.histogram import Histogram

# Where a record's token counts came from, best first.
TOKEN_SOURCES = ("exact", "usage", "tokenizer", "chunks-estimate")

# Error classes (``error_kind``); HTTP statuses appear as ``http_<code>``.
ERROR_KINDS = ("refused", "reset", "timeout", "malformed", "no_done", "protocol", "http_<code>")


@dataclass(slots=True)
class RequestRecord:
    """One request, as measured by the client. Times in seconds.

    ``ttft_s``: first token of any channel; ``ttfct_s``: first content token
    (after reasoning); ``tpot_s = (e2e_s - ttft_s) / (tokens_output - 1)``.
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
    tokens_output: int = 0
    prompt_tokens: int | None = None
    chunks: int = 0  # chunks carrying at least one token
    chunks_coalesced: int = 0  # chunk gaps of exactly 0 s (several events in one socket read)
    finish_reason: str | None = None
    reasoning_truncated: bool = False
    token_count_source: str = "exact"
    channel_split_source: str = "exact"
    worker: str = ""
    itl_token_hist: Histogram | None = field(default=None, repr=False)
    itl_chunk_hist: Histogram | None = field(default=None, repr=False)

    @property
    def tokens_per_chunk(self) -> float | None:
        return self.tokens_output / self.chunks if self.chunks else None

    @property
    def itl_token_median_s(self) -> float | None:
        return self.itl_token_hist.quantile(0.5) if self.itl_token_hist else None

    def to_dict(self, *, include_histograms: bool = False) -> dict[str, Any]:
        """Plain data (JSON-ready). Histograms go as :meth:`Histogram.to_dict` if asked."""
        out: dict[str, Any] = {}
        for f in fields(self):
            value = getattr(self, f.name)
            if isinstance(value, Histogram) or f.name in ("itl_token_hist", "itl_chunk_hist"):
                if include_histograms and value is not None:
                    out[f.name] = value.to_dict()
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

