"""Incremental decoding of HTTP/1.1 ``Transfer-Encoding: chunked``, read by read.

The framing is read strictly (RFC 9112 §7.1): a chunk size is 1 to
:data:`MAX_SIZE_DIGITS` hex digits (no sign, ``0x``, ``_`` or leading white space; at
most :data:`MAX_CHUNK_BYTES`), optionally followed by ``;`` extensions (printable
text, at most :data:`MAX_EXT_BYTES`), then CRLF — white space is allowed before the
``;`` or the CRLF, as h11 reads it;
each chunk's data is followed by CRLF; the last chunk (size 0) by a trailer section
(field lines, at most :data:`MAX_TRAILER_BYTES`) and an empty line. Every other
framing fails at once as ``RequestFailed("protocol", <the rule broken>)``: the
decoder never waits for bytes that cannot make the framing valid, and holds at most
one size or trailer line. Output decoded before a violation in the same read is
returned first; the violation is then in :attr:`ChunkedDecoder.error` (and raised by
the next :meth:`~ChunkedDecoder.feed`).
"""

from __future__ import annotations

from specload.load.failures import RequestFailed

MAX_SIZE_DIGITS = 16  # hex digits of a chunk size (leading zeros included)
MAX_CHUNK_BYTES = 0xFFFFFFFF  # one chunk's data: 4 GiB (the C fast path: 8 hex digits)
MAX_EXT_BYTES = 1024  # a chunk size line's extensions, after the ";"
MAX_TRAILER_BYTES = 8192  # the trailer section after the last chunk
_MAX_LINE = MAX_SIZE_DIGITS + 16 + MAX_EXT_BYTES  # a size line, with room for white space
_HEX = b"0123456789abcdefABCDEF"
_BWS = b" \t"
# Bytes allowed in a chunk extension: visible ASCII, obs-text, space and tab.
_EXT_BAD = bytes(c for c in range(256) if (c < 0x20 and c != 0x09) or c == 0x7F)

_SIZE, _DATA, _CRLF, _TRAILER, _END = range(5)


def _violation(rule: str, seen: bytes = b"") -> RequestFailed:
    shown = f" {seen[:24]!r}" if seen else ""
    return RequestFailed("protocol", f"{rule}{shown}")


def _parse_size(line: bytes) -> int:
    """The size of a complete chunk size line (its CRLF removed); raises if invalid."""
    digits, semi, ext = line.partition(b";")
    digits = digits.rstrip(_BWS)  # white space before the ";" or the CRLF (as h11 reads it)
    if not digits:
        raise _violation("chunk size empty", line)
    if digits.strip(_HEX):
        raise _violation("chunk size not hex digits", line)
    if len(digits) > MAX_SIZE_DIGITS:
        raise _violation("chunk size too long", line)
    size = int(digits, 16)
    if size > MAX_CHUNK_BYTES:
        raise _violation(f"chunk size over {MAX_CHUNK_BYTES} bytes", line)
    if semi:
        if len(ext) > MAX_EXT_BYTES:
            raise _violation(f"chunk extension over {MAX_EXT_BYTES} bytes")
        if not ext.strip(_BWS) or len(ext.translate(None, _EXT_BAD)) != len(ext):
            raise _violation("bad chunk extension", line)
    return size


def _check_partial_size(part: bytes) -> None:
    """Fail at once when the start of a size line (no LF yet) cannot become valid."""
    if part[:1] in (b" ", b"\t"):
        raise _violation("chunk size not hex digits", part)
    digits, semi, ext = part.partition(b";")
    digits = digits.removesuffix(b"\r").rstrip(_BWS)
    if semi:
        if not digits:
            raise _violation("chunk size empty", part)
        if len(ext) > MAX_EXT_BYTES + 1:  # the CR of the line end may be in it
            raise _violation(f"chunk extension over {MAX_EXT_BYTES} bytes")
    if digits.strip(_HEX):
        raise _violation("chunk size not hex digits", part)
    if len(digits) > MAX_SIZE_DIGITS:
        raise _violation("chunk size too long", part)


