"""The simulator's API over real sockets: shapes, token accounting, errors, metrics agreement."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import httpx
import pytest

from specload import promtext
from specload.sse import DONE, SSEDecoder
from tests.fixtures.sim import SimHandle

pytestmark = pytest.mark.integration


def stream_chat(
    url: str, body: dict[str, Any], headers: dict[str, str] | None = None
) -> list[bytes]:
    events: list[bytes] = []
    decoder = SSEDecoder()
    with httpx.stream(
        "POST", url + "/v1/chat/completions", json=body, headers=headers, timeout=30
    ) as r:
        assert r.status_code == 200
        assert r.headers["content-type"].startswith("text/event-stream")
        for data in r.iter_raw():
            events.extend(decoder.feed(data))
    return events


@pytest.fixture
def sim(sim_factory: Callable[..., SimHandle]) -> SimHandle:
    return sim_factory(["--variant", "eagle3", "--time-scale", "50", "--seed", "7"])


def test_stream_carries_every_token_once_with_usage(sim: SimHandle) -> None:
    body = {
        "model": "moonshotai/Kimi-K2.5",
        "messages": [{"role": "user", "content": "Explain TCP slow start."}],
        "max_tokens": 4096,
        "stream": True,
        "stream_options": {"include_usage": True, "continuous_usage_stats": True},
    }
    events = stream_chat(sim.url, body, {"X-Specload-Category": "explanation"})
    assert events[-1] == DONE
    chunks = [json.loads(e) for e in events[:-1]]
    assert chunks[0]["choices"][0]["delta"] == {"role": "assistant", "content": ""}
    assert chunks[0]["usage"]["completion_tokens"] == 0
    final = chunks[-1]
    assert final["choices"] == [] and final["usage"]["completion_tokens"] > 0
    reasoning_words = content_words = 0
    seen_content = False
    multi_token_chunks = 0
    previous = 0
    for chunk in chunks[1:-1]:
        delta = chunk["choices"][0]["delta"]
        r = len(delta.get("reasoning", "").split())
        c = len(delta.get("content", "").split())
        if r and seen_content:
            pytest.fail("reasoning after content")
        seen_content = seen_content or c > 0
        reasoning_words += r
        content_words += c
        cumulative = chunk["usage"]["completion_tokens"]
        assert cumulative - previous == r + c  # one word per token
        multi_token_chunks += (r + c) > 1
        previous = cumulative
    assert reasoning_words > 0 and content_words > 0
    assert reasoning_words + content_words == final["usage"]["completion_tokens"]
    assert chunks[-2]["choices"][0]["finish_reason"] == "stop"
    assert multi_token_chunks > 0  # EAGLE-3: a chunk carries what one step produced


def test_max_tokens_gives_length_and_reasoning_content_field(
    sim_factory: Callable[..., SimHandle],
) -> None:
    sim = sim_factory(["--time-scale", "50", "--reasoning-field", "reasoning_content"])
    body = {
        "messages": [{"role": "user", "content": "Prove it."}],
        "max_completion_tokens": 17,
        "stream": True,
        "stream_options": {"include_usage": True},
    }
    events = stream_chat(sim.url, body, {"X-Specload-Category": "long_reasoning"})
    chunks = [json.loads(e) for e in events[:-1]]
    words = sum(
        len(c["choices"][0]["delta"].get("reasoning_content", "").split())
        for c in chunks
        if c["choices"]
    )
    assert words == 17
    assert not any("reasoning" in c["choices"][0]["delta"] for c in chunks if c["choices"])
    assert chunks[-2]["choices"][0]["finish_reason"] == "length"
    assert chunks[-1]["usage"]["completion_tokens"] == 17


def test_non_streaming_and_completions(sim: SimHandle) -> None:
    r = httpx.post(
        sim.url + "/v1/chat/completions",
        json={"messages": [{"role": "user", "content": "hi"}], "max_tokens": 9},
        timeout=30,
    )
    assert r.status_code == 200
    body = r.json()
    assert body["object"] == "chat.completion"
    message = body["choices"][0]["message"]
    assert len(message["reasoning"].split()) == 9 and message["content"] is None
    assert body["choices"][0]["finish_reason"] == "length"
    assert body["usage"]["completion_tokens"] == 9
    r = httpx.post(
        sim.url + "/v1/completions", json={"prompt": "Once upon", "max_tokens": 5}, timeout=30
    )
    assert r.status_code == 200
    assert len(r.json()["choices"][0]["text"].split()) == 5


def test_info_routes(sim: SimHandle) -> None:
    assert httpx.get(sim.url + "/health").status_code == 200
    # vLLM's answer, plus the simulator's time scale (results record which clock they ran on)
    assert httpx.get(sim.url + "/version").json() == {
        "version": "0.32.0",
        "specload_simulator": {"time_scale": 50.0},
    }  # the fixture's
    models = httpx.get(sim.url + "/v1/models").json()
    assert models["data"][0]["id"] == "moonshotai/Kimi-K2.5"
    assert httpx.get(sim.url + "/nope").status_code == 404


def test_errors_have_vllm_status_and_shape(sim: SimHandle) -> None:
    url = sim.url + "/v1/chat/completions"
    r = httpx.post(
        url, json={"model": "no-such-model", "messages": [{"role": "user", "content": "hi"}]}
    )
    assert r.status_code == 404
    err = r.json()["error"]
    assert err["type"] == "NotFoundError" and err["code"] == 404 and err["param"] == "model"
    assert "no-such-model" in err["message"]
    r = httpx.post(
        url, content=b'{"model": "x", "messages": [', headers={"content-type": "application/json"}
    )
    assert r.status_code == 400
    assert r.json()["error"]["type"] == "Bad Request"
    r = httpx.post(url, json={"max_tokens": 4})
    assert r.status_code == 400
    assert r.json()["error"]["param"] == "body.messages"
    r = httpx.post(url, json={"messages": [{"role": "user", "content": "x"}], "max_tokens": -1})
    assert r.status_code == 400
    assert httpx.get(url).status_code == 405


def test_client_disconnect_mid_stream_is_counted_as_abort(sim: SimHandle) -> None:
    body = {"messages": [{"role": "user", "content": "long"}], "max_tokens": 4000, "stream": True}
    with httpx.stream(
        "POST",
        sim.url + "/v1/chat/completions",
        json=body,
        headers={"X-Specload-Category": "long_reasoning"},
        timeout=30,
    ) as r:
        for _ in r.iter_raw():
            break
    # The server keeps serving and counts the abort.
    r = httpx.post(
        sim.url + "/v1/chat/completions",
        json={"messages": [{"role": "user", "content": "x"}], "max_tokens": 3},
        timeout=30,
    )
    assert r.status_code == 200
    expo = promtext.parse(httpx.get(sim.url + "/metrics").text)
    success = expo["vllm:request_success_total"].by_label("finished_reason")
    assert success["abort"] == 1 and success["length"] == 1


def test_metrics_agree_with_what_was_served(sim: SimHandle) -> None:
    sent = 0
    prompts = 0
    for i in range(4):
        r = httpx.post(
            sim.url + "/v1/chat/completions",
            json={"messages": [{"role": "user", "content": f"question {i}"}], "max_tokens": 30 + i},
            headers={"X-Specload-Category": "math"},
            timeout=30,
        )
        usage = r.json()["usage"]
        sent += usage["completion_tokens"]
        prompts += usage["prompt_tokens"]
    expo = promtext.parse(httpx.get(sim.url + "/metrics").text)
    assert expo["vllm:generation_tokens_total"].total() == sent
    assert expo["vllm:prompt_tokens_total"].total() == prompts
    assert sum(expo["vllm:request_success_total"].by_label("finished_reason").values()) == 4
    e2e = expo["vllm:e2e_request_latency_seconds"].histogram()
    assert e2e is not None and e2e.count == 4
    accepted = expo["vllm:spec_decode_num_accepted_tokens_total"].total()
    drafts = expo["vllm:spec_decode_num_drafts_total"].total()
    assert drafts is not None and drafts > 0 and accepted is not None
    # Every token leaves in a step: EAGLE-3 drafts on every decode step, so steps = drafts and
    # tokens = first tokens + decode steps + accepted drafts (less those max_tokens cut off).
    assert 4 + drafts <= sent <= 4 + drafts + accepted
