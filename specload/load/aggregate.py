"""Aggregates of request records, mergeable exactly (counters add, histograms merge).

:class:`Stats` summarises any set of records; :class:`Aggregator` keeps one
:class:`Stats` per ``(step, category)`` and answers totals over any subset.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from specload.histogram import Histogram
from specload.load.records import RequestRecord

HISTOGRAM_NAMES = ("ttft", "ttfct", "tpot", "e2e", "itl", "itl_chunk")


@dataclass
class Stats:
    """Counts and latency histograms (seconds) of a set of requests."""

    completed: int = 0
    failed: int = 0
    errors: Counter[str] = field(default_factory=Counter)
    tokens_reasoning: int = 0
    tokens_content: int = 0
    reasoning_truncated: int = 0
    chunks: int = 0
    chunks_coalesced: int = 0
    token_sources: Counter[str] = field(default_factory=Counter)
    first_start_s: float | None = None
    last_end_s: float | None = None
    ttft: Histogram = field(default_factory=Histogram)
    ttfct: Histogram = field(default_factory=Histogram)
    tpot: Histogram = field(default_factory=Histogram)
    e2e: Histogram = field(default_factory=Histogram)
    itl: Histogram = field(default_factory=Histogram)  # per token
    itl_chunk: Histogram = field(default_factory=Histogram)  # per chunk (raw gaps)

    @property
    def tokens_output(self) -> int:
        return self.tokens_reasoning + self.tokens_content

    @property
    def requests(self) -> int:
        return self.completed + self.failed

    @property
    def tokens_per_chunk(self) -> float | None:
        return self.tokens_output / self.chunks if self.chunks else None

    @property
    def coalesced_share(self) -> float | None:
        """Share of chunk gaps that were 0 s (events read together): per-chunk ITL unreliable."""
        gaps = self.itl_chunk.count
        return self.chunks_coalesced / gaps if gaps else None

    def add(self, r: RequestRecord) -> None:
        if r.ok:
            self.completed += 1
        else:
            self.failed += 1
            self.errors[r.error_kind or "unknown"] += 1
        # Tokens received count even for failed requests (the server generated them).
        self.tokens_reasoning += r.tokens_reasoning
        self.tokens_content += r.tokens_content
        self.chunks += r.chunks
        self.chunks_coalesced += r.chunks_coalesced
        if r.reasoning_truncated:
            self.reasoning_truncated += 1
        self.token_sources[r.token_count_source] += 1
        if self.first_start_s is None or r.start_s < self.first_start_s:
            self.first_start_s = r.start_s
        if self.last_end_s is None or r.end_s > self.last_end_s:
            self.last_end_s = r.end_s
        if not r.ok:
            return
        if r.ttft_s is not None:
            self.ttft.add(r.ttft_s)
        if r.ttfct_s is not None:
            self.ttfct.add(r.ttfct_s)
        if r.tpot_s is not None:
            self.tpot.add(r.tpot_s)
        if r.e2e_s is not None:
            self.e2e.add(r.e2e_s)
        if r.itl_token_hist is not None:
            self.itl.merge(r.itl_token_hist)
        if r.itl_chunk_hist is not None:
            self.itl_chunk.merge(r.itl_chunk_hist)

    def merge(self, other: Stats) -> None:
        self.completed += other.completed
        self.failed += other.failed
        self.errors.update(other.errors)
        self.tokens_reasoning += other.tokens_reasoning
        self.tokens_content += other.tokens_content
        self.reasoning_truncated += other.reasoning_truncated
        self.chunks += other.chunks
        self.chunks_coalesced += other.chunks_coalesced
        self.token_sources.update(other.token_sources)
        if other.first_start_s is not None and (
            self.first_start_s is None or other.first_start_s < self.first_start_s
        ):
            self.first_start_s = other.first_start_s
        if other.last_end_s is not None and (
            self.last_end_s is None or other.last_end_s > self.last_end_s
        ):
            self.last_end_s = other.last_end_s
        for name in HISTOGRAM_NAMES:
            getattr(self, name).merge(getattr(other, name))

    def to_dict(self) -> dict[str, Any]:
        d: dict[str, Any] = {
            "completed": self.completed,
            "failed": self.failed,
            "errors": dict(self.errors),
            "tokens_reasoning": self.tokens_reasoning,
            "tokens_content": self.tokens_content,
            "reasoning_truncated": self.reasoning_truncated,
            "chunks": self.chunks,
            "chunks_coalesced": self.chunks_coalesced,
            "token_sources": dict(self.token_sources),
            "first_start_s": self.first_start_s,
            "last_end_s": self.last_end_s,
        }
        for name in HISTOGRAM_NAMES:
            d[name] = getattr(self, name).to_dict()
        return d

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> Stats:
        s = cls(
            completed=int(d["completed"]),
            failed=int(d["failed"]),
            errors=Counter(d["errors"]),
            tokens_reasoning=int(d["tokens_reasoning"]),
            tokens_content=int(d["tokens_content"]),
            reasoning_truncated=int(d["reasoning_truncated"]),
            chunks=int(d["chunks"]),
            chunks_coalesced=int(d["chunks_coalesced"]),
            token_sources=Counter(d["token_sources"]),
            first_start_s=d["first_start_s"],
            last_end_s=d["last_end_s"],
        )
        for name in HISTOGRAM_NAMES:
            setattr(s, name, Histogram.from_dict(d[name]))
        return s


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
