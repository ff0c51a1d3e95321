"""``--record-token-ids``: the body asks for them, the meter picks them from the chunks
(streamed and not), the record keeps them out of requests.jsonl but in the worker message."""

from __future__ import annotations

from typing import Any

import orjson
import pytest

from specload.load import meter as meter_mod
from specload.load.chat import ChatSettings
from specload.load.meter import MalformedChunk, TokenIdMeter
from specload.records.request import RequestRecord
from tests.unit.test_load_meter_usage import PROMPT, requester, sse_response

pytestmark = pytest.mark.unit


def chunk(ids: list[int] | None, *, content: str = "", reasoning: str = "", **top: Any) -> bytes:
    delta: dict[str, Any] = {}
    if reasoning:
        delta["reasoning"] = reasoning
    if content:
        delta["content"] = content
    choice: dict[str, Any] = {"index": 0, "delta": delta, "finish_reason": None}
    if ids is not None:
        choice["token_ids"] = ids
    return orjson.dumps({"choices": [choice], **top})


STREAM = [
    orjson.dumps(
        {
            "choices": [{"index": 0, "delta": {"role": "assistant", "content": ""}}],
            "prompt_token_ids": [5, 6, 7],
        }
    ),
    chunk([10], reasoning="a", usage={"prompt_tokens": 3, "completion_tokens": 1}),
    chunk([11, 12], reasoning="b c", usage={"prompt_tokens": 3, "completion_tokens": 3}),
    chunk([13], content="d", usage={"prompt_tokens": 3, "completion_tokens": 4}),
    orjson.dumps(
        {
            "choices": [
                {
                    "index": 0,
                    "delta": {"content": "e"},
                    "finish_reason": "length",
                    "token_ids": [14],
                }
            ],
            "usage": {"prompt_tokens": 3, "completion_tokens": 5},
        }
    ),
    orjson.dumps({"choices": [], "usage": {"prompt_tokens": 3, "completion_tokens": 5}}),
    b"[DONE]",
]


def test_the_meter_picks_prompt_and_output_ids_and_the_content_start() -> None:
    m = TokenIdMeter(0.0, max_tokens=5)
    for i, payload in enumerate(STREAM):
        m.feed(payload, 0.1 * (i + 1))
    r = RequestRecord("coding", "c1", "v", "m", 0.0, 0.0)
    m.finish(r, 1.0)
    assert r.prompt_ids == [5, 6, 7]
    assert r.output_ids == [10, 11, 12, 13, 14]
    assert r.content_start == 3  # three reasoning ids before the first content chunk
    assert r.tokens_output == 5 and r.token_count_source == "exact"
    assert r.finish_reason == "length"


def test_no_content_leaves_content_start_none_and_bad_ids_are_malformed() -> None:
    m = TokenIdMeter(0.0)
    m.feed(chunk([1, 2], reasoning="x y"), 0.1)
    r = RequestRecord("math", "c1", "v", "m", 0.0, 0.0)
    m.finish(r, 1.0)
    assert r.output_ids == [1, 2] and r.content_start is None and r.prompt_ids is None
    for bad in ([1, "2"], [-1], "12", [True]):
        with pytest.raises(MalformedChunk):
            TokenIdMeter(0.0).feed(chunk(bad, content="x"), 0.1)  # type: ignore[arg-type]


def test_a_whole_response_gives_its_ids_split_by_the_text() -> None:
    m = TokenIdMeter(0.0)
    message = {
        "prompt_token_ids": [1, 2],
        "choices": [
            {
                "message": {"reasoning": "ab", "content": "cd"},
                "finish_reason": "stop",
                "token_ids": [3, 4, 5, 6],
            }
        ],
        "usage": {"prompt_tokens": 2, "completion_tokens": 4},
    }
    meter_mod.meter_message(message, m, 1.0)
    r = RequestRecord("math", "c1", "v", "m", 0.0, 0.0)
    m.finish(r, 1.0)
    assert r.prompt_ids == [1, 2] and r.output_ids == [3, 4, 5, 6]
    assert r.content_start == 2


def test_the_request_asks_and_the_record_keeps_them_out_of_requests_jsonl(canned: Any) -> None:
    server = canned([sse_response(STREAM), sse_response(STREAM)])
    chat = requester(server, return_token_ids=True, max_tokens=5)
    try:
        r = chat.send(PROMPT, "c1")
    finally:
        chat.close()
    body = orjson.loads(server.requests[0].split(b"\r\n\r\n", 1)[1])
    assert body["return_token_ids"] is True
    assert r.ok and r.prompt_ids == [5, 6, 7] and r.output_ids == [10, 11, 12, 13, 14]
    assert r.content_start == 3 and len(r.output_ids) == r.tokens_output
    plain = r.to_dict(include_histograms=True)
    assert not {"prompt_ids", "output_ids", "content_start"} & set(plain)
    sent = r.to_dict(include_histograms=True, include_token_ids=True)
    back = RequestRecord.from_dict(orjson.loads(orjson.dumps(sent)))
    assert back.output_ids == r.output_ids and back.content_start == 3
    assert back.prompt_ids == [5, 6, 7]


def test_off_the_body_does_not_ask_and_the_record_has_no_ids(canned: Any) -> None:
    server = canned([sse_response(STREAM)])
    chat = requester(server, max_tokens=5)
    try:
        r = chat.send(PROMPT, "c1")
    finally:
        chat.close()
    body = orjson.loads(server.requests[0].split(b"\r\n\r\n", 1)[1])
    assert "return_token_ids" not in body
    assert r.ok and r.prompt_ids is None and r.output_ids is None
    assert ChatSettings(model="m").return_token_ids is False
