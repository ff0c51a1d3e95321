"""Chunked transfer decoding (specload.load.chunked), fed in every possible split."""

from __future__ import annotations

import pytest

from specload.load.chunked import ChunkedDecoder
from specload.load.failures import RequestFailed

pytestmark = pytest.mark.unit


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
