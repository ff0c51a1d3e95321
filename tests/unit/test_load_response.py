"""The HTTP/1.1 response parser (specload.load.response), fed byte by byte."""

from __future__ import annotations

import pytest

from specload.load.failures import RequestFailed
from specload.load.response import ResponseParser

pytestmark = pytest.mark.unit


def chunked(parts: list[bytes]) -> bytes:
    return b"".join(b"%x\r\n%s\r\n" % (len(p), p) for p in parts) + b"0\r\n\r\n"


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
    assert p.feed(
        b"HTTP/1.1 503 Service Unavailable\r\nContent-Length: %d\r\n\r\n%s" % (len(body), body), 0.0
    )
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
