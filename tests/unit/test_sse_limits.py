"""specload.sse: linear work however an event is split, and a cap on an event's size.

The behaviour tests of the decoder (splits, CRLF, comments, multi-line data) are in
tests/unit/test_sse.py; these count the decoder's work instead of timing it.
"""

from __future__ import annotations

import pytest

from specload.sse import MAX_EVENT_BYTES, SSEDecoder
from specload.sse import EventTooLarge as EventTooLargeType

pytestmark = pytest.mark.unit

READ = 64 * 1024
BIG = 25 * 1024 * 1024


def reads(data: bytes, size: int = READ) -> list[bytes]:
    return [data[i : i + size] for i in range(0, len(data), size)]


def big_event(size: int, line_end: bytes = b"\n") -> bytes:
    return b"data: " + b"x" * (size - 6) + line_end + line_end


def test_a_25_mb_event_in_64_kib_reads_is_scanned_once() -> None:
    wire = big_event(BIG) + b"data: [DONE]\n\n"
    d = SSEDecoder(max_event_bytes=32 * 1024 * 1024)
    out: list[bytes] = []
    for part in reads(wire):
        out += d.feed(part)
        assert d.pending_size == len(d.pending)
    assert [len(e) for e in out] == [BIG - 6, 6] and out[1] == b"[DONE]"
    assert d.pending == b"" and d.pending_size == 0
    # Linear: every byte looked at a small constant number of times (the old decoder
    # rebuilt and rescanned the whole buffer on each read: ~400 x 12 MB here).
    assert d.scanned <= 2 * len(wire) + len(wire) // READ + 1, d.scanned


def test_crlf_big_event_split_between_cr_and_lf_is_linear() -> None:
    wire = big_event(4 * 1024 * 1024, b"\r\n") + b"data: [DONE]\r\n\r\n"
    d = SSEDecoder()
    out: list[bytes] = []
    # Odd read size: reads end between CR and LF, and inside "\r\n\r\n".
    for part in reads(wire, 65_537):
        out += d.feed(part)
    assert [len(e) for e in out] == [4 * 1024 * 1024 - 6, 6]
    assert d.scanned <= 2 * len(wire) + len(wire) // 65_537 + 1, d.scanned


def test_many_small_events_cost_what_they_weigh() -> None:
    event = b'data: {"choices": [{"delta": {"content": "word"}}]}\n\n'
    wire = event * 20_000
    d = SSEDecoder()
    n = 0
    for part in reads(wire, 1000):  # reads that cut events anywhere
        n += len(d.feed(part))
    assert n == 20_000
    assert d.scanned <= 2 * len(wire) + len(wire) // 1000 + 1


def test_an_event_over_the_cap_raises_a_value_error() -> None:
    assert MAX_EVENT_BYTES == 16 * 1024 * 1024
    assert issubclass(EventTooLargeType, ValueError)
    d = SSEDecoder()
    wire = big_event(BIG)
    fed = 0
    with pytest.raises(EventTooLargeType) as exc:
        for part in reads(wire):
            d.feed(part)
            fed += len(part)
    # Raised as soon as the incomplete event passed the cap, not at its end.
    assert MAX_EVENT_BYTES < fed + READ <= MAX_EVENT_BYTES + 2 * READ
    assert exc.value.limit == MAX_EVENT_BYTES
    assert str(MAX_EVENT_BYTES) in str(exc.value)
    assert d.pending == b""  # the buffer is dropped: the stream should be abandoned
    assert d.scanned <= 2 * fed


def test_the_cap_is_configurable_and_counts_complete_events_too() -> None:
    d = SSEDecoder(max_event_bytes=1000)
    assert d.max_event_bytes == 1000
    assert d.feed(big_event(1000)) == [b"x" * 994]  # exactly at the cap: fine
    with pytest.raises(EventTooLargeType):
        d.feed(big_event(1001))  # one read holding the whole event (the fast path)
    d = SSEDecoder(max_event_bytes=1000)
    with pytest.raises(EventTooLargeType):
        d.feed(b"data: 1\n\n" + b"data: 2\ndata: " + b"y" * 1000 + b"\n\n")
    d = SSEDecoder(max_event_bytes=1000)
    with pytest.raises(EventTooLargeType):
        d.feed(b": keep-alive comment without an end " * 40)  # no blank line ever
    with pytest.raises(ValueError, match="max_event_bytes"):
        SSEDecoder(max_event_bytes=0)


def test_cr_line_ends_complete_an_event_at_once() -> None:
    d = SSEDecoder()
    assert d.feed(b"data: 1\r") == []
    assert d.feed(b"\r") == [b"1"]  # CR CR is a blank line: no need to wait for an LF
    assert d.feed(b"\n") == []  # ... and an LF after that CR belongs to it
    assert d.pending == b""
    assert d.feed(b"data: 2\r\n\r\ndata: 3\rdata: 4\r\r") == [b"2", b"3\n4"]


def reference(stream: bytes) -> list[bytes]:
    """The whole stream at once, the plain way: what any split must give."""
    text = stream.replace(b"\r\n", b"\n").replace(b"\r", b"\n")
    out = []
    for block in text.split(b"\n\n")[:-1]:
        lines = [ln for ln in block.split(b"\n") if ln and not ln.startswith(b":")]
        data = [
            v[1:] if v.startswith(b" ") else v
            for name, sep, v in (ln.partition(b":") for ln in lines)
            if name == b"data"
        ]
        if data:
            out.append(b"\n".join(data))
    return out


def test_random_streams_and_splits_match_the_reference() -> None:
    import random  # noqa: PLC0415

    rng = random.Random(7)
    pieces = [b"data: ", b"data:", b"x", b"{}", b":c", b"id: 1", b"event: e", b"\n", b"\r", b"\r\n"]
    for _ in range(300):
        stream = b"".join(rng.choice(pieces) for _ in range(rng.randrange(1, 80)))
        d = SSEDecoder()
        out: list[bytes] = []
        pos = 0
        while pos < len(stream):
            step = rng.choice((1, 2, 3, 5, 8, 64))
            out += d.feed(stream[pos : pos + step])
            pos += step
        assert out == reference(stream), stream
