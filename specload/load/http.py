"""A lean HTTP/1.1 client for streamed responses, on (gevent) sockets.

One :class:`Connection` per Locust user, kept alive between requests. The
response is parsed by a :class:`ResponseParser` state machine that hands the
body to a callback as soon as each socket read completes — chunked transfer
encoding decoded on the fly, never waiting for a buffer to fill
(geventhttpclient's ``iter_content(chunk_size=N)`` waits for N bytes, which
delays SSE events and inflates TTFT and ITL). Each read is stamped with
``time.perf_counter()`` right after it returns.

Streams of plain-HTTP targets are read by one :class:`Reactor` per process:
a greenlet that polls every open stream's socket with ``epoll`` and reads
each ready socket once per wake-up, so hundreds of streams cost one greenlet
switch per batch of events instead of one (plus a failed ``recv``) per event.
Every read of a round is stamped with the moment ``epoll`` returned (the data
was there then), so the time spent reading the other sockets is not added.

Failures raise :class:`RequestFailed` with an error class: ``refused``,
``reset`` (connection lost or closed mid-response), ``protocol`` (not HTTP),
``timeout``, ``http_<status>``.
"""

from __future__ import annotations

import contextlib
import os
import select
import socket
import ssl
import time
from collections.abc import Callable
from typing import Any

import gevent
import gevent.event
from gevent import monkey

_perf = time.perf_counter
_RECV = 16384  # per read; smaller buffers allocate faster, more data waits for the next round
_MAX_HEAD = 65536
_MAX_ERROR_BODY = 4096
_YIELD_EVERY_S = 0.002
# SPECLOAD_REACTOR=0: read each stream in its own greenlet (diagnostics, benchmarks).
_USE_REACTOR = os.environ.get("SPECLOAD_REACTOR", "1") != "0"


class RequestFailed(Exception):
    """A request that failed, with its error class (``kind``)."""

    def __init__(self, kind: str, detail: str = "", status: int | None = None) -> None:
        super().__init__(f"{kind}: {detail}" if detail else kind)
        self.kind = kind
        self.detail = detail
        self.status = status


class _Stale(Exception):
    """A kept-alive connection the server had closed; retry on a fresh one."""


class ChunkedDecoder:
    """Incremental decoder of HTTP/1.1 ``Transfer-Encoding: chunked``."""

    __slots__ = ("_crlf", "_pending", "_remaining", "done")

    def __init__(self) -> None:
        self._pending = b""
        self._remaining = 0
        self._crlf = False
        self.done = False

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
        if len(out) == 1:
            return out[0]
        return b"".join(out)


OnBody = Callable[[bytes, float], None]

_HEAD, _CHUNKED, _LENGTH, _CLOSE, _DONE = range(5)


