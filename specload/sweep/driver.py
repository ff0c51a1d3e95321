"""The sweep itself: levels in order, warm-up then measured window, outages, stop.

The driver is independent of Locust: it talks to a :class:`LoadBackend`
(start users, pause them, set the step every new request carries) and is fed
completed request records through :meth:`SweepDriver.on_record`. Clock and
sleep are injected, so the whole sequence is tested with a fake backend and a
fake clock; ``specload run`` plugs in Locust runners and gevent.

Samples belong to exactly one level: the step is set before a level's window
starts and changed when it ends; every request carries the step in force when
it *started*. Requests in flight at a window's end still belong to their
level (they complete during the next warm-up, or in the final drain). The
window's throughput is the tokens that *arrived* during it (of any request)
over its length. A count-based window (``--requests N``) gives its step a
budget of exactly N requests. Requests still in flight at the drain deadline
are stopped and recorded as ``unfinished``; requests lost with a worker are
counted as ``lost``; the users actually running are sampled every tick.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any, Protocol

from specload.records.clientload import level_result as client_level_result
from specload.records.request import RequestRecord
from specload.results.aggregate import LevelAggregate, assess_level
from specload.results.stopping import PrecisionRule, SequentialRule, ThroughputPrecision
from specload.sweep.plan import Level, SweepPlan
from specload.sweep.reconcile import Reconciler, reconcile_flags, reconcile_warnings
from specload.sweep.reconcile import verdicts as reconcile_verdicts
from specload.sweep.search import EarlyVerdict, SloSearch
from specload.sweep.server_metrics import CacheReset
from specload.sweep.stopping import StopPlan
from specload.sweep.window import Outage, Window

log = logging.getLogger("specload.sweep")

# Errors that can mean the target went away (a reload): checked with a probe.
CONNECTION_ERRORS = frozenset({"refused", "reset", "timeout", "http_502", "http_503"})
DRAIN_STEP = "drain"
OUTAGE_SUFFIX = "-outage"
# Users are sampled from this long after a window starts (workers report every second).
USERS_SAMPLE_DELAY_S = 1.5
# After the drain deadline, how long stopped requests have to report as ``unfinished``.
ABORT_REPORT_S = 10.0

# stop() -> the reason the operator asked the run to stop (a signal's name), or None.
StopCheck = Callable[[], str | None]


class LoadBackend(Protocol):
    """What the driver needs from the load generator (Locust runners in practice)."""

    def set_step(self, step: str, budget: int | None = None) -> None: ...
    def start(self, level: Level) -> None: ...
    def pause(self) -> None: ...
    def stop(self) -> None: ...
    def hold(self) -> None: ...
    def in_flight(self) -> int: ...
    def user_count(self) -> int: ...
    def lost(self) -> int: ...
    def workers_left(self) -> int | None: ...


class ServerSide(Protocol):
    def start(self) -> None: ...
    def end(self) -> dict[str, Any]: ...


@dataclass
class OutagePolicy:
    """``wait`` (default) pauses the level until the target is ready again; ``fail`` stops."""

    mode: str = "wait"
    timeout_s: float = 3600.0
    # probe() -> True when the target refuses; wait_ready(timeout_s, stop) raises on timeout,
    # and soon after stop() names a reason (the operator's SIGINT/SIGTERM).
    is_refusing: Callable[[], bool] = lambda: False
    wait_ready: Callable[[float, StopCheck], None] = lambda _timeout, _stop: None


def _step_budget(level: Level) -> int | None:
    """The requests the load may start in the level's step (None: no limit). A trace's
    count is its own: each worker sends its share of the entries once, and a budget
    granted on demand could strand the last entries of one worker behind the surplus
    granted to another (the level then never ended)."""
    return None if level.trace else level.requests


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
    window_start_wall: float | None = None
    window_end_wall: float | None = None
    users_area: float = 0.0  # user-seconds sampled over the window
    users_time: float = 0.0
    users_min: int | None = None
    _last_sample: float | None = None
    lost_at_start: int = 0
    lost: int = 0
    started: int = 0  # records of this level's step that arrived
    probe: ServerSide | None = None
    search_step: int | None = None  # --search: this level's place in the search
    early: EarlyVerdict | None = None  # --search: watches the window for a verdict known early
    cut_short: str | None = None  # --search: why the window ended before its plan
    reconciler: Reconciler | None = None
    cache_reset: CacheReset | None = None
    # --precision: watches the window's metric
    precision: PrecisionRule | ThroughputPrecision | None = None
    sequential: SequentialRule | None = None  # --against: the verdict against the baseline
    stop_reason: str | None = None  # precise, decided, budget, interrupted (None: running)

    @property
    def outages(self) -> list[Outage]:
        out: list[Outage] = []
        for w in (self.warmup, self.window):
            if w is not None:
                out.extend(w.outages)
        return out


class Stopped(Exception):
    """The run was asked to stop (Ctrl-C, SIGTERM) or an outage policy said fail."""


def drain_note(in_flight: int, left_s: float) -> str:
    """The progress line's note while the last requests finish."""
    noun = "request" if in_flight == 1 else "requests"
    return f"draining: {in_flight} {noun} in flight, up to {math.ceil(left_s):.0f}s"


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
        on_record_written: Callable[[RequestRecord], None] | None = None,
        server: Callable[[], ServerSide] | None = None,
        outage: OutagePolicy | None = None,
        metadata: dict[str, Any] | None = None,
        tick_s: float = 0.05,
        drain_timeout_s: float = 60.0,
        on_tick: Callable[[SweepDriver], None] | None = None,
        reset_cache: Callable[[], CacheReset] | None = None,
        objectives: Mapping[str, float] | None = None,
        search: SloSearch | None = None,
        stopping: StopPlan | None = None,
        on_precision: Callable[[str, float], None] | None = None,
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
        self.reset_cache = reset_cache
        self.objectives = dict(objectives or {})
        self.search = search
        self.stopping = stopping if stopping is not None and stopping.active else None
        self.on_precision = on_precision  # (step, half-width) after each precision look
        levels = [search.first()] if search is not None else list(plan.levels)
        self.states = [LevelState(level, aggregate=LevelAggregate(objectives)) for level in levels]
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
    def on_record(self, record: RequestRecord) -> None:
        """A finished request (any step): completed, failed, or unfinished."""
        self.records += 1
        if self.on_record_written is not None:
            self.on_record_written(record)
        for s in self.states:
            if s.reconciler is not None:
                s.reconciler.add(record)
        if record.error_kind in CONNECTION_ERRORS:
            if not self._suspect_outage:
                self._suspect_since = self.clock()
            self._suspect_outage = True
        # Tokens count for every window they arrived in, whichever level sent them.
        for s in self.states:
            lo, hi = s.window_start_wall, s.window_end_wall
            if lo is not None and record.end_s >= lo and (hi is None or record.start_s <= hi):
                s.aggregate.add_window_tokens(record, lo, hi if hi is not None else math.inf)
                if isinstance(s.precision, ThroughputPrecision):
                    s.precision.add_record(record, record.step == s.level.name)
        state = self._by_step.get(record.step)
        if state is None:
            return
        state.aggregate.add(record)
        state.started += 1
        if state.window is not None and state.window.end_s is None:
            state.window.completed += 1
            if state.early is not None:
                state.early.add(record)
            value = self.stopping.metric.value(record) if self.stopping is not None else None
            if value is not None:  # TPOT 0 too (its tokens came in one read)
                for rule in (state.precision, state.sequential):
                    if isinstance(rule, PrecisionRule | SequentialRule):
                        rule.add(record.start_s, value)

    def request_stop(self, reason: str) -> None:
        """Ask the sweep to stop at the next tick (signal handlers call this)."""
        if self._stop_requested is None:
            self._stop_requested = reason

    def stop_requested(self) -> str | None:
        """Why the sweep was asked to stop (a signal's name), or None: waits poll it."""
        return self._stop_requested

    # -- the sequence ---------------------------------------------------------
    def run(self) -> dict[str, Any]:
        self.started_wall = self.wall()
        self.sweep_start = self.clock()
        self.write_summary()
        try:
            if self.states:
                self._begin_level(self.states[0])
            i = 0
            while i < len(self.states):  # a search appends its next level as it goes
                state = self.states[i]
                following = self.states[i + 1] if i + 1 < len(self.states) else None
                self._run_level(state, following)
                i += 1
            self._drain()
            self.status = "complete"
        except Stopped as stop:
            self.status = "failed" if str(stop).startswith(("outage", "workers")) else "interrupted"
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
            # The stopped requests report as unfinished: give them a moment to arrive.
            deadline = self.clock() + ABORT_REPORT_S / 3
            while self.backend.in_flight() > 0 and self.clock() < deadline:
                self.sleep(self.tick_s)
            self.ended_wall = self.wall()
            summary = self.write_summary()
        return summary

    def _begin_level(self, state: LevelState) -> None:
        """Switch the load to ``state``'s level: step first, then users, then its first clock."""
        level = state.level
        self.current = state
        state.started_at = iso(self.wall())
        state.lost_at_start = self.backend.lost()
        if self.reset_cache is not None:
            # No request starts while the server resets (the old level's window is over,
            # the new one's not begun: nothing is labelled with either step meanwhile).
            self.backend.set_step(DRAIN_STEP, 0)
            state.cache_reset = reset = self.reset_cache()
            if not reset.again:
                self.reset_cache = None  # the server does not serve it: once is enough
        log.info("level %s begins (%d users)", level.name, level.users)
        if level.warmup_s > 0:
            state.phase = "warmup"
            self.backend.set_step(level.warmup_name)
            self.backend.start(level)
            self.sleep(0)  # let the users spawn before anything else runs
            state.warmup = Window(self.clock(), level.warmup_s)
        else:
            # No warm-up: the first scrape goes before the level's first request, so a level
            # whose requests all end inside its window brackets them whole (reconciled
            # exactly). Users still running from the last level start nothing meanwhile: a
            # request of this level's step must not end before its window opens.
            self.backend.set_step(DRAIN_STEP, 0)
            self._start_probe(state)
            state.phase = "measure"
            self.backend.set_step(level.name, _step_budget(level))
            self._open_window(state)
            self.backend.start(level)
            self.sleep(0)  # let the users spawn before anything else runs

    def _open_window(self, state: LevelState) -> None:
        level = state.level
        state.window = Window(self.clock(), level.duration_s, level.requests)
        if self.search is not None:
            state.early = EarlyVerdict(self.search.attainment, level.requests)
        state.window_start_wall = self.wall()
        if self.stopping is not None:
            state.precision, state.sequential = self.stopping.rules(level)
            if isinstance(state.precision, ThroughputPrecision):
                state.precision.start_s = state.window_start_wall
        state.window_started_at = iso(state.window_start_wall)

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
            self.backend.set_step(level.name, _step_budget(level))
            self._open_window(state)
        assert state.window is not None
        if state.probe is None:
            self._start_probe(state)  # within the first milliseconds of the window
        probe = state.probe
        self._run_window(state, state.window, level.name)
        state.window.finish(self.clock())
        if state.stop_reason is None:
            state.stop_reason = "decided" if state.cut_short is not None else "budget"
        if state.sequential is not None and not state.sequential.decided:
            state.sequential.look(last=True)  # the budget is spent: what is left of alpha
        state.window_end_wall = self.wall()
        if isinstance(state.precision, ThroughputPrecision):
            state.precision.end_s = state.window_end_wall
        state.window_ended_at = iso(state.window_end_wall)
        state.lost = self.backend.lost() - state.lost_at_start
        log.info("level %s window ends after %.3fs", level.name, state.window.active_s(0))
        if following is None and self.search is not None:
            following = self._searched(state)
        if probe is not None and following is not None and following.level.warmup_s <= 0:
            # The next level scrapes before its users start: this one's last scrape first,
            # so the two levels' server blocks do not overlap.
            self._end_probe(state, probe)
            probe = None
        if following is not None:
            self._begin_level(following)
        else:
            # The drain starts now: no new request, the in-flight ones finish.
            self.backend.set_step(DRAIN_STEP, 0)
            self.backend.hold()
            self._drain_start = self.clock()
            self.current = None
        if probe is not None:
            self._end_probe(state, probe)
        state.ended_at = state.window_ended_at
        state.phase = "done"
        for warning in self.level_warnings(state):
            log.warning("level %s: %s", level.name, warning)
        self.write_summary()

    def _searched(self, state: LevelState) -> LevelState | None:
        """The search's next level after ``state`` (its requests all in: the window ended)."""
        assert self.search is not None
        state.search_step = len(self.search.steps)
        nxt = self.search.next_level(
            state.level, state.aggregate.all.slo_attainment_ratio, state.cut_short
        )
        if nxt is None:
            return None
        new = LevelState(nxt, aggregate=LevelAggregate(self.objectives))
        self.states.append(new)
        self._by_step[nxt.name] = new
        return new

    @staticmethod
    def _end_probe(state: LevelState, probe: ServerSide) -> None:
        state.server = probe.end()
        times = getattr(probe, "end_times", None)
        if state.reconciler is not None and times is not None:
            state.reconciler.close(*times)

    def _start_probe(self, state: LevelState) -> None:
        if self.server_factory is None:
            return
        probe = state.probe = self.server_factory()
        probe.start()
        times = getattr(probe, "start_times", None)
        if times is not None:
            state.reconciler = Reconciler(*times)

    def _run_window(self, state: LevelState, window: Window, step: str) -> None:
        while not window.done(self.clock()):
            self._check_stop()
            if self.backend.workers_left() == 0:
                # nobody runs the load any more: a window by requests would never end
                raise Stopped(
                    "workers: every worker was lost (its link or its process failed), "
                    "none runs the load"
                )
            if window is state.window:
                # a request lost with a worker is never recorded: it counts as it is booked
                window.lost = max(0, self.backend.lost() - state.lost_at_start)
            if self._suspect_outage:
                self._suspect_outage = False
                if self.outage.is_refusing():
                    self._handle_outage(state, window, step)
                    continue
            if window is state.window:
                self._sample_users(state, window)
                if state.early is not None and self._cut_short(state, window):
                    return
                if self.stopping is not None and self._stopped_early(state, window):
                    return
            if self.on_tick is not None:
                self.on_tick(self)
            remaining = window.remaining_s(self.clock())
            pause = self.tick_s if remaining is None else min(self.tick_s, remaining)
            if pause > 0:
                self.sleep(pause)

    def _cut_short(self, state: LevelState, window: Window) -> bool:
        """A search level whose verdict is already known ends now (``state.cut_short``)."""
        assert state.early is not None
        if window.paused:
            return False
        reason = state.early.verdict(self._budget_share(window))
        if reason is None:
            return False
        state.cut_short = reason
        log.info("level %s cut short: %s", state.level.name, reason)
        return True

    def _stopped_early(self, state: LevelState, window: Window) -> bool:
        """``--precision`` or ``--against`` ends the window now (``state.stop_reason``)."""
        if window.paused:
            return False
        seq, precision = state.sequential, state.precision
        share = self._budget_share(window)
        if seq is not None and seq.due(share) and seq.look(share) is not None:
            state.stop_reason = "decided"
            log.info(
                "level %s decided after %d requests: %s",
                state.level.name,
                seq.verdict_requests,
                seq.verdict,
            )
            return True
        if precision is None or not precision.due():
            return False
        precise = precision.look(self.wall())
        if self.on_precision is not None and precision.half_width is not None:
            self.on_precision(state.level.name, precision.half_width)
        if precise:
            state.stop_reason = "precise"
            log.info(
                "level %s precise after %d requests: +-%.2f%%",
                state.level.name,
                precision.reached_at,
                (precision.half_width or 0.0) * 100.0,
            )
            return True
        return False

    def _budget_share(self, window: Window) -> float:
        """How much of the window's budget is used: requests, else time."""
        if window.target_requests:
            return window.completed / window.target_requests
        assert window.target_s is not None
        return window.active_s(self.clock()) / window.target_s if window.target_s > 0 else 1.0

    def _sample_users(self, state: LevelState, window: Window) -> None:
        """Integrate the users actually running over the window (not during outages)."""
        now = self.clock()
        last, state._last_sample = state._last_sample, now
        if window.paused or now - window.start_s < USERS_SAMPLE_DELAY_S or last is None:
            return
        users = self.backend.user_count()
        dt = now - max(last, window.start_s + USERS_SAMPLE_DELAY_S)
        if dt > 0:
            state.users_area += users * dt
            state.users_time += dt
        state.users_min = users if state.users_min is None else min(state.users_min, users)

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
            self.outage.wait_ready(self.outage.timeout_s, self.stop_requested)
        except Exception as exc:  # the readiness gate timed out, or the operator stopped it
            window.resume(self.clock())
            if self._stop_requested is not None:
                raise Stopped(self._stop_requested) from None
            raise Stopped(f"outage: {exc}") from None
        window.resume(self.clock())
        outage.end_wall = self.wall()
        self.phase_note = ""
        self._suspect_outage = False
        self._suspect_since = None
        budget = None
        if window.target_requests is not None:
            # What the level still needs: its requests so far all have records (the users
            # stopped for the outage recorded theirs as unfinished) once they arrive.
            deadline = self.clock() + ABORT_REPORT_S
            while self.backend.in_flight() > 0 and self.clock() < deadline:
                self._check_stop()
                self.sleep(self.tick_s)
            budget = max(0, window.target_requests - window.completed)
        self.backend.set_step(step, budget)
        self.backend.start(state.level)

    def _check_stop(self) -> None:
        if self._stop_requested is not None:
            raise Stopped(self._stop_requested)

    def _drain(self) -> None:
        """Let the last level's in-flight requests finish; no new request starts meanwhile."""
        if not self.states:
            return
        start = self._drain_start if self._drain_start is not None else self.clock()
        log.info(
            "drain: %d requests in flight, up to %.0fs",
            self.backend.in_flight(),
            self.drain_timeout_s,
        )
        while (
            left_s := self.drain_timeout_s - (self.clock() - start)
        ) > 0 and self.backend.in_flight() > 0:
            self._check_stop()
            self.phase_note = drain_note(self.backend.in_flight(), left_s)
            if self.on_tick is not None:
                self.on_tick(self)
            self.sleep(min(self.tick_s, left_s))
        left = self.backend.in_flight()
        if left > 0:
            # Past the deadline: stop the users; their requests report as ``unfinished``.
            log.warning(
                "drain: %d requests still in flight after %.0fs: stopped, recorded as unfinished",
                left,
                self.drain_timeout_s,
            )
            self.phase_note = f"stopping {left} unfinished requests"
            self.backend.stop()
            deadline = self.clock() + ABORT_REPORT_S
            while self.backend.in_flight() > 0 and self.clock() < deadline:
                self.sleep(self.tick_s)
        last = self.states[-1]
        if last.phase == "done":  # requests lost with a worker during the drain
            last.lost = self.backend.lost() - last.lost_at_start
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
        state.stop_reason = "interrupted"

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
        numbers = state.aggregate.result(duration)
        rec = state.reconciler.result(state.server) if state.reconciler is not None else None
        spec_ok, tokens_ok = reconcile_verdicts(rec)
        users_held = state.users_area / state.users_time if state.users_time > 0 else None
        # The client's own lag and busy share over the window (a backend that measures them).
        client_load = getattr(self.backend, "client_load", None)
        client = client_load(level.name) if client_load is not None else None
        flags, warnings = assess_level(
            state.aggregate,
            numbers,
            concurrency=level.concurrency,
            planned_duration_s=level.duration_s,
            lost=state.lost,
            users_held=users_held,
            users_min=state.users_min,
            client=client,
            in_flight_settled=self.sweep_end is not None,
        )
        flags.extend(f for f in reconcile_flags(rec) if f not in flags)
        if state.cut_short is not None:
            flags.append("cut_short")
            warnings.append(f"the search ended this level early: {state.cut_short}")
        warnings.extend(reconcile_warnings(rec))
        reset = state.cache_reset
        if reset is not None and reset.done is False and not reset.busy:
            warnings.append(f"the server's prefix cache was not reset: {reset.detail}")
        return {
            "name": level.name,
            "concurrency": level.concurrency,
            "request_rate": level.request_rate,
            "max_concurrency": level.max_concurrency,
            "complete": state.phase == "done",
            "warmup_s": level.warmup_s,
            "planned_duration_s": level.duration_s,
            "planned_requests": level.requests,
            "started_at": state.started_at,
            "ended_at": state.ended_at,
            "window_started_at": state.window_started_at,
            "window_ended_at": state.window_ended_at,
            **numbers,
            **client_level_result(client),
            "lost": state.lost,
            "users_held": users_held,
            "users_min": state.users_min,
            "window_start_s": state.window_start_wall,
            "window_end_s": state.window_end_wall,
            "output_throughput_basis": "token_arrivals",
            "flags": flags,
            "warnings": warnings,
            "outages": outages,
            "server": state.server,
            "prefix_cache_reset": reset.done if reset is not None else None,
            "prefix_cache_hit_ratio": state.server.get("prefix_cache_hit_ratio"),
            "reconciliation": rec,
            "spec_decode_reconciled": spec_ok,
            "tokens_reconciled": tokens_ok,
            "search_step": state.search_step,
            "search_cut_short": state.cut_short,
            **self._stopping_result(state),
        }

    def _stopping_result(self, state: LevelState) -> dict[str, Any]:
        """Why the level ended and, under ``--precision``/``--against``, how sure it got."""
        out: dict[str, Any] = {"stop_reason": state.stop_reason}
        precision = state.precision
        if precision is not None:
            seen = (
                precision.requests
                if isinstance(precision, ThroughputPrecision)
                else len(precision.values)
            )
            ended = state.phase in ("done", "partial") and state.stop_reason != "precise"
            if precision.looked_at < seen and ended:
                precision.look(self.wall())  # the level's last word on its precision
            out["precision_half_width"] = precision.half_width
            out["precision_requests"] = precision.looked_at or None
        seq = state.sequential
        if seq is not None:
            last = seq.last
            out["verdict"] = seq.verdict
            out["verdict_requests"] = seq.verdict_requests
            out["verdict_ratio"] = last.ratio if last is not None else None
            out["verdict_interval"] = (
                [last.low, last.high]
                if last is not None
                and last.low is not None
                and last.high is not None
                and math.isfinite(last.low)
                and math.isfinite(last.high)
                else None
            )
            out["verdict_looks"] = len(seq.looks)
        return out

    def level_warnings(self, state: LevelState) -> list[str]:
        """The level's warnings as of now (logged when it ends)."""
        return list(self.level_result(state)["warnings"])

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
        levels = [self.level_result(s) for s in self.states if s.phase != "pending"]
        wall_s = None
        overhead = None
        if self.sweep_start is not None:
            end = self.sweep_end if self.sweep_end is not None else self.clock()
            wall_s = end - self.sweep_start
            overhead = wall_s - planned - outage_s
        status = self.status
        if status == "complete" and any(
            set(level["flags"]) & {"unfinished", "lost", "users_short"} for level in levels
        ):
            status = "incomplete"
        return {
            **self.metadata,
            "status": status,
            "stop_reason": self.stop_reason,
            "started_at": iso(self.started_wall) if self.started_wall is not None else None,
            "ended_at": iso(self.ended_wall) if self.ended_wall is not None else None,
            "mode": self.plan.mode,
            "wall_time_s": wall_s,
            "planned_s": planned,
            "outage_s": outage_s,
            "overhead_s": overhead,
            "levels": levels,
            **({"search": self.search.result()} if self.search is not None else {}),
        }

    def write_summary(self) -> dict[str, Any]:
        summary = self.summary()
        self.on_summary(summary)
        return summary
