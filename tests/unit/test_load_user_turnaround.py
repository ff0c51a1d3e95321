"""A chat user sends its next request as soon as the last one is published, without
queueing behind the other users (bench/results/client.md: where the offered load went).

Locust sleeps ``wait_time()`` between tasks; a ``gevent.sleep(0)`` puts the user at the
back of the hub's queue, so when many streams end in the same moment every user waited
for all the others' bookkeeping before its next request went out. Run in a subprocess:
Locust monkey-patches the process it is imported in.
"""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import pytest

pytestmark = pytest.mark.unit

ROOT = Path(__file__).resolve().parents[2]

SCRIPT = textwrap.dedent(
    """
    import json, sys, time
    from gevent import monkey
    monkey.patch_all()
    import gevent, gevent.event, gevent.pool
    from locust.env import Environment
    from locust.exception import StopUser
    from specload.load import subscribe
    from specload.load.records import RequestRecord
    from specload.load.user import ChatUser

    env = Environment(user_classes=[ChatUser], host="http://127.0.0.1:9")
    log = []
    subscribe(env, lambda r: log.append(["publish", r.worker, r.error_kind]))

    def record(name, step, status, error=None):
        now = time.time()
        return RequestRecord(category="math", step=step, variant="v", model="m",
                             start_s=now, end_s=now, ok=error is None, error_kind=error,
                             http_status=status, e2e_s=0.01, ttft_s=0.001, tpot_s=0.001,
                             tokens_output=10, tokens_content=10, chunks=10, worker=name)

    class Answered:
        # every request gets an answer; the first ones all end together
        def __init__(self, name, ended):
            self.name, self.ended, self.n = name, ended, 0
        def send(self, prompt, step):
            self.n += 1
            log.append(["send", self.name, self.n])
            if self.n == 1:
                self.ended.wait()
            else:
                gevent.event.Event().wait()  # in flight until the test ends
            return record(self.name, step, 200)
        def close(self):
            pass

    class NoAnswer:
        # fails at once, before any I/O (a fault in building the request, say)
        def __init__(self, name, limit):
            self.name, self.limit, self.n = name, limit, 0
        def send(self, prompt, step):
            self.n += 1
            if self.n > self.limit:
                raise StopUser()
            return record(self.name, step, None, "client_error")
        def close(self):
            pass

    group = gevent.pool.Group()
    if sys.argv[1] == "burst":
        ended = gevent.event.Event()
        users = []
        for name in ("a", "b", "c"):
            u = ChatUser(env)
            u._requester = Answered(name, ended)
            users.append(u)
            u.start(group)
        gevent.sleep(0.05)
        ended.set()  # all three streams end in the same moment
        gevent.sleep(0.05)
    else:
        u = ChatUser(env)
        u._requester = NoAnswer("x", 200)
        seen = []
        def watch():
            while True:
                seen.append(u._requester.n)
                gevent.sleep(0)
        g = gevent.spawn(watch)
        u.start(group)
        gevent.sleep(0.2)
        g.kill()
        log.append(["watched", seen[:5]])
    group.kill()
    print(json.dumps(log))
    """
)


def run(mode: str) -> list[Any]:
    proc = subprocess.run(
        [sys.executable, "-c", SCRIPT, mode],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    out: list[Any] = json.loads(proc.stdout.strip().splitlines()[-1])
    return out


def test_next_request_goes_out_before_the_other_users_bookkeeping() -> None:
    log = run("burst")
    events = [(e[0], e[1], e[2]) for e in log]
    assert events[:3] == [("send", "a", 1), ("send", "b", 1), ("send", "c", 1)]
    # Each user publishes and sends its next request in one go, in the order the streams
    # ended: no user waits for the others to publish first.
    assert events[3:] == [
        ("publish", "a", None),
        ("send", "a", 2),
        ("publish", "b", None),
        ("send", "b", 2),
        ("publish", "c", None),
        ("send", "c", 2),
    ]


def test_a_request_without_an_answer_still_lets_the_others_run() -> None:
    log = run("no-answer")
    publishes = [e for e in log if e[0] == "publish"]
    assert len(publishes) == 200  # every failure recorded, then the user stopped
    assert all(e[2] == "client_error" for e in publishes)
    watched = next(e[1] for e in log if e[0] == "watched")
    # The watcher ran between the user's first requests: nothing blocked in them, so the
    # user yielded after each (it never keeps the process to itself).
    assert watched and watched[0] <= 1
    assert watched[:3] == sorted(watched[:3]) and watched[2] - watched[0] <= 2
