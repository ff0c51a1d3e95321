"""Capture a vLLM profile: ``POST /start_profile``, wait, ``POST /stop_profile``, analyse.

vLLM serves both endpoints only when started with a profiler, e.g.
``--profiler-config '{"profiler":"torch","torch_profiler_dir":"/abs/dir"}'``
(older releases: ``VLLM_TORCH_PROFILER_DIR``); otherwise they answer 404.
``/stop_profile`` returns once every rank has written its trace, which can
take minutes for a busy server. The new files in the trace directory are the
capture: one gzipped Chrome trace per rank.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Final

import httpx

from specload.errors import UsageError
from specload.profile.analysis import ProfileReport, analyze
from specload.profile.tracefile import TraceFileError, is_trace_file, read_header
from specload.urls import ServerURL, redact_url

#: Failure reasons (the ``reason`` label of ``specload_profile_failures_total``).
REASON_NOT_ENABLED: Final = "profiler_not_enabled"
REASON_TIMEOUT: Final = "timeout"
REASON_NO_TRACE: Final = "no_trace"
REASON_UNREACHABLE: Final = "unreachable"
REASON_HTTP: Final = "http_error"
REASON_BAD_TRACE: Final = "bad_trace"
REASONS: Final = (
    REASON_NOT_ENABLED,
    REASON_TIMEOUT,
    REASON_NO_TRACE,
    REASON_UNREACHABLE,
    REASON_HTTP,
    REASON_BAD_TRACE,
)

DEFAULT_STOP_TIMEOUT_S: Final = 600.0
DEFAULT_SETTLE_S: Final = 30.0
_POLL_S: Final = 0.25


class CaptureError(UsageError):
    """A capture that failed; ``reason`` is one of :data:`REASONS`."""

    def __init__(self, message: str, reason: str) -> None:
        super().__init__(message)
        self.reason = reason


@dataclass(frozen=True)
class CaptureResult:
    files: tuple[Path, ...]
    report: ProfileReport
    started_at: float  # unix time of /start_profile
    seconds: float  # time between start and stop


def _snapshot(trace_dir: Path) -> dict[Path, tuple[int, int]]:
    """Trace files under ``trace_dir`` with (mtime_ns, size)."""
    found: dict[Path, tuple[int, int]] = {}
    if not trace_dir.is_dir():
        return found
    for p in trace_dir.rglob("*"):
        if is_trace_file(p):
            try:
                st = p.stat()
            except OSError:
                continue
            if st.st_size > 0:
                found[p] = (st.st_mtime_ns, st.st_size)
    return found


def _expected_files(files: list[Path]) -> int | None:
    """The world size the first readable header claims (how many rank files to wait for)."""
    for p in files:
        try:
            world = read_header(p).world_size
        except TraceFileError:
            continue
        if world:
            return world
    return None


def wait_for_traces(
    trace_dir: Path,
    before: dict[Path, tuple[int, int]],
    *,
    settle_s: float = DEFAULT_SETTLE_S,
    clock: Callable[[], float] = time.monotonic,
    sleep: Callable[[float], None] = time.sleep,
) -> list[Path]:
    """New or rewritten trace files, once as many as the world size are there and
    their sizes have stopped changing (or ``settle_s`` has passed)."""
    deadline = clock() + settle_s
    last: dict[Path, tuple[int, int]] = {}
    while True:
        now = {p: s for p, s in _snapshot(trace_dir).items() if before.get(p) != s}
        stable = bool(now) and now == last
        if stable:
            files = sorted(now)
            want = _expected_files(files)
            if want is None or len(files) >= want or clock() >= deadline:
                return files
        elif clock() >= deadline:
            return sorted(now)
        last = now
        sleep(_POLL_S)


def _post(client: httpx.Client, url: str, timeout_s: float, what: str) -> None:
    try:
        resp = client.post(url, timeout=timeout_s)
    except httpx.TimeoutException as exc:
        raise CaptureError(
            f"{what}: no answer from {url} within {timeout_s:g} s", REASON_TIMEOUT
        ) from exc
    except httpx.HTTPError as exc:
        raise CaptureError(
            f"{what}: cannot reach {url} ({exc.__class__.__name__})", REASON_UNREACHABLE
        ) from exc
    except httpx.InvalidURL as exc:  # not an HTTPError; the CLI checks --target before
        raise CaptureError(
            f"{what}: {redact_url(url)} is not a valid URL", REASON_UNREACHABLE
        ) from exc
    if resp.status_code == 404:
        raise CaptureError(
            f"profiler not enabled on {url} (404): start vLLM with "
            '--profiler-config \'{"profiler":"torch","torch_profiler_dir":"/abs/dir"}\'',
            REASON_NOT_ENABLED,
        )
    if resp.status_code >= 400:
        raise CaptureError(f"{what}: {url} answered HTTP {resp.status_code}", REASON_HTTP)


def capture(
    target: ServerURL,
    trace_dir: Path,
    seconds: float,
    *,
    stop_timeout_s: float = DEFAULT_STOP_TIMEOUT_S,
    settle_s: float = DEFAULT_SETTLE_S,
    client: httpx.Client | None = None,
    cancel: threading.Event | None = None,
    during: Callable[[], None] | None = None,
) -> CaptureResult:
    """Profile ``target`` for ``seconds`` and analyse the traces it writes to ``trace_dir``.

    ``during`` (e.g. a load to run) is called once the profiler has started; the
    profile then lasts until it returns and at least ``seconds`` have passed.

    Raises :class:`CaptureError` (one line, with a reason) on any failure; the
    profiler is stopped again if anything fails after it was started.
    """
    trace_dir = Path(trace_dir)
    own = client is None
    http = client if client is not None else httpx.Client()
    try:
        before = _snapshot(trace_dir)
        started_at = time.time()
        t0 = time.monotonic()
        _post(http, target.join("/start_profile"), 60.0, "start_profile")
        try:
            if during is not None:
                during()
            remaining = seconds - (time.monotonic() - t0)
            if cancel is not None:
                cancel.wait(max(0.0, remaining))
            elif remaining > 0:
                time.sleep(remaining)
        finally:
            elapsed = time.monotonic() - t0
            _post(http, target.join("/stop_profile"), stop_timeout_s, "stop_profile")
        files = wait_for_traces(trace_dir, before, settle_s=settle_s)
        if not files:
            raise CaptureError(
                f"no trace found in {trace_dir} after /stop_profile "
                "(is it the server's torch_profiler_dir?)",
                REASON_NO_TRACE,
            )
        try:
            report = analyze(files)
        except TraceFileError as exc:
            raise CaptureError(str(exc), REASON_BAD_TRACE) from exc
        return CaptureResult(tuple(files), report, started_at, elapsed)
    finally:
        if own:
            http.close()
