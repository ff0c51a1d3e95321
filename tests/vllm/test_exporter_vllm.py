"""The exporter against real vLLM 0.32 (CPU build, tiny local model)."""

from __future__ import annotations

import time

import httpx
import pytest

from exporter.app import Exporter
from exporter.config import parse_config
from tests.fixtures.exporter import raw_counters, sample
from tests.fixtures.vllm import VllmServer

pytestmark = pytest.mark.vllm


def chat(server: VllmServer, text: str, max_tokens: int = 64) -> None:
    r = httpx.post(
        server.base_url + "/chat/completions",
        json={
            "model": server.model,
            "messages": [{"role": "user", "content": text}],
            "max_tokens": max_tokens,
            "temperature": 0,
            "seed": 1,
        },
        timeout=120,
    )
    r.raise_for_status()


def stable_poll(ex: Exporter, url: str) -> dict[str, float]:
    """Poll once with the counters not moving: raw read, poll, raw read agree."""
    for _ in range(20):
        before = raw_counters(url)
        ex.poller.once()
        after = raw_counters(url)
        keys = [k for k in after if k.startswith("vllm:spec_decode")]
        if all(before.get(k) == after[k] for k in keys):
            return after
        time.sleep(0.2)
    raise AssertionError("vLLM counters never settled")


PROMPTS = (
    "Count the primes below 30, then list them in order.",
    "List the even numbers below 20, then list them again in reverse.",
    "Repeat after me: one two three, one two three, one two three.",
)


def drafted_more(ex: Exporter, server: VllmServer, than: float) -> dict[str, float]:
    """Chat until vLLM has drafted more tokens than ``than``, then poll while still."""
    for i in range(8):
        chat(server, PROMPTS[i % len(PROMPTS)])
        counters = stable_poll(ex, server.url)
        if counters["vllm:spec_decode_num_draft_tokens_total"] > than:
            return counters
    raise AssertionError(f"no new drafts after 8 requests: {counters}")


def exporter_for(server: VllmServer, variant: str, interval: float = 0.5) -> Exporter:
    cfg = parse_config(
        {
            "port": 0,
            "interval": interval,
            "targets": [{"variant": variant, "url": server.url, "log": str(server.log_path)}],
        }
    )
    return Exporter(cfg, sources=[])


def test_ngram_acceptance_equals_hand_computed(vllm_ngram: VllmServer) -> None:
    ex = exporter_for(vllm_ngram, "ngram")
    m = {"variant": "ngram", "model": vllm_ngram.model}
    try:
        c0 = drafted_more(ex, vllm_ngram, 0.0)
        c1 = drafted_more(ex, vllm_ngram, c0["vllm:spec_decode_num_draft_tokens_total"])
    finally:
        ex.stop()
    drafts = "vllm:spec_decode_num_drafts_total"
    tokens = "vllm:spec_decode_num_draft_tokens_total"
    acc = "vllm:spec_decode_num_accepted_tokens_total"
    assert c1[tokens] > c0[tokens] > 0, (c0, c1)
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
    for p in range(3):
        per_pos = c1[f"vllm:spec_decode_num_accepted_tokens_per_pos_total[{p}]"]
        got = sample(ex, "specload_spec_decode_position_acceptance_ratio", **m, window="lifetime",
                position=str(p))  # fmt: skip
        assert got == pytest.approx(per_pos / c1[drafts])
    # From the real log: the method and k; from GET /version: the version.
    info = {**m, "method": "ngram", "num_speculative_tokens": "3", "draft_model": "",
            "tensor_parallel_size": "1", "vllm_version": "0.32.0"}  # fmt: skip
    assert sample(ex, "specload_variant_info", **info) == 1.0


def test_plain_has_no_spec_families(vllm_plain: VllmServer) -> None:
    ex = exporter_for(vllm_plain, "plain")
    m = {"variant": "plain", "model": vllm_plain.model}
    try:
        chat(vllm_plain, "hello there")
        ex.poller.once()
        ex.poller.once()
    finally:
        ex.stop()
    assert sample(ex, "specload_target_up", **m) == 1.0
    names = {
        s.name for fam in ex.registry.collect() for s in fam.samples if s.labels.get("variant")
    }
    assert not {n for n in names if n.startswith("specload_spec_decode")}, names
    assert "specload_server_itl_mean_seconds" in names
    assert sample(ex, "specload_variant_info", **m, method="none", num_speculative_tokens="0",
             draft_model="", tensor_parallel_size="1", vllm_version="0.32.0") == 1.0  # fmt: skip


@pytest.mark.slow
def test_real_restart_is_a_reload(vllm_plain: VllmServer) -> None:
    ex = exporter_for(vllm_plain, "plain", interval=0.5)
    m = {"variant": "plain", "model": vllm_plain.model}
    states: list[str] = []
    ex.start(serve=False)
    try:
        deadline = time.monotonic() + 10
        while sample(ex, "specload_target_state", **m, state="ready") != 1.0:
            assert time.monotonic() < deadline
            time.sleep(0.1)
        start0 = sample(ex, "specload_target_start_time_seconds", **m)
        states.append("ready")
        t_stop = time.monotonic()
        vllm_plain.stop()
        vllm_plain.spawn()
        deadline = time.monotonic() + 300
        saw_loading = False
        while True:
            if sample(ex, "specload_target_state", **m, state="loading") == 1.0 and not saw_loading:
                saw_loading = True
                states.append("loading")
            if saw_loading and sample(ex, "specload_target_state", **m, state="ready") == 1.0:
                states.append("ready")
                break
            assert time.monotonic() < deadline, states
            time.sleep(0.1)
        downtime = time.monotonic() - t_stop
    finally:
        ex.stop()
        # Leave the shared server up for the next tests, whatever happened here.
        if not vllm_plain.is_running():
            vllm_plain.spawn()
        vllm_plain.wait_ready()
    assert states == ["ready", "loading", "ready"]
    assert sample(ex, "specload_target_reloads_total", **m) == 1.0
    took = sample(ex, "specload_target_last_reload_duration_seconds", **m)
    assert took is not None and 0 < took <= downtime + 0.5
    assert sample(ex, "specload_target_start_time_seconds", **m) != start0
