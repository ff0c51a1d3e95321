"""The HTTP reader's framing rules: each way a response can be framed wrong fails as a
named ``protocol`` rule (or ``content_encoding``) at once — never a loop, never a wait
for bytes that cannot make it valid — and what RFC 9112 lets a recipient accept (bare LF
line ends, interim responses, trailers, white space before a chunk's CRLF) is read.

In process: :class:`ChunkedDecoder` and :class:`ResponseParser` fed whole and byte by
byte, and property tests on random bytes. Through the real client (reactor path, C fast
path and pure Python): ``test_load_floods.py``.
"""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from specload.load.chunked import MAX_EXT_BYTES, MAX_TRAILER_BYTES, ChunkedDecoder
from specload.load.failures import RequestFailed
from specload.load.response import MAX_HEAD_BYTES, MAX_HEAD_LINES, MAX_INTERIM, ResponseParser

pytestmark = [pytest.mark.unit, pytest.mark.timeout(60)]

SSE = b"text/event-stream"


def decode(wire: bytes, *, step: int = 0) -> tuple[bytes, ChunkedDecoder]:
    """``wire`` through a decoder, whole (``step`` 0) or ``step`` bytes at a time."""
    d = ChunkedDecoder()
    out = b""
    for i in range(0, len(wire), step or len(wire) or 1):
        out += d.feed(wire[i : i + (step or len(wire))])
    if d.error is not None:
        raise d.error
    return out, d


def protocol_rule(exc: pytest.ExceptionInfo[RequestFailed]) -> str:
    assert exc.value.kind == "protocol", exc.value
    return exc.value.detail


# -- chunk framing: one case per rule -----------------------------------------------------

BAD_CHUNKS: dict[str, tuple[bytes, str]] = {
    # name: (wire, the rule the detail names)
    "negative": (b"-5\r\nhello\r\n0\r\n\r\n", "chunk size not hex digits"),
    # -6 took the decoder back onto the CRLF before its own line: it looped for ever
    "negative-loop": (b"1\r\nA\r\n-6\r\nmore", "chunk size not hex digits"),
    "plus-sign": (b"+5\r\nhello\r\n0\r\n\r\n", "chunk size not hex digits"),
    "0x-prefix": (b"0x5\r\nhello\r\n0\r\n\r\n", "chunk size not hex digits"),
    "underscore": (b"1_0\r\n" + b"x" * 16 + b"\r\n0\r\n\r\n", "chunk size not hex digits"),
    "leading-space": (b" 5\r\nhello\r\n0\r\n\r\n", "chunk size not hex digits"),
    "inner-space": (b"5 5\r\nhello\r\n0\r\n\r\n", "chunk size not hex digits"),
    "non-hex": (b"zz\r\nhello\r\n0\r\n\r\n", "chunk size not hex digits"),
    "unicode-digit": ("\u0665\r\nhello\r\n".encode(), "chunk size not hex digits"),
    "empty": (b"\r\nhello\r\n0\r\n\r\n", "chunk size empty"),
    "extension-only": (b";a=b\r\nhello\r\n", "chunk size empty"),
    "too-many-digits": (b"0" * 17 + b"5\r\nhello\r\n0\r\n\r\n", "chunk size too long"),
    "huge": (b"fffffffff\r\nhello\r\n", "chunk size over"),
    "line-too-long": (b"5" + b" " * 2000 + b"\r\nhello\r\n", "chunk size line too long"),
    "extension-too-long": (b"5;" + b"a" * (MAX_EXT_BYTES + 1) + b"\r\nhello\r\n", "extension over"),
    "extension-control-char": (b"5;a\x00b\r\nhello\r\n", "bad chunk extension"),
    "extension-empty": (b"5;\r\nhello\r\n", "bad chunk extension"),
    "size-line-bare-lf": (b"5\nhello\r\n0\r\n\r\n", "chunk size line not ended by CRLF"),
    "size-line-bare-cr": (b"5\rhello\r\n0\r\n\r\n", "chunk size not hex digits"),
    "data-longer-than-size": (b"5\r\nhello!\r\n0\r\n\r\n", "no CRLF after chunk data"),
    "data-then-bare-lf": (b"5\r\nhello\n0\r\n\r\n", "no CRLF after chunk data"),
    "data-then-cr-x": (b"5\r\nhello\rx0\r\n\r\n", "no CRLF after chunk data"),
    "trailer-without-colon": (b"5\r\nhello\r\n0\r\nnot a field\r\n\r\n", "bad trailer line"),
    "trailer-bare-lf": (b"5\r\nhello\r\n0\r\nX-A: b\n\r\n", "trailer line not ended by CRLF"),
    "trailer-folded": (b"5\r\nhello\r\n0\r\n x: b\r\n\r\n", "bad trailer line"),
    "trailers-too-long": (
        b"5\r\nhello\r\n0\r\n" + b"X-Pad: " + b"p" * MAX_TRAILER_BYTES + b"\r\n\r\n",
        "trailer section over",
    ),
}


