"""Closed-loop sweep users do not start in step: in a warm-up each new user's first
request is spread over ``START_SPREAD_S`` (bench/results/client.md: where the offered
load went — users in step end their streams together, and the client then handles
hundreds of completions at once).

Run in a subprocess: Locust monkey-patches the process it is imported in.
"""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import pytest

from specload.sweep.plan import build_plan

pytestmark = pytest.mark.unit

ROOT = Path(__file__).resolve().parents[2]

SCRIPT = textwrap.dedent(
    """
    import json, sys
    from gevent import monkey
    monkey.patch_all()
    import gevent
    from locust.env import Environment
    from specload.load import set_step
    from specload.sweep import locustfile
    from specload.sweep.locustfile import START_SPREAD_S, Pacer, SweepUser, get_pacer

    out = {"spread": START_SPREAD_S, "suffix": locustfile.WARMUP_SUFFIX}
    pacer = Pacer(seed=1)
    out["warmup"] = [pacer.start_delay("c256-warmup") for _ in range(2000)]
    out["window"] = pacer.start_delay("c256")
    pacer.set_rate(4.0)
    out["open_loop"] = pacer.start_delay("r4-warmup")
    pacer.set_rate(None, hold=True)
    out["held"] = pacer.start_delay("c256-warmup")
    pacer.set_rate(None)

    # SweepUser.on_start waits the delay, then takes its (closed-loop: no) ticket
    env = Environment(user_classes=[SweepUser], host="http://127.0.0.1:9")
    slept = []
    real_sleep = gevent.sleep
    locustfile.gevent.sleep = lambda s=0: slept.append(s)
    try:
        for step in ("c8-warmup", "c8"):
            set_step(env, step)
            for _ in range(50):
                SweepUser(env).on_start()
            out[f"on_start {step}"] = slept[:]
            slept.clear()
    finally:
        locustfile.gevent.sleep = real_sleep
    print(json.dumps(out))
    """
)


@pytest.fixture(scope="module")
def out() -> dict[str, Any]:
    proc = subprocess.run(
        [sys.executable, "-c", SCRIPT],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    result: dict[str, Any] = json.loads(proc.stdout.strip().splitlines()[-1])
    return result


def test_warmup_spreads_first_requests_and_nothing_else_waits(out: dict[str, Any]) -> None:
    spread = out["spread"]
    assert spread == 1.0
    delays = out["warmup"]
    assert all(0.0 <= d < spread for d in delays)
    # spread evenly: every tenth of the interval gets about a tenth of the users
    tenths = [sum(1 for d in delays if i / 10 <= d / spread < (i + 1) / 10) for i in range(10)]
    assert min(tenths) > 150 and max(tenths) < 250
    # a measured window, the open loop (its tickets are spread already), a hold: no wait
    assert out["window"] == 0.0
    assert out["open_loop"] == 0.0
    assert out["held"] == 0.0


def test_sweep_user_waits_its_delay_only_in_a_warmup(out: dict[str, Any]) -> None:
    warm = out["on_start c8-warmup"]
    assert len(warm) == 50 and all(0.0 < d < out["spread"] for d in warm)
    assert len(set(warm)) == 50  # each user its own delay
    assert out["on_start c8"] == []


def test_the_warmup_suffix_is_the_plans(out: dict[str, Any]) -> None:
    plan = build_plan(
        concurrency="4,16",
        request_rate=None,
        max_concurrency=None,
        warmup="5s",
        duration="10s",
        requests=None,
    )
    for level in plan.levels:
        assert level.warmup_name.endswith(out["suffix"])
        assert not level.name.endswith(out["suffix"])
