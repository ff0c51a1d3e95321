"""The parser of one HTTP/1.1 response fed in pieces, as socket reads complete.

The body of a 2xx response goes to a callback as soon as each read is parsed —
chunked transfer encoding decoded on the fly, never waiting for a buffer to fill
(geventhttpclient's ``iter_content(chunk_size=N)`` waits for N bytes, which
delays SSE events and inflates TTFT and ITL). While a chunked 2xx body is at a
chunk boundary, the parser offers the next read to a fused reader
(:class:`FastReader`) first.

A 2xx answer whose ``Content-Type`` is not the one asked for (``expect``) fails
as ``content_type``; its body is read like an error body. A 2xx answer with a
content coding (``Content-Encoding`` other than ``identity``, or a transfer coding
other than ``chunked``) fails at its head as ``content_encoding`` (detail: the
coding): the client asks for none and reads none. The body of an error
answer is read to its end (its first 4 KiB kept for the detail) so the connection
can serve the next request, unless it is over 64 KiB (then the connection is closed
instead). ``Retry-After`` of an error answer (seconds or an HTTP date) is handed on
in :attr:`RequestFailed.retry_after_s`.

The head is read strictly but as RFC 9112 lets a recipient: lines end in CRLF or a
bare LF (mixed too), empty lines before the status line are skipped, folded field
lines are joined. Bounded: at most :data:`MAX_INTERIM` interim (1xx) responses,
:data:`MAX_HEAD_LINES` lines per head and :data:`MAX_HEAD_BYTES` of heads in all,
interim ones included, read in one pass without recursion. Every other framing —
a bad status line, a bare CR, a ``Content-Length`` that is not digits or several that
differ, both ``Transfer-Encoding`` and ``Content-Length``, ``chunked`` not the last
transfer coding, an unasked ``101`` — fails as ``protocol`` with the rule broken.

``ends`` (optional): an object whose ``done`` turns true when the body has said all
that is read of it (the stream's meter, at ``data: [DONE]``). The response is complete
then, whatever follows: :attr:`ResponseParser.early` is set, the rest of the body goes
nowhere and :attr:`ResponseParser.complete` stays false until it ends (the connection
layer drains it, or closes the connection).
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

MAX_HEAD_BYTES = 65536  # of a response's heads, interim (1xx) heads included
MAX_HEAD_LINES = 128  # lines of one head (the status line included)
MAX_INTERIM = 10  # interim (1xx) responses before the final one
_MAX_LENGTH_DIGITS = 18  # a Content-Length below 10**18 bytes
_MAX_ERROR_BODY = 4096
# An error body (or a 2xx body of the wrong content type) longer than this is not
# drained to keep the connection: the connection is closed instead.
MAX_DRAIN_BYTES = 65536
_TYPE_CHARS = 80  # of a wrong content type or coding, in the detail
_OWS = b" \t"

OnBody = Callable[[bytes, float], None]


class FastReader(Protocol):
    """A fused reader of whole socket reads of a chunked body (a ``StreamMeter``)."""

    def feed_read(self, buf: bytearray, n: int, now: float) -> int:
        """Account ``buf[:n]``: 1 (2: the body ended; 3: the stream ended at ``[DONE]``,
        its body did not), or 0 declined, nothing changed."""
        ...


class Ends(Protocol):
    """What says the body has said all that is read of it (a ``StreamMeter``)."""

    done: bool


_HEAD, _CHUNKED, _LENGTH, _CLOSE, _DONE = range(5)


def _discard(data: bytes, now: float) -> None:
    """The sink of what follows the end of a stream (``[DONE]``)."""


def _shown(value: bytes) -> str:
    text = " ".join(value.decode("latin-1").split())
    return text if len(text) <= _TYPE_CHARS else text[: _TYPE_CHARS - 1] + "…"


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


def _protocol(rule: str, seen: bytes = b"") -> RequestFailed:
    return RequestFailed("protocol", f"{rule} {seen[:40]!r}" if seen else rule)


def _status(line: bytes) -> tuple[int, bool]:
    """The status code of a status line and whether the connection persists by default."""
    version, _, rest = line.partition(b" ")
    code = rest[:3]
    if (
        len(version) != 8
        or not version.startswith(b"HTTP/1.")
        or not version[7:].isdigit()
        or len(code) != 3
        or not code.isdigit()
        or rest[3:4] not in (b"", b" ")
    ):
        raise _protocol("bad status line", line)
    return int(code), version != b"HTTP/1.0"


def _fields(lines: list[bytes]) -> list[tuple[bytes, bytes]]:
    """(lower-case name, value) of a head's field lines; folded lines joined."""
    fields: list[tuple[bytes, bytes]] = []
    for line in lines:
        if line[:1] in (b" ", b"\t"):  # obs-fold: a continuation of the previous value
            if not fields:
                raise _protocol("folded line before any field", line)
            name, value = fields[-1]
            fields[-1] = (name, value + b" " + line.strip(_OWS))
            continue
        name, colon, value = line.partition(b":")
        name = name.rstrip(_OWS)
        if not colon or not name or b" " in name or b"\t" in name:
            raise _protocol("bad header line", line)
        fields.append((name.lower(), value.strip(_OWS)))
    return fields