class ChunkedDecoder:
    """Incremental decoder of HTTP/1.1 ``Transfer-Encoding: chunked``.

    :meth:`feed` returns the data decoded from one read. ``done``: the last chunk and
    its trailer section were read; ``extra``: bytes followed them (the connection
    cannot serve another response); ``clean``: at a chunk boundary, nothing pending;
    ``error``: the framing rule broken after the output :meth:`feed` returned last.
    """

    __slots__ = ("_pending", "_remaining", "_state", "_trailer", "clean", "done", "error", "extra")

    def __init__(self) -> None:
        self._pending = b""  # an incomplete size or trailer line, or a lone CR
        self._remaining = 0
        self._state = _SIZE
        self._trailer = 0  # trailer bytes read
        self.done = False
        self.extra = False
        self.clean = True  # at a chunk boundary: nothing pending
        self.error: RequestFailed | None = None

    def feed(self, data: bytes) -> bytes:
        if self._state == _SIZE and not self._pending and self.error is None:
            # Fast path: the read holds exactly one whole chunk (servers write one per event).
            idx = data.find(b"\r\n")
            if 0 < idx < 9:
                head = data[:idx]
                if not head.strip(_HEX):
                    size = int(head, 16)
                    end = idx + 2 + size
                    if size and len(data) == end + 2 and data[end:] == b"\r\n":
                        return data[idx + 2 : end]
        return self._feed(data)

    def _feed(self, data: bytes) -> bytes:
        if self.error is not None:
            raise self.error
        out: list[bytes] = []
        try:
            self._decode(data, out)
        except RequestFailed as exc:
            self._pending = b""
            self.clean = False
            if not out:
                self.error = exc
                raise
            self.error = exc  # the caller takes the output first
        else:
            self.clean = self._state == _SIZE and not self._pending
        if len(out) == 1:
            return out[0]
        return b"".join(out)

    def _decode(self, data: bytes, out: list[bytes]) -> None:
        buf = self._pending + data if self._pending else data
        self._pending = b""
        end = len(buf)
        pos = 0
        while pos < end:
            state = self._state
            if state == _DATA:
                remaining = self._remaining
                take = min(remaining, end - pos)
                out.append(buf[pos : pos + take])
                pos += take
                self._remaining = remaining - take
                if self._remaining == 0:
                    self._state = _CRLF
            elif state == _CRLF:
                if buf[pos] != 13:  # CR
                    raise _violation("no CRLF after chunk data", buf[pos : pos + 8])
                if end - pos < 2:
                    self._pending = buf[pos:]
                    return
                if buf[pos + 1] != 10:  # LF
                    raise _violation("no CRLF after chunk data", buf[pos : pos + 8])
                pos += 2
                self._state = _SIZE
            elif state == _SIZE:
                nl = buf.find(b"\n", pos, pos + _MAX_LINE + 2)
                if nl < 0:
                    part = buf[pos:]
                    _check_partial_size(part[: _MAX_LINE + 2])
                    if len(part) > _MAX_LINE:
                        raise _violation("chunk size line too long", part)
                    self._pending = part
                    return
                if nl == pos or buf[nl - 1] != 13:
                    raise _violation("chunk size line not ended by CRLF", buf[pos : nl + 1])
                size = _parse_size(buf[pos : nl - 1])
                pos = nl + 1
                if size:
                    self._remaining = size
                    self._state = _DATA
                else:
                    self._state = _TRAILER
            elif state == _TRAILER:
                room = MAX_TRAILER_BYTES - self._trailer
                nl = buf.find(b"\n", pos, pos + room + 1)
                if nl < 0:
                    part = buf[pos:]
                    if len(part) > room:
                        raise _violation(f"trailer section over {MAX_TRAILER_BYTES} bytes")
                    self._pending = part
                    return
                if nl == pos or buf[nl - 1] != 13:
                    raise _violation("trailer line not ended by CRLF", buf[pos : nl + 1])
                line = buf[pos : nl - 1]
                self._trailer += nl + 1 - pos
                pos = nl + 1
                if not line:
                    self._state = _END
                    self.done = True
                elif b":" not in line or line[:1] in (b" ", b"\t", b":"):
                    raise _violation("bad trailer line", line)
            else:  # _END: whatever follows the message is not part of it
                self.extra = True
                return
