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

What the figures cannot be trusted for is said, never dropped silently:

- a scrape that fails or gives no vLLM page (an HTTP error, an HTML page, a page
  with no ``vllm:`` family, text that is not Prometheus' or OpenMetrics') makes the
  block ``{"error": ...}`` naming why; the level is flagged
  ``server_metrics_unavailable`` (:mod:`specload.sweep.reconcile`);
- a counter that is not a finite number (NaN, ±Inf) leaves its figures out of the
  block and lists it in ``non_finite``: it is not reconciled;
- each of the level's two scrapes is followed by a check scrape (:data:`CHECKS`);
  the four pages must be one server's: one ``process_start_time_seconds`` (or a
  restart: a new process that started after the last page of the old one) and
  counters that never go down without a restart. Pages that alternate between
  processes, an older process answering after a newer one, or counters going
  backwards within one process are several servers behind one address (replicas
  behind a load balancer): the block is ``{"reliable": false, "reason": ...,
  "withheld": {...}}`` — its figures kept aside, not at the top where readers take
  them — and the level is flagged ``server_counters_inconsistent``.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Sequence
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


#: Check scrapes taken right after each of the level's two scrapes (four pages a level):
#: replicas behind one address show as pages of different processes.
CHECKS = 1
#: Seconds of clock difference between the server and specload tolerated when a new
#: process's start time is compared with the last page of the old one.
CLOCK_TOLERANCE_S = 5.0
MAX_PAGE_BYTES = 64 * 1024 * 1024  # a larger /metrics answer is a failed scrape


class ScrapeError(Exception):
    """The scrape gave no vLLM metrics page; the message says what it gave instead."""


@dataclass(frozen=True)
class Snapshot:
    """The raw numbers read from one scrape."""

    counters: dict[str, float]
    per_position: dict[str, float]
    histograms: dict[str, tuple[float, float]]  # name -> (sum, count)
    gauges: dict[str, float]
    process_start_s: float | None = None  # process_start_time_seconds


def http_scraper(
    url: str, timeout_s: float = 5.0, transport: httpx.BaseTransport | None = None
) -> Scrape:
    """GET ``url``: the page's text, or :class:`ScrapeError` (an HTTP error status, an HTML
    page, a body over :data:`MAX_PAGE_BYTES` or still arriving after ``4 * timeout_s``);
    httpx's errors (refused, timeouts) pass through."""

    def scrape() -> str:
        deadline = time.monotonic() + 4 * timeout_s
        with (
            httpx.Client(transport=transport, timeout=timeout_s) as client,
            client.stream("GET", url) as response,
        ):
            if response.status_code >= 400:
                raise ScrapeError(f"HTTP {response.status_code}")
            ctype = response.headers.get("content-type", "").split(";")[0].strip().lower()
            if ctype in ("text/html", "application/xhtml+xml"):
                raise ScrapeError(f"an HTML page (Content-Type {ctype}), not metrics")
            chunks: list[bytes] = []
            size = 0
            for chunk in response.iter_bytes():
                size += len(chunk)
                if size > MAX_PAGE_BYTES:
                    raise ScrapeError(f"a page over {MAX_PAGE_BYTES} bytes")
                if time.monotonic() > deadline:
                    raise ScrapeError(f"the page still arriving after {4 * timeout_s:g}s")
                chunks.append(chunk)
            try:
                return b"".join(chunks).decode(response.encoding or "utf-8")
            except (UnicodeDecodeError, LookupError):
                raise ScrapeError("a page that is not text") from None

    return scrape


def snapshot(text: str, model: str | None = None) -> Snapshot:
    """The numbers of one scrape; of ``model``'s series where a family names several models.

    Raises :class:`promtext.PromTextError` for text that is not an exposition and
    :class:`ScrapeError` for one without any ``vllm:`` family (an empty page, another
    program's metrics): neither is a page of the server's figures.
    """
    fams = promtext.parse(text)
    if not any(name.startswith("vllm:") for name in fams):
        what = "an empty page" if not fams else f"a page of {len(fams)} families, none vllm:*"
        raise ScrapeError(f"{what} (not a vLLM /metrics page?)")
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
    start = vm.counter_total(fams, vm.PROCESS_START)
    if start is not None and not math.isfinite(start):
        start = None
    # Several samples (processes of one page) would sum: take one, as the exporter does.
    fam = fams.get_family(vm.PROCESS_START)
    if fam is not None and len(fam.samples) > 1:
        start = fam.samples[0].value
    return Snapshot(counters, per_position, histograms, gauges, start)


