"""The server's view of a level: vLLM ``/metrics`` scraped at its start and end.

:class:`ServerProbe` scrapes the server's metrics around a level; :func:`snapshot`
reads the raw numbers of one scrape and :func:`server_block` turns two into the
level's ``server`` block (keys in docs/results.md). The names (current and
legacy), the reset-safe deltas and the formulas are :mod:`specload.vllm_metrics`'s,
shared with the exporter: V1 formulas on counter deltas (acceptance rate =
accepted / draft tokens; mean acceptance length = 1 + accepted / drafts;
per-position acceptance = accepted at position / drafts), server-side mean TPOT
from the ``vllm:request_time_per_output_token_seconds`` histogram, generated
tokens from ``vllm:generation_tokens_total``, the prefix-cache hit ratio from
its hits and queries counters; vLLM ≤0.9's gauges where they are what the
server has. A counter that went down (the server restarted within the level)
counts from zero and the block says ``counter_reset``.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import httpx

from specload import promtext
from specload import vllm_metrics as vm

Scrape = Callable[[], str]
Post = Callable[[str], httpx.Response]

# Block key -> the counter's names (current first, then legacy ones).
_COUNTERS: dict[str, tuple[str, ...]] = {
    "generation_tokens": (vm.GENERATION_TOKENS,),
    "prompt_tokens": (vm.PROMPT_TOKENS,),
    "spec_decode_num_drafts": (vm.DRAFTS,),
    "spec_decode_num_draft_tokens": (vm.DRAFT_TOKENS,),
    "spec_decode_num_accepted_tokens": (vm.ACCEPTED,),
    "requests_success": (vm.REQUEST_SUCCESS,),
    "prefix_cache_queries": vm.PREFIX_CACHE_QUERIES_NAMES,
    "prefix_cache_hits": vm.PREFIX_CACHE_HITS_NAMES,
}
# "mean_<key>_ms" -> the histogram's names.
_HISTOGRAMS: dict[str, tuple[str, ...]] = {
    "tpot": vm.TPOT_NAMES,
    "itl": vm.ITL_NAMES,
    "ttft": (vm.TIME_TO_FIRST_TOKEN,),
    "e2el": (vm.E2E_LATENCY,),
}
_V0_GAUGES = {
    "spec_decode_draft_acceptance_rate_gauge": vm.V0_DRAFT_ACCEPTANCE_RATE,
    "spec_decode_efficiency_gauge": vm.V0_EFFICIENCY,
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


def snapshot(text: str, model: str | None = None) -> Snapshot:
    """The numbers of one scrape; of ``model``'s series where a family names several models."""
    fams = promtext.parse(text)
    counters: dict[str, float] = {}
    for key, names in _COUNTERS.items():
        value = vm.counter_total(fams, names, model)
        if value is not None:
            counters[key] = value
    per_position: dict[str, float] = {}
    fam = fams.get_family(vm.ACCEPTED_PER_POS)
    if fam is not None:
        per_position = fam.by_label("position", vm.model_match(fam, model))
    histograms: dict[str, tuple[float, float]] = {}
    for key, names in _HISTOGRAMS.items():
        pair = vm.sum_count(fams, names, model)
        if pair is not None:
            histograms[key] = pair
    gauges: dict[str, float] = {}
    for key, name in _V0_GAUGES.items():
        value = vm.counter_total(fams, name, model)
        if value is not None:
            gauges[key] = value
    return Snapshot(counters, per_position, histograms, gauges)


def _position_order(pos: str) -> int:
    return int(pos) if pos.isdigit() else 0


