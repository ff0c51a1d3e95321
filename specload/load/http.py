"""A lean HTTP/1.1 client for streamed responses, on (gevent) sockets.

One :class:`Connection` per Locust user, kept alive between requests. The
response is parsed by a :class:`ResponseParser` state machine that hands the
body to a callback as soon as each socket read completes — chunked transfer
encoding decoded on the fly, never waiting for a buffer to fill
(geventhttpclient's ``iter_content(chunk_size=N)`` waits for N bytes, which
delays SSE events and inflates TTFT and ITL).

Streams of plain-HTTP targets are read by one :class:`Reactor` per process:
a greenlet that polls every open stream's socket with ``epoll`` (blocking in
it, with the event loop's own fd in the set so other greenlets' sockets wake
it too) and reads each ready socket once per round. With the C extension
(``specload.load._fastpath``) a round is one C call, each read carries the
kernel's arrival stamp of its data (``SO_TIMESTAMPNS``, on
``time.perf_counter()``'s clock) and a *fused reader* (the request's
``StreamMeter``) takes a streamed body's reads in one pass, declining to the
full parsers what it cannot read with certainty. As reads are stamped on
arrival, at >= 32 open streams the reactor polls at most once per
``SPECLOAD_READ_BATCH_S`` (1 ms): one wake-up reads dozens of sockets. Without
the extension (or with ``SPECLOAD_FASTPATH=0``) every read goes through the
full parsers and is stamped when the poll that found it returned.

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
from typing import Any, Protocol

import gevent
import gevent.event
from gevent import monkey

try:
    from specload.load import _fastpath
except ImportError:  # built without a C compiler: plain recv, stamped at poll time
    _fastpath = None  # type: ignore[assignment]
if os.environ.get("SPECLOAD_FASTPATH", "1") == "0":  # the pure-Python path, C or not
    _fastpath = None  # type: ignore[assignment]

_perf = time.perf_counter
_RECV = 65536  # per read (into one reused buffer)
_MAX_HEAD = 65536
_MAX_ERROR_BODY = 4096
_YIELD_EVERY_S = 0.002
_YIELD_TIMER_S = 1e-6
_BLOCK_S = 0.001
# SPECLOAD_REACTOR=0: read each stream in its own greenlet (diagnostics, benchmarks).
_USE_REACTOR = os.environ.get("SPECLOAD_REACTOR", "1") != "0"
# SPECLOAD_REACTOR_DRIVE=0: the reactor waits through the hub (one switch per wake-up).
_DRIVE = os.environ.get("SPECLOAD_REACTOR_DRIVE", "1") != "0"
# Kernel receive timestamps (SO_TIMESTAMPNS): each read carries the time its data arrived.
_RX_STAMPS = _fastpath is not None and os.environ.get("SPECLOAD_RX_TIMESTAMPS", "1") != "0"
# With arrival stamps, reading late costs no accuracy: at >= _BATCH_MIN_STREAMS open
# streams, poll at most every _BATCH_S so one wake-up reads many sockets.
_BATCH_S = float(os.environ.get("SPECLOAD_READ_BATCH_S", "0.001"))
_BATCH_MIN_STREAMS = 32
_MAX_UNSTAMPED = 16  # more reads than this without a kernel stamp: batching stops
_os_sleep = monkey.get_original("time", "sleep")


def _socket_patched() -> bool:
    return bool(monkey.is_module_patched("socket"))

# Kinds of what the C round hands back (see _fastpath.read_ready).
_R_DATA, _R_EOF, _R_ENDED, _R_ERRNO, _R_LOOP, _R_UNKNOWN, _R_EXC = range(7)


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


OnBody = Callable[[bytes, float], None]


class FastReader(Protocol):
    """A fused reader of whole socket reads of a chunked body (a ``StreamMeter``)."""

    def feed_read(self, buf: bytearray, n: int, now: float) -> int:
        """Account ``buf[:n]``: 1 (2: the body ended), or 0 declined, nothing changed."""
        ...

_HEAD, _CHUNKED, _LENGTH, _CLOSE, _DONE = range(5)


class ResponseParser:
    """Parses one HTTP/1.1 response fed in pieces; 2xx bodies go to ``on_body``.

    :meth:`feed` returns True when the response is complete. :meth:`eof` is
    called when the server closed the connection. After completion,
    :meth:`result` returns the status or raises ``RequestFailed("http_<code>")``.
    """

    __slots__ = ("_buf", "_dec", "_error_body", "_fast", "_left", "_sink", "fast", "got_bytes",
                 "keep_alive", "method", "on_body", "state", "status")

    def __init__(
        self, on_body: OnBody, method: str = "POST", fast: FastReader | None = None
    ) -> None:
        self.on_body = on_body
        self._fast = fast
        # ``fast`` is set while the fused reader may take the next read: a 2xx chunked
        # body at a chunk boundary. Callers try it first and fall back to :meth:`feed`.
        self.fast: FastReader | None = None
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
                self.fast = None
                return True
            self.fast = self._fast if dec.clean else None
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

    def fast_ended(self) -> None:
        """The fused reader read the end of the body."""
        self.state = _DONE
        self.fast = None
        if self._dec is not None:
            self._dec.done = True

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
            if 200 <= status < 300:
                self.fast = self._fast
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
    greenlet until its response is complete, failed, or timed out. Between
    rounds the other greenlets run: after a stream ended, when the event loop
    has a ready socket or a due timer (the reactor blocks at most 1 ms), and at
    least every 2 ms.
    """

    def __init__(self) -> None:
        epoll = monkey.get_original("select", "epoll") if monkey.is_module_patched(
            "select") else select.epoll
        self._ep: Any = epoll()
        self._epfd = self._ep.fileno()
        self._handlers: dict[int, _Stream] = {}
        self._parsers: list[ResponseParser | None] = [None] * 1024  # by fd, for the C round
        self._buf = bytearray(_RECV)
        self._yield_now = False
        self._hub = gevent.get_hub()
        self._work = gevent.event.Event()  # set when a stream is registered
        # Driving mode: block in our own epoll, which also watches the event loop's
        # backend fd (ready when any other greenlet's socket is). Else (no such fd):
        # wait for our epoll fd through the hub, one greenlet switch per wake-up.
        self._hub_fd = -1
        self._watcher: Any = None
        if _DRIVE:
            with contextlib.suppress(AttributeError, OSError, ValueError, TypeError):
                hub_fd = int(self._hub.loop.fileno())
                self._ep.register(hub_fd, select.EPOLLIN)
                self._hub_fd = hub_fd
        if self._hub_fd < 0:
            self._watcher = self._hub.loop.io(self._ep.fileno(), 1)
        self.wakeups = 0  # poll rounds that found ready sockets
        self.reads = 0  # socket reads
        self.fast_reads = 0  # reads taken by a fused reader (the rest: the full parsers)
        self.yields = 0  # switches to the other greenlets (driving mode)
        self.unstamped_reads = 0  # reads without a kernel arrival stamp (stamped at poll time)
        self.hub_wakeups = 0  # rounds where the event loop's fd was ready
        self._greenlet = gevent.spawn(self._run)

    def wait(self, raw: Any, parser: ResponseParser, timeout_s: float | None) -> None:
        """Read the response of ``raw`` (a non-blocking socket) into ``parser``."""
        stream = _Stream(raw, parser)
        fd = raw.fileno()
        self._handlers[fd] = stream
        if fd >= len(self._parsers):
            self._parsers.extend([None] * (fd + 1024 - len(self._parsers)))
        self._parsers[fd] = parser
        try:
            self._ep.register(fd, select.EPOLLIN)
        except FileExistsError:
            self._ep.modify(fd, select.EPOLLIN)
        self._work.set()
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
        self._parsers[fd] = None
        self._yield_now = True  # its user greenlet can go on
        with contextlib.suppress(OSError, ValueError):
            self._ep.unregister(fd)
        stream.error = error
        stream.event.set()

    def _run(self) -> None:
        handlers = self._handlers
        hub_wait = self._hub.wait
        watcher = self._watcher
        work = self._work
        read_round = self._read_round_c if _fastpath is not None else self._read_round_py
        # Driving: block up to _BLOCK_S in epoll (timers of other greenlets run at most
        # that late); else poll without blocking and wait through the hub.
        block_s = _BLOCK_S if watcher is None else 0.0
        batch_s = _BATCH_S if _RX_STAMPS and watcher is None else 0.0
        last_poll = 0.0
        last_yield = _perf()
        while True:
            if self._yield_now or _perf() - last_yield > _YIELD_EVERY_S:
                # Let the other greenlets run: users whose response ended, timers, sockets.
                self.yields += 1
                self._yield_now = False
                # A timer, not sleep(0): sleep(0) only queues a callback, and the hub runs
                # queued callbacks back to back (checking the clock every 50), so a reactor
                # that blocks ~1 ms per round would starve due timers for ~50 ms. A timer
                # makes the hub go round its whole loop: I/O, timers, then back here.
                gevent.sleep(_YIELD_TIMER_S)
                last_yield = _perf()
            if not handlers:
                if watcher is None:
                    work.clear()
                    work.wait()
                else:
                    hub_wait(watcher)
                last_yield = _perf()
                continue
            if batch_s and len(handlers) >= _BATCH_MIN_STREAMS:
                if self.unstamped_reads > _MAX_UNSTAMPED:
                    batch_s = 0.0  # no arrival stamps here: read data as soon as it is there
                wait_s = batch_s - (_perf() - last_poll)
                if wait_s > 0:
                    _os_sleep(wait_s)  # the whole process: data waits, stamped on arrival
            ready = read_round(block_s)
            last_poll = _perf()
            if not ready:
                if watcher is None:
                    self._yield_now = True  # a timer may be due
                else:
                    hub_wait(watcher)
                    last_yield = _perf()

    def _read_round_c(self, timeout_s: float) -> int:
        """One round in C (``_fastpath.read_ready``): Python sees only what the fused
        readers did not take (heads, other bodies, ends, errors)."""
        ready, left, _now, unstamped = _fastpath.read_ready(
            self._epfd, timeout_s, self._buf, self._parsers, self._hub_fd
        )
        if not ready:
            return 0
        self.wakeups += 1
        self.reads += ready
        self.unstamped_reads += unstamped
        handlers = self._handlers
        taken = ready
        for fd, kind, payload, t in left:
            taken -= 1
            if kind == _R_LOOP:
                self.reads -= 1
                self.hub_wakeups += 1
                self._yield_now = True  # another greenlet's socket is ready
                continue
            stream = handlers.get(fd)
            if stream is None:
                with contextlib.suppress(OSError, ValueError):
                    self._ep.unregister(fd)
                continue
            parser = stream.parser
            if kind == _R_ENDED:
                taken += 1
                parser.fast_ended()
                self._finish(fd, stream, None)
            elif kind == _R_ERRNO:
                exc = OSError(payload, os.strerror(payload))
                self._finish(fd, stream, _Stale() if not parser.got_bytes else
                             RequestFailed("reset", str(exc)))
            elif kind == _R_EXC:
                self._finish(fd, stream, payload)
            else:
                self._feed(fd, stream, payload if kind == _R_DATA else b"", t)
        self.fast_reads += taken
        return ready

    def _read_round_py(self, timeout_s: float) -> int:
        """One round in Python (no C extension): every read through the full parsers."""
        events = self._ep.poll(timeout_s)
        if not events:
            return 0
        # Every socket in this round was ready when poll returned: stamp them all with
        # that moment, so reading the others first does not make the last one late.
        now = _perf()
        self.wakeups += 1
        self.reads += len(events)
        handlers = self._handlers
        buf = self._buf
        view = memoryview(buf)
        for fd, _mask in events:
            stream = handlers.get(fd)
            if stream is None:
                if fd == self._hub_fd:
                    self.reads -= 1
                    self.hub_wakeups += 1
                    self._yield_now = True
                    continue
                with contextlib.suppress(OSError, ValueError):
                    self._ep.unregister(fd)
                continue
            try:
                n = stream.recv_into(buf)
            except BlockingIOError:
                continue
            except OSError as exc:
                self._finish(fd, stream, _Stale() if not stream.parser.got_bytes else
                             RequestFailed("reset", str(exc)))
                continue
            self._feed(fd, stream, view[:n].tobytes(), now)
        return len(events)

    def _feed(self, fd: int, stream: _Stream, data: bytes, now: float) -> None:
        parser = stream.parser
        try:
            if data:
                done = parser.feed(data, now)
            elif not parser.got_bytes:
                raise _Stale
            else:
                done = parser.eof(now)
        except Exception as exc:
            self._finish(fd, stream, exc)
            return
        if done:
            self._finish(fd, stream, None)