def _position_order(pos: str) -> int:
    return int(pos) if pos.isdigit() else 0


def _finite(value: float | None) -> bool:
    return value is not None and math.isfinite(value)


def server_block(start: Snapshot, end: Snapshot, *, restarted: bool = False) -> dict[str, Any]:
    """The level's server-side block (keys documented in docs/results.md).

    ``restarted``: the server is known to have restarted between the two scrapes (a new
    process start), so every counter counts from zero even where it is higher than
    before. A counter that is not a finite number on either page is left out, with
    its figures, and named in ``non_finite``.
    """
    block: dict[str, Any] = {}
    reset = restarted
    non_finite: list[str] = []
    for key, value in end.counters.items():
        before = start.counters.get(key)
        if not math.isfinite(value) or (before is not None and not math.isfinite(before)):
            non_finite.append(key)  # NaN or Inf: neither a delta nor a sign of a restart
            continue
        delta, was_reset = vm.increase(before, value, restarted=restarted)
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
            before, value = start.per_position.get(pos), end.per_position[pos]
            if not math.isfinite(value) or (before is not None and not math.isfinite(before)):
                per_pos_delta[pos] = math.nan
                continue
            delta, was_reset = vm.increase(before, value, restarted=restarted)
            reset = reset or was_reset
            per_pos_delta[pos] = delta
        per_pos = vm.position_acceptance(per_pos_delta, drafts)
        if per_pos and all(math.isfinite(v) for v in per_pos.values()):
            block["spec_decode_acceptance_per_position"] = per_pos
        elif per_pos:
            non_finite.append("spec_decode_num_accepted_tokens_per_pos")
    hits = vm.hit_ratio(block.get("prefix_cache_hits"), block.get("prefix_cache_queries"))
    if hits is not None:
        block["prefix_cache_hit_ratio"] = hits
    for key, end_pair in end.histograms.items():
        start_pair = start.histograms.get(key)
        if not all(math.isfinite(v) for v in (*end_pair, *(start_pair or ()))):
            non_finite.append(f"mean_{key}_ms")
            continue
        pair, was_reset = vm.histogram_increase(start_pair, end_pair, restarted=restarted)
        reset = reset or was_reset
        mean = vm.histogram_mean(pair)
        if mean is not None:
            block[f"mean_{key}_ms"] = mean * 1000.0
    for key, value in end.gauges.items():
        if math.isfinite(value):
            block[key] = value
        else:
            non_finite.append(key)
    if reset:
        block["counter_reset"] = True
    if non_finite:
        block["non_finite"] = sorted(non_finite)
    if any(k.startswith("spec_decode_num") for k in end.counters):
        block["source"] = "v1_counters"
    elif end.gauges:
        block["source"] = "v0_gauges"
    return block


@dataclass(frozen=True)
class Page:
    """One scrape: when it was answered (wall clock), its numbers or why there are none."""

    at_s: float
    snap: Snapshot | None
    error: str | None = None


@dataclass(frozen=True)
class Consistency:
    """Whether a level's pages are one server's: ``restarted`` (a restart between the
    level's two scrapes: counters from zero), ``problem`` (why they cannot be one
    server's, naming the likely cause; None when they are)."""

    restarted: bool = False
    problem: str | None = None


_SAME_START_S = 1e-3
_REPLICAS = "several replicas behind one address (a load balancer)?"


def _lower(before: float | None, after: float | None) -> bool:
    return _finite(before) and _finite(after) and after < before  # type: ignore[operator]


def _went_down(a: Snapshot, b: Snapshot) -> list[str]:
    """The counters (and histogram counts) smaller on page ``b`` than on the earlier ``a``."""
    down = [key for key, value in b.counters.items() if _lower(a.counters.get(key), value)]
    for key, pair in b.histograms.items():
        old = a.histograms.get(key)
        if old is not None and _lower(old[1], pair[1]):
            down.append(f"{key} histogram count")
    return down


def _when(start_s: float) -> str:
    return time.strftime("%Y-%m-%d %H:%M:%SZ", time.gmtime(start_s))


