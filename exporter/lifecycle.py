"""The life of one server through its reloads, from the outcome of each poll.

States (exactly one is current):

- ``unknown``: not polled yet;
- ``ready``: the last poll of ``/metrics`` succeeded;
- ``loading``: a reload is in progress — connections are refused after the
  server had been up (vLLM does not listen while it loads), or the log shows
  the engine starting or checkpoints loading;
- ``down``: failing otherwise (refused and never seen up nor loading, or a
  listening server that times out, answers 5xx or garbage).

A reload ends at the first successful poll after it began; its duration runs
from the first failed poll (or the new process's ``process_start_time_seconds``
when that is earlier and after the last good poll) to that success, so it is
within one poll interval of the true downtime. A restart between two polls
(``process_start_time_seconds`` changed, or counters went backwards) also
counts as a reload, lasting from the new process's start to the poll that
saw it — unless the caller knows the page is another process that answers at
the same address (``replica``: several replicas behind one load balancer),
which is no reload.
"""

from __future__ import annotations

from dataclasses import dataclass

STATES = ("ready", "loading", "down", "unknown")


@dataclass(frozen=True)
class LifecycleView:
    state: str
    reload_in_progress: bool
    reload_elapsed_s: float | None
    last_reload_duration_s: float | None
    reloads_total: int
    start_time_s: float | None  # the server process's start (process_start_time_seconds)


class Lifecycle:
    def __init__(self) -> None:
        self.state = "unknown"
        self.reloads_total = 0
        self.last_reload_duration_s: float | None = None
        self.reload_started_s: float | None = None
        self.last_ok_s: float | None = None
        self.process_start_s: float | None = None
        self._ever_ready = False

    def ok(
        self,
        now_s: float,
        process_start_s: float | None,
        *,
        restarted: bool = False,
        replica: bool = False,
    ) -> None:
        """A successful poll at ``now_s``; ``restarted``: counters went backwards;
        ``replica``: the page is another process running beside the last one (no restart;
        the start time kept is the one first seen)."""
        if replica:
            process_start_s = None
        changed = (
            process_start_s is not None
            and self.process_start_s is not None
            and abs(process_start_s - self.process_start_s) > 1e-3
        )
        if self.state == "loading" and self.reload_started_s is not None:
            start = self.reload_started_s
            if (
                process_start_s is not None
                and changed
                and (self.last_ok_s is None or process_start_s > self.last_ok_s)
            ):
                start = min(start, process_start_s)
            self._finish(now_s - start)
        elif self.state in ("ready", "down") and (changed or restarted):
            # Restarted between two polls: from the new process's start (if known) to now.
            if changed and process_start_s is not None and process_start_s <= now_s:
                self._finish(now_s - process_start_s)
            elif self.last_ok_s is not None:
                self._finish(now_s - self.last_ok_s)
            else:
                self._finish(None)
        self.state = "ready"
        self.reload_started_s = None
        self.last_ok_s = now_s
        self._ever_ready = True
        if process_start_s is not None:
            self.process_start_s = process_start_s

    def _finish(self, duration_s: float | None) -> None:
        self.reloads_total += 1
        if duration_s is not None:
            self.last_reload_duration_s = max(0.0, duration_s)

    def failed(
        self,
        now_s: float,
        *,
        refused: bool,
        log_loading: bool = False,
        log_started_s: float | None = None,
    ) -> None:
        """A failed poll; ``refused``: nothing listens; ``log_loading``: the log shows a load."""
        if self.state == "loading":
            return  # still loading, whatever the failure looks like
        if (refused and self._ever_ready) or log_loading:
            self.state = "loading"
            start = now_s
            if log_started_s is not None and (
                self.last_ok_s is None or log_started_s > self.last_ok_s
            ):
                start = min(start, log_started_s)
            self.reload_started_s = start
            return
        self.state = "down"

    def view(self, now_s: float) -> LifecycleView:
        loading = self.state == "loading"
        elapsed = None
        if loading and self.reload_started_s is not None:
            elapsed = max(0.0, now_s - self.reload_started_s)
        return LifecycleView(
            state=self.state,
            reload_in_progress=loading,
            reload_elapsed_s=elapsed,
            last_reload_duration_s=self.last_reload_duration_s,
            reloads_total=self.reloads_total,
            start_time_s=self.process_start_s,
        )
