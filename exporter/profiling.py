"""The exporter's profiling source: captures vLLM profiles and exports the all-reduce share.

Per target (config key ``profile: {trace_dir, interval, seconds}``) a background
thread captures a profile (``POST /start_profile``, wait ``seconds``,
``POST /stop_profile``, analyse the new traces in ``trace_dir``) every
``interval`` (unset: never on a schedule, since profiling slows the server) and
whenever :meth:`ProfilingSource.trigger` asks. :meth:`ProfilingSource.collect`
yields fresh metric families from the last results; it never does network work
and never raises, so a failing capture leaves every other metric untouched.

Metrics (``variant`` label): ``specload_decode_allreduce_ratio``,
``specload_decode_allreduce_seconds_per_step``, ``specload_decode_step_seconds``
(from the last successful capture, median across ranks),
``specload_profile_decode_steps``, ``specload_profile_last_success_timestamp_seconds``,
``specload_profile_captures_total``, ``specload_profile_failures_total{reason}``,
``specload_profile_in_progress``, ``specload_profile_capture_duration_seconds``.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Final

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric

from specload.profile.analysis import ProfileReport
from specload.profile.capture import (
    DEFAULT_SETTLE_S,
    DEFAULT_STOP_TIMEOUT_S,
    REASONS,
    CaptureError,
    capture,
)
from specload.redact import scrub, split_userinfo
from specload.urls import ServerURL

if TYPE_CHECKING:
    from exporter.config import TargetConfig

log = logging.getLogger(__name__)

#: Reason label for a failure that is not one of the capture's own reasons.
REASON_INTERNAL: Final = "internal_error"
FAILURE_REASONS: Final = (*REASONS, REASON_INTERNAL)


@dataclass(frozen=True)
class ProfileTarget:
    """One variant to profile."""

    variant: str
    url: ServerURL = field(repr=False)  # may carry user:password@ (the capture needs it)
    trace_dir: Path
    interval_s: float | None = None  # None: only on demand
    seconds: float = 10.0
    stop_timeout_s: float = DEFAULT_STOP_TIMEOUT_S
    settle_s: float = DEFAULT_SETTLE_S

    @classmethod
    def from_target_config(cls, target: TargetConfig) -> ProfileTarget | None:
        """From the exporter's target config; ``None`` when it has no ``profile.trace_dir``."""
        p = target.profile
        if p.trace_dir is None:
            return None
        return cls(target.variant, target.request_url, p.trace_dir, p.interval_s, p.seconds)


#: Runs one capture for a target; ``cancel`` is set when the exporter stops.
CaptureFn = Callable[[ProfileTarget, threading.Event], ProfileReport]


def capture_target(target: ProfileTarget, cancel: threading.Event) -> ProfileReport:
    return capture(
        target.url,
        target.trace_dir,
        target.seconds,
        stop_timeout_s=target.stop_timeout_s,
        settle_s=target.settle_s,
        cancel=cancel,
    ).report


@dataclass
class _State:
    target: ProfileTarget
    wake: threading.Event = field(default_factory=threading.Event)
    in_progress: bool = False
    ratio: float | None = None
    allreduce_s: float | None = None
    step_s: float | None = None
    decode_steps: int | None = None
    last_success: float | None = None
    last_duration_s: float | None = None
    captures: int = 0
    failures: dict[str, int] = field(default_factory=lambda: dict.fromkeys(FAILURE_REASONS, 0))
    last_error: str | None = None
    thread: threading.Thread | None = None


