"""End to end: the exporter captures a simulator's profile on demand and exports the share.

A simulator with its profiler (TP 2, NCCL, hops slow enough that all-reduce is
about half a step) under a steady single-stream load is the ``baseline``
target; ``ngram`` points at a closed port. ``POST /-/profile/VARIANT`` on the
exporter process starts captures; the exported share must match the
simulator's truth.json within 1 percentage point, and the failed ``ngram``
capture only counts a failure.
"""

from __future__ import annotations

import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import httpx
import orjson
import pytest
import yaml

from specload.promtext import parse
from tests.fixtures.sim import free_port

pytestmark = pytest.mark.integration


@contextmanager
def steady_load(url: str) -> Iterator[None]:
    stop = threading.Event()

    def client() -> None:
        with httpx.Client(timeout=60.0) as http:
            while not stop.is_set():
                try:
                    http.post(
                        f"{url}/v1/chat/completions",
                        json={
                            "model": "moonshotai/Kimi-K2.5",
                            "max_tokens": 32,
                            "messages": [{"role": "user", "content": "hello"}],
                        },
                    )
                except httpx.HTTPError:
                    stop.wait(0.1)

    thread = threading.Thread(target=client, daemon=True)
    thread.start()
    try:
        yield
    finally:
        stop.set()
        thread.join(30.0)


def _samples(url: str) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    text = httpx.get(f"{url}/metrics", timeout=10.0).text
    return {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for family in parse(text).values()
        for s in family.samples
    }


def _wait_for(url: str, name: str, labels: dict[str, str], timeout_s: float = 60.0) -> float:
    key = (name, tuple(sorted(labels.items())))
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        value = _samples(url).get(key)
        if value:
            return value
        time.sleep(0.2)
    raise AssertionError(f"{name}{labels} not exported within {timeout_s} s")


def test_exporter_profiles_on_demand(sim_factory: Callable[..., Any], tmp_path: Path) -> None:
    sim = sim_factory(
        [
            "--allreduce-kernel",
            "nccl",
            "--tp",
            "2",
            "--time-scale",
            "20",
            "--cost",
            "allreduce_hop_latency_s=30e-6",
            "--profiler-max-steps",
            "60",
        ]
    )
    port = free_port()
    config = tmp_path / "exporter.yaml"
    config.write_text(
        yaml.safe_dump(
            {
                "address": "127.0.0.1",
                "port": port,
                "interval": "1s",
                "targets": [
                    {
                        "variant": "baseline",
                        "url": sim.url,
                        "profile": {
                            "trace_dir": str(sim.profiler_dir),
                            "interval": None,
                            "seconds": 0.5,
                        },
                    },
                    {
                        "variant": "ngram",
                        "url": f"http://127.0.0.1:{free_port()}",
                        "profile": {"trace_dir": str(tmp_path / "none"), "seconds": 0.5},
                    },
                ],
            }
        )
    )
    proc = subprocess.Popen(
        [sys.executable, "-m", "specload", "exporter", "--config", str(config)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 30.0
        while True:
            try:
                httpx.get(f"{url}/-/healthy", timeout=1.0).raise_for_status()
                break
            except httpx.HTTPError:
                assert proc.poll() is None, proc.stderr.read() if proc.stderr else ""
                assert time.monotonic() < deadline, "exporter did not start"
                time.sleep(0.1)
        before = _samples(url)
        # Off by default: nothing is captured until asked.
        assert before[("specload_profile_captures_total", (("variant", "baseline"),))] == 0
        assert ("specload_decode_allreduce_ratio", (("variant", "baseline"),)) not in before
        with steady_load(sim.url):
            time.sleep(0.3)
            assert httpx.post(f"{url}/-/profile/baseline").status_code == 202
            assert httpx.post(f"{url}/-/profile/ngram").status_code == 202
            assert httpx.post(f"{url}/-/profile/unknown").status_code == 404
            ratio = _wait_for(url, "specload_decode_allreduce_ratio", {"variant": "baseline"})
        truth = orjson.loads((sim.profiler_dir / "truth.json").read_bytes())
        assert abs(ratio - truth["decode_allreduce_share"]) < 0.01
        assert 0.3 < ratio < 0.8
        samples = _samples(url)
        base = (("variant", "baseline"),)
        assert samples[("specload_profile_captures_total", base)] == 1
        assert samples[("specload_decode_step_seconds", base)] > 0
        assert samples[("specload_decode_allreduce_seconds_per_step", base)] > 0
        last = samples[("specload_profile_last_success_timestamp_seconds", base)]
        assert last > time.time() - 120
        failures = _wait_for(
            url, "specload_profile_failures_total", {"variant": "ngram", "reason": "unreachable"}
        )
        assert failures == 1
        # The exporter still serves everything else.
        up = {
            dict(labels)["variant"]: value
            for (name, labels), value in _samples(url).items()
            if name == "specload_target_up"
        }
        assert up == {"baseline": 1, "ngram": 0}
    finally:
        proc.terminate()
        proc.wait(15)
        if proc.stderr:
            proc.stderr.close()
