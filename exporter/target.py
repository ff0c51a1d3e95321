"""One monitored server: poll its ``/metrics`` (and log), keep what the collector serves.

:meth:`TargetMonitor.poll` runs on the poller's event loop; :meth:`view`
returns an immutable :class:`TargetView` that the collector reads from any
thread. Each poll replaces the view in one assignment.

A target may really be several servers behind one address (replicas behind a load
balancer): its pages then come from different processes in turn. The monitor keeps
the processes it saw (by ``process_start_time_seconds``) over the last
:data:`PROCESS_MEMORY_POLLS` good polls; a page of a process seen before, of an older
process than the last page's, or of one that was already running when the last page
was answered is *another process beside it*, not a restart: no reload is counted,
interval values are derived against that same process's previous page, and while more
than one process answers, rates and the counters passed on are withheld (they would
mix processes) and the target says so (``processes`` in ``/-/targets``,
``specload_target_processes``).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from urllib.parse import unquote

import httpx
import orjson

from exporter.config import TargetConfig
from exporter.fetch import REASONS, Deadline, FetchResult, fetch
from exporter.lifecycle import Lifecycle, LifecycleView
from exporter.logs import LineSource, LogState
from exporter.vllm_metrics import Derived, Reading, derive, extract, keep, went_backwards
from specload.promtext import PromTextError, parse
from specload.redact import basic_auth

VERSION_MAX_BYTES = 64 * 1024
VERSION_TRIES = 3  # polls that may ask /version after a (re)start, if it times out
#: A process not seen answering in this many good polls is forgotten.
PROCESS_MEMORY_POLLS = 30
#: Seconds of clock difference between a server and the exporter tolerated when a new
#: process's start time is compared with the time of the last page of the old one.
CLOCK_TOLERANCE_S = 5.0
_SAME_START_S = 1e-3
MULTIPLE_PROCESSES = (
    "several server processes answer at this address in turn (replicas behind a load "
    "balancer?): their pages are not counted as reloads, and rates and passed-on counters "
    "are withheld; poll each replica as its own target"
)


@dataclass(frozen=True)
class TargetView:
    variant: str
    model: str
    up: bool
    scrape_duration_s: float | None
    errors_total: Mapping[str, int]
    last_error: str | None
    derived: Derived | None  # None while the target is not up
    info: Mapping[str, str]
    lifecycle: LifecycleView
    load_progress_ratio: float | None
    expected_reload_s: float | None
    polled_at_s: float | None = None
    last_error_detail: str = ""
    extra: Mapping[str, float] = field(default_factory=dict)
    # Server processes seen answering recently (None: the page has no process start).
    processes: int | None = None


class TargetMonitor:
    def __init__(
        self,
        cfg: TargetConfig,
        *,
        timeout_s: float,
        max_bytes: int,
        log: LineSource | None = None,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.cfg = cfg
        self.timeout_s = timeout_s
        self.max_bytes = max_bytes
        self.log = log
        self.clock = clock
        self.log_state = LogState()
        self.lifecycle = Lifecycle()
        self.errors: dict[str, int] = dict.fromkeys(REASONS, 0)
        self.headers: dict[str, str] = {}
        secrets: list[str] = []
        if cfg.api_key:
            self.headers["Authorization"] = f"Bearer {cfg.api_key}"
            secrets.append(cfg.api_key)
        elif cfg.userinfo:
            self.headers["Authorization"] = basic_auth(cfg.userinfo)
            password = cfg.userinfo.partition(":")[2]
            secrets += [cfg.userinfo, password, unquote(password)]
        # Masked in every error detail (the values as sent, and what they are made of).
        self.secrets: tuple[str, ...] = (*self.headers.values(), *secrets)
        self._prev: Reading | None = None
        # Process start -> (its last reading, the good poll that read it).
        self._processes: dict[float, tuple[Reading, int]] = {}
        self._good_polls = 0
        self._model: str | None = cfg.model
        self._version: str | None = None
        self._version_asked = False
        self._version_for: float | None = None  # process start the version was asked for
        self._version_tries = 0  # left for this process start (a timeout asks again)
        self._view = self._make_view(self.clock(), None, None, None, None, "")

    # -- polling --------------------------------------------------------------------

    def read_log(self) -> None:
        if self.log is None:
            return
        lines = self.log.poll()
        if lines:
            self.log_state.feed(lines, self.clock())

    def poll(self, transport: httpx.BaseTransport, deadline: Deadline | None = None) -> None:
        """Read the log, fetch /metrics (and /version after a start), fold it in.

        Everything ends by ``deadline`` (default: ``timeout_s`` from now); /version
        gets what /metrics left, and is asked again next poll if it timed out (up
        to ``VERSION_TRIES`` polls per process start).
        """
        if deadline is None:
            deadline = Deadline.after(self.timeout_s)
        self.read_log()
        result = fetch(
            transport,
            self.cfg.url.metrics,
            timeout_s=self.timeout_s,
            max_bytes=self.max_bytes,
            headers=self.headers,
            deadline=deadline,
            secrets=self.secrets,
        )
        reading = self.apply(result, self.clock())
        if reading is None:
            return
        if not self._version_asked or self._version_for != reading.process_start_s:
            self._version_asked = True
            self._version_for = reading.process_start_s
            self._version_tries = VERSION_TRIES
        if self._version_tries > 0 and deadline.remaining() > 0 and not deadline.cancelled:
            self._version_tries -= 1
            if self._ask_version(transport, deadline):
                self._version_tries = 0

    def _ask_version(self, transport: httpx.BaseTransport, deadline: Deadline) -> bool:
        """Ask ``GET /version``; False when the poll's deadline cut it short (ask again)."""
        res = fetch(
            transport,
            self.cfg.url.version,
            timeout_s=self.timeout_s,
            max_bytes=VERSION_MAX_BYTES,
            headers=self.headers,
            deadline=deadline,
            secrets=self.secrets,
        )
        if res.reason == "timeout":
            return False
        version = None
        if res.body is not None:
            try:
                doc = orjson.loads(res.body)
            except orjson.JSONDecodeError:
                doc = None
            if isinstance(doc, dict) and isinstance(doc.get("version"), str):
                version = doc["version"][:64]
        self._version = version
        self._view = self._with_info(self._view)
        return True

    def apply(self, result: FetchResult, now_s: float) -> Reading | None:
        """Fold one fetch outcome into the state; return the reading when it parsed."""
        if result.body is None:
            self._failed(result.reason or "error", result.detail, result.duration_s, now_s)
            return None
        try:
            text = result.body.decode("utf-8")
            fams = parse(text, keep, buckets=False)  # means need only _sum/_count
        except (UnicodeDecodeError, PromTextError) as exc:
            self._failed("malformed", str(exc), result.duration_s, now_s)
            return None
        reading = extract(fams, now_s)
        base, restarted, replica = self._place(reading)
        self.lifecycle.ok(now_s, reading.process_start_s, restarted=restarted, replica=replica)
        self.log_state.loading = False
        if self.cfg.model is None and reading.model:
            self._model = reading.model
        k = self._k_hint(reading)
        derived = derive(base, reading, reset=restarted, k=k)
        processes = len(self._processes) if self._processes else None
        if processes is not None and processes > 1:
            # Rates over one process's interval are not the target's, and counters that
            # alternate between processes would read as resets: withheld.
            derived = replace(
                derived,
                drafted_tokens_per_s=None,
                accepted_tokens_per_s=None,
                generation_tokens_per_s=None,
                prefix_cache_queries=None,
                prefix_cache_hits=None,
                preemptions=None,
            )
        self._prev = reading
        self._view = self._make_view(
            now_s, True, result.duration_s, derived, None, "", reading, processes
        )
        return reading

    def _place(self, reading: Reading) -> tuple[Reading | None, bool, bool]:
        """Which earlier reading ``reading``'s interval runs from, whether the server
        restarted, and whether the page is another process beside the last one."""
        prev = self._prev
        self._good_polls += 1
        now = self._good_polls
        start = reading.process_start_s
        base, restarted, replica = prev, False, False
        if start is None or prev is None or prev.process_start_s is None:
            restarted = prev is not None and went_backwards(prev, reading)
        elif abs(start - prev.process_start_s) > _SAME_START_S:
            known = next(
                (v for p, v in self._processes.items() if abs(p - start) <= _SAME_START_S), None
            )
            if known is not None:  # a process seen before answers again
                base, replica = known[0], True
            elif start < prev.process_start_s or start < prev.time_s - CLOCK_TOLERANCE_S:
                base, replica = None, True  # older, or already running: beside it
            else:  # a new process that started after the last page: a restart
                restarted = True
                self._processes.clear()
        else:
            restarted = went_backwards(prev, reading)
        if start is not None:
            for p in [p for p, v in self._processes.items() if abs(p - start) <= _SAME_START_S]:
                del self._processes[p]
            self._processes[start] = (reading, now)
            for p in [p for p, v in self._processes.items() if now - v[1] >= PROCESS_MEMORY_POLLS]:
                del self._processes[p]
        return base, restarted, replica

    def _failed(self, reason: str, detail: str, duration_s: float, now_s: float) -> None:
        self.errors[reason] = self.errors.get(reason, 0) + 1
        self.lifecycle.failed(
            now_s,
            refused=reason == "refused",
            log_loading=self.log_state.loading,
            log_started_s=self.log_state.load_started_s,
        )
        self._view = self._make_view(now_s, False, duration_s, None, reason, detail)

    # -- what the collector reads ------------------------------------------------------

    def view(self) -> TargetView:
        """The latest view, with reload elapsed time brought up to now."""
        v = self._view
        if v.lifecycle.reload_in_progress:
            lc = self.lifecycle.view(self.clock())
            v = replace(v, lifecycle=lc)
        return v

    def _k_hint(self, reading: Reading | None) -> int | None:
        declared = self.cfg.labels.get("num_speculative_tokens")
        if declared is not None and declared.isdigit():
            return int(declared)
        spec = self.log_state.spec
        if spec is not None and spec.num_speculative_tokens:
            return spec.num_speculative_tokens
        if reading is not None and reading.num_positions:
            return reading.num_positions
        return None

    def _info(self, reading: Reading | None) -> dict[str, str]:
        declared = self.cfg.labels
        spec = self.log_state.spec
        method = declared.get("method") or (spec.method if spec is not None else "")
        if not method and reading is not None:
            method = "unknown" if reading.has_spec_decode else "none"
        k = self._k_hint(reading)
        if k is None and method == "none":
            k = 0
        tp = declared.get("tensor_parallel_size") or (
            str(self.log_state.tensor_parallel_size) if self.log_state.tensor_parallel_size else ""
        )
        draft = declared.get("draft_model") or (spec.draft_model or "" if spec is not None else "")
        return {
            "method": method,
            "num_speculative_tokens": "" if k is None else str(k),
            "draft_model": draft,
            "tensor_parallel_size": tp,
            "vllm_version": self._version or self.log_state.vllm_version or "",
        }

    def _with_info(self, v: TargetView) -> TargetView:
        return replace(v, info=self._info(self._prev))

    def _make_view(  # noqa: PLR0917
        self,
        now_s: float,
        up: bool | None,
        duration_s: float | None,
        derived: Derived | None,
        reason: str | None,
        detail: str,
        reading: Reading | None = None,
        processes: int | None = None,
    ) -> TargetView:
        lc = self.lifecycle.view(now_s)
        progress = None
        if lc.reload_in_progress and self.log_state.load_progress is not None:
            started = self.log_state.load_started_s
            last_ok = self.lifecycle.last_ok_s
            # Only progress from this load (begun after the last good poll).
            if started is not None and (last_ok is None or started > last_ok):
                progress = self.log_state.load_progress
        return TargetView(
            variant=self.cfg.variant,
            model=self._model or "unknown",
            up=bool(up),
            scrape_duration_s=duration_s,
            errors_total=dict(self.errors),
            last_error=reason,
            derived=derived,
            info=self._info(reading if reading is not None else self._prev),
            lifecycle=lc,
            load_progress_ratio=progress,
            expected_reload_s=self.cfg.expected_reload_s,
            polled_at_s=now_s if up is not None else None,
            last_error_detail=detail,
            processes=processes if processes is not None else self._view_processes(),
        )

    def _view_processes(self) -> int | None:
        """The processes known (kept while a poll fails: they are what was seen last)."""
        return len(self._processes) if self._processes else None
