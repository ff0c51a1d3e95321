"""The live progress display: rich on a terminal, plain lines otherwise."""

from __future__ import annotations

import re
import sys
import time
from collections.abc import Mapping
from typing import Any, TextIO

from rich.console import Console
from rich.live import Live
from rich.table import Table

from specload.load.options import WARMUP_SUFFIX
from specload.sweep.driver import OUTAGE_SUFFIX, SweepDriver

_DIGITS = re.compile(r"\d+")


def _ms(value: float | None) -> str:
    return "-" if value is None else f"{value:.2f} ms"


def snapshot(driver: SweepDriver) -> dict[str, Any]:
    """What the display shows, as plain values (tested without a terminal)."""
    state = driver.current
    out: dict[str, Any] = {"note": driver.phase_note, "records": driver.records}
    if state is None:
        out["level"] = None
        return out
    index = driver.states.index(state)
    window = state.window if state.phase == "measure" else state.warmup
    now = driver.clock()
    elapsed = window.active_s(now) if window is not None else 0.0
    agg = state.aggregate.all
    out.update(
        level=state.level.name,
        index=index + 1,
        levels=len(driver.states),
        phase=state.phase,
        elapsed_s=elapsed,
        target_s=window.target_s if window is not None else None,
        target_requests=window.target_requests if window is not None else None,
        completed=agg.completed,
        failed=agg.failed,
        median_tpot_ms=_to_ms(agg.quantile("tpot", 0.5)),
        output_tok_s=(state.aggregate.window_tokens / elapsed)
        if state.phase == "measure" and elapsed > 0
        else None,
        errors=dict(agg.errors),
    )
    if state.precision is not None:
        out["precision"] = state.precision.target
        out["half_width"] = state.precision.half_width
    seq = state.sequential
    if seq is not None and seq.last is not None and seq.last.ratio is not None:
        last = seq.last
        out["against"] = {
            "ratio": last.ratio,
            "low": last.low,
            "high": last.high,
            "verdict": seq.verdict,
            "requests": last.requests,
        }
    return out


def _to_ms(seconds: float | None) -> float | None:
    return None if seconds is None else seconds * 1000.0


def describe(snap: dict[str, Any]) -> str:
    if snap.get("level") is None:
        return snap.get("note") or "starting"
    target = (
        f"{snap['target_s']:.0f}s"
        if snap.get("target_s") is not None
        else f"{snap.get('target_requests')} requests"
    )
    tok = snap.get("output_tok_s")
    errors = ", ".join(f"{k} {v}" for k, v in sorted(snap["errors"].items())) or "none"
    text = (
        f"level {snap['index']}/{snap['levels']} {snap['level']} {snap['phase']} "
        f"{snap['elapsed_s']:.1f}s/{target} | requests {snap['completed']} ok "
        f"{snap['failed']} failed | median TPOT {_ms(snap['median_tpot_ms'])} | "
        f"output {'-' if tok is None else f'{tok:.1f}'} tok/s | errors {errors}"
    )
    if "precision" in snap:
        hw = snap.get("half_width")
        shown = "-" if hw is None else f"+-{hw * 100:.1f}%"
        text += f" | precision {shown} (target +-{snap['precision'] * 100:g}%)"
    against = snap.get("against")
    if against:
        text += (
            f" | vs baseline {against['ratio']:.3f}x [{against['low']:.3f}, "
            f"{against['high']:.3f}] after {against['requests']}"
        )
        if against.get("verdict"):
            text += f": {against['verdict']}"
    if snap.get("note"):
        text += f" | {snap['note']}"
    return text


