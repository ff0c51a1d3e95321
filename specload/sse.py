"""Server-sent events (SSE) parsing: the one implementation in specload.

:class:`SSEDecoder` is incremental: feed it bytes as they arrive from the
socket (any split, ``\\n``, ``\\r\\n`` or ``\\r`` line ends) and it returns the
``data`` payload of every event completed by those bytes, at once — never
waiting for more bytes than the event needs. Multi-line ``data:`` fields are
joined with ``\\n``; comments (``:``) and other fields (``event:``, ``id:``,
``retry:``) are ignored; an event without data yields nothing.

Work is linear in the bytes fed, however an event is split: each read is
scanned once for line ends and the event terminator (a blank line), and an
incomplete event grows in place rather than being rebuilt on every read.
An event larger than ``max_event_bytes`` (default :data:`MAX_EVENT_BYTES`,
16 MiB) raises :class:`EventTooLarge` as soon as the decoder holds that many
bytes of it, complete or not; the decoder then drops its buffer, and the
stream should be abandoned (the load client counts the request ``malformed``).

>>> d = SSEDecoder()
>>> d.feed(b'data: {"a": 1}\\n\\ndata: [DO')
[b'{"a": 1}']
>>> d.feed(b'NE]\\n\\n')
[b'[DONE]']
"""

from __future__ import annotations

from typing import Final

DONE: Final = b"[DONE]"

#: The largest event (its lines with their line ends, without the blank line ending it)
#: a decoder accepts by default. A vLLM chunk is a few hundred bytes; a whole
#: non-streamed-size answer in one event is a few MB at most.
MAX_EVENT_BYTES: Final = 16 * 1024 * 1024


class EventTooLarge(ValueError):
    """An SSE event (complete or still arriving) is over the decoder's ``max_event_bytes``."""

    def __init__(self, size: int, limit: int) -> None:
        super().__init__(f"SSE event over {limit} bytes (at least {size} bytes)")
        self.size = size
        self.limit = limit


class SSEDecoder:
    __slots__ = ("_buf", "_cr", "_max", "scanned")

    def __init__(self, max_event_bytes: int = MAX_EVENT_BYTES) -> None:
        if max_event_bytes < 1:
            raise ValueError(f"max_event_bytes must be at least 1, not {max_event_bytes}")
        # The incomplete event, line ends already turned into "\n"; never holds "\n\n".
        self._buf = bytearray()
        # The last byte fed was a CR (a whole line end): an LF right after it belongs to it.
        self._cr = False
        self._max = max_event_bytes
        #: Bytes searched for event ends and split into events so far (a work counter for
        #: tests: at most about twice the bytes fed).
        self.scanned = 0

    @property
    def max_event_bytes(self) -> int:
        return self._max

    @property
    def pending(self) -> bytes:
        """Bytes of an event not yet completed (non-empty at a truncated end); a copy."""
        return bytes(self._buf)

    @property
    def pending_size(self) -> int:
        """``len(pending)`` without the copy (for a check after every read)."""
        return len(self._buf)

    def feed(self, data: bytes) -> list[bytes]:
        buf = self._buf
        if (
            not buf
            and not self._cr
            and data[-2:] == b"\n\n"
            and data[:6] == b"data: "
            and len(data) <= self._max + 2
        ):
            # Fast path: exactly one single-line event, as servers write them.
            inner = data[6:-2]
            if b"\n" not in inner and b"\r" not in inner:
                self.scanned += len(data)
                return [inner]
        if self._cr:
            self._cr = False
            if data[:1] == b"\n":
                data = data[1:]
        if b"\r" in data:
            # Normalise this read only; a CR at its end is a line end already (the
            # LF that may follow is dropped above, on the next read).
            self._cr = data[-1:] == b"\r"
            data = data.replace(b"\r\n", b"\n").replace(b"\r", b"\n")
        if buf:
            # The buffer holds no blank line, so one can only end in the new bytes
            # (starting at the buffer's last byte, for "\n" + "\n" across reads).
            start = len(buf) - 1
            buf += data
            end = buf.rfind(b"\n\n", start)
            self.scanned += len(buf) - start
            if end < 0:
                if len(buf) > self._max:
                    self._drop()
                    raise EventTooLarge(len(buf), self._max)
                return []
            complete = bytes(buf[:end])
            del buf[: end + 2]  # what is left came in this read
        else:
            # Nothing pending (the usual case): work on the read itself, keep only its tail.
            end = data.rfind(b"\n\n")
            self.scanned += len(data)
            if end < 0:
                if len(data) > self._max:
                    raise EventTooLarge(len(data), self._max)
                buf += data
                return []
            complete = data[:end]
            if end + 2 < len(data):
                buf += data[end + 2 :]
        self.scanned += end  # split into events below: each byte once, at its event's end
        out: list[bytes] = []
        big = len(complete) > self._max
        for block in complete.split(b"\n\n"):
            if big and len(block) > self._max:
                self._drop()
                raise EventTooLarge(len(block), self._max)
            # Fast path: one ``data: ...`` line, as vLLM and most servers send.
            if block.startswith(b"data: ") and b"\n" not in block:
                out.append(block[6:])
                continue
            payload = _parse_block(block)
            if payload is not None:
                out.append(payload)
        if len(buf) > self._max:
            self._drop()
            raise EventTooLarge(len(buf), self._max)
        return out

    def _drop(self) -> None:
        self._buf = bytearray()
        self._cr = False


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
