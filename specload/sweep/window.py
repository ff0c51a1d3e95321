"""A phase of a level (warm-up or measured window) whose clock stops during outages.

Pure state, driven by the caller's clock, so it is tested with a fake clock.
"""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass
class Outage:
    """A span when the target refused connections (a reload, a crash)."""

    start_s: float  # the driver's monotonic clock
    end_s: float | None = None
    start_wall: float | None = None  # wall clock (time.time), for the summary
    end_wall: float | None = None

    @property
    def duration_s(self) -> float | None:
        return None if self.end_s is None else self.end_s - self.start_s


@dataclass
class Window:
    """Active time excluding pauses; done after ``target_s`` active s or ``target_requests``."""

    start_s: float
    target_s: float | None
    target_requests: int | None = None
    outages: list[Outage] = field(default_factory=list)
    completed: int = 0
    lost: int = 0  # requests lost with a worker (never to be recorded): they count too
    end_s: float | None = None

    @property
    def paused(self) -> bool:
        return bool(self.outages) and self.outages[-1].end_s is None

    def pause(self, now_s: float) -> Outage:
        if self.paused:
            return self.outages[-1]
        outage = Outage(now_s)
        self.outages.append(outage)
        return outage

    def resume(self, now_s: float) -> None:
        if self.paused:
            self.outages[-1].end_s = now_s

    def paused_s(self, now_s: float) -> float:
        return sum((o.end_s if o.end_s is not None else now_s) - o.start_s for o in self.outages)

    def active_s(self, now_s: float) -> float:
        end = self.end_s if self.end_s is not None else now_s
        return max(0.0, end - self.start_s - self.paused_s(end))

    def remaining_s(self, now_s: float) -> float | None:
        """Active seconds left, or ``None`` when the window ends by request count."""
        if self.target_s is None:
            return None
        return max(0.0, self.target_s - self.active_s(now_s))

    def done(self, now_s: float) -> bool:
        if self.paused:
            return False
        if self.target_requests is not None:
            return self.completed + self.lost >= self.target_requests
        assert self.target_s is not None
        return self.active_s(now_s) >= self.target_s

    def finish(self, now_s: float) -> None:
        self.resume(now_s)
        if self.end_s is None:
            self.end_s = now_s
