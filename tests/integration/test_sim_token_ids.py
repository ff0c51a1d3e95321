"""``"return_token_ids": true`` on the simulator: vLLM 0.32's fields and placement, the ids
the simulator really generated (each id's word is the token's text), and the n-gram variant's
counters equal to the replay of those ids."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import httpx
import pytest

from simulator.ngram import RequestReplay
from simulator.text import WORDS, prompt_token_ids
from specload import promtext
from specload.sse import DONE, SSEDecoder
from tests.fixtures.sim import SimHandle

pytestmark = pytest.mark.integration

PROMPT = "Write a Python function that merges overlapping intervals and explain its complexity."


def _events(url: str, path: str, body: dict[str, Any], category: str = "coding") -> list[Any]:
    decoder = SSEDecoder()
    events: list[bytes] = []
    with httpx.stream(
        "POST", url + path, json=body, headers={"X-Specload-Category": category}, timeout=30
    ) as r:
        assert r.status_code == 200
        for data in r.iter_raw():
            events.extend(decoder.feed(data))
    assert events[-1] == DONE
    return [json.loads(e) for e in events[:-1]]


def _words(ids: list[int]) -> str:
    return "".join(" " + WORDS[i] for i in ids)


@pytest.fixture
def ngram(sim_factory: Callable[..., SimHandle]) -> SimHandle:
    return sim_factory(["--variant", "ngram", "--time-scale", "200", "--seed", "3"])


def test_streamed_chat_carries_prompt_ids_first_and_ids_per_chunk(ngram: SimHandle) -> None:
    body = {
        "messages": [{"role": "user", "content": PROMPT}],
        "max_tokens": 300,
        "stream": True,
        "return_token_ids": True,
        "stream_options": {"include_usage": True},
    }
    chunks = _events(ngram.url, "/v1/chat/completions", body)
    role, tokens, usage = chunks[0], chunks[1:-1], chunks[-1]
    # The first chunk: the prompt's ids at the top level, next to prompt_text (vLLM 0.32).
    assert role["choices"][0]["delta"] == {"role": "assistant", "content": ""}
    assert role["prompt_token_ids"] == prompt_token_ids(PROMPT)
    assert "token_ids" not in role["choices"][0]
    assert len(role["prompt_token_ids"]) == usage["usage"]["prompt_tokens"]
    output: list[int] = []
    for chunk in tokens:
        (choice,) = chunk["choices"]
        assert "prompt_token_ids" not in chunk
        ids = choice["token_ids"]
        delta = choice["delta"]
        reasoning, content = delta.get("reasoning", ""), delta.get("content", "")
        assert reasoning + content == _words(ids)  # each id's word is the token's text
        output += ids
    assert len(output) == usage["usage"]["completion_tokens"] == 300
    assert usage["choices"] == [] and "token_ids" not in usage
    assert any(len(c["choices"][0]["token_ids"]) > 1 for c in tokens)  # accepted drafts

    # The same prompt asked again: the same prompt ids; another text (another request).
    again = httpx.post(
        ngram.url + "/v1/chat/completions",
        json={**body, "stream": False},
        headers={"X-Specload-Category": "coding"},
        timeout=30,
    ).json()
    assert again["prompt_token_ids"] == role["prompt_token_ids"]
    (choice,) = again["choices"]
    assert len(choice["token_ids"]) == again["usage"]["completion_tokens"] == 300
    text = (choice["message"]["reasoning"] or "") + (choice["message"]["content"] or "")
    assert text == _words(choice["token_ids"])
    assert choice["token_ids"] != output


def test_the_ngram_counters_are_the_replay_of_the_returned_ids(ngram: SimHandle) -> None:
    drafts = tokens = accepted = accepted_max = 0
    for i in range(6):
        body = {
            "messages": [{"role": "user", "content": f"{PROMPT} Case {i}."}],
            "max_tokens": 400 + 50 * i,
            "return_token_ids": True,
        }
        r = httpx.post(ngram.url + "/v1/chat/completions", json=body, timeout=30).json()
        steps = RequestReplay(
            r["prompt_token_ids"], r["choices"][0]["token_ids"], lookup_min=2, lookup_max=4
        ).steps(5)
        drafts += steps.drafts
        tokens += steps.draft_tokens
        accepted += steps.accepted_tokens
        accepted_max += steps.accepted_max
    expo = promtext.parse(httpx.get(ngram.url + "/metrics").text)
    assert expo["vllm:spec_decode_num_drafts_total"].total() == drafts
    assert expo["vllm:spec_decode_num_draft_tokens_total"].total() == tokens
    served = expo["vllm:spec_decode_num_accepted_tokens_total"].total()
    assert served is not None and accepted <= served <= accepted_max  # vLLM's rule too
    assert 0 < accepted < tokens


def test_without_the_flag_the_fields_stay_null(ngram: SimHandle) -> None:
    body = {"messages": [{"role": "user", "content": "hi"}], "max_tokens": 5, "stream": True}
    chunks = _events(ngram.url, "/v1/chat/completions", body)
    assert chunks[0]["prompt_token_ids"] is None
    assert all(c["choices"][0]["token_ids"] is None for c in chunks[1:])
    whole = httpx.post(
        ngram.url + "/v1/chat/completions", json={**body, "stream": False}, timeout=30
    ).json()
    assert whole["prompt_token_ids"] is None and whole["choices"][0]["token_ids"] is None
    r = httpx.post(
        ngram.url + "/v1/chat/completions", json={**body, "return_token_ids": "yes"}, timeout=30
    )
    assert r.status_code == 400 and r.json()["error"]["param"] == "body.return_token_ids"


def test_completions_put_both_in_the_choice(ngram: SimHandle) -> None:
    body = {"prompt": PROMPT, "max_tokens": 40, "return_token_ids": True}
    whole = httpx.post(ngram.url + "/v1/completions", json=body, timeout=30).json()
    (choice,) = whole["choices"]
    assert choice["prompt_token_ids"] == prompt_token_ids(PROMPT)
    assert len(choice["token_ids"]) == 40 and choice["text"] == _words(choice["token_ids"])
    chunks = _events(ngram.url, "/v1/completions", {**body, "stream": True})
    firsts = [c["choices"][0]["prompt_token_ids"] for c in chunks]
    assert firsts[0] == prompt_token_ids(PROMPT) and all(f is None for f in firsts[1:])
    ids = [i for c in chunks for i in c["choices"][0]["token_ids"]]
    assert len(ids) == 40
    assert "".join(c["choices"][0]["text"] for c in chunks) == _words(ids)
