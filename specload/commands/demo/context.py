"""What every stage shares: :class:`DemoContext` (the options, the stack, the results, the
facts written to ``demo.json``) and small helpers."""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Callable
from concurrent.futures import Future
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from specload.commands.demo.constants import SERVER
from specload.commands.demo.webhook import WebhookReceiver
from specload.promapi import PrometheusAPI
from specload.results.model import finite_number
from specload.results.writer import atomic_write_bytes, dump_json

#: The prediction's JSON (``specload predict --json``), or one line saying why not; and the
#: seconds it took.
PredictOutcome = tuple[dict[str, Any] | str, float]


@dataclass
class DemoContext:
    args: argparse.Namespace
    out: Path
    state_dir: Path
    stack: dict[str, Any] = field(default_factory=dict)  # part name -> {url, ports, pid…}
    prometheus: PrometheusAPI | None = None
    results: dict[str, Path] = field(default_factory=dict)
    baseline_file: Path | None = None
    comparison: Path | None = None
    stack_running: bool = False
    facts: dict[str, Any] = field(default_factory=dict)
    started: float = field(default_factory=time.monotonic)
    webhook: WebhookReceiver | None = None
    loadgen_address: str | None = None
    #: The simulator's time scale as it reports it (``server_time_scale`` of the sweeps).
    time_scale: float | None = None
    #: Stage 4's prediction, started beside stage 3's sweep, and when it started.
    predict_job: tuple[Future[PredictOutcome], float] | None = None

    def say(self, text: str) -> None:
        print(text, flush=True)

    def record(self, key: str, value: Any) -> None:
        """Add a fact of the story to ``demo.json`` (written at once, atomically)."""
        self.facts[key] = value
        atomic_write_bytes(self.out / "demo.json", dump_json(self.facts))

    @property
    def server_url(self) -> str:
        return str(self.stack[SERVER]["url"])

    @property
    def prom(self) -> PrometheusAPI:
        assert self.prometheus is not None
        return self.prometheus

    @property
    def scale(self) -> float:
        """Reference time / simulator time (1: a real server)."""
        if self.time_scale is not None:
            return self.time_scale
        return float(getattr(self.args, "time_scale", 1.0) or 1.0)

    def ref_ms(self, sim_ms: Any) -> float | None:
        v = finite_number(sim_ms)
        return None if v is None else v * self.scale

    def both(self, sim_ms: Any) -> str:
        """``0.51 ms [15.3 ms]``: the simulator's figure, then on the reference scale."""
        v = finite_number(sim_ms)
        if v is None:
            return "-"
        return f"{_time(v)} [{_time(v * self.scale)}]"


Stage = Callable[[DemoContext], None]


def _time(ms: float | None) -> str:
    if ms is None:
        return "-"
    if ms >= 60_000:
        return f"{ms / 60_000:.1f} min"
    if ms >= 1000:
        return f"{ms / 1000:.2f} s"
    return f"{ms:.2f} ms"


def _specload(*argv: str) -> list[str]:
    return [sys.executable, "-m", "specload", *argv]


def _wait_for(check: Callable[[], Any], timeout_s: float, every_s: float = 0.25) -> Any:
    deadline = time.monotonic() + timeout_s
    result = check()
    while not result and time.monotonic() < deadline:
        time.sleep(every_s)
        result = check()
    return result
