"""The client's own load: how late its event loop ran and how busy its process was.

Every process that runs users measures itself (:mod:`specload.load.lag`), per step:

- **lag**: a greenlet sleeps :data:`LAG_INTERVAL_S` again and again and records how late it
  wakes (a histogram of seconds). Every other greenlet of the process — the reactor reading
  the streams, the users sending — waits in the same loop, so a late wake-up is a late read or
  a late send. The reactor lets the loop run at least every 2 ms, so an idle client shows up
  to about 2 ms;
- **busy share**: the process's CPU time (user + system, every thread) over the wall time of
  the same ticks: 1.0 is one core fully used by the client.

A level's figures (:class:`ClientLoadFigures`) merge its processes over its measured window
(the ticks while its step was in force): the lag p99 over every process's wake-ups, the busy
share of the busiest process (each process has one event loop on one core: the busiest one is
the one that may lag).

**client_saturated** (:func:`saturated`, the one rule; :func:`saturation_reasons` in words).
Stream reads carry the kernel's arrival stamp, so a late read costs nothing — until it is late
enough that the next chunk has arrived too: the read holds both and carries the later one's
stamp (a first token stamped with the second's arrival: TTFT one chunk gap long; a per-chunk
gap of 0 s). And a send that leaves late lowers the load offered. A level is flagged when

1. the lag p99 exceeds :data:`LAG_P99_LIMIT_S` (8 ms): the loop stalls — its core taken away
   by another process, or its own work — for longer than any chunk gap the client can vouch
   for; or
2. its chunks were read together (the level's share of 0-s chunk gaps beyond
   :data:`COALESCED_SHARE_LIMIT`, 5%) while the lag p99 exceeds the level's chunk gap
   (:func:`chunk_gap_s`: median TPOT x tokens per chunk, what the server keeps between chunks):
   a client that reads later than the server writes; or
3. the busiest process used more than :data:`BUSY_RATIO_LIMIT` (90%) of a core: no headroom.

The limits and the measurements behind them (256 streams against a fixed-timing server, with a
busy loop on the client's core, and with chunk gaps of 2 and 1 ms):
``bench/results/client_lag.md``.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from specload.histogram import Histogram

#: How often the lag meter wakes (seconds): 100 wake-ups a second cost ~0.1% of a core.
LAG_INTERVAL_S = 0.01
#: A level whose client lag p99 is beyond this (seconds) is ``client_saturated``.
LAG_P99_LIMIT_S = 0.008
#: A level whose chunk gaps of 0 s are more than this share, with a lag p99 beyond its chunk
#: gap, is ``client_saturated``.
COALESCED_SHARE_LIMIT = 0.05
#: A level whose busiest client process used more than this share of a core is
#: ``client_saturated``.
BUSY_RATIO_LIMIT = 0.9
#: The flag's name in a level's ``flags``.
CLIENT_SATURATED = "client_saturated"


@dataclass
class ClientLoad:
    """One process's lag and CPU over some ticks (a step, or the ticks since a report)."""

    lag: Histogram = field(default_factory=Histogram)  # wake-up lateness, seconds
    cpu_s: float = 0.0  # the process's CPU time (user + system) over the ticks
    wall_s: float = 0.0  # the ticks' wall time

    def add(self, late_s: float, cpu_s: float, wall_s: float) -> None:
        self.lag.add(late_s)
        self.cpu_s += cpu_s
        self.wall_s += wall_s

    def merge(self, other: ClientLoad) -> None:
        """More ticks of the same process."""
        self.lag.merge(other.lag)
        self.cpu_s += other.cpu_s
        self.wall_s += other.wall_s

    @property
    def busy_ratio(self) -> float | None:
        return self.cpu_s / self.wall_s if self.wall_s > 0 else None

    def to_dict(self) -> dict[str, Any]:
        return {"lag": self.lag.to_dict(), "cpu_s": self.cpu_s, "wall_s": self.wall_s}

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> ClientLoad:
        return cls(Histogram.from_dict(data["lag"]), float(data["cpu_s"]), float(data["wall_s"]))


