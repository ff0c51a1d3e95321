"""The server's view of a level: vLLM ``/metrics`` scraped at its start and end.

V1 formulas on counter deltas (acceptance rate = accepted / draft tokens; mean
acceptance length = 1 + accepted / drafts; per-position acceptance = accepted
at position / drafts), server-side mean TPOT from the
``vllm:request_time_per_output_token_seconds`` histogram, generated tokens from
``vllm:generation_tokens_total``; vLLM ≤0.9's gauges where they are what the
server has. A counter that went down (the server restarted within the level)
counts from zero and the block says ``counter_reset``.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import httpx

from specload import promtext

Scrape = Callable[[], str]

_COUNTERS = {
    "generation_tokens": "vllm:generation_tokens_total",
    "prompt_tokens": "vllm:prompt_tokens_total",
    "spec_decode_num_drafts": "vllm:spec_decode_num_drafts_total",
    "spec_decode_num_draft_tokens": "vllm:spec_decode_num_draft_tokens_total",
    "spec_decode_num_accepted_tokens": "vllm:spec_decode_num_accepted_tokens_total",
}
_PER_POS = "vllm:spec_decode_num_accepted_tokens_per_pos_total"
_REQUEST_SUCCESS = "vllm:request_success_total"
_HISTOGRAMS = {
    "tpot": "vllm:request_time_per_output_token_seconds",
    "itl": "vllm:inter_token_latency_seconds",
    "ttft": "vllm:time_to_first_token_seconds",
    "e2el": "vllm:e2e_request_latency_seconds",
}
# vLLM <= 0.10 named the per-token histogram this way (it is per output token).
_OLD_TPOT = "vllm:time_per_output_token_seconds"
_V0_GAUGES = {
    "spec_decode_draft_acceptance_rate_gauge": "vllm:spec_decode_draft_acceptance_rate",
    "spec_decode_efficiency_gauge": "vllm:spec_decode_efficiency",
}


@dataclass(frozen=True)
class Snapshot:
    """The raw numbers read from one scrape."""

    counters: dict[str, float]
    per_position: dict[str, float]
    histograms: dict[str, tuple[float, float]]  # name -> (sum, count)
    gauges: dict[str, float]


def http_scraper(url: str, timeout_s: float = 5.0) -> Scrape:
    def scrape() -> str:
        response = httpx.get(url, timeout=timeout_s)
        response.raise_for_status()
        return response.text

    return scrape


def snapshot(text: str) -> Snapshot:
    fams = promtext.parse(text)
    counters: dict[str, float] = {}
    for key, name in {**_COUNTERS, "requests_success": _REQUEST_SUCCESS}.items():
        fam = fams.get_family(name)
        value = fam.total() if fam is not None else None
        if value is not None:
            counters[key] = value
    per_position: dict[str, float] = {}
    fam = fams.get_family(_PER_POS)
    if fam is not None:
        per_position = fam.by_label("position")
    histograms: dict[str, tuple[float, float]] = {}
    for key, name in _HISTOGRAMS.items():
        fam = fams.get(name)
        if fam is None and key == "tpot":
            fam = fams.get(_OLD_TPOT)
        pair = fam.sum_count() if fam is not None else None
        if pair is not None:
            histograms[key] = pair
    gauges: dict[str, float] = {}
    for key, name in _V0_GAUGES.items():
        fam = fams.get(name)
        value = fam.total() if fam is not None else None
        if value is not None:
            gauges[key] = value
    return Snapshot(counters, per_position, histograms, gauges)


def _delta(start: float | None, end: float) -> tuple[float, bool]:
    if start is None:
        return end, False
    if end < start:  # the server restarted: its counters began again at zero
        return end, True
    return end - start, False


def server_block(start: Snapshot, end: Snapshot) -> dict[str, Any]:
    """The level's server-side block (keys documented in docs/results.md)."""
    block: dict[str, Any] = {}
    reset = False
    for key, value in end.counters.items():
        delta, was_reset = _delta(start.counters.get(key), value)
        reset = reset or was_reset
        block[key] = delta
    drafts = block.get("spec_decode_num_drafts")
    draft_tokens = block.get("spec_decode_num_draft_tokens")
    accepted = block.get("spec_decode_num_accepted_tokens")
    if draft_tokens and accepted is not None:
        block["spec_decode_acceptance_rate"] = accepted / draft_tokens
    if drafts and accepted is not None:
        block["spec_decode_mean_acceptance_length"] = 1.0 + accepted / drafts
        per_pos: dict[str, float] = {}
        for pos in sorted(end.per_position, key=lambda p: int(p) if p.isdigit() else 0):
            delta, was_reset = _delta(start.per_position.get(pos), end.per_position[pos])
            reset = reset or was_reset
            per_pos[pos] = delta / drafts
        if per_pos:
            block["spec_decode_acceptance_per_position"] = per_pos
    for key, (end_sum, end_count) in end.histograms.items():
        start_sum, start_count = start.histograms.get(key, (0.0, 0.0))
        if end_count < start_count:
            reset = True
            start_sum, start_count = 0.0, 0.0
        count = end_count - start_count
        if count > 0:
            block[f"mean_{key}_ms"] = (end_sum - start_sum) / count * 1000.0
    block.update(end.gauges)
    if reset:
        block["counter_reset"] = True
    if any(k.startswith("spec_decode_num") for k in end.counters):
        block["source"] = "v1_counters"
    elif end.gauges:
        block["source"] = "v0_gauges"
    return block


class ServerProbe:
    """Scrapes at a level's start and end; failures become ``{"error": ...}``, never a crash."""

    def __init__(self, scrape: Scrape) -> None:
        self._scrape = scrape
        self._start: Snapshot | None = None
        self._start_error: str | None = None

    def _read(self) -> tuple[Snapshot | None, str | None]:
        try:
            return snapshot(self._scrape()), None
        except (httpx.HTTPError, promtext.PromTextError, OSError) as exc:
            return None, f"{type(exc).__name__}: {exc}"

    def start(self) -> None:
        self._start, self._start_error = self._read()

    def end(self) -> dict[str, Any]:
        end, error = self._read()
        if end is None:
            return {"error": f"scrape at level end failed: {error}"}
        if self._start is None:
            return {"error": f"scrape at level start failed: {self._start_error}"}
        return server_block(self._start, end)
