"""A lean HTTP/1.1 server on asyncio: keep-alive, Content-Length bodies, chunked streaming.

Just enough HTTP for an OpenAI-style API at tens of thousands of streamed
chunks a second: one :class:`HttpConnection` per socket parses requests and
hands each to a handler; responses are written straight to the transport.
"""

from __future__ import annotations

import asyncio
import contextlib
import socket
import struct
from collections.abc import Callable
from http import HTTPStatus
from typing import cast

MAX_HEAD_BYTES = 64 * 1024
MAX_BODY_BYTES = 32 * 1024 * 1024
SERVER_HEADER = b"server: uvicorn\r\n"


class Request:
    __slots__ = ("body", "headers", "keep_alive", "method", "path", "query")

    def __init__(  # noqa: PLR0917 - a plain record
        self,
        method: str,
        path: str,
        query: str,
        headers: dict[str, str],
        body: bytes,
        keep_alive: bool,
    ) -> None:
        self.method = method
        self.path = path
        self.query = query
        self.headers = headers
        self.body = body
        self.keep_alive = keep_alive


Handler = Callable[[Request, "HttpConnection"], None]


def _reason(status: int) -> bytes:
    try:
        return HTTPStatus(status).phrase.encode()
    except ValueError:
        return b"Unknown"


class HttpConnection(asyncio.Protocol):
    """One client connection. A handler answers with :meth:`respond` or a stream."""

    def __init__(self, handler: Handler, registry: set[HttpConnection] | None = None) -> None:
        self.handler = handler
        self.registry = registry
        self.transport: asyncio.Transport | None = None
        self.buffer = bytearray()
        self.busy = False
        self.closed = False
        self.keep_alive = True
        self.on_close: Callable[[], None] | None = None

    # -- asyncio.Protocol --------------------------------------------------------------------
    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        # uvloop's transports implement asyncio.Transport without subclassing it.
        self.transport = cast(asyncio.Transport, transport)
        sock = transport.get_extra_info("socket")
        if sock is not None:
            with contextlib.suppress(OSError):
                sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        if self.registry is not None:
            self.registry.add(self)

    def data_received(self, data: bytes) -> None:
        self.buffer += data
        if not self.busy:
            self._parse()

    def connection_lost(self, exc: Exception | None) -> None:
        self.closed = True
        if self.registry is not None:
            self.registry.discard(self)
        callback, self.on_close = self.on_close, None
        if callback is not None:
            callback()

    # -- parsing -----------------------------------------------------------------------------
    def _parse(self) -> None:
        while not self.busy and not self.closed and self.buffer:
            end = self.buffer.find(b"\r\n\r\n")
            if end < 0:
                if len(self.buffer) > MAX_HEAD_BYTES:
                    self.respond(431, b"", close=True)
                return
            head = bytes(self.buffer[:end]).decode("latin-1")
            lines = head.split("\r\n")
            parts = lines[0].split(" ")
            if len(parts) != 3 or not parts[2].startswith("HTTP/1."):
                self.keep_alive = False
                self.respond(400, b'{"detail":"Invalid HTTP request"}', close=True)
                return
            method, target, version = parts
            headers: dict[str, str] = {}
            for line in lines[1:]:
                name, sep, value = line.partition(":")
                if sep:
                    headers[name.strip().lower()] = value.strip()
            if headers.get("transfer-encoding", "").lower() == "chunked":
                self.respond(
                    411, b'{"detail":"chunked request bodies are not supported"}', close=True
                )
                return
            try:
                length = int(headers.get("content-length", "0"))
            except ValueError:
                length = -1
            if length < 0 or length > MAX_BODY_BYTES:
                self.respond(400, b'{"detail":"bad Content-Length"}', close=True)
                return
            total = end + 4 + length
            if len(self.buffer) < total:
                return
            body = bytes(self.buffer[end + 4 : total])
            del self.buffer[:total]
            connection = headers.get("connection", "").lower()
            keep_alive = (
                connection != "close" if version == "HTTP/1.1" else connection == "keep-alive"
            )
            self.keep_alive = keep_alive
            path, _, query = target.partition("?")
            self.busy = True
            self.handler(Request(method, path, query, headers, body, keep_alive), self)

    def _done(self) -> None:
        self.busy = False
        if self.closed:
            return
        if not self.keep_alive:
            assert self.transport is not None
            self.transport.close()
            return
        if self.buffer:
            asyncio.get_running_loop().call_soon(self._parse)

    # -- responses ---------------------------------------------------------------------------
    def _head(self, status: int, content_type: bytes, extra: bytes) -> bytes:
        conn = b"connection: keep-alive\r\n" if self.keep_alive else b"connection: close\r\n"
        return b"HTTP/1.1 %d %s\r\n%scontent-type: %s\r\n%s%s" % (
            status,
            _reason(status),
            SERVER_HEADER,
            content_type,
            conn,
            extra,
        )

    def respond(
        self,
        status: int,
        body: bytes,
        content_type: bytes = b"application/json",
        *,
        close: bool = False,
    ) -> None:
        if self.closed or self.transport is None:
            self.busy = False
            return
        if close:
            self.keep_alive = False
        head = self._head(status, content_type, b"content-length: %d\r\n\r\n" % len(body))
        self.transport.write(head + body)
        self._done()

    def start_stream(
        self, status: int = 200, content_type: bytes = b"text/event-stream; charset=utf-8"
    ) -> None:
        if self.closed or self.transport is None:
            return
        self.transport.write(
            self._head(status, content_type, b"transfer-encoding: chunked\r\n\r\n")
        )

    def send(self, data: bytes) -> None:
        """One chunk of a streamed body."""
        if self.closed or self.transport is None or not data:
            return
        self.transport.write(b"%x\r\n%s\r\n" % (len(data), data))

    def end_stream(self) -> None:
        if self.closed or self.transport is None:
            self.busy = False
            return
        self.transport.write(b"0\r\n\r\n")
        self._done()

    def reset(self) -> None:
        """Drop the connection with a TCP RST (a crash mid-stream, as the client sees it)."""
        if self.closed or self.transport is None:
            return
        self.closed = True  # nothing more is written; connection_lost still runs on_close
        sock = self.transport.get_extra_info("socket")
        if sock is not None:
            with contextlib.suppress(OSError):
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        self.transport.abort()

    def close(self) -> None:
        if self.transport is not None and not self.closed:
            self.transport.close()


async def serve(
    handler: Handler, host: str, port: int, registry: set[HttpConnection] | None = None
) -> asyncio.Server:
    loop = asyncio.get_running_loop()
    return await loop.create_server(
        lambda: HttpConnection(handler, registry),
        host,
        port,
        reuse_address=True,
        backlog=2048,
    )
