"""The sweep itself: levels in order, warm-up then measured window, outages, stop.

The driver is independent of Locust: it talks to a :class:`LoadBackend`
(start users, pause them, set the step every new request carries) and is fed
completed request records through :meth:`SweepDriver.on_record`. Clock and
sleep are injected, so the whole sequence is tested with a fake backend and a
fake clock; ``specload run`` plugs in Locust runners and gevent.

Samples belong to exactly one level: the step is set before a level's window
starts and changed when it ends; every request carries the step in force when
it *started*. Requests in flight at a window's end still belong to their
level (they complete during the next warm-up, or in the final drain), so the
window's throughput counts the requests started in it.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any, Protocol

from specload.results.aggregate import LevelAggregate, RecordView
from specload.sweep.plan import Level, SweepPlan
from specload.sweep.window import Outage, Window

log = logging.getLogger("specload.sweep")

# Errors that can mean the target went away (a reload): checked with a probe.
CONNECTION_ERRORS = frozenset({"refused", "reset", "timeout", "http_502", "http_503"})
DRAIN_STEP = "drain"
OUTAGE_SUFFIX = "-outage"


class LoadBackend(Protocol):
    """What the driver needs from the load generator (Locust runners in practice)."""

    def set_step(self, step: str) -> None: ...
    def start(self, level: Level) -> None: ...
    def pause(self) -> None: ...
    def stop(self) -> None: ...
    def hold(self) -> None: ...
    def in_flight(self) -> int: ...


class ServerSide(Protocol):
    def start(self) -> None: ...
    def end(self) -> dict[str, Any]: ...


@dataclass
class OutagePolicy:
    """``wait`` (default) pauses the level until the target is ready again; ``fail`` stops."""

    mode: str = "wait"
    timeout_s: float = 3600.0
    # probe() -> True when the target refuses; wait_ready(timeout_s) raises on timeout.
    is_refusing: Callable[[], bool] = lambda: False
    wait_ready: Callable[[float], None] = lambda _timeout: None


@dataclass
class LevelState:
    level: Level
    phase: str = "pending"  # pending, warmup, measure, done
    warmup: Window | None = None
    window: Window | None = None
    started_at: str | None = None
    ended_at: str | None = None
    window_started_at: str | None = None
    window_ended_at: str | None = None
    server: dict[str, Any] = field(default_factory=dict)
    aggregate: LevelAggregate = field(default_factory=LevelAggregate)

    @property
    def outages(self) -> list[Outage]:
        out: list[Outage] = []
        for w in (self.warmup, self.window):
            if w is not None:
                out.extend(w.outages)
        return out


class Stopped(Exception):
    """The run was asked to stop (Ctrl-C, SIGTERM) or an outage policy said fail."""


def iso(ts: float) -> str:
    return datetime.fromtimestamp(ts, UTC).isoformat(timespec="milliseconds")


class SweepDriver:
    def __init__(
        self,
        plan: SweepPlan,
        backend: LoadBackend,
        *,
        clock: Callable[[], float],
        wall: Callable[[], float],
        sleep: Callable[[float], None],
        on_summary: Callable[[dict[str, Any]], None],
        on_record_written: Callable[[Mapping[str, Any]], None] | None = None,
        server: Callable[[], ServerSide] | None = None,
        outage: OutagePolicy | None = None,
        metadata: dict[str, Any] | None = None,
        tick_s: float = 0.05,
        drain_timeout_s: float = 60.0,
        on_tick: Callable[[SweepDriver], None] | None = None,
    ) -> None:
        self.plan = plan
        self.backend = backend
        self.clock = clock
        self.wall = wall
        self.sleep = sleep
        self.on_summary = on_summary
        self.on_record_written = on_record_written
        self.server_factory = server
        self.outage = outage or OutagePolicy()
        self.metadata = dict(metadata or {})
        self.tick_s = tick_s
        self.drain_timeout_s = drain_timeout_s
        self.on_tick = on_tick
        self.states = [LevelState(level) for level in plan.levels]
        self._by_step = {s.level.name: s for s in self.states}
        self.current: LevelState | None = None
        self.status = "running"
        self.stop_reason: str | None = None
        self._stop_requested: str | None = None
        self._suspect_outage = False
        self._suspect_since: float | None = None
        self.records = 0
        self.started_wall: float | None = None
        self.ended_wall: float | None = None
        self.sweep_start: float | None = None
        self.sweep_end: float | None = None
        self.phase_note = ""
        self._drain_start: float | None = None

    # -- inputs -------------------------------------------------------------
    def on_record(self, raw: Mapping[str, Any]) -> None:
        """A completed request (any step). Called where records are aggregated."""
        self.records += 1
        if self.on_record_written is not None:
            self.on_record_written(raw)
        view = RecordView(raw)
        state = self._by_step.get(view.step)
        if view.error in CONNECTION_ERRORS:
            if not self._suspect_outage:
                self._suspect_since = self.clock()
            self._suspect_outage = True
        if state is None:
            return
        state.aggregate.add(view)
        if state.window is not None and state.window.end_s is None:
            state.window.completed += 1

    def request_stop(self, reason: str) -> None:
        """Ask the sweep to stop at the next tick (signal handlers call this)."""
        if self._stop_requested is None:
            self._stop_requested = reason

    # -- the sequence ---------------------------------------------------------
    def run(self) -> dict[str, Any]:
        self.started_wall = self.wall()
        self.sweep_start = self.clock()
        self.write_summary()
        try:
            if self.states:
                self._begin_level(self.states[0])
            for i, state in enumerate(self.states):
                following = self.states[i + 1] if i + 1 < len(self.states) else None
                self._run_level(state, following)
            self._drain()
            self.status = "complete"
        except Stopped as stop:
            self.status = "failed" if str(stop).startswith("outage") else "interrupted"
            self.stop_reason = str(stop)
            if self.current is not None and self.current.phase not in ("done", "pending"):
                self._close_current_partial()
        except Exception as exc:  # a bug: keep what was measured, say why it stopped
            self.status = "failed"
            self.stop_reason = f"error: {type(exc).__name__}: {exc}"
            if self.current is not None and self.current.phase not in ("done", "pending"):
                self._close_current_partial()
            raise
        finally:
            self.sweep_end = self.clock()
            self.backend.stop()
            self.ended_wall = self.wall()
            summary = self.write_summary()
        return summary

    def _begin_level(self, state: LevelState) -> None:
        """Switch the load to ``state``'s level: step first, then users, then its first clock."""
        level = state.level
        self.current = state
        state.started_at = iso(self.wall())
        log.info("level %s begins (%d users)", level.name, level.users)
        if level.warmup_s > 0:
            state.phase = "warmup"
            self.backend.set_step(level.warmup_name)
            self.backend.start(level)
            self.sleep(0)  # let the users spawn before anything else runs
            state.warmup = Window(self.clock(), level.warmup_s)
        else:
            state.phase = "measure"
            self.backend.set_step(level.name)
            self.backend.start(level)
            self.sleep(0)  # let the users spawn before anything else runs
            state.window = Window(self.clock(), level.duration_s, level.requests)
            state.window_started_at = iso(self.wall())

    def _run_level(self, state: LevelState, following: LevelState | None) -> None:
        """Run a level already begun; begin the next one the moment its window ends.

        Scrapes and the summary write happen while the next level's clock runs, so they
        cost no wall time beyond the planned windows.
        """
        level = state.level
        if state.warmup is not None and state.window is None:
            self._run_window(state, state.warmup, level.warmup_name)
            state.warmup.finish(self.clock())
            state.phase = "measure"
            self.backend.set_step(level.name)
            state.window = Window(self.clock(), level.duration_s, level.requests)
            state.window_started_at = iso(self.wall())
        assert state.window is not None
        probe = self.server_factory() if self.server_factory is not None else None
        if probe is not None:
            probe.start()  # within the first milliseconds of the window
        self._run_window(state, state.window, level.name)
        state.window.finish(self.clock())
        state.window_ended_at = iso(self.wall())
        log.info("level %s window ends after %.3fs", level.name, state.window.active_s(0))
        if following is not None:
            self._begin_level(following)
        else:
            # The drain starts now: no new request, the in-flight ones finish.
            self.backend.set_step(DRAIN_STEP)
            self.backend.hold()
            self._drain_start = self.clock()
            self.current = None
        if probe is not None:
            state.server = probe.end()
        state.ended_at = state.window_ended_at
        state.phase = "done"
        self.write_summary()

    def _run_window(self, state: LevelState, window: Window, step: str) -> None:
        while not window.done(self.clock()):
            self._check_stop()
            if self._suspect_outage:
                self._suspect_outage = False
                if self.outage.is_refusing():
                    self._handle_outage(state, window, step)
                    continue
            if self.on_tick is not None:
                self.on_tick(self)
            remaining = window.remaining_s(self.clock())
            pause = self.tick_s if remaining is None else min(self.tick_s, remaining)
            if pause > 0:
                self.sleep(pause)

    def _handle_outage(self, state: LevelState, window: Window, step: str) -> None:
        # The outage began with the first connection error, a tick or so ago.
        since = self._suspect_since if self._suspect_since is not None else self.clock()
        lag = max(0.0, self.clock() - since)
        outage = window.pause(max(since, window.start_s))
        outage.start_wall = self.wall() - lag
        self.backend.pause()
        self.backend.set_step(state.level.name + OUTAGE_SUFFIX)
        self.phase_note = f"outage since {iso(outage.start_wall)}: waiting for the target"
        self.write_summary()
        if self.outage.mode == "fail":
            window.resume(self.clock())
            raise Stopped("outage: the target refused connections (--on-outage fail)")
        try:
            self.outage.wait_ready(self.outage.timeout_s)
        except Exception as exc:  # the readiness gate timed out
            window.resume(self.clock())
            raise Stopped(f"outage: {exc}") from None
        window.resume(self.clock())
        outage.end_wall = self.wall()
        self.phase_note = ""
        self._suspect_outage = False
        self._suspect_since = None
        self.backend.set_step(step)
        self.backend.start(state.level)

    def _check_stop(self) -> None:
        if self._stop_requested is not None:
            raise Stopped(self._stop_requested)

    def _drain(self) -> None:
        """Let the last level's in-flight requests finish; no new request starts meanwhile."""
        if not self.states:
            return
        start = self._drain_start if self._drain_start is not None else self.clock()
        log.info("drain: %d requests in flight", self.backend.in_flight())
        self.phase_note = "draining in-flight requests"
        while self.clock() - start < self.drain_timeout_s and self.backend.in_flight() > 0:
            self._check_stop()
            if self.on_tick is not None:
                self.on_tick(self)
            self.sleep(self.tick_s)
        log.info("drain done after %.3fs", self.clock() - start)
        self.phase_note = ""

    def _close_current_partial(self) -> None:
        state = self.current
        assert state is not None
        now = self.clock()
        for w in (state.warmup, state.window):
            if w is not None:
                w.finish(now)
        state.ended_at = iso(self.wall())
        if state.window is not None:
            state.window_ended_at = state.ended_at
        state.phase = "partial"

    # -- results ----------------------------------------------------------------
    def level_result(self, state: LevelState) -> dict[str, Any]:
        level = state.level
        window = state.window
        now = self.clock()
        duration = window.active_s(now) if window is not None else 0.0
        outages = []
        for o in state.outages:
            outages.append(
                {
                    "start": iso(o.start_wall) if o.start_wall is not None else None,
                    "end": iso(o.end_wall) if o.end_wall is not None else None,
                    "duration_s": o.duration_s,
                    "phase": "warmup"
                    if state.warmup is not None and o in state.warmup.outages
                    else "measure",
                }
            )
        return {
            "name": level.name,
            "concurrency": level.concurrency,
            "request_rate": level.request_rate,
            "max_concurrency": level.max_concurrency,
            "complete": state.phase == "done",
            "warmup_s": level.warmup_s,
            "started_at": state.started_at,
            "ended_at": state.ended_at,
            "window_started_at": state.window_started_at,
            "window_ended_at": state.window_ended_at,
            **state.aggregate.result(duration),
            "outages": outages,
            "server": state.server,
        }

    def summary(self) -> dict[str, Any]:
        planned = 0.0
        outage_s = 0.0
        for state in self.states:
            if state.phase == "pending":
                continue
            for w in (state.warmup, state.window):
                if w is not None:
                    end = w.end_s if w.end_s is not None else self.clock()
                    planned += w.active_s(end)
                    outage_s += w.paused_s(end)
        wall_s = None
        overhead = None
        if self.sweep_start is not None:
            end = self.sweep_end if self.sweep_end is not None else self.clock()
            wall_s = end - self.sweep_start
            overhead = wall_s - planned - outage_s
        return {
            **self.metadata,
            "status": self.status,
            "stop_reason": self.stop_reason,
            "started_at": iso(self.started_wall) if self.started_wall is not None else None,
            "ended_at": iso(self.ended_wall) if self.ended_wall is not None else None,
            "mode": self.plan.mode,
            "wall_time_s": wall_s,
            "planned_s": planned,
            "outage_s": outage_s,
            "overhead_s": overhead,
            "levels": [self.level_result(s) for s in self.states if s.phase != "pending"],
        }

    def write_summary(self) -> dict[str, Any]:
        summary = self.summary()
        self.on_summary(summary)
        return summary
