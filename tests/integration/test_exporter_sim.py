"""The exporter against the simulator (real processes, real sockets): values, reloads, variants."""

from __future__ import annotations

import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families

from exporter.app import Exporter
from exporter.config import parse_config
from tests.fixtures.exporter import free_port, raw_counters, sample
from tests.fixtures.sim import SimHandle

pytestmark = pytest.mark.integration

INTERVAL_S = 0.25


def load(sim: SimHandle, n: int, max_tokens: int = 48) -> None:
    model = sim.state()["model"]

    def one(i: int) -> None:
        r = httpx.post(
            sim.url + "/v1/chat/completions",
            json={
                "model": model,
                "messages": [{"role": "user", "content": f"write code for task {i}"}],
                "max_tokens": max_tokens,
            },
            timeout=60,
        )
        r.raise_for_status()

    threads = [threading.Thread(target=one, args=(i,)) for i in range(n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()


def exporter_for(sim: SimHandle, variant: str, **extra: object) -> Exporter:
    cfg = parse_config(
        {
            "port": 0,
            "interval": INTERVAL_S,
            "targets": [{"variant": variant, "url": sim.url, "log": str(sim.log_path), **extra}],
        }
    )
    return Exporter(cfg, sources=[])


def test_values_equal_the_simulators_raw_counters(
    sim_factory: Callable[..., SimHandle],
) -> None:
    sim = sim_factory(["--variant", "ngram", "--time-scale", "20", "--seed", "3"])
    model = sim.state()["model"]
    ex = exporter_for(sim, "ngram")
    m = {"variant": "ngram", "model": model}
    try:
        load(sim, 4)
        ex.poller.once()  # quiescent: nothing changes between our poll and the raw read
        c0 = raw_counters(sim.url)
        load(sim, 6)
        ex.poller.once()
        c1 = raw_counters(sim.url)
    finally:
        ex.stop()
    drafts = "vllm:spec_decode_num_drafts_total"
    tokens = "vllm:spec_decode_num_draft_tokens_total"
    acc = "vllm:spec_decode_num_accepted_tokens_total"
    assert c1[tokens] > c0[tokens] > 0
    assert sample(ex, "specload_spec_decode_acceptance_ratio", **m, window="lifetime") == (
        pytest.approx(c1[acc] / c1[tokens])
    )
    assert sample(ex, "specload_spec_decode_mean_acceptance_length", **m, window="lifetime") == (
        pytest.approx(1 + c1[acc] / c1[drafts])
    )
    assert sample(ex, "specload_spec_decode_acceptance_ratio", **m, window="interval") == (
        pytest.approx((c1[acc] - c0[acc]) / (c1[tokens] - c0[tokens]))
    )
    assert sample(ex, "specload_spec_decode_mean_acceptance_length", **m, window="interval") == (
        pytest.approx(1 + (c1[acc] - c0[acc]) / (c1[drafts] - c0[drafts]))
    )
    for p in range(5):
        key = f"vllm:spec_decode_num_accepted_tokens_per_pos_total[{p}]"
        assert sample(
            ex, "specload_spec_decode_position_acceptance_ratio", **m, window="lifetime",
            position=str(p),
        ) == pytest.approx(c1[key] / c1[drafts])  # fmt: skip
    tpot = "vllm:request_time_per_output_token_seconds"
    assert sample(ex, "specload_server_tpot_mean_seconds", **m, window="interval") == pytest.approx(
        (c1[tpot + "_sum"] - c0[tpot + "_sum"]) / (c1[tpot + "_count"] - c0[tpot + "_count"])
    )
    itl = "vllm:inter_token_latency_seconds"
    assert sample(ex, "specload_server_itl_mean_seconds", **m, window="lifetime") == pytest.approx(
        c1[itl + "_sum"] / c1[itl + "_count"]
    )
    info = {
        **m, "method": "ngram", "num_speculative_tokens": "5", "draft_model": "",
        "tensor_parallel_size": "8", "vllm_version": "0.32.0",
    }  # fmt: skip
    assert sample(ex, "specload_variant_info", **info) == 1.0
    queries, hits = "vllm:prefix_cache_queries_total", "vllm:prefix_cache_hits_total"
    assert c1[queries] > c0[queries] > 0
    assert sample(ex, "specload_server_prefix_cache_queries_tokens_total", **m) == c1[queries]
    assert sample(ex, "specload_server_prefix_cache_hits_tokens_total", **m) == c1[hits]
    assert sample(ex, "specload_server_prefix_cache_hit_ratio", **m, window="interval") == (
        pytest.approx((c1[hits] - c0[hits]) / (c1[queries] - c0[queries]))
    )
    preemptions = "vllm:num_preemptions_total"
    assert sample(ex, "specload_server_preemptions_total", **m) == c1[preemptions]
    assert sample(ex, "specload_server_sleep_state", **m, state="awake") == 1.0
    assert sample(ex, "specload_server_sleep_state", **m, state="discard_all") == 0.0


class DowntimeProbe:
    """Connects to the API port every 10 ms: the true downtime, to compare against."""

    def __init__(self, port: int) -> None:
        self.port = port
        self.down_at: float | None = None
        self.up_at: float | None = None
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _up(self) -> bool:
        try:
            with socket.create_connection(("127.0.0.1", self.port), timeout=0.5):
                return True
        except OSError:
            return False

    def _run(self) -> None:
        while not self._stop.is_set():
            up = self._up()
            now = time.monotonic()
            if not up and self.down_at is None:
                self.down_at = now
            if up and self.down_at is not None and self.up_at is None:
                self.up_at = now
            time.sleep(0.01)

    def __enter__(self) -> DowntimeProbe:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()

    @property
    def downtime_s(self) -> float:
        assert self.down_at is not None and self.up_at is not None
        return self.up_at - self.down_at


def test_reload_walks_ready_loading_ready_and_variant_switch(
    sim_factory: Callable[..., SimHandle],
) -> None:
    sim = sim_factory(["--variant", "ngram", "--time-scale", "20", "--seed", "3"])
    model = sim.state()["model"]
    ex = exporter_for(sim, "ngram", expected_reload="5s")
    m = {"variant": "ngram", "model": model}
    states: list[str] = []
    progress: list[float] = []
    ex.start(serve=False)
    try:
        deadline = time.monotonic() + 10
        while sample(ex, "specload_target_state", **m, state="ready") != 1.0:
            assert time.monotonic() < deadline, "never ready"
            time.sleep(0.05)
        ngram_info = {**m, "method": "ngram", "num_speculative_tokens": "5", "draft_model": "",
                      "tensor_parallel_size": "8", "vllm_version": "0.32.0"}  # fmt: skip
        assert sample(ex, "specload_variant_info", **ngram_info) == 1.0
        with DowntimeProbe(sim.port) as probe:
            sim.reload(variant="baseline", load_time=3.0)
            deadline = time.monotonic() + 20
            while True:
                state = next(
                    s for s in ("ready", "loading", "down", "unknown")
                    if sample(ex, "specload_target_state", **m, state=s) == 1.0
                )  # fmt: skip
                if not states or states[-1] != state:
                    states.append(state)
                p = sample(ex, "specload_target_load_progress_ratio", **m)
                if p is not None:
                    progress.append(p)
                if state == "ready" and len(states) > 2:
                    break
                assert time.monotonic() < deadline, states
                time.sleep(0.05)
        assert states == ["ready", "loading", "ready"]
        assert sample(ex, "specload_target_reloads_total", **m) == 1.0
        measured = sample(ex, "specload_target_last_reload_duration_seconds", **m)
        assert measured is not None
        assert abs(measured - probe.downtime_s) <= INTERVAL_S + 0.1, (measured, probe.downtime_s)
        # Load progress from the log rose while loading.
        assert len(set(progress)) >= 3, progress
        assert progress == sorted(progress) and progress[-1] > progress[0]
        # The variant switched at the reload: the log's new config line, no spec families.
        deadline = time.monotonic() + 5
        base_info = {**m, "method": "none", "num_speculative_tokens": "0", "draft_model": "",
                     "tensor_parallel_size": "8", "vllm_version": "0.32.0"}  # fmt: skip
        while sample(ex, "specload_variant_info", **base_info) != 1.0:
            assert time.monotonic() < deadline
            time.sleep(0.05)
        assert sample(ex, "specload_spec_decode_acceptance_ratio", **m, window="lifetime") is None
        assert sample(ex, "specload_target_reload_in_progress", **m) == 0.0
    finally:
        ex.stop()


def test_exporter_cli_serves_while_target_is_down(
    sim_factory: Callable[..., SimHandle], tmp_path: Path
) -> None:
    """The real command: a refused target and a live sim, scraped over HTTP."""
    sim = sim_factory(["--variant", "eagle3", "--time-scale", "20"])
    port = free_port()
    with (tmp_path / "exporter.err").open("wb") as err:
        proc = subprocess.Popen(
            [sys.executable, "-m", "specload", "exporter", "--port", str(port), "--interval",
             "0.2", "--target", f"eagle3={sim.url}",
             "--target", f"gone=http://127.0.0.1:{free_port()}"],
            stdout=subprocess.DEVNULL, stderr=err,
        )  # fmt: skip
    try:
        deadline = time.monotonic() + 20
        text = ""
        while time.monotonic() < deadline:
            try:
                text = httpx.get(f"http://127.0.0.1:{port}/metrics", timeout=2).text
                if 'specload_target_up{model="' in text and "eagle3" in text:
                    break
            except httpx.HTTPError:
                pass
            time.sleep(0.1)
        fams = {f.name: f for f in text_string_to_metric_families(text)}
        ups = {s.labels["variant"]: s.value for s in fams["specload_target_up"].samples}
        assert ups == {"eagle3": 1.0, "gone": 0.0}
        errs = {
            (s.labels["variant"], s.labels["reason"]): s.value
            for s in fams["specload_target_scrape_errors"].samples
            if s.name.endswith("_total")
        }
        assert errs[("gone", "refused")] >= 1 and errs[("eagle3", "refused")] == 0
    finally:
        proc.terminate()
        proc.wait(10)
    assert proc.returncode == 0
