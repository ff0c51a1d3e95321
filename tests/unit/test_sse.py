"""SSE parsing as the load generator reads streams, fed in every possible split."""

from __future__ import annotations

import pytest

from specload.sse import SSEDecoder

pytestmark = pytest.mark.unit

STREAM = b"".join(
    [
        b'data: {"a": 1}\n\n',
        b": a comment\n\n",
        b'event: message\ndata: {"b":\ndata: 2}\n\n',
        b"data: [DONE]\n\n",
    ]
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
