"""Loading and reloads: the port refuses connections while loading, counters reset, log lines."""

from __future__ import annotations

import os
import re
import signal
import time
from collections.abc import Callable
from typing import Any

import httpx
import pytest

from specload import promtext
from tests.fixtures.sim import SimHandle

pytestmark = pytest.mark.integration


def refused(url: str) -> bool:
    try:
        httpx.get(url + "/health", timeout=1)
    except httpx.ConnectError:
        return True
    return False


def wait_control(sim: SimHandle) -> dict[str, Any]:
    """The first answer of the control port (it is up before the API port opens)."""
    deadline = time.monotonic() + 20
    while True:
        try:
            return sim.state()
        except OSError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.02)


def start_time(sim: SimHandle) -> float:
    value = promtext.parse(httpx.get(sim.url + "/metrics").text)[
        "process_start_time_seconds"
    ].total()
    assert value is not None
    return value


def test_load_window_refuses_then_serves_and_logs_like_vllm(
    sim_factory: Callable[..., SimHandle],
) -> None:
    sim = sim_factory(["--variant", "ngram", "--load-time", "2", "--time-scale", "50"], wait=False)
    state = wait_control(sim)
    assert state["state"] == "loading"
    assert refused(sim.url)
    time.sleep(0.5)
    assert 0 < sim.state()["loading_progress"] < 1
    assert refused(sim.url)
    sim.wait_ready()
    assert httpx.get(sim.url + "/health").status_code == 200
    log = sim.log_path.read_text()
    spec = "speculative_config=SpeculativeConfig(method='ngram', model=None, num_spec_tokens=5)"
    assert spec in log
    progress = re.findall(
        r"Loading safetensors checkpoint shards:\s+(\d+)% Completed \| (\d+)/62", log
    )
    assert len(progress) == 62 and progress[-1] == ("100", "62")
    assert "Application startup complete." in log
    assert log.index("Loading safetensors") < log.index("Application startup complete.")


def test_reload_to_another_variant_resets_counters(sim_factory: Callable[..., SimHandle]) -> None:
    sim = sim_factory(["--time-scale", "50"])
    httpx.post(
        sim.url + "/v1/chat/completions",
        json={"messages": [{"role": "user", "content": "x"}], "max_tokens": 5},
        timeout=30,
    )
    before = start_time(sim)
    expo = promtext.parse(httpx.get(sim.url + "/metrics").text)
    assert expo["vllm:generation_tokens_total"].total() == 5
    assert "vllm:spec_decode_num_drafts_total" not in expo
    sim.reload(variant="ngram", load_time=1.0)
    time.sleep(0.3)
    assert refused(sim.url)
    sim.wait_ready(generation=2)
    expo = promtext.parse(httpx.get(sim.url + "/metrics").text)
    assert expo["vllm:generation_tokens_total"].total() == 0
    assert "vllm:spec_decode_num_drafts_total" in expo
    assert start_time(sim) > before
    state = sim.state()
    assert state["variant"] == "ngram" and state["generation"] == 2
    assert sim.log_path.read_text().count("Application startup complete.") == 2


def test_sighup_restarts_with_the_current_variant(sim_factory: Callable[..., SimHandle]) -> None:
    sim = sim_factory(["--variant", "eagle3", "--time-scale", "50"])
    before = start_time(sim)
    os.kill(sim.pid, signal.SIGHUP)
    deadline = time.monotonic() + 10
    while sim.state()["generation"] < 2 and time.monotonic() < deadline:
        time.sleep(0.05)
    sim.wait_ready(generation=2)
    assert sim.state()["variant"] == "eagle3"
    assert start_time(sim) > before


def test_bad_reload_request_is_refused(sim_factory: Callable[..., SimHandle]) -> None:
    sim = sim_factory(["--time-scale", "50"])
    r = httpx.post(sim.control_url + "/reload", json={"variant": "nope"})
    assert r.status_code == 400 and "nope" in r.text
    assert sim.state()["generation"] == 1