@pytest.mark.parametrize("step", [0, 1, 3], ids=["whole", "byte-by-byte", "3-bytes"])
@pytest.mark.parametrize("case", list(BAD_CHUNKS))
def test_each_bad_chunk_framing_is_a_named_protocol_failure(case: str, step: int) -> None:
    wire, rule = BAD_CHUNKS[case]
    with pytest.raises(RequestFailed) as exc:
        decode(wire, step=step)
    assert rule in protocol_rule(exc), (case, exc.value.detail)


@pytest.mark.parametrize(
    "start",
    [b"-", b"+", b"0x", b"1_", b" ", b"z", b"0" * 17, b";", b"5;" + b"e" * (MAX_EXT_BYTES + 2)],
)
def test_a_chunk_size_that_cannot_become_valid_fails_before_its_line_ends(start: bytes) -> None:
    # The server holds the line open: nothing more will come, so waiting would be a hang.
    with pytest.raises(RequestFailed) as exc:
        ChunkedDecoder().feed(start)
    assert exc.value.kind == "protocol"


def test_a_negative_chunk_size_never_sends_the_decoder_backwards() -> None:
    # The class of fault that looped for ever at 100% CPU, memory growing: a size int()
    # took as negative moved the decoder back onto an earlier CRLF, then to the same line.
    for back in range(1, 12):
        wire = b"1\r\nA\r\n-%x\r\nmore data" % back
        for step in (len(wire), 1):
            d = ChunkedDecoder()
            out = b""
            with pytest.raises(RequestFailed) as exc:
                for i in range(0, len(wire), step):
                    out += d.feed(wire[i : i + step])
                if d.error is not None:
                    raise d.error
            assert exc.value.kind == "protocol" and out == b"A"


GOOD_CHUNKS: dict[str, tuple[bytes, bytes]] = {
    "plain": (b"5\r\nhello\r\n0\r\n\r\n", b"hello"),
    "upper-hex": (b"A\r\n0123456789\r\n0\r\n\r\n", b"0123456789"),
    "leading-zeros": (b"0000000000000005\r\nhello\r\n00\r\n\r\n", b"hello"),
    "extension": (b'5;name="v";x\r\nhello\r\n0;last\r\n\r\n', b"hello"),
    "white-space-before-semicolon": (b"5 \t;a=1\r\nhello\r\n0\r\n\r\n", b"hello"),
    "white-space-before-crlf": (b"5  \r\nhello\r\n0\r\n\r\n", b"hello"),
    "trailers": (b"5\r\nhello\r\n0\r\nX-A: b\r\nX-Checksum: 1\r\n\r\n", b"hello"),
    "empty-body": (b"0\r\n\r\n", b""),
}


@pytest.mark.parametrize("step", [0, 1, 2], ids=["whole", "byte-by-byte", "2-bytes"])
@pytest.mark.parametrize("case", list(GOOD_CHUNKS))
def test_valid_chunk_framing_is_read(case: str, step: int) -> None:
    wire, body = GOOD_CHUNKS[case]
    out, d = decode(wire, step=step)
    assert out == body and d.done and not d.extra


def test_the_end_of_the_message_is_the_empty_line_after_the_trailers() -> None:
    d = ChunkedDecoder()
    assert d.feed(b"5\r\nhello\r\n0\r\n") == b"hello"
    assert not d.done  # the trailer section (here: none) and its empty line are still to come
    d.feed(b"X-A: b\r\n")
    assert not d.done
    d.feed(b"\r\n")
    assert d.done and not d.extra


