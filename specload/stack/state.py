"""The state folder's ``stack.json``: what ``up`` started, for ``down``/``status``/``reload``.

Written atomically after every process start, so a crash half-way through
``up`` still leaves a file from which ``down`` stops what did start.
"""

from __future__ import annotations

import fcntl
import json
import os
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from specload.errors import UsageError
from specload.stack.procs import ProcessId

STATE_FILE = "stack.json"
PID_DIR = "pids"


@dataclass
class PartState:
    name: str
    kind: str
    log: str
    url: str | None = None
    health_url: str | None = None
    ports: dict[str, int] = field(default_factory=dict)
    pid: int | None = None
    start_ticks: int | None = None

    @property
    def process(self) -> ProcessId | None:
        if self.pid is None or self.start_ticks is None:
            return None
        return ProcessId(self.pid, self.start_ticks)


@dataclass
class StackState:
    state_dir: str
    repo: str
    parts: list[PartState]

    def part(self, name: str) -> PartState | None:
        return next((p for p in self.parts if p.name == name), None)


def save(state: StackState) -> None:
    """``stack.json`` and, for each started part, ``pids/<part>.pid`` (for other tools)."""
    path = Path(state.state_dir) / STATE_FILE
    tmp = path.with_name(f".{STATE_FILE}.tmp")
    tmp.write_text(json.dumps(asdict(state), indent=2) + "\n", encoding="utf-8")
    os.replace(tmp, path)
    pids = Path(state.state_dir) / PID_DIR
    pids.mkdir(exist_ok=True)
    for part in state.parts:
        if part.pid is not None:
            (pids / f"{part.name}.pid").write_text(f"{part.pid}\n", encoding="utf-8")


def load(state_dir: Path) -> StackState | None:
    path = state_dir / STATE_FILE
    try:
        raw: Any = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        return None
    except (OSError, ValueError) as exc:
        raise UsageError(f"--state-dir: {path} is unreadable ({exc})") from None
    try:
        parts = [PartState(**p) for p in raw["parts"]]
        return StackState(raw["state_dir"], raw["repo"], parts)
    except (KeyError, TypeError) as exc:
        raise UsageError(f"--state-dir: {path} is not a specload stack state ({exc})") from None


def remove(state_dir: Path) -> None:
    (state_dir / STATE_FILE).unlink(missing_ok=True)
    for pid_file in (state_dir / PID_DIR).glob("*.pid"):
        pid_file.unlink(missing_ok=True)


@contextmanager
def locked(state_dir: Path) -> Iterator[None]:
    """One ``up``/``down`` at a time per state folder (created here: one line if it cannot be)."""
    try:
        state_dir.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise UsageError(
            f"--state-dir {state_dir}: cannot create directory ({exc.strerror or exc})"
        ) from None
    try:
        handle = (state_dir / ".lock").open("w")
    except OSError as exc:
        raise UsageError(f"--state-dir {state_dir}: not writable ({exc.strerror or exc})") from None
    with handle:
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            raise UsageError(
                f"--state-dir: {state_dir} is in use by another specload stack command"
            ) from None
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)
