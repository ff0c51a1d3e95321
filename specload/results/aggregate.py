"""Per-request records → a level's numbers (and the same per category).

Keys follow ``vllm bench serve`` where they overlap (``completed``, ``failed``,
``duration``, ``request_throughput``, ``output_throughput``,
``{mean,median,p90,p99}_{ttft,tpot,itl,e2el}_ms``); percentiles come from
:mod:`specload.histogram`, the one implementation. Records arrive one at a
time (live progress reads the same aggregate) and are plain mappings, the
JSON form written to ``requests.jsonl``; :class:`RecordView` is the one place
that knows their field names.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from specload.histogram import Histogram

METRICS = ("ttft", "ttfct", "tpot", "itl", "e2el")


def _num(value: Any) -> float | None:
    if isinstance(value, bool) or value is None:
        return None
    if isinstance(value, int | float):
        return float(value)
    return None


class RecordView:
    """Typed access to one request record (the ``requests.jsonl`` form)."""

    __slots__ = ("raw",)

    def __init__(self, raw: Mapping[str, Any]) -> None:
        self.raw = raw

    @property
    def step(self) -> str:
        return str(self.raw.get("step") or "")

    @property
    def category(self) -> str:
        return str(self.raw.get("category") or "default")

    @property
    def error(self) -> str | None:
        """The error class when the request failed (``refused``, ``http_503``…), else None."""
        err = self.raw.get("error_kind")
        ok = self.raw.get("ok")
        if ok is False or (ok is None and err):
            return str(err or "unknown")
        return None

    @property
    def ok(self) -> bool:
        return self.error is None

    def seconds(self, metric: str) -> float | None:
        key = {"ttft": "ttft_s", "ttfct": "ttfct_s", "tpot": "tpot_s", "e2el": "e2e_s"}[metric]
        return _num(self.raw.get(key))

    def itl_histogram(self) -> Histogram | None:
        """Per-token inter-token latencies (``itl_token_hist``), when the record carries them."""
        value = self.raw.get("itl_token_hist")
        if isinstance(value, Histogram):
            return value
        if isinstance(value, Mapping):
            return Histogram.from_dict(value)
        return None

    @property
    def chunks_coalesced(self) -> int:
        return int(_num(self.raw.get("chunks_coalesced")) or 0)

    @property
    def tokens_output(self) -> int:
        total = _num(self.raw.get("tokens_output"))
        if total is not None:
            return int(total)
        return self.tokens_reasoning + self.tokens_content

    @property
    def tokens_reasoning(self) -> int:
        return int(_num(self.raw.get("tokens_reasoning")) or 0)

    @property
    def tokens_content(self) -> int:
        return int(_num(self.raw.get("tokens_content")) or 0)

    @property
    def chunks(self) -> int | None:
        value = _num(self.raw.get("chunks"))
        return int(value) if value is not None else None

    @property
    def reasoning_truncated(self) -> bool:
        return bool(self.raw.get("reasoning_truncated"))

    @property
    def tokens_estimated(self) -> bool:
        return self.raw.get("token_count_source") == "chunks-estimate"


class Aggregate:
    """Running numbers of one group of records (a level, or a category in it)."""

    def __init__(self) -> None:
        self.completed = 0
        self.failed = 0
        self.errors: dict[str, int] = {}
        self.hist = {m: Histogram() for m in METRICS}
        self.tokens_output = 0
        self.tokens_reasoning = 0
        self.tokens_content = 0
        self.chunks = 0
        self.chunks_coalesced = 0
        self.chunked_tokens = 0
        self.reasoning_truncated = 0
        self.tokens_estimated = 0

    def add(self, record: RecordView) -> None:
        error = record.error
        if error is not None:
            self.failed += 1
            self.errors[error] = self.errors.get(error, 0) + 1
            return
        self.completed += 1
        for metric in ("ttft", "ttfct", "tpot", "e2el"):
            value = record.seconds(metric)
            if value is not None:
                self.hist[metric].add(value)
        itl = record.itl_histogram()
        if itl is not None and itl.relative_accuracy == self.hist["itl"].relative_accuracy:
            self.hist["itl"].merge(itl)
        self.tokens_output += record.tokens_output
        self.tokens_reasoning += record.tokens_reasoning
        self.tokens_content += record.tokens_content
        chunks = record.chunks
        if chunks:
            self.chunks += chunks
            self.chunks_coalesced += record.chunks_coalesced
            self.chunked_tokens += record.tokens_output
        if record.reasoning_truncated:
            self.reasoning_truncated += 1
        if record.tokens_estimated:
            self.tokens_estimated += 1

    def median_ms(self, metric: str) -> float | None:
        value = self.hist[metric].quantile(0.5)
        return None if value is None else value * 1000.0

    def result(self, duration_s: float) -> dict[str, Any]:
        """The numbers, vLLM-bench style keys; ``None`` where there is nothing to report."""
        out: dict[str, Any] = {
            "completed": self.completed,
            "failed": self.failed,
            "duration": duration_s,
            "request_throughput": self.completed / duration_s if duration_s > 0 else None,
            "output_throughput": self.tokens_output / duration_s if duration_s > 0 else None,
            "total_output_tokens": self.tokens_output,
            "total_reasoning_tokens": self.tokens_reasoning,
            "total_content_tokens": self.tokens_content,
        }
        for metric in METRICS:
            stats = self.hist[metric].percentiles()
            for stat in ("mean", "median", "p90", "p99"):
                value = stats[stat]
                out[f"{stat}_{metric}_ms"] = None if value is None else value * 1000.0
        n = self.completed
        out["mean_output_tokens"] = self.tokens_output / n if n else None
        out["mean_reasoning_tokens"] = self.tokens_reasoning / n if n else None
        out["mean_content_tokens"] = self.tokens_content / n if n else None
        out["reasoning_truncated"] = self.reasoning_truncated
        out["mean_tokens_per_chunk"] = self.chunked_tokens / self.chunks if self.chunks else None
        out["coalesced_chunk_share"] = self.chunks_coalesced / self.chunks if self.chunks else None
        out["tokens_estimated"] = self.tokens_estimated
        out["errors"] = dict(sorted(self.errors.items()))
        return out


class LevelAggregate:
    """A level's aggregate plus one per category."""

    def __init__(self) -> None:
        self.all = Aggregate()
        self.categories: dict[str, Aggregate] = {}

    def add(self, record: RecordView) -> None:
        self.all.add(record)
        cat = self.categories.get(record.category)
        if cat is None:
            cat = self.categories[record.category] = Aggregate()
        cat.add(record)

    def result(self, duration_s: float) -> dict[str, Any]:
        out = self.all.result(duration_s)
        out["categories"] = {
            name: agg.result(duration_s) for name, agg in sorted(self.categories.items())
        }
        return out


def aggregate_records(
    records: Iterable[Mapping[str, Any]], step: str, duration_s: float
) -> dict[str, Any]:
    """Aggregate the records of one step (used to re-check results from ``requests.jsonl``)."""
    level = LevelAggregate()
    for raw in records:
        view = RecordView(raw)
        if view.step == step:
            level.add(view)
    return level.result(duration_s)
