"""Facts about real vLLM 0.32 (CPU build, tiny local models) that specload relies on.

Ordered by server so a run starts each server once: plain (then its stop/start
cycle), ngram, answering, profiled.
"""

from __future__ import annotations

import gzip
import itertools
import json
import time
from pathlib import Path
from typing import Any

import httpx
import pytest

from specload import promtext
from specload.sse import DONE, SSEDecoder
from tests.fixtures.vllm import VllmPool, VllmServer, port_refuses

pytestmark = pytest.mark.vllm

PROMPT = "Count the primes below 30, then list them in order."
SPEC_FAMILIES = (
    "vllm:spec_decode_num_drafts",
    "vllm:spec_decode_num_draft_tokens",
    "vllm:spec_decode_num_accepted_tokens",
    "vllm:spec_decode_num_accepted_tokens_per_pos",
)


def chat(server: VllmServer, **extra: Any) -> dict[str, Any]:
    body: dict[str, Any] = {
        "model": server.model,
        "messages": [{"role": "user", "content": PROMPT}],
        "max_tokens": 16,
        "seed": 1,
    }
    body.update(extra)
    return body


def stream_chunks(server: VllmServer, body: dict[str, Any]) -> tuple[list[dict[str, Any]], bool]:
    """The JSON chunks of a streamed chat completion, and whether ``[DONE]`` ended it."""
    decoder = SSEDecoder()
    chunks: list[dict[str, Any]] = []
    done = False
    with (
        httpx.Client(timeout=60) as client,
        client.stream("POST", f"{server.base_url}/chat/completions", json=body) as r,
    ):
        assert r.status_code == 200, r.read()
        assert r.headers["content-type"].startswith("text/event-stream")
        for raw in r.iter_raw():
            for data in decoder.feed(raw):
                if data == DONE:
                    done = True
                else:
                    assert not done, "data after [DONE]"
                    chunks.append(json.loads(data))
    return chunks, done


def deltas(chunks: list[dict[str, Any]], key: str) -> list[str]:
    return [
        c["choices"][0]["delta"][key]
        for c in chunks
        if c["choices"] and c["choices"][0]["delta"].get(key)
    ]


def metrics(server: VllmServer) -> promtext.Exposition:
    r = httpx.get(f"{server.url}/metrics", timeout=10)
    assert r.status_code == 200
    return promtext.parse(r.text)


# --------------------------------------------------------------------------- plain


def test_reasoning_arrives_in_delta_reasoning(vllm_plain: VllmServer) -> None:
    chunks, done = stream_chunks(vllm_plain, chat(vllm_plain, stream=True, max_tokens=12))
    assert done
    reasoning = deltas(chunks, "reasoning")
    assert reasoning, "no delta.reasoning in the stream"
    assert "".join(reasoning).strip()
    # 0.16+ dropped the old field; the plain model never closes </think>, so no content.
    assert not any("reasoning_content" in c["choices"][0]["delta"] for c in chunks if c["choices"])
    assert deltas(chunks, "content") == []
    finals = [c["choices"][0]["finish_reason"] for c in chunks if c["choices"]]
    assert finals[-1] == "length"
    # Without stream_options there is no usage at all.
    assert all(c.get("usage") is None for c in chunks)


def test_usage_chunk_arrives_with_include_usage(vllm_plain: VllmServer) -> None:
    body = chat(vllm_plain, stream=True, max_tokens=10, stream_options={"include_usage": True})
    chunks, done = stream_chunks(vllm_plain, body)
    assert done
    last = chunks[-1]
    assert last["choices"] == []
    assert last["usage"]["completion_tokens"] == 10
    assert last["usage"]["prompt_tokens"] > 0
    assert last["usage"]["total_tokens"] == 10 + last["usage"]["prompt_tokens"]
    # <think> sits in the prompt (chat template), so vLLM counts no reasoning tokens.
    assert last["usage"]["completion_tokens_details"]["reasoning_tokens"] == 0
    assert all(c.get("usage") is None for c in chunks[:-1])


def test_continuous_usage_stats_are_cumulative(vllm_plain: VllmServer) -> None:
    options = {"include_usage": True, "continuous_usage_stats": True}
    chunks, _ = stream_chunks(
        vllm_plain, chat(vllm_plain, stream=True, max_tokens=12, stream_options=options)
    )
    counts = [c["usage"]["completion_tokens"] for c in chunks]
    assert counts[0] == 0  # the role chunk comes before any token
    assert counts == sorted(counts)
    assert counts[-1] == 12
    # Every chunk that carries text carries at least one more token than the one before.
    text_steps = [
        b - a
        for a, b, c in zip(counts, counts[1:], chunks[1:], strict=False)
        if c["choices"] and c["choices"][0]["delta"].get("reasoning")
    ]
    assert text_steps and all(step >= 1 for step in text_steps)


def test_non_streamed_reply_has_reasoning_and_length(vllm_plain: VllmServer) -> None:
    r = httpx.post(f"{vllm_plain.base_url}/chat/completions", json=chat(vllm_plain), timeout=60)
    assert r.status_code == 200
    reply = r.json()
    message = reply["choices"][0]["message"]
    assert message["reasoning"] and message["content"] is None
    assert reply["choices"][0]["finish_reason"] == "length"
    assert reply["usage"]["completion_tokens"] == 16


