"""Against real vLLM (CPU build, tiny local models): tokens and channels as the server counts."""

from __future__ import annotations

import json
import time
from pathlib import Path

import httpx
import pytest

from specload.load.meter import StreamMeter
from specload.promtext import parse
from specload.records.request import RequestRecord
from specload.sse import SSEDecoder

pytestmark = [pytest.mark.vllm, pytest.mark.slow]


def generation_tokens(url: str) -> float:
    text = httpx.get(f"{url}/metrics", timeout=10).text
    exposition = parse(text)
    for name in ("vllm:generation_tokens", "vllm:generation_tokens_total"):
        fam = exposition.get_family(name)
        if fam is not None:
            return fam.total() or 0.0
    raise AssertionError("vllm:generation_tokens_total not in /metrics")


@pytest.mark.parametrize("kind", ["vllm_plain", "vllm_ngram"])
def test_client_tokens_equal_server_generation_tokens(request, run_locust, kind: str) -> None:
    server = request.getfixturevalue(kind)
    before = generation_tokens(server.url)
    run = run_locust(
        server.url,
        users=3,
        seconds=4,
        timeout_s=300,
        args=["--max-tokens", "48", "--temperature", "0", "--stop-timeout", "120"],
    )
    assert run.returncode == 0, run.stderr[-2000:]
    assert run.records and all(r["ok"] for r in run.records)
    client = sum(r["tokens_output"] for r in run.records)
    delta = 0.0
    for _ in range(50):  # the counter follows the last step closely
        delta = generation_tokens(server.url) - before
        if delta >= client:
            break
        time.sleep(0.1)
    assert client == delta
    assert {r["token_count_source"] for r in run.records} == {"exact"}
    assert all(r["model"] == server.model for r in run.records)
    if kind == "vllm_ngram":
        # Speculation puts several tokens in some chunks: chunks alone would undercount.
        assert sum(r["chunks"] for r in run.records) < client


def test_channel_split_matches_the_tokens_sent(vllm_answering) -> None:
    """Truth from the token ids the server streamed: reasoning ends at the first </think>."""
    server = vllm_answering
    body = {
        "model": server.model,
        "max_tokens": 200,
        "temperature": 1.0,
        "seed": 11,
        "stream": True,
        "messages": [{"role": "user", "content": "Explain briefly why the sky looks blue."}],
        "stream_options": {"include_usage": True, "continuous_usage_stats": True},
        "return_token_ids": True,
    }
    meter = StreamMeter(time.perf_counter())
    decoder = SSEDecoder()
    token_ids: list[int] = []
    with httpx.stream("POST", f"{server.url}/v1/chat/completions", json=body, timeout=120) as resp:
        assert resp.status_code == 200
        for raw in resp.iter_raw():
            for payload in decoder.feed(raw):
                meter.feed(payload, time.perf_counter())
                if payload != b"[DONE]":
                    for choice in json.loads(payload).get("choices") or []:
                        token_ids += choice.get("token_ids") or []
    record = RequestRecord("explanation", "s", "v", server.model, 0.0, 0.0)
    meter.finish(record, time.perf_counter())
    assert record.token_count_source == "exact"
    assert record.tokens_output == len(token_ids) == meter.final_usage["completion_tokens"]
    manifest = json.loads((Path(server.model_path).parent / "manifest.json").read_text())
    think_close = manifest["variants"]["answering"]["token_ids"]["</think>"]
    assert think_close in token_ids  # the answering model closes its reasoning
    reasoning = token_ids.index(think_close) + 1  # </think> itself ends the reasoning
    assert (record.tokens_reasoning, record.tokens_content) == (
        reasoning,
        len(token_ids) - reasoning,
    ), record
