"""The parser of one HTTP/1.1 response fed in pieces, as socket reads complete.

The body of a 2xx response goes to a callback as soon as each read is parsed —
chunked transfer encoding decoded on the fly, never waiting for a buffer to fill
(geventhttpclient's ``iter_content(chunk_size=N)`` waits for N bytes, which
delays SSE events and inflates TTFT and ITL). While a chunked 2xx body is at a
chunk boundary, the parser offers the next read to a fused reader
(:class:`FastReader`) first.

A 2xx answer whose ``Content-Type`` is not the one asked for (``expect``) fails
as ``content_type``; its body is read like an error body. The body of an error
answer is read to its end (its first 4 KiB kept for the detail) so the connection
can serve the next request, unless it is over 64 KiB (then the connection is closed
instead). ``Retry-After`` of an error answer (seconds or an HTTP date) is handed on
in :attr:`RequestFailed.retry_after_s`.
"""

from __future__ import annotations

import datetime
import email.utils
import math
import time
from collections.abc import Callable
from typing import Protocol

from specload.load.chunked import ChunkedDecoder
from specload.load.failures import RequestFailed

_MAX_HEAD = 65536
_MAX_ERROR_BODY = 4096
# An error body (or a 2xx body of the wrong content type) longer than this is not
# drained to keep the connection: the connection is closed instead.
MAX_DRAIN_BYTES = 65536
_TYPE_CHARS = 80  # of a wrong content type, in the detail

OnBody = Callable[[bytes, float], None]


class FastReader(Protocol):
    """A fused reader of whole socket reads of a chunked body (a ``StreamMeter``)."""

    def feed_read(self, buf: bytearray, n: int, now: float) -> int:
        """Account ``buf[:n]``: 1 (2: the body ended), or 0 declined, nothing changed."""
        ...


_HEAD, _CHUNKED, _LENGTH, _CLOSE, _DONE = range(5)


def content_type_matches(value: bytes, expect: bytes) -> bool:
    """Whether a ``Content-Type`` value is the media type ``expect`` (parameters and
    case ignored); ``application/json`` also takes any ``application/…+json``."""
    media = value.partition(b";")[0].strip().lower()
    if media == expect:
        return True
    json_like = media.startswith(b"application/") and media.endswith(b"+json")
    return expect == b"application/json" and json_like


def parse_retry_after(value: bytes, now_s: float | None = None) -> float | None:
    """``Retry-After`` in seconds from now (``now_s``: wall clock, default now): a
    number of seconds or an HTTP date (one in the past: 0); None when unreadable."""
    text = value.strip().decode("latin-1")
    if not text:
        return None
    try:
        seconds = float(text)
    except ValueError:
        try:
            when = email.utils.parsedate_to_datetime(text)
        except (TypeError, ValueError, IndexError, OverflowError):
            return None
        if when.tzinfo is None:  # "-0000": UTC, said without a zone
            when = when.replace(tzinfo=datetime.UTC)
        seconds = when.timestamp() - (time.time() if now_s is None else now_s)
    if not math.isfinite(seconds):
        return None
    return max(0.0, seconds)


