"""The simulator's prefix cache over real sockets: the same prompt twice hits,
``POST /reset_prefix_cache`` (vLLM 0.32's dev-mode route) empties it, ``--dev-mode off`` hides
the route as vLLM without ``VLLM_SERVER_DEV_MODE=1`` does."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable

import httpx
import pytest

from simulator.prefix_cache import BLOCK_TOKENS
from simulator.text import prompt_token_ids
from specload import promtext
from tests.fixtures.sim import SimHandle

pytestmark = pytest.mark.integration

PROMPT = "Explain how a write-ahead log makes a database crash-safe. " * 12


def cache_counters(url: str) -> tuple[float, float, float]:
    page = promtext.parse(httpx.get(url + "/metrics").text)
    return (
        page["vllm:prefix_cache_queries_total"].total() or 0.0,
        page["vllm:prefix_cache_hits_total"].total() or 0.0,
        page["vllm:prompt_tokens_cached_total"].total() or 0.0,
    )


def ask(url: str, max_tokens: int = 5) -> int:
    r = httpx.post(
        url + "/v1/chat/completions",
        json={"messages": [{"role": "user", "content": PROMPT}], "max_tokens": max_tokens},
        timeout=60,
    )
    assert r.status_code == 200
    prompt_tokens: int = r.json()["usage"]["prompt_tokens"]
    return prompt_tokens


def test_the_same_prompt_hits_until_the_cache_is_reset(
    sim_factory: Callable[..., SimHandle],
) -> None:
    sim = sim_factory(["--time-scale", "50"])
    n = len(prompt_token_ids(PROMPT))
    full_hit = (n - 1) // BLOCK_TOKENS * BLOCK_TOKENS
    deltas = []
    for step in ("first", "second", "reset", "third"):
        if step == "reset":
            r = httpx.post(sim.url + "/reset_prefix_cache")
            assert (r.status_code, r.json()) == (200, {"success": True})
            continue
        before = cache_counters(sim.url)
        assert ask(sim.url) == n
        after = cache_counters(sim.url)
        deltas.append(tuple(a - b for a, b in zip(after, before, strict=True)))
    assert deltas == [(n, 0, 0), (n, full_hit, full_hit), (n, 0, 0)]
    assert httpx.get(sim.url + "/reset_prefix_cache").status_code == 405


def test_reset_is_refused_while_a_request_holds_the_cache(
    sim_factory: Callable[..., SimHandle],
) -> None:
    sim = sim_factory(["--time-scale", "2"])
    done = threading.Event()

    def long_request() -> None:
        try:
            ask(sim.url, max_tokens=400)  # ~3 s at --time-scale 2
        finally:
            done.set()

    worker = threading.Thread(target=long_request)
    worker.start()
    try:
        deadline = time.monotonic() + 10
        while httpx.get(sim.control_url + "/state").json()["tokens_sent"] == 0:
            assert time.monotonic() < deadline
            time.sleep(0.02)
        r = httpx.post(sim.url + "/reset_prefix_cache")
        assert (r.status_code, r.json()) == (200, {"success": False})
        assert not done.is_set()
        forced = httpx.post(sim.url + "/reset_prefix_cache?reset_running_requests=true")
        assert forced.json() == {"success": True}
        bad = httpx.post(sim.url + "/reset_prefix_cache?reset_running_requests=perhaps")
        assert bad.status_code == 422
    finally:
        worker.join(timeout=30)
    r = httpx.post(sim.url + "/reset_prefix_cache")
    assert r.json() == {"success": True}  # nothing running any more


def test_dev_mode_off_answers_404(sim_factory: Callable[..., SimHandle]) -> None:
    sim = sim_factory(["--time-scale", "50", "--dev-mode", "off"])
    r = httpx.post(sim.url + "/reset_prefix_cache")
    assert (r.status_code, r.json()) == (404, {"detail": "Not Found"})
    # The cache itself still works: only the route is gone.
    ask(sim.url)
    _, hits_before, _ = cache_counters(sim.url)
    ask(sim.url)
    assert cache_counters(sim.url)[1] > hits_before