class ResponseParser:
    """Parses one HTTP/1.1 response fed in pieces; 2xx bodies go to ``on_body``.

    :meth:`feed` returns True when the response is complete. :meth:`eof` is
    called when the server closed the connection. After completion,
    :meth:`result` returns the status or raises ``RequestFailed("http_<code>")``.
    """

    __slots__ = ("_buf", "_dec", "_error_body", "_left", "_sink", "got_bytes", "keep_alive",
                 "method", "on_body", "state", "status")

    def __init__(self, on_body: OnBody, method: str = "POST") -> None:
        self.on_body = on_body
        self.method = method
        self.state = _HEAD
        self._buf = b""
        self.status = 0
        self.keep_alive = True
        self._dec: ChunkedDecoder | None = None
        self._left = 0
        self._error_body: list[bytes] = []
        self._sink: OnBody = on_body
        self.got_bytes = False

    def feed(self, data: bytes, now: float) -> bool:
        self.got_bytes = True
        state = self.state
        if state == _CHUNKED:
            dec = self._dec
            assert dec is not None
            out = dec.feed(data)
            if out:
                self._sink(out, now)
            if dec.done:
                self.state = _DONE
                return True
            return False
        if state == _HEAD:
            return self._feed_head(data, now)
        if state == _LENGTH:
            take = data[: self._left]
            self._left -= len(take)
            if take:
                self._sink(take, now)
            if self._left <= 0:
                self.state = _DONE
                return True
            return False
        if state == _CLOSE:
            self._sink(data, now)
            return False
        return True

    def eof(self, now: float) -> bool:
        """The server closed: True if that completes the response, else raises."""
        if self.state == _CLOSE:
            self.state = _DONE
            return True
        if self.state == _DONE:
            return True
        if self.state == _HEAD:
            raise RequestFailed("reset", "connection closed before the response head")
        raise RequestFailed("reset", "connection closed mid-body")

    def result(self) -> int:
        if 200 <= self.status < 300:
            return self.status
        text = b"".join(self._error_body)[:300].decode("utf-8", "replace")
        raise RequestFailed(f"http_{self.status}", " ".join(text.split()), self.status)

    def _collect_error(self, data: bytes, now: float) -> None:
        if sum(map(len, self._error_body)) < _MAX_ERROR_BODY:
            self._error_body.append(data)

    def _feed_head(self, data: bytes, now: float) -> bool:
        buf = self._buf + data if self._buf else data
        idx = buf.find(b"\r\n\r\n")
        if idx < 0:
            if len(buf) > _MAX_HEAD:
                raise RequestFailed("protocol", "response head too long")
            self._buf = buf
            return False
        self._buf = b""
        head = buf[:idx]
        rest = buf[idx + 4 :]
        lines = head.split(b"\r\n")
        status_line = lines[0].split(b" ", 2)
        if len(status_line) < 2 or not status_line[0].startswith(b"HTTP/"):
            raise RequestFailed("protocol", f"bad status line {lines[0][:40]!r}")
        try:
            status = int(status_line[1])
        except ValueError:
            raise RequestFailed("protocol", f"bad status line {lines[0][:40]!r}") from None
        if 100 <= status < 200:
            # An interim response (100 Continue): the real one follows.
            return self._feed_head(rest, now) if rest else False
        self.status = status
        chunked = False
        length: int | None = None
        self.keep_alive = status_line[0] == b"HTTP/1.1"
        for line in lines[1:]:
            name, _, value = line.partition(b":")
            name = name.strip().lower()
            if name == b"transfer-encoding":
                chunked = b"chunked" in value.lower()
            elif name == b"content-length":
                try:
                    length = int(value.strip())
                except ValueError:
                    raise RequestFailed("protocol", "bad content-length") from None
            elif name == b"connection":
                v = value.strip().lower()
                if v == b"close":
                    self.keep_alive = False
                elif v == b"keep-alive":
                    self.keep_alive = True
        if not 200 <= status < 300:
            self._sink = self._collect_error
        if self.method == "HEAD" or status in (204, 304):
            self.state = _DONE
            return True
        if chunked:
            self.state = _CHUNKED
            self._dec = ChunkedDecoder()
        elif length is not None:
            self.state = _LENGTH
            self._left = length
            if length == 0:
                self.state = _DONE
                return True
        else:
            self.state = _CLOSE
            self.keep_alive = False
        return self.feed(rest, now) if rest else False


class Reactor:
    """Reads every registered stream's socket from one greenlet, with epoll.

    One per process (:func:`get_reactor`). ``wait(...)`` blocks the calling
    greenlet until its response is complete, failed, or timed out.
    """

    def __init__(self) -> None:
        epoll = monkey.get_original("select", "epoll") if monkey.is_module_patched(
            "select") else select.epoll
        self._ep: Any = epoll()
        self._handlers: dict[int, _Stream] = {}
        self._hub = gevent.get_hub()
        self._watcher = self._hub.loop.io(self._ep.fileno(), 1)
        self.wakeups = 0  # poll rounds that found ready sockets
        self.reads = 0  # socket reads
        self._greenlet = gevent.spawn(self._run)

    def wait(self, raw: Any, parser: ResponseParser, timeout_s: float | None) -> None:
        """Read the response of ``raw`` (a non-blocking socket) into ``parser``."""
        stream = _Stream(raw, parser)
        fd = raw.fileno()
        self._handlers[fd] = stream
        try:
            self._ep.register(fd, select.EPOLLIN)
        except FileExistsError:
            self._ep.modify(fd, select.EPOLLIN)
        try:
            if not stream.event.wait(timeout_s):
                raise RequestFailed("timeout", "no complete response in time")
        finally:
            if self._handlers.get(fd) is stream:
                self._finish(fd, stream, None)
        if stream.error is not None:
            raise stream.error

    def _finish(self, fd: int, stream: _Stream, error: BaseException | None) -> None:
        del self._handlers[fd]
        with contextlib.suppress(OSError, ValueError):
            self._ep.unregister(fd)
        stream.error = error
        stream.event.set()

    def _run(self) -> None:
        poll = self._ep.poll
        handlers = self._handlers
        hub_wait = self._hub.wait
        watcher = self._watcher
        last_yield = _perf()
        while True:
            events = poll(0)
            if not events:
                hub_wait(watcher)
                last_yield = _perf()
                continue
            # Every socket in this round was ready when poll returned: stamp them all with
            # that moment, so reading the others first does not make the last one late.
            now = _perf()
            self.wakeups += 1
            self.reads += len(events)
            for fd, _mask in events:
                stream = handlers.get(fd)
                if stream is None:
                    with contextlib.suppress(OSError, ValueError):
                        self._ep.unregister(fd)
                    continue
                try:
                    data = stream.raw.recv(_RECV)
                except BlockingIOError:
                    continue
                except (ConnectionError, OSError) as exc:
                    parser = stream.parser
                    self._finish(fd, stream, _Stale() if not parser.got_bytes else
                                 RequestFailed("reset", str(exc)))
                    continue
                try:
                    if data:
                        done = stream.parser.feed(data, now)
                    elif not stream.parser.got_bytes:
                        raise _Stale
                    else:
                        done = stream.parser.eof(now)
                except Exception as exc:
                    self._finish(fd, stream, exc)
                    continue
                if done:
                    self._finish(fd, stream, None)
            if _perf() - last_yield > _YIELD_EVERY_S:
                gevent.sleep(0)
                last_yield = _perf()