def test_restart_refuses_while_loading_then_answers(
    vllm_pool: VllmPool, vllm_plain: VllmServer
) -> None:
    """A stop/start cycle on the same port: refused while loading, then the three
    endpoints answer, and the server's counters start again from zero."""
    httpx.post(f"{vllm_plain.base_url}/chat/completions", json=chat(vllm_plain), timeout=60)
    before = metrics(vllm_plain).get_family("vllm:request_success")
    assert before is not None and (before.total() or 0) >= 1
    url, pid = vllm_plain.url, vllm_plain.pid

    vllm_plain.stop()
    assert port_refuses(vllm_plain.port)
    refused_while_loading: list[bool] = []

    def probe(server: VllmServer) -> None:
        time.sleep(1.0)  # well inside the ~20-60 s load
        refused_while_loading.append(port_refuses(server.port))

    server = vllm_pool.ensure("plain", on_spawn=probe)
    assert server is vllm_plain and server.url == url and server.pid != pid
    assert refused_while_loading == [True]
    with httpx.Client(timeout=10) as client:
        assert client.get(f"{url}/health").status_code == 200
        models = client.get(f"{url}/v1/models")
        assert models.status_code == 200
        assert [m["id"] for m in models.json()["data"]] == [server.model]
        page = client.get(f"{url}/metrics")
        assert page.status_code == 200
    after = promtext.parse(page.text).get_family("vllm:request_success")
    assert after is not None and (after.total() or 0) == 0


# --------------------------------------------------------------------------- ngram


def test_ngram_metrics_have_spec_decode_families(vllm_ngram: VllmServer) -> None:
    before = metrics(vllm_ngram)
    for name in SPEC_FAMILIES:
        fam = before.get_family(name)
        assert fam is not None, f"{name} missing from /metrics"
        assert fam.type == "counter"
    body = chat(vllm_ngram, temperature=0.0, max_tokens=48)
    r = httpx.post(f"{vllm_ngram.base_url}/chat/completions", json=body, timeout=60)
    assert r.status_code == 200
    after = metrics(vllm_ngram)
    per_pos = after.get_family("vllm:spec_decode_num_accepted_tokens_per_pos")
    assert per_pos is not None
    assert per_pos.label_values("position") == {"0", "1", "2"}

    def delta(name: str) -> float:
        fam_after, fam_before = after.get_family(name), before.get_family(name)
        assert fam_after is not None and fam_before is not None
        return (fam_after.total() or 0.0) - (fam_before.total() or 0.0)

    drafts = delta("vllm:spec_decode_num_drafts")
    draft_tokens = delta("vllm:spec_decode_num_draft_tokens")
    accepted = delta("vllm:spec_decode_num_accepted_tokens")
    assert drafts > 0
    assert draft_tokens == 3 * drafts  # k = 3 tokens per draft
    assert 0 < accepted <= draft_tokens
    assert delta("vllm:spec_decode_num_accepted_tokens_per_pos") == accepted


def test_ngram_chunks_can_carry_several_tokens(vllm_ngram: VllmServer) -> None:
    """Chunk counts are not token counts: accepted drafts arrive together."""
    options = {"include_usage": True, "continuous_usage_stats": True}
    body = chat(vllm_ngram, stream=True, temperature=0.0, max_tokens=48, stream_options=options)
    chunks, _ = stream_chunks(vllm_ngram, body)
    text_chunks = [c for c in chunks if c["choices"] and c["choices"][0]["delta"].get("reasoning")]
    assert chunks[-1]["usage"]["completion_tokens"] == 48
    assert len(text_chunks) < 48
    counts = [c["usage"]["completion_tokens"] for c in chunks]
    assert max(b - a for a, b in itertools.pairwise(counts)) > 1


# --------------------------------------------------------------------------- answering


def test_answering_model_writes_content_after_reasoning(vllm_answering: VllmServer) -> None:
    options = {"include_usage": True}
    body = chat(vllm_answering, stream=True, max_tokens=64, seed=3, stream_options=options)
    chunks, _ = stream_chunks(vllm_answering, body)
    kinds = [
        "reasoning" if c["choices"][0]["delta"].get("reasoning") else "content"
        for c in chunks
        if c["choices"]
        and (c["choices"][0]["delta"].get("reasoning") or c["choices"][0]["delta"].get("content"))
    ]
    assert "reasoning" in kinds and "content" in kinds
    first_content = kinds.index("content")
    assert "reasoning" not in kinds[first_content:], "reasoning after content"
    assert "".join(deltas(chunks, "content")).strip()
    assert chunks[-1]["usage"]["completion_tokens"] == 64


# --------------------------------------------------------------------------- profiled


def test_profiler_writes_a_trace_per_rank(vllm_profiled: VllmServer) -> None:
    trace_dir = vllm_profiled.trace_dir
    assert trace_dir is not None
    before = set(trace_dir.rglob("*"))
    with httpx.Client(timeout=120) as client:
        assert client.post(f"{vllm_profiled.url}/start_profile").status_code == 200
        r = client.post(
            f"{vllm_profiled.base_url}/chat/completions", json=chat(vllm_profiled, max_tokens=8)
        )
        assert r.status_code == 200
        assert client.post(f"{vllm_profiled.url}/stop_profile").status_code == 200
    # One trace per rank (rank0.*), plus one of the API server's engine client.
    deadline = time.monotonic() + 60
    ranks: list[Path] = []
    while time.monotonic() < deadline:
        ranks = [p for p in trace_dir.glob("rank*.pt.trace.json.gz") if p not in before]
        if ranks:
            break
        time.sleep(0.5)
    assert len(ranks) == 1, f"expected one rank trace (TP 1), got {ranks}"
    trace = json.loads(gzip.decompress(ranks[0].read_bytes()))
    names = {e.get("name", "") for e in trace["traceEvents"]}
    steps = [n for n in names if n.startswith("execute_context_") and "_generation_" in n]
    assert steps, "no execute_context_N(t)_generation_M(t) step annotations"
    front = [p for p in trace_dir.glob("*async_llm*.pt.trace.json.gz") if p not in before]
    assert len(front) == 1
