"""Type stub of the C fast path (specload/load/_fastpath.c)."""

from typing import Any

class MeterCore:
    t0: float
    want_text: bool
    done: bool
    first_t: float | None
    last_event_t: float | None
    first_content_t: float | None
    _last_t: float
    _gaps: list[float]
    _chunk_tokens: list[int]
    chunks_reasoning: int
    chunks_content: int
    continuous: bool
    _prev_cum: int
    tokens_reasoning_exact: int
    tokens_content_exact: int
    unattributed: int
    _pending_tokens: int
    _mixed: list[tuple[int, str, str]]
    last_channel: int
    _usage: dict[str, Any] | bytes | None
    finish_reason: str | None
    has_content_text: bool
    sse_pending: bool
    _text_reasoning: list[str]
    _text_content: list[str]

    def feed_read(self, buf: bytes | bytearray | memoryview, n: int, now: float) -> int: ...

def enable_rx_timestamps(fd: int) -> bool: ...
def recv_stamped(fd: int, buf: bytearray, now: float) -> tuple[int, float | None]: ...
def read_ready(
    epfd: int, timeout_s: float, buf: bytearray, parsers: list[Any], loop_fd: int
) -> tuple[int, list[tuple[int, int, Any, float]], float, int]: ...
