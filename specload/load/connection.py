"""One keep-alive HTTP/1.1 connection per Locust user, on (gevent) sockets.

A request is sent in one write; its response is read by the process's
:class:`~specload.load.reactor.Reactor` (plain HTTP on gevent-patched sockets),
else (TLS, ``SPECLOAD_REACTOR=0``, unpatched sockets) by the calling greenlet.
A stale kept-alive connection is retried once on a fresh one. Failures raise
:class:`~specload.load.failures.RequestFailed`. A complete error answer (its body
read to the end: ``Content-Length`` or chunked, at most
:data:`~specload.load.response.MAX_DRAIN_BYTES`) without ``Connection: close``
leaves the connection open for the next request; any other failure closes it.
A stream that ended (``data: [DONE]``) before its body completes its request at
once; what is left of its body (the last chunk, normally already on its way) is
read before the next request, waiting at most :data:`SETTLE_S` for it: the next
request gets a fresh connection when that body has not ended by then.
``Accept-Encoding: identity`` is asked: an encoded 2xx answer fails as
``content_encoding``.
"""

from __future__ import annotations

import contextlib
import socket
import ssl
import time
from typing import Any

from gevent import monkey

from specload.load.failures import RequestFailed, Stale
from specload.load.reactor import READ_SIZE, get_reactor
from specload.load.response import MAX_DRAIN_BYTES, Ends, FastReader, OnBody, ResponseParser
from specload.load.switches import SWITCHES, fastpath, rx_timestamps

_perf = time.perf_counter
_MIN_WAIT_S = 0.001  # a socket timeout of 0 would make the socket non-blocking
# After a stream ended at [DONE] before its body: how long the next request waits for
# the rest of that body (normally its last chunk, written right after [DONE]) to keep
# the connection; past it, the next request goes on a fresh connection.
SETTLE_S = 0.05


def _send_all(sock: socket.socket, data: bytes, deadline: float | None) -> None:
    """``sock.sendall(data)`` within ``deadline`` (a server that does not read: the
    request's deadline, as for its answer); raises ``TimeoutError`` past it."""
    if deadline is None:
        sock.sendall(data)
        return
    sock.settimeout(max(_MIN_WAIT_S, deadline - _perf()))
    try:
        sock.sendall(data)
    finally:
        with contextlib.suppress(OSError):
            sock.settimeout(None)


def _socket_patched() -> bool:
    return bool(monkey.is_module_patched("socket"))


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
        # The response of the last request when it completed at the end of its stream
        # before its body ended: read on (without waiting) before the next request.
        self._open: ResponseParser | None = None

    def close(self) -> None:
        sock, self._sock = self._sock, None
        self._open = None
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
        if rx_timestamps and not self.tls:
            fastpath.enable_rx_timestamps(sock.fileno())
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
        expect: bytes | None = None,
        ends: Ends | None = None,
    ) -> int:
        """Send a request and stream the body of a 2xx response to ``on_body``.

        ``headers`` are extra raw header lines (each ending in ``\\r\\n``).
        Returns the status; a non-2xx status raises ``RequestFailed("http_<code>")``
        with the start of the body as detail; past ``timeout_s``,
        ``RequestFailed("timeout")``. A stale kept-alive connection is retried
        once on a fresh one. Exceptions raised by ``on_body`` propagate.
        ``fast`` (optional): a fused reader tried first on each read of a
        chunked 2xx body (see :class:`FastReader`); ``on_body`` gets what it declines.
        ``expect`` (optional): the media type a 2xx answer must have, else
        ``RequestFailed("content_type")``. After a complete error answer that did not
        say ``Connection: close`` the connection stays open.
        ``ends`` (optional): an object whose ``done`` turns true at the end of the
        stream (the meter, at ``[DONE]``): the request is complete then.
        """
        head = (
            (
                f"{method} {path} HTTP/1.1\r\nHost: {self.host_header}\r\n"
                f"Content-Length: {len(body) if body else 0}\r\n"
                "Accept-Encoding: identity\r\n"
            ).encode()
            + headers
            + b"\r\n"
        )
        payload = head + body if body else head
        deadline = None if timeout_s is None else _perf() + timeout_s
        if self._open is not None:
            self._settle()
        for attempt in (0, 1):
            reused = self._sock is not None
            if self._sock is None:
                self._sock = self._connect()
            sock = self._sock
            parser = ResponseParser(on_body, method, fast, expect, ends)
            try:
                raw: Any = getattr(sock, "_sock", None)
                reactor = (
                    raw is not None and SWITCHES.reactor and not self.tls and _socket_patched()
                )
                if reactor:
                    # The request fits the socket buffer: one send on the raw socket
                    # (gevent's sendall only for what is left, if anything).
                    try:
                        sent = raw.send(payload)
                    except BlockingIOError:
                        sent = 0
                    if sent < len(payload):
                        _send_all(sock, payload[sent:], deadline)
                else:
                    _send_all(sock, payload, deadline)
                if reactor:
                    left = None if deadline is None else max(0.0, deadline - _perf())
                    get_reactor().wait(raw, parser, left)
                else:
                    self._read_blocking(sock, parser, deadline)
            except Stale:
                self.close()
                if reused and not attempt:
                    continue
                raise RequestFailed("reset", "connection closed before the response") from None
            except RequestFailed:
                self.close()
                raise
            except TimeoutError:  # a server that does not read the request, or answer it
                self.close()
                raise RequestFailed("timeout", "no complete response in time") from None
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
            # The response is complete: an error answer keeps a kept-alive connection.
            if not parser.keep_alive:
                self.close()
            elif not parser.complete:  # ended at [DONE]: the rest of its body is unread
                self._open = parser
            return parser.result()
        raise RequestFailed("reset", "connection closed before the response")

    def _read_blocking(
        self, sock: socket.socket, parser: ResponseParser, deadline: float | None
    ) -> None:
        """Read the response until complete or ``deadline`` (a socket timeout per read:
        bounded on unpatched sockets too, where a gevent timeout cannot interrupt)."""
        try:
            while True:
                if deadline is not None:
                    sock.settimeout(max(_MIN_WAIT_S, deadline - _perf()))
                data = sock.recv(READ_SIZE)
                now = _perf()
                if not data:
                    if not parser.got_bytes:
                        raise Stale
                    parser.eof(now)
                    return
                if parser.feed(data, now):
                    return
        finally:
            if deadline is not None and self._sock is sock:
                with contextlib.suppress(OSError):
                    sock.settimeout(None)

    def _settle(self) -> None:
        """Read the rest of the last response's body, waiting at most
        :data:`SETTLE_S` for it; keep the connection if that ends the body, else
        close it."""
        parser, self._open = self._open, None
        sock = self._sock
        if parser is None or sock is None:
            return
        deadline = _perf() + SETTLE_S
        taken = 0
        try:
            while taken <= MAX_DRAIN_BYTES:
                left = deadline - _perf()
                if left <= 0:
                    break
                sock.settimeout(left)
                data = sock.recv(READ_SIZE)
                if not data:
                    break
                taken += len(data)
                if parser.feed(data, _perf()):
                    if parser.complete and parser.keep_alive:
                        sock.settimeout(None)
                        return  # the body ended: the connection serves the next request
                    break
        except (OSError, RequestFailed):  # not in time (TimeoutError), or broken
            pass
        self.close()
