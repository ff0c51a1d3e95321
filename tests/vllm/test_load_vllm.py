"""Against real vLLM (CPU build, tiny local models): tokens and channels as the server counts."""

from __future__ import annotations

import json
import time
from pathlib import Path

import httpx
import pytest

from specload.promtext import parse

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
    run = run_locust(server.url, users=3, seconds=4, timeout_s=300,
                     args=["--max-tokens", "48", "--temperature", "0", "--stop-timeout", "120"])
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


def test_channel_split_matches_the_text_sent(vllm_answering, run_locust, tmp_path: Path) -> None:
    from tokenizers import Tokenizer  # noqa: PLC0415

    server = vllm_answering
    prompt = "Explain briefly why the sky looks blue."
    prompts = tmp_path / "one.jsonl"
    prompts.write_text(json.dumps({"prompt": prompt, "category": "explanation"}) + "\n")
    run = run_locust(server.url, users=1, seconds=2, timeout_s=300,
                     args=["--prompts", str(prompts), "--max-tokens", "200", "--temperature", "0",
                           "--stop-timeout", "120"])
    assert run.returncode == 0, run.stderr[-2000:]
    record = run.records[0]
    # The same greedy answer, not streamed: the server's own text per channel.
    body = httpx.post(f"{server.url}/v1/chat/completions", timeout=120, json={
        "model": server.model, "messages": [{"role": "user", "content": prompt}],
        "max_tokens": 200, "temperature": 0,
    }).json()
    message = body["choices"][0]["message"]
    reasoning_text = message.get("reasoning") or message.get("reasoning_content") or ""
    content_text = message.get("content") or ""
    assert reasoning_text and content_text, message  # the answering model closes </think>
    tok = Tokenizer.from_file(str(Path(server.model_path) / "tokenizer.json"))

    def count(text: str) -> int:
        return len(tok.encode(text, add_special_tokens=False).ids)

    assert record["tokens_output"] == body["usage"]["completion_tokens"]
    # </think> (and an end-of-turn token) sit in neither text: allow those two.
    assert abs(record["tokens_reasoning"] - count(reasoning_text)) <= 2, record
    assert abs(record["tokens_content"] - count(content_text)) <= 2, record
