"""A worker's watchdog on its master (:class:`specload.load.plugin.MasterWatchdog`), on a
fake clock: it quits after ``MASTER_SILENCE_TIMEOUT_S`` without a heartbeat, never while
heartbeats arrive (a long level), and a worker whose own loop was blocked is not fooled.
Run in a subprocess: Locust monkey-patches the process it is imported in."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

pytestmark = pytest.mark.unit

ROOT = Path(__file__).resolve().parents[2]

SCRIPT = textwrap.dedent(
    """
    import json
    from specload.load.plugin import MASTER_SILENCE_TIMEOUT_S, MasterWatchdog

    class Runner:
        def __init__(self):
            self.quit_at = None
            self.environment = type("Env", (), {"process_exit_code": None})()
        def quit(self):
            self.quit_at = clock.now

    class Clock:
        now = 0.0
    clock = Clock()

    def scenario(heartbeat_every=None, blocked=()):
        runner = Runner()
        dog = MasterWatchdog(runner, clock=lambda: clock.now, sleep=None)
        clock.now = 0.0
        def sleep(s):
            clock.now += s + (blocked[0] if blocked and abs(clock.now - 2.0) < 1e-9 else 0)
            if heartbeat_every and clock.now < 30 and round(clock.now, 6) % heartbeat_every == 0:
                dog.heard()
            if clock.now > 60:
                raise SystemExit("never quit")
        dog.sleep = sleep
        try:
            dog.run()
        except SystemExit:
            pass
        return runner.quit_at, runner.environment.process_exit_code

    print(json.dumps({
        "timeout": MASTER_SILENCE_TIMEOUT_S,
        "silent": scenario(),
        "heartbeats_then_silent": scenario(heartbeat_every=1.0),
        "blocked_loop": scenario(blocked=(20.0,)),
    }))
    """
)


def test_watchdog_quits_on_silence_only() -> None:
    done = subprocess.run(
        [sys.executable, "-c", SCRIPT],
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=60,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    out = json.loads(done.stdout.strip().splitlines()[-1])
    assert out["timeout"] == 5.0
    assert out["silent"] == [5.0, 1]  # a master silent from the start: quit at 5 s
    # heartbeats every second for 30 s: no quit then; quit 5 s after the last one
    # (within one check of 0.5 s: the last one came at 29 s)
    assert 29.0 + 4.5 <= out["heartbeats_then_silent"][0] <= 29.0 + 5.5
    # the worker's own loop blocked 20 s: counted as 1 s, not as 20 s of silence
    quit_at = out["blocked_loop"][0]
    assert quit_at is not None and quit_at > 20.0 + 4.0