class ResponseParser:
    """Parses one HTTP/1.1 response fed in pieces; 2xx bodies go to ``on_body``.

    :meth:`feed` returns True when the response is complete. :meth:`eof` is
    called when the server closed the connection. After completion,
    :meth:`result` returns the status or raises ``RequestFailed("http_<code>")``
    (``RequestFailed("content_type")``: a 2xx answer whose ``Content-Type`` is not
    ``expect``; no ``Content-Type`` at all is taken as the one expected).
    """

    __slots__ = (
        "_buf",
        "_dec",
        "_drained",
        "_error_body",
        "_expect",
        "_fast",
        "_left",
        "_sink",
        "content_type",
        "fast",
        "got_bytes",
        "keep_alive",
        "method",
        "on_body",
        "retry_after",
        "state",
        "status",
        "wrong_type",
    )

    def __init__(
        self,
        on_body: OnBody,
        method: str = "POST",
        fast: FastReader | None = None,
        expect: bytes | None = None,
    ) -> None:
        self.on_body = on_body
        self._fast = fast
        # ``fast`` is set while the fused reader may take the next read: a 2xx chunked
        # body at a chunk boundary. Callers try it first and fall back to :meth:`feed`.
        self.fast: FastReader | None = None
        self.method = method
        self.state = _HEAD
        self._buf = b""
        self.status = 0
        self.keep_alive = True
        self._dec: ChunkedDecoder | None = None
        self._left = 0
        self._error_body: list[bytes] = []
        self._sink: OnBody = on_body
        self.got_bytes = False
        self._expect = expect
        self._drained = 0
        self.content_type: bytes | None = None
        self.retry_after: bytes | None = None
        self.wrong_type = False

    def feed(self, data: bytes, now: float) -> bool:
        self.got_bytes = True
        state = self.state
        if state == _CHUNKED:
            dec = self._dec
            assert dec is not None
            out = dec.feed(data)
            if out:
                self._sink(out, now)
            if dec.done or self.state == _DONE:
                self.state = _DONE
                self.fast = None
                return True
            self.fast = self._fast if dec.clean else None
            return False
        if state == _HEAD:
            return self._feed_head(data, now)
        if state == _LENGTH:
            take = data[: self._left]
            self._left -= len(take)
            if take:
                self._sink(take, now)
            if self._left <= 0 or self.state == _DONE:
                self.state = _DONE
                return True
            return False
        if state == _CLOSE:
            self._sink(data, now)
            return self.state == _DONE
        return True

    def fast_ended(self) -> None:
        """The fused reader read the end of the body."""
        self.state = _DONE
        self.fast = None
        if self._dec is not None:
            self._dec.done = True

    def eof(self, now: float) -> bool:
        """The server closed: True if that completes the response, else raises."""
        if self.state == _CLOSE:
            self.state = _DONE
            return True
        if self.state == _DONE:
            return True
        if self.state == _HEAD:
            raise RequestFailed("reset", "connection closed before the response head")
        raise RequestFailed("reset", "connection closed mid-body")

    def result(self) -> int:
        status = self.status
        if 200 <= status < 300 and not self.wrong_type:
            return status
        text = " ".join(b"".join(self._error_body)[:300].decode("utf-8", "replace").split())
        if self.wrong_type:
            got = " ".join((self.content_type or b"").decode("latin-1").split())
            if len(got) > _TYPE_CHARS:
                got = got[: _TYPE_CHARS - 1] + "…"
            expect = (self._expect or b"").decode("latin-1")
            detail = f"{got} (expected {expect})" + (f": {text}" if text else "")
            raise RequestFailed("content_type", detail, status)
        wait = None if self.retry_after is None else parse_retry_after(self.retry_after)
        raise RequestFailed(f"http_{status}", text, status, wait)

    def _collect_error(self, data: bytes, now: float) -> None:
        if self._drained < _MAX_ERROR_BODY:
            self._error_body.append(data)
        self._drained += len(data)
        if self._drained > MAX_DRAIN_BYTES:
            # Not worth draining to keep the connection: close it once the head is kept.
            self.keep_alive = False
            self.state = _DONE

    def _feed_head(self, data: bytes, now: float) -> bool:
        buf = self._buf + data if self._buf else data
        idx = buf.find(b"\r\n\r\n")
        if idx < 0:
            if len(buf) > _MAX_HEAD:
                raise RequestFailed("protocol", "response head too long")
            self._buf = buf
            return False
        self._buf = b""
        head = buf[:idx]
        rest = buf[idx + 4 :]
        lines = head.split(b"\r\n")
        status_line = lines[0].split(b" ", 2)
        if len(status_line) < 2 or not status_line[0].startswith(b"HTTP/"):
            raise RequestFailed("protocol", f"bad status line {lines[0][:40]!r}")
        try:
            status = int(status_line[1])
        except ValueError:
            raise RequestFailed("protocol", f"bad status line {lines[0][:40]!r}") from None
        if 100 <= status < 200:
            # An interim response (100 Continue): the real one follows.
            return self._feed_head(rest, now) if rest else False
        self.status = status
        chunked = False
        length: int | None = None
        self.keep_alive = status_line[0] == b"HTTP/1.1"
        for line in lines[1:]:
            name, _, value = line.partition(b":")
            name = name.strip().lower()
            if name == b"content-type":
                self.content_type = value.strip()
            elif name == b"retry-after":
                self.retry_after = value
            elif name == b"transfer-encoding":
                chunked = b"chunked" in value.lower()
            elif name == b"content-length":
                try:
                    length = int(value.strip())
                except ValueError:
                    raise RequestFailed("protocol", "bad content-length") from None
            elif name == b"connection":
                v = value.strip().lower()
                if v == b"close":
                    self.keep_alive = False
                elif v == b"keep-alive":
                    self.keep_alive = True
        ok = 200 <= status < 300
        expect, got = self._expect, self.content_type
        if ok and expect is not None and got is not None and not content_type_matches(got, expect):
            self.wrong_type = True
            ok = False
        if not ok:
            self._sink = self._collect_error
        if self.method == "HEAD" or status in (204, 304):
            self.state = _DONE
            return True
        if chunked:
            self.state = _CHUNKED
            self._dec = ChunkedDecoder()
            if ok:
                self.fast = self._fast
        elif length is not None:
            self.state = _LENGTH
            self._left = length
            if length == 0:
                self.state = _DONE
                return True
        else:
            self.state = _CLOSE
            self.keep_alive = False
        return self.feed(rest, now) if rest else False
