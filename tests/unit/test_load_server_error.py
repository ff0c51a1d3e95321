"""A server's own error event inside a stream is ``server_error``, with its message.

vLLM ends a stream that failed after its 200 head with an error event and ``[DONE]``:
``data: {"error": {"message": ..., "type": ..., "param": null, "code": 500}}`` (current
versions) or ``data: {"object": "error", "message": ..., "type": ..., "code": 500}``
(older ones). That is the server saying what went wrong, not bytes the client cannot
read: the record says ``server_error`` and quotes the message (one line, cut, the API
key never quoted), keeping the tokens counted before it.
"""

from __future__ import annotations

from typing import Any

import orjson
import pytest

from specload.load.chat import ChatRequester, ChatSettings
from specload.load.meter import (
    MalformedChunk,
    PyStreamMeter,
    ServerErrorEvent,
    StreamMeter,
    meter_message,
)
from specload.load.metrics import FIXED_ERROR_KINDS
from specload.prompts import Prompt
from specload.records.request import ERROR_KINDS, RequestRecord
from specload.urls import parse_server_url
from tests.fixtures.canned import CannedServer

pytestmark = pytest.mark.unit

METERS = [PyStreamMeter] + ([StreamMeter] if StreamMeter is not PyStreamMeter else [])
PROMPT = Prompt("p1", "math", ({"role": "user", "content": "hi"},), 100)
SECRET = "sk-error-event-test-key"
SSE_HEAD = (
    b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ntransfer-encoding: chunked\r\n\r\n"
)

# As vLLM writes them (create_streaming_error_response).
CURRENT = (
    b'{"error":{"message":"The decoder prompt (length 9000) is longer than the maximum '
    b'model length of 8192.","type":"BadRequestError","param":null,"code":400}}'
)
OLDER = (
    b'{"object":"error","message":"CUDA error: an illegal memory access was encountered",'
    b'"type":"InternalServerError","param":null,"code":500}'
)


def content(text: str, cum: int) -> bytes:
    return orjson.dumps(
        {"choices": [{"delta": {"content": text}}], "usage": {"completion_tokens": cum}}
    )


@pytest.mark.parametrize("meter", METERS)
@pytest.mark.parametrize(
    ("payload", "expect"),
    [
        (CURRENT, "BadRequestError 400: The decoder prompt (length 9000) is longer"),
        (OLDER, "InternalServerError 500: CUDA error: an illegal memory access"),
        (b'{"error":"engine dead"}', "engine dead"),
        (b'{"object":"error"}', "(no message)"),
    ],
)
def test_an_error_event_raises_server_error_with_its_message(
    meter: Any, payload: bytes, expect: str
) -> None:
    m = meter(0.0)
    m.feed(content("ab", 2), 0.1)
    with pytest.raises(ServerErrorEvent) as exc:
        m.feed(payload, 0.2)
    assert exc.value.kind == "server_error" and isinstance(exc.value, MalformedChunk)
    assert str(exc.value).startswith("the server's error event: " + expect)
    r = RequestRecord("math", "s", "v", "m", 0.0, 0.0)
    m.finish(r, 0.3)
    assert r.tokens_output == 2  # what came before is kept


def test_the_message_is_one_line_and_cut() -> None:
    message = "line one\nline two\r\x1b[31m" + "x" * 1000
    payload = orjson.dumps({"error": {"message": message, "type": "E", "code": 500}})
    with pytest.raises(ServerErrorEvent) as exc:
        PyStreamMeter(0.0).feed(payload, 0.1)
    text = str(exc.value)
    assert text.isprintable() and "line one line two" in text
    assert len(text) <= 200 and text.endswith("...")


def test_a_null_error_is_no_error_and_other_objects_stay_malformed() -> None:
    m = PyStreamMeter(0.0)
    m.feed(b'{"error":null,"choices":[{"delta":{"content":"a"}}]}', 0.1)
    assert m.chunks_content == 1
    with pytest.raises(MalformedChunk) as exc:
        m.feed(b'{"object":"x"}', 0.2)
    assert type(exc.value) is MalformedChunk and exc.value.kind == "malformed"


def test_a_non_streamed_error_object_is_server_error() -> None:
    with pytest.raises(ServerErrorEvent, match="InternalServerError 500: CUDA error"):
        meter_message(orjson.loads(OLDER), PyStreamMeter(0.0), 1.0)


def test_server_error_is_a_fixed_error_class() -> None:
    assert "server_error" in ERROR_KINDS and "server_error" in FIXED_ERROR_KINDS


def sse(*payloads: bytes) -> bytes:
    body = b"".join(b"data: " + p + b"\n\n" for p in payloads)
    return SSE_HEAD + b"%x\r\n%s\r\n0\r\n\r\n" % (len(body), body)


def ok_stream() -> bytes:
    return sse(content("a", 1), content("b", 2), b"[DONE]")


@pytest.mark.parametrize("payload", [CURRENT, OLDER], ids=["current", "older"])
def test_a_request_whose_stream_carries_an_error_event_is_server_error(
    canned: Any, payload: bytes
) -> None:
    server: CannedServer = canned([sse(content("ab", 2), payload, b"[DONE]"), ok_stream()])
    settings = ChatSettings(model="m", api_key=SECRET, timeout_s=10.0)
    chat = ChatRequester(parse_server_url(server.url), settings)
    try:
        r = chat.send(PROMPT, "s")
        assert not r.ok and r.error_kind == "server_error", (r.error_kind, r.error_detail)
        assert r.error_detail is not None and r.error_detail.startswith("the server's error event")
        assert "Error 40" in r.error_detail or "Error 50" in r.error_detail
        assert r.tokens_output == 2  # counted before the event: kept
        assert chat.send(PROMPT, "s").ok  # the next request goes on
    finally:
        chat.close()


def test_an_error_event_quoting_the_api_key_is_masked(canned: Any) -> None:
    event = orjson.dumps(
        {"error": {"message": f"bad key {SECRET}", "type": "AuthenticationError", "code": 401}}
    )
    server: CannedServer = canned([sse(event, b"[DONE]")])
    settings = ChatSettings(model="m", api_key=SECRET, timeout_s=10.0)
    chat = ChatRequester(parse_server_url(server.url), settings)
    try:
        r = chat.send(PROMPT, "s")
        assert r.error_kind == "server_error" and r.error_detail is not None
        assert SECRET not in r.error_detail and "<api key>" in r.error_detail
    finally:
        chat.close()
