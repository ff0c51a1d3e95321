"""Real time: --time-scale divides the cost model's step times; degradation multiplies them."""

from __future__ import annotations

from collections.abc import Callable

import httpx
import pytest

from simulator.costmodel import CostModel
from simulator.workload import prompt_tokens_of
from specload import promtext
from tests.fixtures.sim import SimHandle

# Step times within 10-15%: alone under pytest -n (tests/fixtures/parallel.py).
pytestmark = [pytest.mark.integration, pytest.mark.serial]

PROMPT = "Explain how the scheduler batches requests. " * 90
SCALE = 10.0
TOKENS = 300


def request_tpot(sim: SimHandle) -> float:
    """Send one request; return the server's time per output token for it (seconds)."""
    before = promtext.parse(httpx.get(sim.url + "/metrics").text)
    r = httpx.post(
        sim.url + "/v1/chat/completions",
        json={"messages": [{"role": "user", "content": PROMPT}], "max_tokens": TOKENS},
        headers={"X-Specload-Category": "coding"},
        timeout=60,
    )
    assert r.json()["usage"]["completion_tokens"] == TOKENS
    after = promtext.parse(httpx.get(sim.url + "/metrics").text)
    s0, c0 = before["vllm:request_time_per_output_token_seconds"].sum_count() or (0.0, 0.0)
    s1, c1 = after["vllm:request_time_per_output_token_seconds"].sum_count() or (0.0, 0.0)
    assert c1 - c0 == 1
    return s1 - s0


def predicted_tpot(cost: CostModel) -> float:
    prompt = prompt_tokens_of(PROMPT)
    steps = [
        cost.step(decode_tokens=1, num_seqs=1, context_tokens=prompt + i).total_s
        for i in range(1, TOKENS)
    ]
    return sum(steps) / len(steps)


def test_time_scale_divides_the_cost_model(sim_factory: Callable[..., SimHandle]) -> None:
    sim = sim_factory(["--time-scale", str(SCALE)])
    measured = request_tpot(sim) * SCALE
    expected = predicted_tpot(CostModel())
    assert abs(measured / expected - 1) < 0.10, (measured, expected)


def test_degradation_multiplies_step_time(sim_factory: Callable[..., SimHandle]) -> None:
    sim = sim_factory(["--time-scale", str(SCALE)])
    normal = request_tpot(sim)
    sim.degrade(3.0)
    assert sim.state()["degrade"]["active"]
    degraded = request_tpot(sim)
    assert abs(degraded / normal / 3.0 - 1) < 0.12, (normal, degraded)
    sim.degrade(1.0)
    assert abs(request_tpot(sim) / normal - 1.0) < 0.15


def test_degrade_after_from_the_command_line(sim_factory: Callable[..., SimHandle]) -> None:
    sim = sim_factory(["--time-scale", str(SCALE), "--degrade-after", "0", "--degrade-factor", "2"])
    measured = request_tpot(sim) * SCALE
    assert abs(measured / (2 * predicted_tpot(CostModel())) - 1) < 0.10
