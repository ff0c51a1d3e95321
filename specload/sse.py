"""Server-sent events (SSE) parsing: the one implementation in specload.

:class:`SSEDecoder` is incremental: feed it bytes as they arrive from the
socket (any split, ``\\n`` or ``\\r\\n`` line ends) and it returns the ``data``
payload of every event completed by those bytes, at once — never waiting for
more bytes than the event needs. Multi-line ``data:`` fields are joined with
``\\n``; comments (``:``) and other fields (``event:``, ``id:``, ``retry:``) are
ignored; an event without data yields nothing.

>>> d = SSEDecoder()
>>> d.feed(b'data: {"a": 1}\\n\\ndata: [DO')
[b'{"a": 1}']
>>> d.feed(b'NE]\\n\\n')
[b'[DONE]']
"""

from __future__ import annotations

DONE = b"[DONE]"


class SSEDecoder:
    __slots__ = ("_buf",)

    def __init__(self) -> None:
        self._buf = b""

    @property
    def pending(self) -> bytes:
        """Bytes of an event not yet completed (non-empty at a truncated end)."""
        return self._buf

    def feed(self, data: bytes) -> list[bytes]:
        if not self._buf and data[-2:] == b"\n\n" and data[:6] == b"data: ":
            # Fast path: exactly one single-line event, as servers write them.
            inner = data[6:-2]
            if b"\n" not in inner and b"\r" not in inner:
                return [inner]
        buf = self._buf + data if self._buf else data
        if b"\r" in buf:
            keep_cr = buf.endswith(b"\r")
            if keep_cr:
                buf = buf[:-1]
            buf = buf.replace(b"\r\n", b"\n").replace(b"\r", b"\n")
            if keep_cr:
                buf += b"\r"
        if b"\n\n" not in buf:
            self._buf = buf
            return []
        blocks = buf.split(b"\n\n")
        self._buf = blocks.pop()
        out: list[bytes] = []
        for block in blocks:
            # Fast path: one ``data: ...`` line, as vLLM and most servers send.
            if block.startswith(b"data: ") and b"\n" not in block:
                out.append(block[6:])
                continue
            payload = _parse_block(block)
            if payload is not None:
                out.append(payload)
        return out


def _parse_block(block: bytes) -> bytes | None:
    lines: list[bytes] = []
    for line in block.split(b"\n"):
        if not line or line.startswith(b":"):
            continue
        name, sep, value = line.partition(b":")
        if name != b"data":
            continue
        if sep and value.startswith(b" "):
            value = value[1:]
        lines.append(value)
    if not lines:
        return None
    return b"\n".join(lines)