class _Stream:
    __slots__ = ("error", "event", "parser", "raw", "recv_into")

    def __init__(self, raw: Any, parser: ResponseParser) -> None:
        self.raw = raw
        self.recv_into = raw.recv_into
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
        if _RX_STAMPS and not self.tls:
            _fastpath.enable_rx_timestamps(sock.fileno())
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
        fast: FastReader | None = None,
    ) -> int:
        """Send a request and stream the body of a 2xx response to ``on_body``.

        ``headers`` are extra raw header lines (each ending in ``\\r\\n``).
        Returns the status; a non-2xx status raises ``RequestFailed("http_<code>")``
        with the start of the body as detail; past ``timeout_s``,
        ``RequestFailed("timeout")``. A stale kept-alive connection is retried
        once on a fresh one. Exceptions raised by ``on_body`` propagate.
        ``fast`` (optional): a fused reader tried first on each read of a
        chunked 2xx body (see :class:`FastReader`); ``on_body`` gets what it declines.
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
            parser = ResponseParser(on_body, method, fast)
            try:
                raw: Any = getattr(sock, "_sock", None)
                reactor = raw is not None and _USE_REACTOR and not self.tls and _socket_patched()
                if reactor:
                    # The request fits the socket buffer: one send on the raw socket
                    # (gevent's sendall only for what is left, if anything).
                    try:
                        sent = raw.send(payload)
                    except BlockingIOError:
                        sent = 0
                    if sent < len(payload):
                        sock.sendall(payload[sent:])
                else:
                    sock.sendall(payload)
                left = None if deadline is None else max(0.0, deadline - _perf())
                if reactor:
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