def test_bytes_after_the_message_are_said() -> None:
    out, d = decode(b"5\r\nhello\r\n0\r\n\r\nHTTP/1.1 200 OK\r\n")
    assert out == b"hello" and d.done and d.extra


def test_output_before_a_violation_in_the_same_read_comes_first() -> None:
    d = ChunkedDecoder()
    assert d.feed(b"5\r\nhello\r\n-3\r\n") == b"hello"
    assert d.error is not None and "not hex" in d.error.detail
    with pytest.raises(RequestFailed):
        d.feed(b"abc\r\n")


@settings(max_examples=400, deadline=None)
@given(st.binary(max_size=300), st.integers(min_value=1, max_value=40))
def test_any_bytes_end_decoded_or_rejected_in_bounded_work(wire: bytes, step: int) -> None:
    d = ChunkedDecoder()
    out = 0
    try:
        for i in range(0, len(wire), step):
            out += len(d.feed(wire[i : i + step]))
    except RequestFailed as exc:
        assert exc.kind == "protocol"
    assert out <= len(wire)  # never more data than was read (a negative size made more)


@settings(max_examples=300, deadline=None)
@given(
    st.lists(
        st.one_of(
            st.sampled_from([b"5", b"-5", b"0x5", b"+5", b"5;x", b"5 ", b"0", b"", b"1_0"]),
            st.binary(max_size=12),
        ),
        max_size=12,
    ),
    st.sampled_from([b"\r\n", b"\n", b"\r", b""]),
)
def test_size_lines_of_tokens_end_decoded_or_rejected(parts: list[bytes], end: bytes) -> None:
    wire = b"".join(p + end + b"hello" + end for p in parts)
    d = ChunkedDecoder()
    try:
        assert len(d.feed(wire)) <= len(wire)
    except RequestFailed as exc:
        assert exc.kind == "protocol"


# -- response heads -----------------------------------------------------------------------


def chunked(*parts: bytes) -> bytes:
    return b"".join(b"%x\r\n%s\r\n" % (len(p), p) for p in parts) + b"0\r\n\r\n"


def parse(wire: bytes, *, step: int = 0, **kwargs: Any) -> tuple[ResponseParser, bytes, bool]:
    got: list[bytes] = []
    p = ResponseParser(lambda data, now: got.append(data), **kwargs)
    done = False
    n = step or len(wire)
    for i in range(0, len(wire), n):
        done = p.feed(wire[i : i + n], 0.0)
        if done:
            break
    return p, b"".join(got), done


def failure(wire: bytes, *, step: int = 0, **kwargs: Any) -> RequestFailed:
    with pytest.raises(RequestFailed) as exc:
        parse(wire, step=step, **kwargs)
    return exc.value


OK_HEAD = (
    b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ntransfer-encoding: chunked\r\n\r\n"
)
BODY = chunked(b"data: 1\n\n", b"data: [DONE]\n\n")


@pytest.mark.parametrize("step", [0, 1], ids=["whole", "byte-by-byte"])
@pytest.mark.parametrize(
    "head",
    [
        OK_HEAD.replace(b"\r\n", b"\n"),
        b"HTTP/1.1 200 OK\ncontent-type: text/event-stream\r\ntransfer-encoding: chunked\n\r\n",
        b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\ntransfer-encoding: chunked\r\n\n",
        b"\r\n\n" + OK_HEAD,  # empty lines before the status line
    ],
    ids=["bare-lf", "mixed-1", "mixed-2", "leading-empty-lines"],
)
def test_bare_lf_and_mixed_line_ends_in_a_head_are_read(head: bytes, step: int) -> None:
    p, body, done = parse(head + BODY, step=step, expect=SSE)
    assert done and p.result() == 200 and body == b"data: 1\n\ndata: [DONE]\n\n"
    assert p.keep_alive and p.complete


def test_a_bare_lf_head_with_content_length_is_read() -> None:
    p, body, done = parse(b"HTTP/1.0 503 Busy\nContent-Length: 4\nRetry-After: 2\n\nbusy")
    assert done and body == b"" and not p.keep_alive  # HTTP/1.0: not kept
    with pytest.raises(RequestFailed) as exc:
        p.result()
    assert exc.value.kind == "http_503" and exc.value.detail == "busy"
    assert exc.value.retry_after_s == 2.0


