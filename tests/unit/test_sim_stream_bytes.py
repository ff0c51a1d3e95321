"""The simulator's streaming fast path writes exactly the bytes of the general path.

``Stream.emit`` formats the common chunk (streamed chat, no role, no finish, no
fault) in one go; everything else goes through ``token_chunk`` and
``HttpConnection.send``. Both are driven here through whole requests — one token
per chunk and several (speculation), every reasoning field, with and without
``continuous_usage_stats`` — and the wire bytes must be identical.
"""

from __future__ import annotations

import random
from typing import Any

import pytest

from simulator.api import ApiConfig, SimApi, Stream
from simulator.engine import Sequence
from simulator.faults import FaultConfig
from simulator.http import HttpConnection

pytestmark = pytest.mark.unit


class _Transport:
    def __init__(self) -> None:
        self.out = bytearray()

    def write(self, data: bytes) -> None:
        self.out += data

    def get_extra_info(self, name: str) -> Any:
        return None


class _Driver:
    def submit(self, seq: Sequence) -> None:
        pass

    def abort(self, seq: Sequence) -> None:
        pass


def _wire(
    fast: bool,
    field: str,
    continuous: bool,
    reasoning: int,
    content: int,
    max_tokens: int,
    chunk_sizes: list[int],
) -> bytes:
    api = SimApi(
        ApiConfig(model="m", max_model_len=4096, reasoning_field=field),
        driver=_Driver(),
        metrics_text=lambda: b"",
        faults=FaultConfig({}),
        rng=random.Random(7),
    )
    conn = HttpConnection(lambda req, c: None)
    transport = _Transport()
    conn.transport = transport  # type: ignore[assignment]
    stream = Stream(
        api,
        conn,
        completion=False,
        streaming=True,
        include_usage=True,
        continuous=continuous,
        prompt_tokens=11,
        fault=None,
        fault_at=0,
    )
    stream.created = 1700000000
    if not fast:
        stream.fast_pre = None
    seq = Sequence(
        1,
        category="math",
        prompt_tokens=11,
        reasoning_tokens=reasoning,
        content_tokens=content,
        max_tokens=max_tokens,
        arrival=0.0,
        emit=stream.emit,
    )
    sizes = iter(chunk_sizes)
    while seq.generated < seq.target:
        n = min(next(sizes, 1), seq.target - seq.generated)
        r, c = seq.split(n)
        seq.generated += n
        finish = seq.finish_reason if seq.generated >= seq.target else None
        stream.emit(seq, r, c, finish, 0.0)
    return bytes(transport.out)


@pytest.mark.parametrize("field", ["reasoning", "reasoning_content", "both"])
@pytest.mark.parametrize("continuous", [False, True])
@pytest.mark.parametrize(
    ("reasoning", "content", "max_tokens", "chunk_sizes"),
    [
        (40, 25, 4096, []),  # one token per chunk, reasoning then content
        (40, 25, 4096, [1, 3, 2, 4, 1, 3, 3, 2, 4, 4] * 7),  # speculation across the boundary
        (100, 10, 60, []),  # truncated inside reasoning
        (0, 30, 4096, [2, 1] * 20),  # content only
    ],
)
def test_fast_path_bytes_equal_general_path(
    field: str,
    continuous: bool,
    reasoning: int,
    content: int,
    max_tokens: int,
    chunk_sizes: list[int],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # one clock for both: a stream's prefix carries the second it was created in
    monkeypatch.setattr("simulator.api.time.time", lambda: 1700000000.0)
    case = (field, continuous, reasoning, content, max_tokens, chunk_sizes)
    fast = _wire(True, *case)
    general = _wire(False, *case)
    assert fast == general
    assert fast.count(b"data: {") >= 2
    assert fast.endswith(b"data: [DONE]\n\n\r\n0\r\n\r\n")