def server_block(start: Snapshot, end: Snapshot) -> dict[str, Any]:
    """The level's server-side block (keys documented in docs/results.md)."""
    block: dict[str, Any] = {}
    reset = False
    for key, value in end.counters.items():
        delta, was_reset = vm.increase(start.counters.get(key), value)
        reset = reset or was_reset
        block[key] = delta
    drafts = block.get("spec_decode_num_drafts")
    draft_tokens = block.get("spec_decode_num_draft_tokens")
    accepted = block.get("spec_decode_num_accepted_tokens")
    rate = vm.acceptance_rate(accepted, draft_tokens)
    if rate is not None:
        block["spec_decode_acceptance_rate"] = rate
    length = vm.mean_acceptance_length(accepted, drafts)
    if length is not None:
        block["spec_decode_mean_acceptance_length"] = length
        per_pos_delta: dict[str, float] = {}
        for pos in sorted(end.per_position, key=_position_order):
            delta, was_reset = vm.increase(start.per_position.get(pos), end.per_position[pos])
            reset = reset or was_reset
            per_pos_delta[pos] = delta
        per_pos = vm.position_acceptance(per_pos_delta, drafts)
        if per_pos:
            block["spec_decode_acceptance_per_position"] = per_pos
    hits = vm.hit_ratio(block.get("prefix_cache_hits"), block.get("prefix_cache_queries"))
    if hits is not None:
        block["prefix_cache_hit_ratio"] = hits
    for key, end_pair in end.histograms.items():
        pair, was_reset = vm.histogram_increase(start.histograms.get(key), end_pair)
        reset = reset or was_reset
        mean = vm.histogram_mean(pair)
        if mean is not None:
            block[f"mean_{key}_ms"] = mean * 1000.0
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

    def __init__(
        self, scrape: Scrape, wall: Callable[[], float] = time.time, model: str | None = None
    ) -> None:
        self._scrape = scrape
        self._wall = wall
        self._model = model
        self._start: Snapshot | None = None
        self._start_error: str | None = None
        # Wall clock when each scrape was sent and answered (reconciliation brackets).
        self.start_times: tuple[float, float] | None = None
        self.end_times: tuple[float, float] | None = None

    def _read(self) -> tuple[Snapshot | None, str | None]:
        try:
            return snapshot(self._scrape(), self._model), None
        except (httpx.HTTPError, promtext.PromTextError, OSError) as exc:
            return None, f"{type(exc).__name__}: {exc}"

    def start(self) -> None:
        sent = self._wall()
        self._start, self._start_error = self._read()
        self.start_times = (sent, self._wall())

    def end(self) -> dict[str, Any]:
        sent = self._wall()
        end, error = self._read()
        self.end_times = (sent, self._wall())
        if end is None:
            return {"error": f"scrape at level end failed: {error}"}
        if self._start is None:
            return {"error": f"scrape at level start failed: {self._start_error}"}
        return server_block(self._start, end)


@dataclass(frozen=True)
class CacheReset:
    """What asking the server to reset its prefix cache gave: ``done`` True (reset), False
    (asked, not done: ``detail`` says why); ``again``: worth asking at the next level
    (False once the server said it does not serve the reset)."""

    done: bool | None
    detail: str | None = None
    again: bool = True
    # Refused while requests ran (the last level's, still finishing): expected between
    # levels that overlap; the run's first level starts on an idle server and resets.
    busy: bool = False


RESET_PATH = "/reset_prefix_cache"


def reset_prefix_cache(post: Post, *, cache_bust: bool) -> CacheReset:
    """POST ``/reset_prefix_cache`` (vLLM serves it with ``VLLM_SERVER_DEV_MODE=1``; it
    answers ``{"success": false}`` while running requests hold cached blocks). Never
    raises: a failure is a :class:`CacheReset` saying why."""
    instead = (
        "prompts carry a nonce per level instead (--cache-bust)"
        if cache_bust
        else "levels may start on a cache warmed by earlier ones (--cache-bust avoids it)"
    )
    try:
        response = post(RESET_PATH)
    except (httpx.HTTPError, OSError) as exc:
        return CacheReset(False, f"POST {RESET_PATH} failed ({type(exc).__name__}); {instead}")
    if response.status_code in (404, 405):
        return CacheReset(
            False,
            f"the server does not serve POST {RESET_PATH} (HTTP {response.status_code}; vLLM "
            f"serves it with VLLM_SERVER_DEV_MODE=1): {instead}",
            again=False,
        )
    if response.status_code != 200:
        return CacheReset(
            False, f"POST {RESET_PATH} answered HTTP {response.status_code}; {instead}"
        )
    try:
        success = response.json().get("success", True)
    except (ValueError, AttributeError):
        success = True  # 200 without the JSON body of vLLM 0.32: older servers
    if success is False:
        return CacheReset(
            False,
            f"the server refused (requests still running held cached blocks); {instead}",
            busy=True,
        )
    return CacheReset(True)


def speculates(scrape: Scrape) -> bool:
    """Whether the server's ``/metrics`` show speculative decoding (the drafts counter);
    False when the page cannot be read."""
    try:
        fams = promtext.parse(scrape())
    except (httpx.HTTPError, promtext.PromTextError, OSError):
        return False
    return vm.first_family(fams, (vm.DRAFTS,)) is not None
