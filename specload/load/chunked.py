"""Incremental decoding of HTTP/1.1 ``Transfer-Encoding: chunked``, read by read."""

from __future__ import annotations

from specload.load.failures import RequestFailed


class ChunkedDecoder:
    """Incremental decoder of HTTP/1.1 ``Transfer-Encoding: chunked``."""

    __slots__ = ("_crlf", "_pending", "_remaining", "clean", "done")

    def __init__(self) -> None:
        self._pending = b""
        self._remaining = 0
        self._crlf = False
        self.done = False
        self.clean = True  # at a chunk boundary: nothing pending

    def feed(self, data: bytes) -> bytes:
        if not self._pending and not self._remaining and not self._crlf:
            # Fast path: the read holds exactly one whole chunk (servers write one per event).
            idx = data.find(b"\r\n")
            if 0 < idx < 10:
                try:
                    size = int(data[:idx], 16)
                except ValueError:
                    size = -1
                if size > 0:
                    end = idx + 2 + size
                    if len(data) == end + 2 and data[end:] == b"\r\n":
                        return data[idx + 2 : end]
        return self._feed(data)

    def _feed(self, data: bytes) -> bytes:
        buf = self._pending + data if self._pending else data
        self._pending = b""
        end = len(buf)
        pos = 0
        out: list[bytes] = []
        while pos < end and not self.done:
            remaining = self._remaining
            if remaining:
                take = min(remaining, end - pos)
                out.append(buf[pos : pos + take])
                pos += take
                self._remaining = remaining - take
                if self._remaining == 0:
                    self._crlf = True
            elif self._crlf:
                if end - pos < 2:
                    self._pending = buf[pos:]
                    break
                if buf[pos : pos + 2] != b"\r\n":
                    raise RequestFailed("protocol", "bad chunk terminator")
                pos += 2
                self._crlf = False
            else:
                idx = buf.find(b"\r\n", pos)
                if idx < 0:
                    if end - pos > 1024:
                        raise RequestFailed("protocol", "chunk size line too long")
                    self._pending = buf[pos:]
                    break
                line = buf[pos:idx].split(b";", 1)[0].strip()
                try:
                    size = int(line, 16)
                except ValueError:
                    raise RequestFailed("protocol", f"bad chunk size {line[:20]!r}") from None
                pos = idx + 2
                if size == 0:
                    self.done = True  # trailers, if any, are ignored
                else:
                    self._remaining = size
        self.clean = not (self._pending or self._remaining or self._crlf)
        if len(out) == 1:
            return out[0]
        return b"".join(out)
