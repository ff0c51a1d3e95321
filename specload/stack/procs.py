"""Start, identify and stop the stack's processes (Linux ``/proc``).

A process is known by its pid *and* its start time (``/proc/PID/stat`` field
22), so a pid the kernel handed to someone else is never signalled. Each part
runs in its own session and process group; stopping sends SIGTERM to that
group, waits, then SIGKILLs what is left of it.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import time
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class ProcessId:
    pid: int
    start_ticks: int


def _stat_fields(pid: int) -> list[str] | None:
    """Fields of ``/proc/PID/stat`` from field 3 (state) on, or None if gone."""
    try:
        raw = Path(f"/proc/{pid}/stat").read_text()
    except (FileNotFoundError, ProcessLookupError, PermissionError):
        return None
    return raw[raw.rindex(")") + 2 :].split()


def start_ticks(pid: int) -> int | None:
    fields = _stat_fields(pid)
    if fields is None or fields[0] in ("Z", "X"):
        return None
    return int(fields[19])


def is_running(proc: ProcessId) -> bool:
    """True if this very process still runs (not a zombie, pid not reused)."""
    return start_ticks(proc.pid) == proc.start_ticks


def group_members(pgid: int) -> list[int]:
    """Live processes whose process group is ``pgid``."""
    members: list[int] = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        fields = _stat_fields(int(entry.name))
        if fields is not None and fields[0] not in ("Z", "X") and int(fields[2]) == pgid:
            members.append(int(entry.name))
    return members


def spawn(
    argv: tuple[str, ...], *, log: Path, cwd: Path, env: Mapping[str, str] | None = None
) -> tuple[subprocess.Popen[bytes], ProcessId]:
    """Start ``argv`` in its own session, output appended to ``log``."""
    log.parent.mkdir(parents=True, exist_ok=True)
    with log.open("ab") as out:
        proc = subprocess.Popen(
            argv,
            stdin=subprocess.DEVNULL,
            stdout=out,
            stderr=subprocess.STDOUT,
            cwd=cwd,
            env=dict(env) if env is not None else None,
            start_new_session=True,
        )
    ticks = start_ticks(proc.pid)
    return proc, ProcessId(proc.pid, ticks if ticks is not None else -1)


def _ours(proc: ProcessId) -> list[int]:
    """Live processes of the group ``proc`` started: none if its pid now names
    another process (then our group is gone: the kernel never hands out a pid
    that is still a live process group's id)."""
    fields = _stat_fields(proc.pid)  # a zombie leader still has its start time
    if fields is not None and int(fields[19]) != proc.start_ticks:
        return []
    return group_members(proc.pid)


def _signal_group(proc: ProcessId, sig: signal.Signals) -> None:
    members = _ours(proc)
    if not members:
        return
    if is_running(proc):
        try:
            os.killpg(proc.pid, sig)
            return
        except ProcessLookupError:
            pass
    for pid in members:  # the leader is gone; what it left in its group
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, sig)


def _alive(proc: ProcessId) -> bool:
    return is_running(proc) or bool(_ours(proc))


def stop_all(processes: list[ProcessId], *, timeout_s: float = 10.0) -> set[ProcessId]:
    """Stop the processes and their groups together; return those that had to be killed."""
    known = [p for p in processes if p.start_ticks >= 0 and _alive(p)]
    for proc in known:
        _signal_group(proc, signal.SIGTERM)
    deadline = time.monotonic() + timeout_s
    left = known
    while left and time.monotonic() < deadline:
        time.sleep(0.05)
        left = [p for p in left if _alive(p)]
    for proc in left:
        _signal_group(proc, signal.SIGKILL)
    deadline = time.monotonic() + 5.0
    while time.monotonic() < deadline and any(_alive(p) for p in left):
        time.sleep(0.05)
    return set(left)


def stop(proc: ProcessId, *, timeout_s: float = 10.0) -> bool:
    """Stop the process and its group; True if it had to be killed."""
    return bool(stop_all([proc], timeout_s=timeout_s))


def log_tail(path: Path, lines: int = 20) -> str:
    try:
        with path.open("rb") as handle:
            handle.seek(0, os.SEEK_END)
            size = handle.tell()
            handle.seek(max(0, size - 16384))
            text = handle.read().decode("utf-8", "replace")
    except OSError:
        return "(no log)"
    return "\n".join(text.splitlines()[-lines:]) or "(empty log)"
