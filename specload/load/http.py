"""A lean HTTP/1.1 client for streamed responses, on (gevent) sockets.

One :class:`Connection` per Locust user, kept alive between requests. The
body is handed to a callback as soon as each socket read completes —
chunked transfer encoding decoded on the fly, never waiting for a buffer to
fill (geventhttpclient's ``iter_content(chunk_size=N)`` waits for N bytes,
which delays SSE events and inflates TTFT and ITL). Each read is stamped
with ``time.perf_counter()`` right after it returns.

Failures raise :class:`RequestFailed` with an error class: ``refused``,
``reset`` (connection lost or closed mid-response), ``protocol`` (not HTTP),
``http_<status>``. Timeouts are the caller's (``gevent.Timeout``).
"""

from __future__ import annotations

import contextlib
import socket
import ssl
import time
from collections.abc import Callable

_perf = time.perf_counter
_RECV = 65536
_MAX_HEAD = 65536
_MAX_ERROR_BODY = 4096


class RequestFailed(Exception):
    """A request that failed, with its error class (``kind``)."""

    def __init__(self, kind: str, detail: str = "", status: int | None = None) -> None:
        super().__init__(f"{kind}: {detail}" if detail else kind)
        self.kind = kind
        self.detail = detail
        self.status = status


class ChunkedDecoder:
    """Incremental decoder of HTTP/1.1 ``Transfer-Encoding: chunked``."""

    __slots__ = ("_crlf", "_pending", "_remaining", "done")

    def __init__(self) -> None:
        self._pending = b""
        self._remaining = 0
        self._crlf = False
        self.done = False

    def feed(self, data: bytes) -> bytes:
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
        on_sent: Callable[[float], None] | None = None,
    ) -> int:
        """Send a request and stream the body of a 2xx response to ``on_body``.

        ``headers`` are extra raw header lines (each ending in ``\\r\\n``).
        Returns the status; a non-2xx status raises ``RequestFailed("http_<code>")``
        with the start of the body as detail. A stale kept-alive connection is
        retried once on a fresh one.
        """
        head = (
            f"{method} {path} HTTP/1.1\r\nHost: {self.host_header}\r\n"
            f"Content-Length: {len(body) if body else 0}\r\n"
        ).encode() + headers + b"\r\n"
        payload = head + body if body else head
        for attempt in (0, 1):
            reused = self._sock is not None
            if self._sock is None:
                self._sock = self._connect()
            sock = self._sock
            try:
                sock.sendall(payload)
                if on_sent is not None:
                    on_sent(_perf())
                return self._read_response(sock, on_body, method, retryable=reused and not attempt)
            except _Stale:
                self.close()
                continue
            except RequestFailed:
                self.close()
                raise
            except (ConnectionResetError, BrokenPipeError, ssl.SSLError) as exc:
                self.close()
                if reused and not attempt and isinstance(exc, BrokenPipeError):
                    continue
                raise RequestFailed("reset", str(exc)) from None
            except OSError as exc:
                self.close()
                raise RequestFailed("reset", str(exc)) from None
            except BaseException:
                # Timeouts (gevent.Timeout) and kills: the connection is in an unknown state.
                self.close()
                raise
        raise RequestFailed("reset", "connection closed before the response")

    def _read_response(
        self, sock: socket.socket, on_body: OnBody, method: str, *, retryable: bool
    ) -> int:
        recv = sock.recv
        buf = b""
        while True:
            try:
                data = recv(_RECV)
            except ConnectionResetError:
                if retryable and not buf:
                    raise _Stale from None
                raise
            now = _perf()
            if not data:
                if retryable and not buf:
                    raise _Stale
                raise RequestFailed("reset", "connection closed before the response head")
            buf += data
            idx = buf.find(b"\r\n\r\n")
            if idx >= 0:
                break
            if len(buf) > _MAX_HEAD:
                raise RequestFailed("protocol", "response head too long")
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
        chunked = False
        length: int | None = None
        keep_alive = status_line[0] == b"HTTP/1.1"
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
                    keep_alive = False
                elif v == b"keep-alive":
                    keep_alive = True
        ok = 200 <= status < 300
        error_body: list[bytes] = []
        if ok:
            sink = on_body
        else:

            def sink(data: bytes, now: float) -> None:
                if sum(map(len, error_body)) < _MAX_ERROR_BODY:
                    error_body.append(data)

        if method == "HEAD" or status in (204, 304) or 100 <= status < 200:
            length = 0
            chunked = False
        if chunked:
            dec = ChunkedDecoder()
            if rest:
                out = dec.feed(rest)
                if out:
                    sink(out, now)
            while not dec.done:
                data = recv(_RECV)
                now = _perf()
                if not data:
                    raise RequestFailed("reset", "connection closed mid-body")
                out = dec.feed(data)
                if out:
                    sink(out, now)
        elif length is not None:
            got = len(rest)
            if rest:
                sink(rest[:length], now)
            while got < length:
                data = recv(min(_RECV, length - got))
                now = _perf()
                if not data:
                    raise RequestFailed("reset", "connection closed mid-body")
                got += len(data)
                sink(data, now)
        else:
            keep_alive = False
            if rest:
                sink(rest, now)
            while True:
                data = recv(_RECV)
                now = _perf()
                if not data:
                    break
                sink(data, now)
        if not keep_alive:
            self.close()
        if not ok:
            text = b"".join(error_body)[:300].decode("utf-8", "replace")
            raise RequestFailed(f"http_{status}", " ".join(text.split()), status)
        return status


class _Stale(Exception):
    """A kept-alive connection the server had closed; retry on a fresh one."""
