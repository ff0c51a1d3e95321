"""The simulator against a live real vLLM 0.32: /metrics families and stream chunk shapes.

For every family the simulator emulates: the same name, type, label names,
bucket boundaries and help text as the real server's (the n-gram server for
the spec-decode families). Any difference fails.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import httpx
import pytest

from specload import promtext
from specload.sse import DONE, SSEDecoder
from tests.fixtures.sim import SimHandle
from tests.fixtures.vllm_families import EMULATED_FAMILIES, SPEC_DECODE_FAMILIES, family_shape

pytestmark = [pytest.mark.vllm, pytest.mark.integration]

REQUIRED = EMULATED_FAMILIES
SPEC_DECODE = SPEC_DECODE_FAMILIES
shape = family_shape


def exercise(url: str, model: str) -> None:
    for _ in range(2):
        r = httpx.post(
            url + "/v1/chat/completions",
            json={
                "model": model,
                "messages": [{"role": "user", "content": "hello there"}],
                "max_tokens": 8,
            },
            timeout=120,
        )
        assert r.status_code == 200, r.text


def compare(real_url: str, sim: SimHandle, model: str, extra: tuple[str, ...] = ()) -> None:
    exercise(real_url, model)
    exercise(sim.url, model)
    real = promtext.parse(httpx.get(real_url + "/metrics", timeout=30).text)
    ours = promtext.parse(httpx.get(sim.url + "/metrics", timeout=30).text)
    emulated = [n for n in ours if n.startswith(("vllm:", "process_"))]
    problems = []
    for name in emulated:
        if name not in real:
            problems.append(f"{name}: not served by vLLM 0.32")
        elif shape(ours, name) != shape(real, name):
            problems.append(f"{name}: sim {shape(ours, name)} != vLLM {shape(real, name)}")
    for name in (*REQUIRED, *extra):
        if name not in ours:
            problems.append(f"{name}: not emulated")
    assert not problems, "\n".join(problems)


def test_plain_server_families(vllm_plain: Any, sim_factory: Callable[..., SimHandle]) -> None:
    model = vllm_plain.model
    sim = sim_factory(
        [
            "--model",
            model,
            "--max-model-len",
            "2048",
            "--time-scale",
            "100",
            "--kv-cache-tokens",
            "1048576",
        ]
    )
    compare(vllm_plain.url, sim, model)


def test_ngram_server_families(vllm_ngram: Any, sim_factory: Callable[..., SimHandle]) -> None:
    model = vllm_ngram.model
    sim = sim_factory(
        [
            "--variant",
            "ngram",
            "--num-speculative-tokens",
            "3",
            "--model",
            model,
            "--max-model-len",
            "2048",
            "--time-scale",
            "100",
        ]
    )
    compare(vllm_ngram.url, sim, model, SPEC_DECODE)


def chunks(url: str, model: str) -> list[dict[str, Any]]:
    body = {
        "model": model,
        "messages": [{"role": "user", "content": "hello there"}],
        "max_tokens": 6,
        "stream": True,
        "stream_options": {"include_usage": True, "continuous_usage_stats": True},
    }
    decoder = SSEDecoder()
    events: list[bytes] = []
    with httpx.stream("POST", url + "/v1/chat/completions", json=body, timeout=120) as r:
        for data in r.iter_raw():
            events.extend(decoder.feed(data))
    assert events[-1] == DONE
    return [json.loads(e) for e in events[:-1]]


def keys(obj: Any) -> Any:
    """The key structure of a JSON value (values dropped)."""
    if isinstance(obj, dict):
        return {k: keys(v) for k, v in obj.items()}
    if isinstance(obj, list):
        return [keys(v) for v in obj[:1]]
    return None


def test_stream_chunks_have_vllm_shape(
    vllm_plain: Any, sim_factory: Callable[..., SimHandle]
) -> None:
    model = vllm_plain.model
    sim = sim_factory(["--model", model, "--max-model-len", "2048", "--time-scale", "100"])
    real, ours = chunks(vllm_plain.url, model), chunks(sim.url, model)
    assert keys(ours[0]) == keys(real[0])  # role chunk
    assert keys(ours[1]) == keys(real[1])  # a reasoning token chunk
    assert keys(ours[-2]) == keys(real[-2])  # the finishing chunk
    assert keys(ours[-1]) == keys(real[-1])  # the usage chunk
    assert (
        ours[-2]["choices"][0]["finish_reason"]
        == real[-2]["choices"][0]["finish_reason"]
        == "length"
    )