def _tokens(value: bytes) -> list[bytes]:
    return [t for t in (p.strip(_OWS).lower() for p in value.split(b",")) if t]


class ResponseParser:
    """Parses one HTTP/1.1 response fed in pieces; 2xx bodies go to ``on_body``.

    :meth:`feed` returns True when the response is complete. :meth:`eof` is
    called when the server closed the connection. After completion,
    :meth:`result` returns the status or raises ``RequestFailed("http_<code>")``
    (``RequestFailed("content_type")``: a 2xx answer whose ``Content-Type`` is not
    ``expect``; no ``Content-Type`` at all is taken as the one expected).
    ``ends``: see the module's docstring.
    """

    __slots__ = (
        "_dec",
        "_drained",
        "_ends",
        "_error_body",
        "_expect",
        "_fast",
        "_head",
        "_head_bytes",
        "_interim",
        "_left",
        "_lines",
        "_scan",
        "_sink",
        "content_type",
        "early",
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
        ends: Ends | None = None,
    ) -> None:
        self.on_body = on_body
        self._fast = fast
        # ``fast`` is set while the fused reader may take the next read: a 2xx chunked
        # body at a chunk boundary. Callers try it first and fall back to :meth:`feed`.
        self.fast: FastReader | None = None
        self._ends = ends
        self.early = False  # complete at the end of the stream, before the body's end
        self.method = method
        self.state = _HEAD
        self._head = bytearray()  # the head read so far (from the current line on)
        self._scan = 0  # where in _head the search for the next line end goes on
        self._lines: list[bytes] = []  # the current head's lines
        self._head_bytes = 0  # head bytes taken off _head, interim heads included
        self._interim = 0
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

    @property
    def complete(self) -> bool:
        """The whole response was read, its body to the end."""
        return self.state == _DONE

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
                if dec.extra:  # bytes after the message: not a connection to reuse
                    self.keep_alive = False
                self.state = _DONE
                self.fast = None
                return True
            if self._stopped_at_end():
                return True
            if dec.error is not None:
                raise dec.error
            self.fast = self._fast if dec.clean else None
            return False
        if state == _HEAD:
            return self._feed_head(data, now)
        if state == _LENGTH:
            left = self._left
            take = data[:left] if len(data) > left else data
            if len(data) > left:  # bytes after the body: not a connection to reuse
                self.keep_alive = False
            self._left = left - len(take)
            if take:
                self._sink(take, now)
            if self._left <= 0 or self.state == _DONE:
                self.state = _DONE
                return True
            return self._stopped_at_end()
        if state == _CLOSE:
            self._sink(data, now)
            return self.state == _DONE or self._stopped_at_end()
        return True

    def _stopped_at_end(self) -> bool:
        """True (and the body stopped) once the stream's own end was seen."""
        ends = self._ends
        if ends is not None and ends.done:
            self.stop()
            return True
        return False

    def fast_ended(self) -> None:
        """The fused reader read the end of the body."""
        self.state = _DONE
        self.fast = None
        if self._dec is not None:
            self._dec.done = True

    def stop(self) -> None:
        """The stream ended (``[DONE]``) before its body: complete, what follows unread
        by the caller (:attr:`complete` stays false until the body ends)."""
        self.early = True
        self._ends = None
        self.fast = None
        self._sink = _discard
        dec = self._dec
        if dec is not None and dec.error is not None:
            self.keep_alive = False

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
            got = _shown(self.content_type or b"")
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
        """Read head lines; interim heads are skipped in this one pass (bounded)."""
        head = self._head
        head += data
        start = 0  # the current line's start in head
        lines = self._lines
        while True:
            nl = head.find(b"\n", self._scan)
            if nl < 0:
                self._head_bytes += start  # the lines taken are not kept twice
                del head[:start]
                if self._head_bytes + len(head) > MAX_HEAD_BYTES:
                    raise _protocol(f"response head over {MAX_HEAD_BYTES} bytes")
                if not lines:  # not HTTP: said at once, not after a timeout
                    begun = bytes(head[:7])
                    if begun not in (b"", b"\r") and not b"HTTP/1.".startswith(begun):
                        raise _protocol("bad status line", bytes(head))
                self._scan = len(head)
                return False
            end = nl - 1 if nl > start and head[nl - 1] == 13 else nl  # CRLF or bare LF
            self._scan = nl + 1
            if self._head_bytes + nl + 1 > MAX_HEAD_BYTES:
                raise _protocol(f"response head over {MAX_HEAD_BYTES} bytes")
            line = bytes(head[start:end])
            start = nl + 1
            if b"\r" in line:
                raise _protocol("bare CR in response head", line)
            if line:
                if not lines:
                    _status(line)  # a bad status line fails before the rest of the head
                elif len(lines) >= MAX_HEAD_LINES:
                    raise _protocol(f"response head over {MAX_HEAD_LINES} lines")
                lines.append(line)
                continue
            if not lines:
                continue  # an empty line before the status line: skipped (RFC 9112 §2.2)
            # A whole head: an interim one (1xx) is skipped, the final one starts the body.
            self._head_bytes += start  # interim heads count too
            del head[:start]
            start = self._scan = 0
            status, persistent = _status(lines[0])
            if status >= 200:
                rest = bytes(head)
                self._head = bytearray()
                self._lines = []
                return self._start_body(status, persistent, lines, rest, now)
            if status == 101:
                raise _protocol("101 Switching Protocols (no upgrade was asked)")
            self._interim += 1
            if self._interim > MAX_INTERIM:
                raise _protocol(f"over {MAX_INTERIM} interim (1xx) responses")
            lines.clear()

    def _start_body(
        self, status: int, persistent: bool, lines: list[bytes], rest: bytes, now: float
    ) -> bool:
        self.status = status
        self.keep_alive = persistent
        codings: list[bytes] = []  # transfer codings, in order
        encodings: list[bytes] = []  # content codings other than identity
        lengths: set[bytes] = set()
        for name, value in _fields(lines[1:]):
            if name == b"content-type":
                self.content_type = value
            elif name == b"retry-after":
                self.retry_after = value
            elif name == b"transfer-encoding":
                codings += _tokens(value)
            elif name == b"content-length":
                for part in value.split(b","):
                    digits = part.strip(_OWS)
                    if not digits.isdigit():
                        raise _protocol("content-length not digits", value)
                    digits = digits.lstrip(b"0") or b"0"
                    if len(digits) > _MAX_LENGTH_DIGITS:
                        raise _protocol("content-length too large", value)
                    lengths.add(digits)
            elif name == b"content-encoding":
                encodings += [t for t in _tokens(value) if t != b"identity"]
            elif name == b"connection":
                tokens = _tokens(value)
                if b"close" in tokens:
                    self.keep_alive = False
                elif b"keep-alive" in tokens:
                    self.keep_alive = True
        if len(lengths) > 1:
            raise _protocol("conflicting content-length values", b", ".join(sorted(lengths)))
        if codings and lengths:
            raise _protocol("both transfer-encoding and content-length")
        chunked = bool(codings) and codings[-1] == b"chunked"
        if codings.count(b"chunked") > (1 if chunked else 0):
            raise _protocol("chunked is not the last transfer coding", b", ".join(codings))
        ok = 200 <= status < 300
        expect, got = self._expect, self.content_type
        if ok and expect is not None and got is not None and not content_type_matches(got, expect):
            self.wrong_type = True
            ok = False
        if not ok:
            self._sink = self._collect_error
            self._ends = None
        if self.method == "HEAD" or status in (204, 304):
            self.state = _DONE
            return True
        if ok:
            coded = [c for c in codings if c != b"chunked"]
            if coded:
                raise RequestFailed(
                    "content_encoding", _shown(b", ".join(coded)) + " (transfer coding)", status
                )
            if encodings:
                raise RequestFailed("content_encoding", _shown(b", ".join(encodings)), status)
        if chunked:
            self.state = _CHUNKED
            self._dec = ChunkedDecoder()
            if ok:
                self.fast = self._fast
        elif lengths and not codings:
            length = int(lengths.pop())
            self.state = _LENGTH
            self._left = length
            if length == 0:
                self.state = _DONE
                if rest:
                    self.keep_alive = False
                return True
        else:  # no length, or transfer codings without chunked last: read until closed
            self.state = _CLOSE
            self.keep_alive = False
        return self.feed(rest, now) if rest else False
