"""The analysis recovers the simulator's true all-reduce share (truth.json), per family.

One simulator per all-reduce kernel family: NCCL at TP 8 like the reference,
the others at TP 2 with a per-hop latency raised so that all-reduce is still
about half of a batch-1 step (a large share is the strict case). Two captures
through ``specload profile capture``: one under a single stream (decode steps
at batch 1), one under 32 streams sent in lockstep rounds (batch 32). Done
when the share is within 1 percentage point of the truth at both batch sizes.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import httpx
import pytest

from specload.cli import main
from specload.profile.tracefile import ALLREDUCE_KERNEL_EXAMPLES

pytestmark = pytest.mark.integration

MODEL = "moonshotai/Kimi-K2.5"


@contextmanager
def load(url: str, streams: int) -> Iterator[None]:
    """``streams`` clients, each sending one request after another, until the block ends."""
    stop = threading.Event()
    rounds = threading.Barrier(streams)

    def client() -> None:
        with httpx.Client(timeout=60.0) as http:
            while not stop.is_set():
                try:
                    rounds.wait(5.0)  # all streams start together: one batch
                except threading.BrokenBarrierError:
                    return
                http.post(f"{url}/v1/chat/completions", json={
                    "model": MODEL, "max_tokens": 64,
                    "messages": [{"role": "user", "content": "Why is the sky blue?"}]})

    threads = [threading.Thread(target=client, daemon=True) for _ in range(streams)]
    for t in threads:
        t.start()
    try:
        yield
    finally:
        stop.set()
        rounds.abort()
        for t in threads:
            t.join(30.0)


def _capture(url: str, trace_dir: Path, capsys: pytest.CaptureFixture[str]) -> tuple[
        dict[str, Any], dict[str, Any]]:
    code = main(["profile", "capture", "--target", url, "--seconds", "0.4",
                 "--trace-dir", str(trace_dir), "--json"])
    out = capsys.readouterr()
    assert code == 0, out.err
    return json.loads(out.out), json.loads((trace_dir / "truth.json").read_text())


@pytest.mark.parametrize("family", sorted(ALLREDUCE_KERNEL_EXAMPLES))
def test_recovers_simulator_truth(family: str, load_sim: Callable[..., Any], tmp_path: Path,
                                  capsys: pytest.CaptureFixture[str]) -> None:
    trace_dir = tmp_path / "traces"
    tp = ["--tp", "8"] if family == "nccl" else [
        "--tp", "2", "--cost", "allreduce_hop_latency_s=30e-6"]
    sim = load_sim(["--profiler-dir", str(trace_dir), "--allreduce-kernel", family, *tp,
                    "--time-scale", "5", "--profiler-max-steps", "60"])
    for streams, batch in ((1, "1"), (32, "32")):
        with load(sim.url, streams):
            got, truth = _capture(sim.url, trace_dir, capsys)
        assert truth["allreduce_family"] == family
        assert len(got["ranks"]) == truth["tp"] == int(tp[1])
        assert got["decode_steps"] == truth["decode_steps"] > 0
        assert abs(got["decode_allreduce_ratio"] - truth["decode_allreduce_share"]) < 0.01
        want = truth["by_batch_size"][batch]
        have = got["batch_sizes"][batch]
        assert have["steps"] == want["steps"] > 0
        assert abs(have["allreduce_ratio"] - want["allreduce_share"]) < 0.01
        assert set(got["allreduce_kernels"]) == {family}
        # Every rank sees the same steps; at batch 1 all-reduce is about half the step.
        assert got["decode_allreduce_ratio_max"] - got["decode_allreduce_ratio"] < 0.01
        if batch == "1":
            assert 0.3 < have["allreduce_ratio"] < 0.8
