"""Type stub of the C fast path (specload/load/_fastpath.c)."""

from typing import Any

from specload.load.meter import CoreState

MAX_PROMPT_TOKENS: int  # specload.load.meter.MAX_PROMPT_TOKENS

class MeterCore(CoreState):
    def feed_read(self, buf: bytes | bytearray | memoryview, n: int, now: float) -> int: ...

def enable_rx_timestamps(fd: int) -> bool: ...
def recv_stamped(fd: int, buf: bytearray, now: float) -> tuple[int, float | None]: ...
def read_ready(
    epfd: int, timeout_s: float, buf: bytearray, parsers: list[Any], loop_fd: int
) -> tuple[int, list[tuple[int, int, Any, float]], float, int]: ...
