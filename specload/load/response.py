"""The parser of one HTTP/1.1 response fed in pieces, as socket reads complete.

The body of a 2xx response goes to a callback as soon as each read is parsed —
chunked transfer encoding decoded on the fly, never waiting for a buffer to fill
(geventhttpclient's ``iter_content(chunk_size=N)`` waits for N bytes, which
delays SSE events and inflates TTFT and ITL). While a chunked 2xx body is at a
chunk boundary, the parser offers the next read to a fused reader
(:class:`FastReader`) first.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Protocol

from specload.load.chunked import ChunkedDecoder
from specload.load.failures import RequestFailed

_MAX_HEAD = 65536
_MAX_ERROR_BODY = 4096

OnBody = Callable[[bytes, float], None]


class FastReader(Protocol):
    """A fused reader of whole socket reads of a chunked body (a ``StreamMeter``)."""

    def feed_read(self, buf: bytearray, n: int, now: float) -> int:
        """Account ``buf[:n]``: 1 (2: the body ended), or 0 declined, nothing changed."""
        ...


_HEAD, _CHUNKED, _LENGTH, _CLOSE, _DONE = range(5)


class ResponseParser:
    """Parses one HTTP/1.1 response fed in pieces; 2xx bodies go to ``on_body``.

    :meth:`feed` returns True when the response is complete. :meth:`eof` is
    called when the server closed the connection. After completion,
    :meth:`result` returns the status or raises ``RequestFailed("http_<code>")``.
    """

    __slots__ = (
        "_buf",
        "_dec",
        "_error_body",
        "_fast",
        "_left",
        "_sink",
        "fast",
        "got_bytes",
        "keep_alive",
        "method",
        "on_body",
        "state",
        "status",
    )

    def __init__(
        self, on_body: OnBody, method: str = "POST", fast: FastReader | None = None
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

    def feed(self, data: bytes, now: float) -> bool:
        self.got_bytes = True
        state = self.state
        if state == _CHUNKED:
            dec = self._dec
            assert dec is not None
            out = dec.feed(data)
            if out:
                self._sink(out, now)
            if dec.done:
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
            if self._left <= 0:
                self.state = _DONE
                return True
            return False
        if state == _CLOSE:
            self._sink(data, now)
            return False
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
        if 200 <= self.status < 300:
            return self.status
        text = b"".join(self._error_body)[:300].decode("utf-8", "replace")
        raise RequestFailed(f"http_{self.status}", " ".join(text.split()), self.status)

    def _collect_error(self, data: bytes, now: float) -> None:
        if sum(map(len, self._error_body)) < _MAX_ERROR_BODY:
            self._error_body.append(data)

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
            if name == b"transfer-encoding":
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
        if not 200 <= status < 300:
            self._sink = self._collect_error
        if self.method == "HEAD" or status in (204, 304):
            self.state = _DONE
            return True
        if chunked:
            self.state = _CHUNKED
            self._dec = ChunkedDecoder()
            if 200 <= status < 300:
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