@pytest.mark.parametrize("n", [1, 3, MAX_INTERIM])
@pytest.mark.parametrize("step", [0, 1], ids=["whole", "byte-by-byte"])
def test_interim_responses_are_skipped(n: int, step: int) -> None:
    interim = b"HTTP/1.1 100 Continue\r\n\r\n" + b"HTTP/1.1 103 Early Hints\r\nLink: </a>\r\n\r\n"
    wire = interim * (n // 2) + interim[:25] * (n % 2) + OK_HEAD + BODY
    p, body, done = parse(wire, step=step, expect=SSE)
    assert done and p.result() == 200 and body.startswith(b"data: 1")


@pytest.mark.parametrize("n", [MAX_INTERIM + 1, 2000])
def test_too_many_interim_responses_fail_without_recursion(n: int) -> None:
    # 2000 in one read: the head parser recursed once per interim head (RecursionError).
    exc = failure(b"HTTP/1.1 100 Continue\r\n\r\n" * n + OK_HEAD + BODY)
    assert exc.kind == "protocol" and f"over {MAX_INTERIM} interim" in exc.detail


def test_interim_heads_count_towards_the_head_size() -> None:
    big = b"HTTP/1.1 103 Early Hints\r\n" + b"Link: <" + b"a" * 8000 + b">\r\n\r\n"
    exc = failure(big * 9 + OK_HEAD + BODY)  # 9 interim heads, 72 KB together
    assert exc.kind == "protocol" and f"over {MAX_HEAD_BYTES} bytes" in exc.detail


@pytest.mark.parametrize(
    ("wire", "rule"),
    [
        (b"HTTP/1.1 200 OK\r\n" + b"X-A: b\r\n" * MAX_HEAD_LINES + b"\r\n", "lines"),
        (b"HTTP/1.1 200 OK\r\nX-Big: " + b"b" * MAX_HEAD_BYTES, "bytes"),
        (b"HTTP/1.1 200 OK\r\n" + b"X: y\r\n" * 20000, "lines"),
        (b"\r\n" * (MAX_HEAD_BYTES // 2 + 1), "bytes"),
    ],
    ids=["lines", "one-long-line", "endless-lines", "endless-empty-lines"],
)
def test_heads_over_their_caps_fail(wire: bytes, rule: str) -> None:
    exc = failure(wire)
    assert exc.kind == "protocol" and "head over" in exc.detail and rule in exc.detail


@pytest.mark.parametrize(
    ("wire", "rule"),
    [
        (b"HTTP/1.1 200 OK\r\nX-A: b\rc\r\n\r\n", "bare CR"),
        (b"HTTP/1.1 101 Switching Protocols\r\nUpgrade: h2c\r\n\r\n", "101"),
        (b"HTTP/1.1 2000 OK\r\n\r\n", "bad status line"),
        (b"HTTP/1.1 +20 OK\r\n\r\n", "bad status line"),
        (b"HTTP/1.1 20 OK\r\n\r\n", "bad status line"),
        (b"HTTP/1.1 200OK\r\n\r\n", "bad status line"),
        (b"HTTP/2 200\r\n\r\n", "bad status line"),
        (b"ICY 200 OK\r\n\r\n", "bad status line"),
        (b"HTTP/1.1 200 OK\r\nno colon here\r\n\r\n", "bad header line"),
        (b"HTTP/1.1 200 OK\r\nbad name: x\r\n\r\n", "bad header line"),
        (b"HTTP/1.1 200 OK\r\n folded first\r\n\r\n", "folded line"),
    ],
    ids=[
        "bare-cr",
        "101",
        "4-digit-status",
        "signed-status",
        "2-digit-status",
        "no-space",
        "http2",
        "icy",
        "no-colon",
        "space-in-name",
        "fold-first",
    ],
)
def test_each_bad_head_is_a_named_protocol_failure(wire: bytes, rule: str) -> None:
    exc = failure(wire)
    assert exc.kind == "protocol" and rule in exc.detail, exc.detail


@pytest.mark.parametrize("start", [b"SSH-2.0-OpenSSH_9.6", b"\x16\x03\x01\x02\x00", b"ICY 200"])
def test_a_status_line_that_cannot_become_http_fails_before_its_line_ends(start: bytes) -> None:
    p = ResponseParser(lambda data, now: None)
    with pytest.raises(RequestFailed) as exc:
        p.feed(start, 0.0)  # the server waits after these bytes: so would we, before
    assert exc.value.kind == "protocol"


def test_folded_header_lines_are_joined() -> None:
    wire = b"HTTP/1.1 200 OK\r\nContent-Type: text/event-\r\n stream\r\nContent-Length: 2\r\n\r\nok"
    p, _, done = parse(wire, expect=SSE)
    assert done and p.content_type == b"text/event- stream" and p.wrong_type


# -- lengths and transfer codings ---------------------------------------------------------


def head(*fields: bytes, status: bytes = b"200 OK") -> bytes:
    lines = [b"HTTP/1.1 " + status, b"Content-Type: text/event-stream", *fields]
    return b"\r\n".join(lines) + b"\r\n\r\n"


@pytest.mark.parametrize(
    ("fields", "rule"),
    [
        ((b"Content-Length: -5",), "content-length not digits"),
        ((b"Content-Length: +5",), "content-length not digits"),
        ((b"Content-Length: 5_0",), "content-length not digits"),
        ((b"Content-Length: 0x5",), "content-length not digits"),
        ((b"Content-Length: 1e3",), "content-length not digits"),
        ((b"Content-Length:",), "content-length not digits"),
        ((b"Content-Length: 5 5",), "content-length not digits"),
        ((b"Content-Length: " + b"9" * 19,), "content-length too large"),
        ((b"Content-Length: 5", b"Content-Length: 6"), "conflicting content-length"),
        ((b"Content-Length: 5, 6",), "conflicting content-length"),
        ((b"Transfer-Encoding: chunked", b"Content-Length: 5"), "both transfer-encoding"),
        ((b"Content-Length: 5", b"Transfer-Encoding: chunked"), "both transfer-encoding"),
        ((b"Transfer-Encoding: chunked, chunked",), "chunked is not the last"),
        ((b"Transfer-Encoding: chunked", b"Transfer-Encoding: chunked"), "chunked is not the last"),
        ((b"Transfer-Encoding: chunked, gzip",), "chunked is not the last"),
    ],
)
def test_each_bad_length_or_coding_is_a_named_protocol_failure(
    fields: tuple[bytes, ...], rule: str
) -> None:
    for status in (b"200 OK", b"500 Internal Server Error"):
        exc = failure(head(*fields, status=status) + b"hello", expect=SSE)
        assert exc.kind == "protocol" and rule in exc.detail, (fields, exc.detail)


@pytest.mark.parametrize(
    "fields",
    [
        (b"Content-Length: 5", b"Content-Length: 5"),
        (b"Content-Length: 5, 5",),
        (b"Content-Length: 005",),
    ],
)
def test_repeated_equal_lengths_are_one_length(fields: tuple[bytes, ...]) -> None:
    p, body, done = parse(head(*fields) + b"hello", expect=SSE)
    assert done and body == b"hello" and p.keep_alive


def test_a_huge_content_length_is_read_as_far_as_it_goes() -> None:
    _, body, done = parse(head(b"Content-Length: " + b"9" * 18) + b"hello", expect=SSE)
    assert not done and body == b"hello"  # bounded by the request's deadline, not a loop


def test_bytes_after_a_content_length_body_close_the_connection() -> None:
    p, body, done = parse(head(b"Content-Length: 5") + b"helloHTTP/1.1 200 OK\r\n", expect=SSE)
    assert done and body == b"hello" and not p.keep_alive
    p, body, done = parse(OK_HEAD + BODY + b"junk", expect=SSE)
    assert done and not p.keep_alive


# -- content codings ----------------------------------------------------------------------


@pytest.mark.parametrize(
    ("fields", "detail"),
    [
        ((b"Content-Encoding: gzip", b"Transfer-Encoding: chunked"), "gzip"),
        ((b"Content-Encoding: GZIP", b"Content-Length: 3"), "gzip"),
        ((b"Content-Encoding: br",), "br"),
        ((b"Content-Encoding: identity, deflate", b"Content-Length: 3"), "deflate"),
        ((b"Content-Encoding: gzip", b"Content-Encoding: zstd"), "gzip, zstd"),
        ((b"Transfer-Encoding: gzip, chunked",), "gzip (transfer coding)"),
        ((b"Transfer-Encoding: deflate",), "deflate (transfer coding)"),
    ],
)
def test_an_encoded_2xx_fails_as_content_encoding_at_its_head(
    fields: tuple[bytes, ...], detail: str
) -> None:
    p = ResponseParser(lambda data, now: None, expect=SSE)
    with pytest.raises(RequestFailed) as exc:
        p.feed(head(*fields), 0.0)  # the head alone: no need to read the body
    assert exc.value.kind == "content_encoding" and exc.value.detail == detail
    assert exc.value.status == 200


@pytest.mark.parametrize("fields", [(), (b"Content-Encoding: identity",), (b"Content-Encoding:",)])
def test_identity_is_no_content_coding(fields: tuple[bytes, ...]) -> None:
    p, body, done = parse(head(*fields, b"Transfer-Encoding: chunked") + BODY, expect=SSE)
    assert done and p.result() == 200 and body.endswith(b"[DONE]\n\n")


def test_an_encoded_error_answer_is_its_status() -> None:
    p, _, done = parse(
        head(b"Content-Encoding: gzip", b"Content-Length: 4", status=b"503 Busy")
        + b"\x1f\x8b\x08\x00"
    )
    with pytest.raises(RequestFailed) as exc:
        p.result()
    assert done and exc.value.kind == "http_503"


# -- the end of a stream ------------------------------------------------------------------


class Ends:
    """A meter's ``done``, as the SSE decoder and meter would set it on ``[DONE]``."""

    def __init__(self) -> None:
        self.done = False

    def on_body(self, data: bytes, now: float) -> None:
        if b"data: [DONE]" in data:
            self.done = True


@pytest.mark.parametrize(
    "rest",
    [b"", b"5\r\nhello\r\n", b"-5\r\n", b"\x00\x01garbage"],
    ids=["held-open", "more-chunks", "bad-chunk-after", "garbage-after"],
)
def test_a_chunked_stream_is_complete_at_done_whatever_follows(rest: bytes) -> None:
    ends = Ends()
    p = ResponseParser(ends.on_body, expect=SSE, ends=ends)
    wire = OK_HEAD + b"9\r\ndata: 1\n\n\r\ne\r\ndata: [DONE]\n\n\r\n" + rest
    assert p.feed(wire, 0.0)
    assert p.result() == 200 and p.early and not p.complete


@pytest.mark.parametrize(
    "framing", [b"Content-Length: 1000", b"Connection: close"], ids=["length", "close"]
)
def test_a_length_or_close_delimited_stream_is_complete_at_done(framing: bytes) -> None:
    ends = Ends()
    p = ResponseParser(ends.on_body, expect=SSE, ends=ends)
    assert not p.feed(head(framing) + b"data: 1\n\n", 0.0)
    assert p.feed(b"data: [DONE]\n\n", 0.0)  # 1000 bytes announced, the rest never comes
    assert p.result() == 200 and p.early and not p.complete


def test_the_rest_of_an_early_ended_body_is_read_to_its_end_and_discarded() -> None:
    ends = Ends()
    got: list[bytes] = []

    def on_body(data: bytes, now: float) -> None:
        got.append(data)
        ends.on_body(data, now)

    p = ResponseParser(on_body, expect=SSE, ends=ends)
    assert p.feed(OK_HEAD + b"e\r\ndata: [DONE]\n\n\r\n", 0.0) and p.early
    assert not p.feed(b"5\r\nhello\r\n", 0.0)  # after the end: read, not handed on
    assert p.feed(b"0\r\n\r\n", 0.0) and p.complete and p.keep_alive
    assert got == [b"data: [DONE]\n\n"]


def test_an_error_answer_is_not_ended_by_done() -> None:
    ends = Ends()
    ends.done = True  # even a meter already done does not end an error answer early
    p = ResponseParser(lambda data, now: None, expect=SSE, ends=ends)
    wire = head(b"Transfer-Encoding: chunked", status=b"500 Oops") + b"5\r\nboom!\r\n"
    assert not p.feed(wire, 0.0)
    assert p.feed(b"0\r\n\r\n", 0.0) and p.complete and not p.early