class ProfilingSource:
    """Scheduled and on-demand profile captures for a set of targets; a Prometheus collector."""

    def __init__(
        self,
        targets: Iterable[ProfileTarget],
        *,
        capture_fn: CaptureFn = capture_target,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self._states: dict[str, _State] = {}
        for t in targets:
            if t.variant in self._states:
                raise ValueError(f"two profile targets named {t.variant!r}")
            self._states[t.variant] = _State(t)
        self._capture = capture_fn
        self._clock = clock
        self._lock = threading.Lock()
        self._stopping = threading.Event()
        self._started = False

    @classmethod
    def from_config(
        cls, targets: Iterable[TargetConfig], *, capture_fn: CaptureFn = capture_target
    ) -> ProfilingSource:
        """Targets with ``profile.trace_dir`` set; the others are not profiled."""
        found = (ProfileTarget.from_target_config(t) for t in targets)
        return cls([t for t in found if t is not None], capture_fn=capture_fn)

    @property
    def variants(self) -> list[str]:
        return list(self._states)

    # lifecycle
    def start(self) -> None:
        if self._started:
            return
        self._started = True
        for st in self._states.values():
            st.thread = threading.Thread(
                target=self._loop, args=(st,), name=f"profile-{st.target.variant}", daemon=True
            )
            st.thread.start()

    def stop(self, timeout_s: float = 5.0) -> None:
        """Stop the threads; a capture under way is cut short (its profiler is stopped)."""
        self._stopping.set()
        for st in self._states.values():
            st.wake.set()
        deadline = time.monotonic() + timeout_s
        for st in self._states.values():
            if st.thread is not None:
                st.thread.join(max(0.0, deadline - time.monotonic()))

    def trigger(self, variant: str) -> bool:
        """Ask for a capture of ``variant`` now; False if it has no profiling configured.

        A request while a capture of that variant is under way is merged into it.
        """
        st = self._states.get(variant)
        if st is None:
            return False
        if not self._started:
            self.start()
        with self._lock:
            if not st.in_progress:
                st.wake.set()
        return True

    def run_once(self, variant: str) -> None:
        """Capture ``variant`` in the calling thread (tests, one-shot tools)."""
        self._run(self._states[variant])

    # the per-target thread
    def _loop(self, st: _State) -> None:
        interval = st.target.interval_s
        next_at = time.monotonic() + interval if interval else None
        while not self._stopping.is_set():
            timeout = None if next_at is None else max(0.0, next_at - time.monotonic())
            woken = st.wake.wait(timeout)
            if self._stopping.is_set():
                return
            st.wake.clear()
            if not woken and next_at is not None and time.monotonic() < next_at:
                continue
            self._run(st)
            if interval:
                next_at = time.monotonic() + interval

    def _run(self, st: _State) -> None:
        with self._lock:
            st.in_progress = True
        t0 = time.monotonic()
        reason: str | None = None
        message = ""
        report: ProfileReport | None = None
        try:
            report = self._capture(st.target, self._stopping)
        except CaptureError as exc:
            reason, message = exc.reason, str(exc)
        except Exception as exc:  # a fault in one capture must not end the exporter
            reason, message = REASON_INTERNAL, f"{exc.__class__.__name__}: {exc}"
        duration = time.monotonic() - t0
        if message:  # capture errors quote the URL: never its user:password@
            userinfo = split_userinfo(st.target.url.root)[1] or ""
            message = scrub(message, (userinfo, userinfo.partition(":")[2]))
        with self._lock:
            st.in_progress = False
            st.last_duration_s = duration
            if report is not None:
                st.captures += 1
                st.ratio = report.decode_allreduce_ratio
                st.allreduce_s = report.decode_allreduce_seconds_per_step
                st.step_s = report.decode_step_seconds
                st.decode_steps = report.decode_steps
                st.last_success = self._clock()
                st.last_error = None
            else:
                key = reason if reason in st.failures else REASON_INTERNAL
                st.failures[key] += 1
                st.last_error = message
        if report is None:
            log.warning("profile capture of %s failed (%s): %s", st.target.variant, reason, message)
        else:
            log.info(
                "profile capture of %s: decode all-reduce share %s over %d steps",
                st.target.variant,
                report.decode_allreduce_ratio,
                report.decode_steps,
            )

    def last_error(self, variant: str) -> str | None:
        with self._lock:
            st = self._states.get(variant)
            return st.last_error if st else None

    # collector
    def describe(self) -> list[Metric]:
        return []

    def collect(self) -> Iterator[Metric]:
        ratio = GaugeMetricFamily(
            "specload_decode_allreduce_ratio",
            "Share of decode step time spent in all-reduce, last profile (median across ranks).",
            labels=["variant"],
        )
        ar = GaugeMetricFamily(
            "specload_decode_allreduce_seconds_per_step",
            "All-reduce time per decode step, last profile (median across ranks).",
            labels=["variant"],
        )
        step = GaugeMetricFamily(
            "specload_decode_step_seconds",
            "Decode step time, last profile (median across ranks).",
            labels=["variant"],
        )
        steps = GaugeMetricFamily(
            "specload_profile_decode_steps",
            "Decode steps seen per rank by the last successful profile.",
            labels=["variant"],
        )
        last = GaugeMetricFamily(
            "specload_profile_last_success_timestamp_seconds",
            "Unix time of the last successful profile capture.",
            labels=["variant"],
        )
        captures = CounterMetricFamily(
            "specload_profile_captures_total", "Successful profile captures.", labels=["variant"]
        )
        failures = CounterMetricFamily(
            "specload_profile_failures_total",
            "Failed profile captures by reason (profiler_not_enabled, timeout, no_trace, ...).",
            labels=["variant", "reason"],
        )
        busy = GaugeMetricFamily(
            "specload_profile_in_progress", "1 while a profile capture runs.", labels=["variant"]
        )
        took = GaugeMetricFamily(
            "specload_profile_capture_duration_seconds",
            "Wall time of the last profile capture (start to analysed).",
            labels=["variant"],
        )
        with self._lock:
            for variant, st in self._states.items():
                v = [variant]
                for fam, value in (
                    (ratio, st.ratio),
                    (ar, st.allreduce_s),
                    (step, st.step_s),
                    (steps, st.decode_steps),
                    (last, st.last_success),
                    (took, st.last_duration_s),
                ):
                    if value is not None:
                        fam.add_metric(v, float(value))
                captures.add_metric(v, float(st.captures))
                busy.add_metric(v, 1.0 if st.in_progress else 0.0)
                for reason, n in st.failures.items():
                    failures.add_metric([variant, reason], float(n))
        yield from (ratio, ar, step, steps, last, captures, failures, busy, took)