def final_count(
    summary: dict[str, Any],
    written: int,
    steps: Mapping[str, int] | None = None,
    *,
    all_failed: bool = False,
) -> str:
    """The last line's head: ``complete: 31 measured requests (+6 warm-up)``.

    The levels' own requests (what their counts sum to) apart from the others kept in
    requests.jsonl (``steps``: records written per step); a run whose every measured
    request failed says ``finished, nothing measured``, never ``complete``.
    """
    head = str(summary["status"])
    if all_failed and head in ("complete", "incomplete"):
        head = "finished, nothing measured"
    if steps is None:
        return f"{head}: {written} requests"
    names = {level["name"] for level in summary["levels"]}
    measured = sum(n for step, n in steps.items() if step in names)
    warmup = sum(n for step, n in steps.items() if step.endswith(WARMUP_SUFFIX))
    outage = sum(n for step, n in steps.items() if step.endswith(OUTAGE_SUFFIX))
    other = written - measured - warmup - outage
    extra = [
        f"+{n} {what}"
        for n, what in ((warmup, "warm-up"), (outage, "during outages"), (other, "other"))
        if n > 0
    ]
    noun = "request" if measured == 1 else "requests"
    return f"{head}: {measured} measured {noun}" + (f" ({', '.join(extra)})" if extra else "")


class Progress:
    """``mode``: ``rich`` (a live table), ``plain`` (a line every few seconds), ``off`` (none).

    Messages (:meth:`message`) are printed in every mode.
    """

    def __init__(self, mode: str = "auto", stream: TextIO | None = None, every_s: float = 5.0):
        self.stream = stream or sys.stdout
        if mode == "auto":
            mode = "rich" if self.stream.isatty() else "plain"
        self.mode = mode
        self.every_s = every_s
        self._last = 0.0
        self._last_line = ""
        self._live: Live | None = None
        self._console = Console(file=self.stream)

    def message(self, text: str) -> None:
        """A line that stays (start, readiness, results): printed in every mode."""
        if self._live is not None:
            self._live.console.print(text)
        else:
            print(text, file=self.stream, flush=True)

    def countdown(self, left_s: float, problem: str, what: str) -> None:
        now = time.monotonic()
        if self.mode == "off" or now - self._last < (0.25 if self.mode == "rich" else self.every_s):
            return
        self._last = now
        text = f"waiting for {what}: {problem}; giving up in {left_s:.0f}s"
        if self.mode == "rich":
            self._ensure_live().update(text, refresh=True)
        else:
            print(text, file=self.stream, flush=True)

    def _ensure_live(self) -> Live:
        if self._live is None:
            self._live = Live(console=self._console, auto_refresh=False, transient=False)
            self._live.start()
        return self._live

    def tick(self, driver: SweepDriver) -> None:
        if self.mode == "off":
            return
        now = time.monotonic()
        snap = snapshot(driver)
        if self.mode == "rich":
            if now - self._last < 0.25:
                return
            self._last = now
            self._ensure_live().update(self._table(snap), refresh=True)
            return
        line = describe(snap)
        # A new phase prints at once; a note whose only change is a number (the drain's
        # count and seconds left) waits for the next line.
        note = _DIGITS.sub("#", str(snap.get("note") or ""))
        key = f"{snap.get('level')}/{snap.get('phase')}/{note}"
        if now - self._last >= self.every_s or key != self._last_line:
            self._last = now
            self._last_line = key
            print(line, file=self.stream, flush=True)

    def _table(self, snap: dict[str, Any]) -> Table:
        table = Table(show_header=True, header_style="bold", box=None)
        for col in (
            "level",
            "phase",
            "elapsed",
            "requests",
            "failed",
            "median TPOT",
            "output tok/s",
            "errors",
        ):
            table.add_column(col)
        if snap.get("level") is None:
            table.add_row("-", snap.get("note") or "starting", "", "", "", "", "", "")
            return table
        target = (
            f"/{snap['target_s']:.0f}s"
            if snap.get("target_s") is not None
            else f" ({snap.get('target_requests')} req)"
        )
        tok = snap.get("output_tok_s")
        table.add_row(
            f"{snap['index']}/{snap['levels']} {snap['level']}",
            snap["phase"] + (f" ({snap['note']})" if snap.get("note") else ""),
            f"{snap['elapsed_s']:.1f}s{target}",
            str(snap["completed"]),
            str(snap["failed"]),
            _ms(snap["median_tpot_ms"]),
            "-" if tok is None else f"{tok:.1f}",
            ", ".join(f"{k} {v}" for k, v in sorted(snap["errors"].items())) or "-",
        )
        return table

    def close(self) -> None:
        if self._live is not None:
            self._live.stop()
            self._live = None
