"""Profiler traces: one gzipped trace per TP rank, truth.json, all-reduce ~51.5% at batch 1."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx
import pytest

from specload.profile.analysis import analyze
from tests.fixtures.sim import SimHandle

pytestmark = pytest.mark.integration

PROMPT = "Consider the following program and explain each step. " * 72


def capture(sim: SimHandle, tokens: int) -> tuple[list[Path], dict[str, Any]]:
    """Profile one stream of requests over the reference categories until ``tokens`` were sent."""
    stop = threading.Event()

    def one_stream() -> None:
        with httpx.Client(timeout=60) as client:
            for category in ("coding", "math", "structured", "explanation") * 10:
                if stop.is_set():
                    return
                # ~1000 prompt tokens: the context a decode step sees midway through the
                # reference prompts' reasoning (the share falls as the context grows).
                client.post(
                    sim.url + "/v1/chat/completions",
                    json={"messages": [{"role": "user", "content": PROMPT}], "max_tokens": 300},
                    headers={"X-Specload-Category": category},
                )

    thread = threading.Thread(target=one_stream)
    thread.start()
    try:
        assert httpx.post(sim.url + "/start_profile", timeout=10).status_code == 200
        deadline = time.monotonic() + 30
        while sim.state()["tokens_sent"] < tokens and time.monotonic() < deadline:
            time.sleep(0.05)
        assert httpx.post(sim.url + "/stop_profile", timeout=60).status_code == 200
    finally:
        stop.set()
        thread.join()
    assert sim.profiler_dir is not None
    traces = sorted(sim.profiler_dir.glob("*.pt.trace.json.gz"))
    return traces, json.loads((sim.profiler_dir / "truth.json").read_text())


def test_batch_1_traces_show_half_the_decode_time_in_allreduce(
    sim_factory: Callable[..., SimHandle],
) -> None:
    sim = sim_factory(["--time-scale", "20", "--profiler-max-steps", "40"])
    traces, truth = capture(sim, 60)
    assert len(traces) == 8
    assert truth["allreduces_per_step"] == 122
    assert set(truth["by_batch_size"]) == {"1"}
    share = truth["decode_allreduce_share"]
    assert abs(share - 0.515) <= 0.05, share
    measured = analyze(traces).decode_allreduce_ratio
    assert measured is not None and abs(measured - share) < 0.01, (measured, share)


def test_cpu_allreduce_family_writes_cpu_only_traces(sim_factory: Callable[..., SimHandle]) -> None:
    sim = sim_factory(
        ["--time-scale", "20", "--profiler-max-steps", "20", "--tp", "2",
         "--allreduce-kernel", "cpu_shm", "--cost", "allreduce_hop_latency_s=30e-6"]
    )  # fmt: skip
    traces, truth = capture(sim, 30)
    assert len(traces) == 2
    measured = analyze(traces).decode_allreduce_ratio
    assert measured is not None and abs(measured - truth["decode_allreduce_share"]) < 0.01
