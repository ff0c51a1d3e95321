"""SSE parsing and chunked transfer decoding, fed in every possible split."""

from __future__ import annotations

import pytest

from specload.load.http import ChunkedDecoder, RequestFailed, ResponseParser
from specload.sse import SSEDecoder

pytestmark = pytest.mark.unit

STREAM = (
    b'data: {"a": 1}\n\n'
    b": a comment\n\n"
    b'event: message\ndata: {"b":\ndata: 2}\n\n'
    b"data: [DONE]\n\n"
)
EXPECTED = [b'{"a": 1}', b'{"b":\n2}', b"[DONE]"]


def test_whole_stream_at_once() -> None:
    assert SSEDecoder().feed(STREAM) == EXPECTED


@pytest.mark.parametrize("size", [1, 2, 3, 7, 16])
def test_any_split_gives_the_same_events(size: int) -> None:
    d = SSEDecoder()
    out: list[bytes] = []
    for i in range(0, len(STREAM), size):
        out += d.feed(STREAM[i : i + size])
    assert out == EXPECTED
    assert d.pending == b""


def test_crlf_line_ends_split_between_cr_and_lf() -> None:
    data = b'data: {"x": 1}\r\n\r\ndata: [DONE]\r\n\r\n'
    d = SSEDecoder()
    out: list[bytes] = []
    for i in range(len(data)):
        out += d.feed(data[i : i + 1])
    assert out == [b'{"x": 1}', b"[DONE]"]


def test_event_is_returned_as_soon_as_complete() -> None:
    d = SSEDecoder()
    assert d.feed(b"data: 1\n") == []
    assert d.feed(b"\n") == [b"1"]
    assert d.feed(b"data: 2\n\ndata: 3") == [b"2"]
    assert d.pending == b"data: 3"


def chunked(parts: list[bytes]) -> bytes:
    return b"".join(b"%x\r\n%s\r\n" % (len(p), p) for p in parts) + b"0\r\n\r\n"


@pytest.mark.parametrize("size", [1, 2, 5, 64, 10_000])
def test_chunked_decoder_any_split(size: int) -> None:
    parts = [b"hello ", b"world", b"x" * 300]
    wire = chunked(parts)
    d = ChunkedDecoder()
    out = b""
    for i in range(0, len(wire), size):
        out += d.feed(wire[i : i + size])
    assert out == b"".join(parts)
    assert d.done


def test_chunked_decoder_rejects_garbage() -> None:
    with pytest.raises(RequestFailed) as exc:
        ChunkedDecoder().feed(b"zz\r\nhello\r\n")
    assert exc.value.kind == "protocol"


def test_response_parser_streams_body_and_reports_status() -> None:
    got: list[bytes] = []
    p = ResponseParser(lambda data, now: got.append(data))
    wire = b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n" + chunked([b"ab", b"cd"])
    done = False
    for i in range(len(wire)):
        done = p.feed(wire[i : i + 1], 0.0)
    assert done and p.result() == 200 and b"".join(got) == b"abcd" and p.keep_alive


def test_response_parser_error_status_carries_body() -> None:
    p = ResponseParser(lambda data, now: None)
    body = b'{"error": "overloaded"}'
    assert p.feed(b"HTTP/1.1 503 Service Unavailable\r\nContent-Length: %d\r\n\r\n%s"
                  % (len(body), body), 0.0)
    with pytest.raises(RequestFailed) as exc:
        p.result()
    assert exc.value.kind == "http_503" and "overloaded" in exc.value.detail


def test_response_parser_eof_mid_body_is_a_reset() -> None:
    p = ResponseParser(lambda data, now: None)
    p.feed(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nab", 0.0)
    with pytest.raises(RequestFailed) as exc:
        p.eof(0.0)
    assert exc.value.kind == "reset"


def test_response_parser_rejects_non_http() -> None:
    p = ResponseParser(lambda data, now: None)
    with pytest.raises(RequestFailed) as exc:
        p.feed(b"SSH-2.0-OpenSSH\r\n\r\n", 0.0)
    assert exc.value.kind == "protocol"
