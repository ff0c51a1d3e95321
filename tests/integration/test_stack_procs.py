"""Process handling of the stack: a pid is only signalled while it is the process that
was started, its whole group goes, and a process that ignores SIGTERM is killed."""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

import pytest

from specload.stack.procs import ProcessId, group_members, is_running, spawn, stop_all

pytestmark = pytest.mark.integration

# A parent that starts a child which ignores SIGTERM (and says so), then waits.
STUBBORN = (
    "import subprocess, sys, time\n"
    "subprocess.Popen([sys.executable, '-c', 'import os, signal, time; "
    "signal.signal(signal.SIGTERM, signal.SIG_IGN); print(os.getpid(), flush=True); "
    "time.sleep(60)'])\n"
    "time.sleep(60)\n"
)


def test_stop_takes_the_group_and_kills_what_ignores_sigterm(tmp_path: Path) -> None:
    log = tmp_path / "out.log"
    popen, proc = spawn((sys.executable, "-c", STUBBORN), log=log, cwd=tmp_path)
    try:
        deadline = time.monotonic() + 10
        while not log.read_text().strip() and time.monotonic() < deadline:
            time.sleep(0.05)
        child = int(log.read_text().split()[0])
        assert sorted(group_members(proc.pid)) == sorted([proc.pid, child])
        killed = stop_all([proc], timeout_s=1.0)
        popen.wait(timeout=5)
        assert killed == {proc}  # the child ignored SIGTERM, so the group was killed
        assert not is_running(proc)
        assert group_members(proc.pid) == []
    finally:
        if popen.poll() is None:
            popen.kill()
            popen.wait()


def test_a_pid_with_another_start_time_is_never_signalled(tmp_path: Path) -> None:
    bystander = subprocess.Popen(
        [sys.executable, "-c", "import time; time.sleep(30)"], start_new_session=True
    )
    try:
        time.sleep(0.2)
        wrong = ProcessId(bystander.pid, start_ticks=1)  # what a reused pid looks like
        assert not is_running(wrong)
        assert stop_all([wrong], timeout_s=0.5) == set()
        # (its group still has members, but they are not the process that was started)
        assert bystander.poll() is None
    finally:
        bystander.kill()
        bystander.wait()
