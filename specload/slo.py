"""Service-level objectives: per request, met or not; per level, goodput and attainment.

``--slo ttft=2s,tpot=20ms`` (durations as elsewhere: ``2s``, ``20ms``, ``1m``, a bare number
is seconds) sets an upper bound per measure; a completed request **meets** the objectives
when it meets every one. The measures, with ``vllm bench serve --goodput``'s names where they
overlap:

- ``ttft``: time to first token (any channel);
- ``ttfct``: time to first content token — a request that never reached its answer
  (reasoning cut at ``max_tokens``) fails it;
- ``tpot``: time per output token, (E2E - TTFT) / (tokens - 1);
- ``e2el``: end-to-end latency;
- ``itl_p99``: the request's own 99th-percentile inter-token latency (per token).

A measure a request does not have (a one-token answer's TPOT) counts as met, as in vLLM's
benchmark. Failed and unfinished requests meet nothing; attainment is over completed
requests, goodput over the window.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from specload.durations import parse_duration
from specload.errors import UsageError
from specload.records.request import RequestRecord

MEASURES = ("ttft", "ttfct", "tpot", "e2el", "itl_p99")


@dataclass(frozen=True)
class Objectives:
    """Upper bounds in seconds, by measure (in :data:`MEASURES` order)."""

    bounds: tuple[tuple[str, float], ...]

    def __bool__(self) -> bool:
        return bool(self.bounds)

    def as_dict(self) -> dict[str, float]:
        return dict(self.bounds)


NONE = Objectives(())


def parse_slo(text: Any, *, name: str = "--slo") -> Objectives:
    """``ttft=2s,tpot=20ms`` → :class:`Objectives`; empty or ``off``: none. Bad input is a
    one-line :class:`UsageError` naming the item."""
    raw = str(text or "").strip()
    if raw.lower() in ("", "off", "none"):
        return NONE
    bounds: dict[str, float] = {}
    for item in raw.split(","):
        key, sep, value = item.strip().partition("=")
        key = key.strip().lower()
        if not sep or not value.strip():
            raise UsageError(f"{name}: {item.strip()!r} is not MEASURE=DURATION (e.g. tpot=20ms)")
        if key not in MEASURES:
            raise UsageError(f"{name}: {key!r} is not one of {', '.join(MEASURES)}")
        if key in bounds:
            raise UsageError(f"{name}: {key} is given twice")
        seconds = parse_duration(value.strip(), name=f"{name} {key}", allow_zero=False)
        if not math.isfinite(seconds):
            raise UsageError(f"{name} {key}: {value.strip()!r} is not a finite duration")
        bounds[key] = seconds
    return Objectives(tuple((m, bounds[m]) for m in MEASURES if m in bounds))


def measure(record: RequestRecord, key: str) -> float | None:
    """The record's value of a measure, seconds (None: the request does not have it)."""
    if key == "ttft":
        return record.ttft_s
    if key == "ttfct":
        return record.ttfct_s
    if key == "tpot":
        return record.tpot_s
    if key == "e2el":
        return record.e2e_s
    hist = record.itl_token_hist
    return hist.quantile(0.99) if hist is not None and hist.count else None


def judge(record: RequestRecord, objectives: Objectives) -> None:
    """Set ``record.slo_failed`` (the measures it missed) and ``record.slo_met``."""
    if not objectives:
        return
    if not record.ok:
        record.slo_met = False
        record.slo_failed = []
        return
    failed: list[str] = []
    for key, bound in objectives.bounds:
        value = measure(record, key)
        if value is None:
            # The first content token never came (reasoning to max_tokens): not met.
            if key == "ttfct" and record.tokens_content == 0:
                failed.append(key)
            continue
        if value > bound:
            failed.append(key)
    record.slo_failed = failed
    record.slo_met = not failed
