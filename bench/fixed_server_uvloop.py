"""An independent fixed-timing OpenAI-chat streaming server on uvloop (benchmark only).

Written apart from bench/fixed_server.c and the simulator, to check the client against
a server of another make: Python on uvloop, HTTP/1.1 by hand over an asyncio Protocol
(keep-alive, pipelined requests answered in order, ``Content-Length`` request bodies,
chunked responses), vLLM 0.32's chunk shape (``logprobs``, ``token_ids``,
``completion_tokens_details``, a fresh ``chatcmpl-`` id per request).

Timing contract (the same as bench/fixed_server.c): a chat completion streams
``min(--tokens, max_tokens)`` tokens, one per chunk (``--tokens-per-chunk``), chunk k
(k = 0, 1, …) written at ``t0 + TTFT + k·ITL`` where t0 is when the request was parsed;
the role chunk goes with the first token, the final usage chunk, ``[DONE]`` and the
chunked terminator with the last. Usage with cumulative ``completion_tokens`` on every
chunk. The first ``--reasoning-tokens`` tokens go in ``delta.reasoning``, the rest in
``delta.content`` (default 0: all content, as the C server).

Punctual: every chunk has an absolute deadline (never a chain of sleeps, so lateness
never accumulates), and the chunks due in the same millisecond share one ``loop.call_at``
timer set at the end of that millisecond. libuv timers count whole milliseconds
(``loop.call_at`` rounds the delay to 1 ms against a clock truncated to 1 ms, so a timer
set at an arbitrary deadline can fire up to 0.5 ms *early*); a timer at a whole
millisecond ≥ every deadline it serves is never early, and a chunk that still finds itself
early (a clock adjustment) waits for the next millisecond. So a chunk goes out 0-2 ms
after its deadline (about 1 ms on average on an idle core: half a millisecond of rounding
up, half of libuv's millisecond wake-up), whatever the number of streams, as long as the
core keeps up. One timer per millisecond instead of one per chunk: at 256 streams of
5-ms ITL (51,200 chunks/s) the Python side costs about a third of what per-chunk timers
cost. Lateness is measured for every chunk written (``time.monotonic()`` after the write
minus the deadline) and kept per wall-clock second.

    python bench/fixed_server_uvloop.py --port 8000 --ttft 0.05 --itl 0.005 --tokens 400 \\
        --stats-file /tmp/lag.json

Endpoints: ``POST /v1/chat/completions``, ``GET /v1/models``, ``/health``, ``/version``,
``/metrics`` (a few counters), ``/stats`` (the lag figures as JSON; ``/stats?reset=1``
clears them). On SIGTERM/SIGINT the figures go to ``--stats-file`` (per-second
histograms of chunk lateness, first-chunk lateness, and the per-connection turnaround:
last chunk written to the next request parsed).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import math
import os
import signal
import socket
import time
from typing import Any

MODEL = "fixed-timing"
# Lateness histogram: 10-µs buckets up to 10 ms, then 1-ms buckets up to 10 s, then one
# overflow bucket (bucket_lower() gives each bucket's lower edge).
LAG_BUCKET_S = 1e-5
LAG_FINE = 1000
LAG_BUCKETS = LAG_FINE + 10000


def lag_bucket(lag: float) -> int:
    if lag < 0.01:
        return max(0, int(lag * 1e5))
    b = LAG_FINE + int(lag * 1e3) - 10
    return b if b < LAG_BUCKETS else LAG_BUCKETS


def bucket_mid(b: int) -> float:
    """Seconds: the middle of bucket ``b``."""
    if b < LAG_FINE:
        return (b + 0.5) * LAG_BUCKET_S
    return (b - LAG_FINE + 10 + 0.5) * 1e-3


_mono = time.monotonic


def _fmt_usage(prompt: int, completion: int, reasoning: int) -> bytes:
    return (
        b'"usage":{"prompt_tokens":%d,"total_tokens":%d,"completion_tokens":%d,'
        b'"completion_tokens_details":{"reasoning_tokens":%d}}'
        % (prompt, prompt + completion, completion, reasoning)
    )


class StreamTemplate:
    """The bytes of every chunk of an n-token stream, around the per-request id.

    ``parts[k] = (before_id, after_id)``: chunk k is ``before_id + id + after_id``
    (HTTP chunk framing included; the id has a fixed length, so sizes are known).
    """

    ID_LEN = len("chatcmpl-") + 24

    def __init__(
        self, n: int, per_chunk: int, reasoning: int, prompt: int, created: int, finish: str
    ) -> None:
        self.n = n
        self.n_chunks = max(1, math.ceil(n / per_chunk))
        head = b'data: {"id":"'
        meta = b'","object":"chat.completion.chunk","created":%d,"model":"%s",' % (
            created,
            MODEL.encode(),
        )
        parts: list[tuple[bytes, bytes]] = []
        sent = 0
        for i in range(self.n_chunks):
            events: list[bytes] = []
            if i == 0:
                events.append(
                    meta + b'"choices":[{"index":0,"delta":{"role":"assistant",'
                    b'"content":""},"logprobs":null,"finish_reason":null}],'
                    + _fmt_usage(prompt, 0, 0)
                    + b"}"
                )
            k = min(per_chunk, n - sent)
            # tokens of this chunk, by channel (reasoning first)
            r = max(0, min(k, reasoning - sent))
            c = k - r
            sent += k
            last = i == self.n_chunks - 1
            fin = b'"%s"' % finish.encode() if last else b"null"
            stop = b',"stop_reason":null' if last else b""
            delta = []
            if r:
                delta.append(b'"reasoning":"%s"' % (b" tok" * r))
            if c:
                delta.append(b'"content":"%s"' % (b" tok" * c))
            events.append(
                meta
                + b'"choices":[{"index":0,"delta":{'
                + b",".join(delta)
                + b'},"logprobs":null,"finish_reason":'
                + fin
                + stop
                + b',"token_ids":null}],'
                + _fmt_usage(prompt, sent, min(sent, reasoning))
                + b"}"
            )
            if last:
                usage = _fmt_usage(prompt, sent, min(sent, reasoning))
                events.append(
                    meta + b'"choices":[],' + usage + b',"system_fingerprint":"fixed-uvloop"}'
                )
            before = b""
            after = b""
            for j, ev in enumerate(events):
                size = len(head) + self.ID_LEN + len(ev) + 2
                pre = b"%x\r\n" % size + head
                post = ev + b"\n\n\r\n"
                if j == 0:
                    before, after = pre, post
                else:
                    # later events of the same write carry the id too: keep one id slot
                    # per chunk by splitting around the first; the rest are rendered with
                    # a placeholder replaced at send time (rare: the first and last chunk)
                    after += pre + b"\x00ID\x00" + post
            if last:
                done = b"data: [DONE]\n\n"
                after += b"%x\r\n%s\r\n0\r\n\r\n" % (len(done), done)
            parts.append((before, after))
        self.parts = parts

    def chunk(self, i: int, rid: bytes) -> bytes:
        before, after = self.parts[i]
        if i == 0 or i == self.n_chunks - 1:
            after = after.replace(b"\x00ID\x00", rid)
        return before + rid + after


class Stats:
    """Lateness of chunk writes, per wall-clock second (JSON-ready on demand)."""

    def __init__(self) -> None:
        self.reset()

    def reset(self) -> None:
        self.seconds: dict[int, list[int]] = {}  # second -> histogram (LAG_BUCKETS + 1)
        self.first: dict[int, list[float]] = {}  # second -> first-chunk lateness samples
        self.turnaround: dict[int, list[float]] = {}  # second -> last write -> next request
        # per streamed request: [client port, t0, first chunk written, last chunk written]
        # (time.monotonic(), the clock of the client's time.perf_counter() on Linux)
        self.log: list[list[float]] = []
        self.early = 0
        self.requests = 0
        self.chunks = 0
        self.since = time.time()

    def hist(self, sec: int) -> list[int]:
        h = self.seconds.get(sec)
        if h is None:
            h = self.seconds[sec] = [0] * (LAG_BUCKETS + 1)
        return h

    def to_dict(self) -> dict[str, Any]:
        return {
            "bucket_s": LAG_BUCKET_S,
            "fine_buckets": LAG_FINE,
            "since": self.since,
            "early": self.early,
            "requests": self.requests,
            "chunks": self.chunks,
            # sparse per-second histograms: {second: {bucket: count}}
            "lag": {
                str(s): {str(i): c for i, c in enumerate(h) if c}
                for s, h in sorted(self.seconds.items())
            },
            "first_lag": {str(s): v for s, v in sorted(self.first.items())},
            "turnaround": {str(s): v for s, v in sorted(self.turnaround.items())},
            "requests_log": self.log,
        }

    def summary(self) -> dict[str, Any]:
        total = [0] * (LAG_BUCKETS + 1)
        for h in self.seconds.values():
            for i, c in enumerate(h):
                if c:
                    total[i] += c
        firsts = sorted(v for vs in self.first.values() for v in vs)
        return {
            "chunks": self.chunks,
            "requests": self.requests,
            "early": self.early,
            "lag_ms": hist_quantiles(total, (0.5, 0.9, 0.99, 0.999)),
            "first_lag_ms": {str(q): firsts[int(q * (len(firsts) - 1))] * 1e3 for q in (0.5, 0.99)}
            if firsts
            else {},
        }


def hist_quantiles(hist: list[int], qs: tuple[float, ...]) -> dict[str, float]:
    n = sum(hist)
    out: dict[str, float] = {}
    if not n:
        return out
    for q in qs:
        rank = int(q * (n - 1))
        seen = 0
        for i, c in enumerate(hist):
            seen += c
            if seen > rank:
                out[str(q)] = bucket_mid(i) * 1e3
                break
    return out


class Server:
    def __init__(self, args: argparse.Namespace) -> None:
        self.ttft = args.ttft
        self.itl = args.itl
        self.tokens = args.tokens
        self.per_chunk = args.tokens_per_chunk
        self.reasoning = args.reasoning_tokens
        self.loop = asyncio.get_event_loop()
        self.stats = Stats()
        self.wall_offset = time.time() - _mono()
        self.templates: dict[tuple[int, int, str], StreamTemplate] = {}
        self.created = int(time.time())
        self.seq = 0
        self.pid = os.getpid()
        self.slots: dict[int, list[tuple[Any, ...]]] = {}

    def template(self, n: int, prompt: int, finish: str) -> StreamTemplate:
        key = (n, prompt, finish)
        t = self.templates.get(key)
        if t is None:
            if len(self.templates) > 256:
                self.templates.clear()
            t = self.templates[key] = StreamTemplate(
                n, self.per_chunk, self.reasoning, prompt, self.created, finish
            )
        return t

    def next_id(self) -> bytes:
        self.seq += 1
        return b"chatcmpl-%08x%016x" % (self.pid & 0xFFFFFFFF, self.seq)

    # -- the timer wheel: one loop.call_at per millisecond that has chunks due -------
    def schedule(self, deadline: float, item: tuple[Any, ...]) -> None:
        """Write ``item`` = (connection, request, chunk index, deadline) at ``deadline``."""
        slot = math.ceil(deadline * 1000.0)
        due = self.slots.get(slot)
        if due is None:
            due = self.slots[slot] = []
            self.loop.call_at(slot / 1000.0, self._fire, slot)
        due.append(item)

    def _fire(self, slot: int) -> None:
        due = self.slots.pop(slot, None)
        if not due:
            return
        stats = self.stats
        sec = int(_mono() + self.wall_offset)
        hist = stats.hist(sec)
        itl = self.itl
        mono = _mono
        later: list[tuple[Any, ...]] = []
        for item in due:
            conn, req, i, deadline = item
            if conn.closed:
                continue
            if mono() < deadline:  # never early (a clock step)
                later.append(item)
                continue
            conn.transport.write(req.template.chunk(i, req.rid))
            after = mono()
            lag = after - deadline
            hist[int(lag * 1e5) if lag < 0.01 else lag_bucket(lag)] += 1
            if i == 0:
                stats.first.setdefault(sec, []).append(lag)
                req.first_write = after
            i += 1
            if i < req.n_chunks:
                # absolute: chunk i is due at t0 + TTFT + i·ITL, whenever this one went out
                nxt = req.deadline0 + i * itl
                self.schedule(nxt, (conn, req, i, nxt))
            else:
                stats.log.append([conn.port, req.t0, req.first_write, after])
                conn.ended()
        stats.chunks += len(due) - len(later)
        for item in later:
            self.schedule(item[3] + 0.001, item)


HEAD_STREAM = (
    b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream; charset=utf-8\r\n"
    b"cache-control: no-cache\r\ntransfer-encoding: chunked\r\n"
    b"server: fixed-uvloop\r\n"
)


def _simple(status: str, body: bytes, ctype: bytes, close: bool) -> bytes:
    return (
        b"HTTP/1.1 %s\r\ncontent-type: %s\r\ncontent-length: %d\r\nserver: fixed-uvloop\r\n"
        b"%s\r\n%s"
        % (status.encode(), ctype, len(body), b"connection: close\r\n" if close else b"", body)
    )


class Request:
    __slots__ = ("close", "conn", "deadline0", "first_write", "n_chunks", "rid", "t0", "template")

    def __init__(self, conn: Connection, template: StreamTemplate, close: bool) -> None:
        self.conn = conn
        self.template = template
        self.close = close
        self.rid = conn.server.next_id()
        self.t0 = _mono()
        self.deadline0 = self.t0 + conn.server.ttft
        self.n_chunks = template.n_chunks
        self.first_write = 0.0


class Connection(asyncio.Protocol):
    def __init__(self, server: Server) -> None:
        self.server = server
        self.buf = bytearray()
        self.transport: Any = None
        self.queue: list[tuple[Any, ...]] = []  # parsed requests waiting for the stream
        self.busy = False
        self.last_write: float | None = None  # last chunk of the previous response
        self.closed = False
        self.closing_after = False  # the current response ends with the connection
        self.port = 0  # the client's port

    # -- asyncio.Protocol ----------------------------------------------------
    def connection_made(self, transport: Any) -> None:
        self.transport = transport
        peer = transport.get_extra_info("peername")
        if isinstance(peer, tuple) and len(peer) >= 2:
            self.port = int(peer[1])
        sock = transport.get_extra_info("socket")
        if sock is not None:
            with contextlib.suppress(OSError, AttributeError):
                sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)

    def connection_lost(self, exc: Exception | None) -> None:
        self.closed = True

    def data_received(self, data: bytes) -> None:
        buf = self.buf
        buf += data
        while True:
            end = buf.find(b"\r\n\r\n")
            if end < 0:
                if len(buf) > 65536:
                    self._reply(
                        _simple("431 Request Header Fields Too Large", b"", b"text/plain", True),
                        close=True,
                    )
                return
            head = bytes(buf[:end]).decode("latin-1")
            lines = head.split("\r\n")
            parts = lines[0].split(" ")
            if len(parts) != 3 or not parts[2].startswith("HTTP/1."):
                self._reply(
                    _simple("400 Bad Request", b"bad request line", b"text/plain", True), close=True
                )
                return
            method, target, version = parts
            length = 0
            close = version == "HTTP/1.0"
            for line in lines[1:]:
                name, _, value = line.partition(":")
                name = name.strip().lower()
                if name == "content-length":
                    try:
                        length = int(value.strip())
                    except ValueError:
                        self._reply(
                            _simple("400 Bad Request", b"bad content-length", b"text/plain", True),
                            close=True,
                        )
                        return
                elif name == "transfer-encoding":
                    self._reply(
                        _simple("501 Not Implemented", b"chunked requests", b"text/plain", True),
                        close=True,
                    )
                    return
                elif name == "connection":
                    v = value.strip().lower()
                    close = v == "close" or (close and v != "keep-alive")
            if len(buf) < end + 4 + length:
                return
            body = bytes(buf[end + 4 : end + 4 + length])
            del buf[: end + 4 + length]
            self.queue.append((method, target, body, close))
            if not self.busy:
                self._next()

    # -- requests ------------------------------------------------------------
    def _next(self) -> None:
        while self.queue and not self.busy and not self.closed:
            method, target, body, close = self.queue.pop(0)
            self._handle(method, target.split("?", 1), body, close)

    def _reply(self, data: bytes, close: bool) -> None:
        if self.closed:
            return
        self.transport.write(data)
        if close:
            self.closed = True
            self.transport.close()

    def _handle(self, method: str, target: list[str], body: bytes, close: bool) -> None:
        path = target[0].rstrip("/")
        server = self.server
        if path.endswith("/chat/completions") and method == "POST":
            try:
                req = json.loads(body) if body else {}
                if not isinstance(req, dict):
                    raise ValueError
            except ValueError:
                self._reply(
                    _simple(
                        "400 Bad Request",
                        b'{"error":"body is not JSON"}',
                        b"application/json",
                        close,
                    ),
                    close,
                )
                return
            max_tokens = req.get("max_tokens") or req.get("max_completion_tokens")
            n = server.tokens if not isinstance(max_tokens, int) else min(server.tokens, max_tokens)
            n = max(1, n)
            prompt = (
                1
                + sum(
                    len(str(m.get("content", "")))
                    for m in req.get("messages", ())
                    if isinstance(m, dict)
                )
                // 4
            )
            finish = "length" if isinstance(max_tokens, int) and n >= max_tokens else "stop"
            tmpl = server.template(n, prompt, finish)
            if req.get("stream") is False:
                self._non_stream(tmpl, n, prompt, finish, close)
                return
            self._stream(Request(self, tmpl, close))
        elif path.endswith("/models"):
            data = json.dumps(
                {
                    "object": "list",
                    "data": [{"id": MODEL, "object": "model", "owned_by": "fixed-uvloop"}],
                }
            ).encode()
            self._reply(_simple("200 OK", data, b"application/json", close), close)
        elif path == "/health":
            self._reply(_simple("200 OK", b"", b"text/plain", close), close)
        elif path == "/version":
            self._reply(
                _simple("200 OK", b'{"version":"fixed-uvloop"}', b"application/json", close), close
            )
        elif path == "/metrics":
            s = server.stats
            text = (
                f"# TYPE fixed_requests_total counter\nfixed_requests_total {s.requests}\n"
                f"# TYPE fixed_chunks_total counter\nfixed_chunks_total {s.chunks}\n"
            )
            self._reply(
                _simple("200 OK", text.encode(), b"text/plain; version=0.0.4", close), close
            )
        elif path == "/stats":
            data = json.dumps(server.stats.summary()).encode()
            if len(target) > 1 and "reset=1" in target[1]:
                server.stats.reset()
            self._reply(_simple("200 OK", data, b"application/json", close), close)
        else:
            self._reply(
                _simple("404 Not Found", b'{"error":"not found"}', b"application/json", close),
                close,
            )

    def _non_stream(
        self, tmpl: StreamTemplate, n: int, prompt: int, finish: str, close: bool
    ) -> None:
        server = self.server
        self.busy = True
        rid = server.next_id().decode()
        reasoning = min(n, server.reasoning)
        body = json.dumps(
            {
                "id": rid,
                "object": "chat.completion",
                "created": server.created,
                "model": MODEL,
                "choices": [
                    {
                        "index": 0,
                        "message": {
                            "role": "assistant",
                            "reasoning": (" tok" * reasoning) or None,
                            "content": " tok" * (n - reasoning),
                        },
                        "finish_reason": finish,
                    }
                ],
                "usage": {
                    "prompt_tokens": prompt,
                    "total_tokens": prompt + n,
                    "completion_tokens": n,
                    "completion_tokens_details": {"reasoning_tokens": reasoning},
                },
            }
        ).encode()
        due = _mono() + server.ttft + (tmpl.n_chunks - 1) * server.itl

        def send() -> None:
            self.busy = False
            self._reply(_simple("200 OK", body, b"application/json", close), close)
            self._next()

        server.loop.call_at(math.ceil(due * 1000.0) / 1000.0, send)  # never early

    def _stream(self, req: Request) -> None:
        server = self.server
        stats = server.stats
        stats.requests += 1
        if self.last_write is not None:
            sec = int(req.t0 + server.wall_offset)
            stats.turnaround.setdefault(sec, []).append(req.t0 - self.last_write)
        self.busy = True
        self.closing_after = req.close
        self.transport.write(HEAD_STREAM + (b"connection: close\r\n\r\n" if req.close else b"\r\n"))
        server.schedule(req.deadline0, (self, req, 0, req.deadline0))

    def ended(self) -> None:
        """The last chunk of the current response went out."""
        self.last_write = _mono()
        self.busy = False
        if self.current_close():
            return
        if self.queue:
            self._next()

    def current_close(self) -> bool:
        if self.closing_after:
            self.closed = True
            self.transport.close()
            return True
        return False


def main() -> None:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--host", default="127.0.0.1")
    ap.add_argument("--port", type=int, default=8000)
    ap.add_argument("--ttft", type=float, default=0.05)
    ap.add_argument("--itl", type=float, default=0.005)
    ap.add_argument("--tokens", type=int, default=400)
    ap.add_argument("--tokens-per-chunk", type=int, default=1)
    ap.add_argument(
        "--reasoning-tokens",
        type=int,
        default=0,
        help="the first N tokens of each answer go in delta.reasoning",
    )
    ap.add_argument("--stats-file", default="", help="write the lag figures here on exit")
    args = ap.parse_args()
    import uvloop  # noqa: PLC0415

    loop = uvloop.new_event_loop()
    asyncio.set_event_loop(loop)
    server = Server(args)
    srv = loop.run_until_complete(
        loop.create_server(
            lambda: Connection(server), args.host, args.port, backlog=4096, reuse_address=True
        )
    )
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, loop.stop)
    port = srv.sockets[0].getsockname()[1]  # type: ignore[attr-defined]
    print(f"listening on {args.host}:{port}", flush=True)
    try:
        loop.run_forever()
    finally:
        if args.stats_file:
            tmp = args.stats_file + ".tmp"
            with open(tmp, "w") as f:
                json.dump(server.stats.to_dict(), f)
            os.replace(tmp, args.stats_file)


if __name__ == "__main__":
    main()