class _Stream:
    __slots__ = ("error", "event", "parser", "raw")

    def __init__(self, raw: Any, parser: ResponseParser) -> None:
        self.raw = raw
        self.parser = parser
        self.event = gevent.event.Event()
        self.error: BaseException | None = None


_reactor: Reactor | None = None


def get_reactor() -> Reactor:
    global _reactor
    if _reactor is None:
        _reactor = Reactor()
    return _reactor


class Connection:
    """One keep-alive HTTP/1.1 connection to ``host:port`` (reconnects as needed)."""

    def __init__(
        self,
        host: str,
        port: int,
        *,
        tls: bool = False,
        connect_timeout_s: float = 10.0,
    ) -> None:
        self.host = host
        self.port = port
        self.tls = tls
        self.connect_timeout_s = connect_timeout_s
        self.host_header = host if port in (80, 443) else f"{host}:{port}"
        self._sock: socket.socket | None = None

    def close(self) -> None:
        sock, self._sock = self._sock, None
        if sock is not None:
            with contextlib.suppress(OSError):
                sock.close()

    def _connect(self) -> socket.socket:
        try:
            sock = socket.create_connection((self.host, self.port), timeout=self.connect_timeout_s)
        except ConnectionRefusedError as exc:
            raise RequestFailed("refused", f"{self.host}:{self.port}: {exc.strerror}") from None
        except TimeoutError:
            raise RequestFailed("timeout", f"connect to {self.host}:{self.port}") from None
        except OSError as exc:
            raise RequestFailed("refused", f"{self.host}:{self.port}: {exc}") from None
        sock.settimeout(None)
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        if self.tls:
            ctx = ssl.create_default_context()
            sock = ctx.wrap_socket(sock, server_hostname=self.host)
        return sock

    def request(
        self,
        method: str,
        path: str,
        body: bytes | None,
        headers: bytes,
        on_body: OnBody,
        *,
        timeout_s: float | None = None,
    ) -> int:
        """Send a request and stream the body of a 2xx response to ``on_body``.

        ``headers`` are extra raw header lines (each ending in ``\\r\\n``).
        Returns the status; a non-2xx status raises ``RequestFailed("http_<code>")``
        with the start of the body as detail; past ``timeout_s``,
        ``RequestFailed("timeout")``. A stale kept-alive connection is retried
        once on a fresh one. Exceptions raised by ``on_body`` propagate.
        """
        head = (
            f"{method} {path} HTTP/1.1\r\nHost: {self.host_header}\r\n"
            f"Content-Length: {len(body) if body else 0}\r\n"
        ).encode() + headers + b"\r\n"
        payload = head + body if body else head
        deadline = None if timeout_s is None else _perf() + timeout_s
        for attempt in (0, 1):
            reused = self._sock is not None
            if self._sock is None:
                self._sock = self._connect()
            sock = self._sock
            parser = ResponseParser(on_body, method)
            try:
                sock.sendall(payload)
                left = None if deadline is None else max(0.0, deadline - _perf())
                raw = getattr(sock, "_sock", None)
                if raw is not None and _USE_REACTOR and not self.tls and monkey.is_module_patched(
                    "socket"
                ):
                    get_reactor().wait(raw, parser, left)
                else:
                    self._read_blocking(sock, parser, left)
                status = parser.result() if parser.keep_alive else self._closing(parser)
                return status
            except _Stale:
                self.close()
                if reused and not attempt:
                    continue
                raise RequestFailed("reset", "connection closed before the response") from None
            except RequestFailed:
                self.close()
                raise
            except (ConnectionResetError, BrokenPipeError, ssl.SSLError) as exc:
                self.close()
                if reused and not attempt and not parser.got_bytes:
                    continue
                raise RequestFailed("reset", str(exc)) from None
            except OSError as exc:
                self.close()
                raise RequestFailed("reset", str(exc)) from None
            except BaseException:
                # Malformed data, kills: the connection is in an unknown state.
                self.close()
                raise
        raise RequestFailed("reset", "connection closed before the response")

    def _closing(self, parser: ResponseParser) -> int:
        self.close()
        return parser.result()

    def _read_blocking(
        self, sock: socket.socket, parser: ResponseParser, timeout_s: float | None
    ) -> None:
        with gevent.Timeout(timeout_s, RequestFailed("timeout", "no complete response in time")):
            while True:
                data = sock.recv(_RECV)
                now = _perf()
                if not data:
                    if not parser.got_bytes:
                        raise _Stale
                    parser.eof(now)
                    return
                if parser.feed(data, now):
                    return