@dataclass(frozen=True)
class ClientLoadFigures:
    """A level's client figures, its processes merged (the ``summary.json`` keys)."""

    lag_p50_s: float | None
    lag_p99_s: float | None
    lag_max_s: float | None
    busy_ratio: float | None  # the busiest process's
    processes: int
    samples: int

    def result(self) -> dict[str, Any]:
        """The level's keys: ``client_lag_{p50,p99,max}_s``, ``client_busy_ratio``,
        ``client_processes``, ``client_lag_samples``."""
        return {
            "client_lag_p50_s": self.lag_p50_s,
            "client_lag_p99_s": self.lag_p99_s,
            "client_lag_max_s": self.lag_max_s,
            "client_busy_ratio": self.busy_ratio,
            "client_processes": self.processes,
            "client_lag_samples": self.samples,
        }


#: A level's client keys when nothing was measured (a backend without a lag meter).
NOT_MEASURED: dict[str, Any] = {
    "client_lag_p50_s": None,
    "client_lag_p99_s": None,
    "client_lag_max_s": None,
    "client_busy_ratio": None,
    "client_processes": None,
    "client_lag_samples": None,
}


def level_result(figures: ClientLoadFigures | None) -> dict[str, Any]:
    """A level's client keys (every one None when not measured)."""
    return dict(NOT_MEASURED) if figures is None else figures.result()


def figures(parts: Iterable[ClientLoad]) -> ClientLoadFigures | None:
    """A level's figures from each process's :class:`ClientLoad` (None: no tick at all)."""
    lag = Histogram()
    busy: float | None = None
    processes = 0
    for part in parts:
        if not part.lag.count:
            continue
        processes += 1
        lag.merge(part.lag)
        ratio = part.busy_ratio
        if ratio is not None and (busy is None or ratio > busy):
            busy = ratio
    if not lag.count:
        return None
    p50, p99 = lag.quantiles([0.5, 0.99])
    return ClientLoadFigures(p50, p99, lag.max, busy, processes, lag.count)


def chunk_gap_s(median_tpot_s: float | None, tokens_per_chunk: float | None) -> float | None:
    """The gap the server keeps between a stream's chunks: median TPOT x tokens per chunk
    (TPOT spans first to last token, so chunks read together do not shorten it)."""
    if median_tpot_s is None or tokens_per_chunk is None:
        return None
    return median_tpot_s * tokens_per_chunk


def saturation_reasons(
    figures: ClientLoadFigures | None,
    *,
    chunk_gap_s: float | None = None,
    coalesced_share: float | None = None,
) -> list[str]:
    """Why a level is ``client_saturated`` (empty: it is not), one phrase per limit passed;
    a figure not measured passes none."""
    if figures is None:
        return []
    out = []
    lag, busy = figures.lag_p99_s, figures.busy_ratio
    if lag is not None and lag > LAG_P99_LIMIT_S:
        out.append(
            f"its event loop ran {lag * 1000:.1f} ms late at the p99 "
            f"(limit {LAG_P99_LIMIT_S * 1000:g} ms)"
        )
    elif (
        lag is not None
        and chunk_gap_s is not None
        and coalesced_share is not None
        and coalesced_share > COALESCED_SHARE_LIMIT
        and lag > chunk_gap_s
    ):
        out.append(
            f"{coalesced_share:.0%} of its chunk gaps were 0 s (chunks read together; limit "
            f"{COALESCED_SHARE_LIMIT:.0%}) and its event loop ran {lag * 1000:.1f} ms late at "
            f"the p99, longer than the {chunk_gap_s * 1000:.2f} ms between the server's chunks"
        )
    if busy is not None and busy > BUSY_RATIO_LIMIT:
        out.append(f"its busiest process used {busy:.0%} of a core (limit {BUSY_RATIO_LIMIT:.0%})")
    return out


def saturated(
    figures: ClientLoadFigures | None,
    *,
    chunk_gap_s: float | None = None,
    coalesced_share: float | None = None,
) -> bool:
    """The one rule (the module's doc): any limit passed."""
    return bool(
        saturation_reasons(figures, chunk_gap_s=chunk_gap_s, coalesced_share=coalesced_share)
    )


def saturated_warning(reasons: list[str]) -> str:
    """The level's warning when :func:`saturated` (one sentence with the figures)."""
    what = " and ".join(reasons) or "it was saturated"
    return (
        f"the client may be the bottleneck: {what}; a read that late holds later chunks too "
        "and carries their arrival stamp, and sends leave late, so TTFT and ITL may be biased "
        "— more worker processes (--workers), fewer users per process, or a core of its own "
        "for the client"
    )