def consistency(pages: Sequence[Page], level_end: int) -> Consistency:
    """Judge a level's pages, in the order they were answered; ``level_end``: the index of
    the level's end scrape (a restart after it is not the level's)."""
    seen: list[float] = []  # process start times, in order
    prev: Page | None = None
    restarts: list[int] = []
    drops_unknown = 0
    for i, page in enumerate(pages):
        snap = page.snap
        if snap is None:
            continue
        if prev is not None:
            before = prev.snap
            assert before is not None
            p_prev, p_now = before.process_start_s, snap.process_start_s
            if p_prev is not None and p_now is not None and abs(p_now - p_prev) > _SAME_START_S:
                if any(abs(p_now - p) <= _SAME_START_S for p in seen):
                    starts = ", ".join(_when(p) for p in sorted(seen))
                    return Consistency(
                        problem="the pages alternate between server processes "
                        f"(process_start_time_seconds {starts}): {_REPLICAS}"
                    )
                if p_now < p_prev:
                    return Consistency(
                        problem=f"an older server process (started {_when(p_now)}) answered "
                        f"after a newer one (started {_when(p_prev)}), not a restart: "
                        f"{_REPLICAS}"
                    )
                if p_now < prev.at_s - CLOCK_TOLERANCE_S:
                    return Consistency(
                        problem=f"a server process started {_when(p_now)} answered after one "
                        f"started {_when(p_prev)} that it was running beside (that one "
                        f"answered at {_when(prev.at_s)}), not a restart: {_REPLICAS}"
                    )
                restarts.append(i)
            else:
                down = _went_down(before, snap)
                if down and p_prev is not None and p_now is not None:
                    return Consistency(
                        problem=f"counters went backwards ({', '.join(down)}) with no restart "
                        f"(the same process_start_time_seconds): {_REPLICAS}"
                    )
                if down:  # no process start on the page: a restart, once
                    drops_unknown += 1
                    if drops_unknown > 1:
                        return Consistency(
                            problem=f"counters went backwards {drops_unknown} times within the "
                            f"level ({', '.join(down)}): {_REPLICAS}"
                        )
                    restarts.append(i)
        if snap.process_start_s is not None and not any(
            abs(snap.process_start_s - p) <= _SAME_START_S for p in seen
        ):
            seen.append(snap.process_start_s)
        prev = page
    return Consistency(restarted=any(0 < i <= level_end for i in restarts))


class ServerProbe:
    """Scrapes at a level's start and end (each followed by :data:`CHECKS` check scrapes);
    failures become ``{"error": ...}``, pages of several servers ``{"reliable": false,
    ...}``, never a crash."""

    def __init__(
        self,
        scrape: Scrape,
        wall: Callable[[], float] = time.time,
        model: str | None = None,
        checks: int = CHECKS,
    ) -> None:
        self._scrape = scrape
        self._wall = wall
        self._model = model
        self._checks = checks
        self._start: Snapshot | None = None
        self._start_error: str | None = None
        self._pages: list[Page] = []
        # Wall clock when each scrape was sent and answered (reconciliation brackets).
        self.start_times: tuple[float, float] | None = None
        self.end_times: tuple[float, float] | None = None

    def _read(self) -> Page:
        try:
            snap = snapshot(self._scrape(), self._model)
        except ScrapeError as exc:
            return Page(self._wall(), None, str(exc))
        except promtext.PromTextError as exc:
            return Page(self._wall(), None, f"not Prometheus or OpenMetrics text ({exc})")
        except (httpx.HTTPError, OSError) as exc:
            return Page(self._wall(), None, f"{type(exc).__name__}: {exc}")
        return Page(self._wall(), snap)

    def _checked(self) -> None:
        for _ in range(self._checks):
            self._pages.append(self._read())

    def start(self) -> None:
        sent = self._wall()
        page = self._read()
        self.start_times = (sent, page.at_s)
        self._start, self._start_error = page.snap, page.error
        self._pages = [page]
        if page.snap is not None:
            self._checked()

    def end(self) -> dict[str, Any]:
        sent = self._wall()
        page = self._read()
        if page.snap is None and page.error is not None and self._checks:
            first_error = page.error
            page = self._read()  # once more: a passing fault should not cost the level
            if page.snap is None:
                page = Page(page.at_s, None, first_error)
        self.end_times = (sent, page.at_s)
        if page.snap is None:
            return {"error": f"scrape at level end failed: {page.error}"}
        if self._start is None:
            return {"error": f"scrape at level start failed: {self._start_error}"}
        level_end = len(self._pages)
        self._pages.append(page)
        self._checked()
        verdict = consistency(self._pages, level_end)
        block = server_block(self._start, page.snap, restarted=verdict.restarted)
        if verdict.problem is not None:
            return {"reliable": False, "reason": verdict.problem, "withheld": block}
        return block


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
    except (httpx.HTTPError, promtext.PromTextError, ScrapeError, OSError):
        return False
    return vm.first_family(fams, (vm.DRAFTS,)) is not None
