"""A minimal OpenAI-compatible streaming server with exact, fixed timing (benchmark only).

Every chat completion streams ``--tokens`` tokens: the first chunk at
``--ttft`` seconds after the request arrived, then one chunk every ``--itl``
seconds, each carrying ``--tokens-per-chunk`` tokens, with vLLM's chunk
shape (role chunk, ``delta.content``, ``continuous_usage_stats`` usage on
every chunk, a final usage chunk, ``[DONE]``). Chunks are precomputed and
sent from a 1 ms timer wheel with absolute deadlines, so one core serves
hundreds of streams on time (the mean ITL is exact; each chunk is at most
1 ms late).

    python bench/fixed_server.py --port 8000 --ttft 0.05 --itl 0.005 --tokens 400
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import math
import time
from typing import Any

import orjson

MODEL = "fixed-timing"


def _chunk(obj: Any) -> bytes:
    data = b"data: " + orjson.dumps(obj) + b"\n\n"
    return b"%x\r\n%s\r\n" % (len(data), data)


def build_stream(tokens: int, per_chunk: int, prompt_tokens: int = 16) -> list[bytes]:
    """HTTP chunks of a whole stream: [role+first token, ..., last + usage + DONE]."""
    base = {"id": "chatcmpl-bench", "object": "chat.completion.chunk", "created": 0, "model": MODEL}
    out: list[bytes] = []
    sent = 0
    n_chunks = math.ceil(tokens / per_chunk)
    for i in range(n_chunks):
        k = min(per_chunk, tokens - sent)
        sent += k
        last = i == n_chunks - 1
        piece = b""
        if i == 0:
            piece += _chunk(
                {
                    **base,
                    "choices": [
                        {
                            "index": 0,
                            "delta": {"role": "assistant", "content": ""},
                            "finish_reason": None,
                        }
                    ],
                    "usage": {
                        "prompt_tokens": prompt_tokens,
                        "completion_tokens": 0,
                        "total_tokens": prompt_tokens,
                    },
                }
            )
        piece += _chunk(
            {
                **base,
                "choices": [
                    {
                        "index": 0,
                        "delta": {"content": " tok" * k},
                        "finish_reason": "length" if last else None,
                    }
                ],
                "usage": {
                    "prompt_tokens": prompt_tokens,
                    "completion_tokens": sent,
                    "total_tokens": prompt_tokens + sent,
                },
            }
        )
        if last:
            piece += _chunk(
                {
                    **base,
                    "choices": [],
                    "usage": {
                        "prompt_tokens": prompt_tokens,
                        "completion_tokens": sent,
                        "total_tokens": prompt_tokens + sent,
                    },
                }
            )
            data = b"data: [DONE]\n\n"
            piece += b"%x\r\n%s\r\n0\r\n\r\n" % (len(data), data)
        out.append(piece)
    return out


HEAD = (
    b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\n"
    b"transfer-encoding: chunked\r\nconnection: keep-alive\r\n\r\n"
)


class Server:
    def __init__(self, ttft_s: float, itl_s: float, stream: list[bytes]) -> None:
        self.ttft_s = ttft_s
        self.itl_s = itl_s
        self.stream = stream
        self.wheel: dict[int, list[tuple[Any, int, float]]] = {}
        self.tick_s = 0.001
        self.loop = asyncio.get_event_loop()
        self.next_tick = 0

    def start(self) -> None:
        self.next_tick = int(time.monotonic() / self.tick_s)
        self.loop.call_soon(self._tick)

    def add(self, transport: Any, index: int, due: float) -> None:
        slot = math.ceil(due / self.tick_s)
        self.wheel.setdefault(slot, []).append((transport, index, due))

    def _tick(self) -> None:
        now_slot = int(time.monotonic() / self.tick_s)
        stream = self.stream
        last = len(stream) - 1
        itl = self.itl_s
        wheel = self.wheel
        for slot in range(self.next_tick, now_slot + 1):
            due_list = wheel.pop(slot, None)
            if not due_list:
                continue
            for transport, index, due in due_list:
                if transport.is_closing():
                    continue
                transport.write(stream[index])
                if index < last:
                    self.add(transport, index + 1, due + itl)
        self.next_tick = now_slot + 1
        delay = (self.next_tick * self.tick_s) - time.monotonic()
        self.loop.call_later(max(delay, 0.0), self._tick)


class Protocol(asyncio.Protocol):
    def __init__(self, server: Server) -> None:
        self.server = server
        self.buf = b""
        self.transport: Any = None

    def connection_made(self, transport: Any) -> None:
        self.transport = transport

    def data_received(self, data: bytes) -> None:
        self.buf += data
        while True:
            idx = self.buf.find(b"\r\n\r\n")
            if idx < 0:
                return
            head = self.buf[:idx].decode("latin-1")
            length = 0
            for line in head.split("\r\n")[1:]:
                name, _, value = line.partition(":")
                if name.strip().lower() == "content-length":
                    length = int(value)
            if len(self.buf) < idx + 4 + length:
                return
            self.buf = self.buf[idx + 4 + length :]
            path = head.split(" ", 2)[1]
            if path.endswith("/models"):
                body = orjson.dumps({"object": "list", "data": [{"id": MODEL, "object": "model"}]})
                self.transport.write(
                    b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\n"
                    b"content-length: %d\r\n\r\n%s" % (len(body), body)
                )
                continue
            self.transport.write(HEAD)
            self.server.add(self.transport, 0, time.monotonic() + self.server.ttft_s)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--host", default="127.0.0.1")
    ap.add_argument("--port", type=int, default=8000)
    ap.add_argument("--ttft", type=float, default=0.05)
    ap.add_argument("--itl", type=float, default=0.005)
    ap.add_argument("--tokens", type=int, default=400)
    ap.add_argument("--tokens-per-chunk", type=int, default=1)
    args = ap.parse_args()
    try:
        import uvloop  # noqa: PLC0415

        uvloop.install()
    except ImportError:
        pass
    loop = asyncio.new_event_loop()
    asyncio.set_event_loop(loop)
    server = Server(args.ttft, args.itl, build_stream(args.tokens, args.tokens_per_chunk))
    srv = loop.run_until_complete(
        loop.create_server(lambda: Protocol(server), args.host, args.port, backlog=4096)
    )
    server.start()
    print(f"listening on {args.host}:{srv.sockets[0].getsockname()[1]}", flush=True)
    with contextlib.suppress(KeyboardInterrupt):
        loop.run_forever()


if __name__ == "__main__":
    main()
