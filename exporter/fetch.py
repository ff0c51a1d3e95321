"""One bounded HTTP GET: one deadline for the whole exchange and a cap on the body.

A target that hangs, drips bytes (even its response head, one byte at a time) or
sends 50 MB is a fault with a reason, not a stuck poller or an out-of-memory
exporter. httpx's timeouts are per socket wait, and restart with every byte
received; :class:`PollTransport` (the poller's transport) instead clamps every
wait — connect, TLS, request, head and body — to what is left of the poll's
:class:`Deadline`, so a poll ends by its deadline whatever the target does,
and :meth:`PollTransport.abort` ends the waits at once when the exporter stops.
Other transports (tests' mock ones) get the body loop's deadline check.
Reasons are a small fixed set so ``specload_target_scrape_errors_total{reason}``
stays bounded; error details never carry the request's header values.
"""

from __future__ import annotations

import contextlib
import socket
import threading
import time
import weakref
import zlib
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any

import httpcore
import httpx

from specload.redact import scrub

REASONS = (
    "refused",  # nothing listens (vLLM while loading)
    "timeout",  # no complete answer within the deadline
    "http_4xx",
    "http_5xx",
    "too_large",  # body over the cap
    "malformed",  # not Prometheus text (set by the caller's parser)
    "error",  # anything else on the wire (reset, DNS, TLS, bad encoding)
)

# Uncompressed: on a LAN the CPU to inflate costs more than the bytes.
DEFAULT_HEADERS = {"Accept": "text/plain;version=0.0.4", "Accept-Encoding": "identity"}


@dataclass(frozen=True)
class FetchResult:
    body: bytes | None  # None on failure
    reason: str | None  # one of REASONS on failure
    detail: str
    duration_s: float
    status: int | None = None

    @property
    def ok(self) -> bool:
        return self.body is not None


class Deadline:
    """When everything one poll does must be over (``time.monotonic()``), and a stop flag."""

    __slots__ = ("cancel", "end")

    def __init__(self, end: float, cancel: threading.Event | None = None) -> None:
        self.end = end
        self.cancel = cancel

    @classmethod
    def after(cls, seconds: float, cancel: threading.Event | None = None) -> Deadline:
        return cls(time.monotonic() + seconds, cancel)

    def remaining(self) -> float:
        return self.end - time.monotonic()

    @property
    def cancelled(self) -> bool:
        return self.cancel is not None and self.cancel.is_set()


_local = threading.local()


@contextlib.contextmanager
def bounded(deadline: Deadline) -> Iterator[None]:
    """Every :class:`PollTransport` socket wait in this thread ends by ``deadline``."""
    previous = getattr(_local, "deadline", None)
    _local.deadline = deadline
    try:
        yield
    finally:
        _local.deadline = previous


def _clamp(timeout: float | None, exc: type[Exception]) -> float | None:
    """``timeout`` cut to what is left of this thread's deadline; raise ``exc`` when none is."""
    deadline: Deadline | None = getattr(_local, "deadline", None)
    if deadline is None:
        return timeout
    if deadline.cancelled:
        raise exc("the exporter is stopping")
    left = deadline.end - time.monotonic()
    if left <= 0:
        raise exc("the poll's deadline passed")
    return left if timeout is None else min(timeout, left)


class _DeadlineStream(httpcore.NetworkStream):
    """A socket stream whose every wait ends by the thread's :class:`Deadline`."""

    def __init__(self, inner: httpcore.NetworkStream) -> None:
        self._inner = inner

    def read(self, max_bytes: int, timeout: float | None = None) -> bytes:
        return self._inner.read(max_bytes, _clamp(timeout, httpcore.ReadTimeout))

    def write(self, buffer: bytes, timeout: float | None = None) -> None:
        self._inner.write(buffer, _clamp(timeout, httpcore.WriteTimeout))

    def close(self) -> None:
        self._inner.close()

    def start_tls(
        self,
        ssl_context: Any,
        server_hostname: str | None = None,
        timeout: float | None = None,
    ) -> httpcore.NetworkStream:
        self._inner = self._inner.start_tls(
            ssl_context, server_hostname, _clamp(timeout, httpcore.ConnectTimeout)
        )
        return self

    def get_extra_info(self, info: str) -> Any:
        return self._inner.get_extra_info(info)

    def abort(self) -> None:
        """Wake a wait on this socket from another thread (it sees the connection end)."""
        sock = self._inner.get_extra_info("socket")
        if isinstance(sock, socket.socket):
            with contextlib.suppress(OSError):
                sock.shutdown(socket.SHUT_RDWR)


class _DeadlineBackend(httpcore.NetworkBackend):
    def __init__(self) -> None:
        self._inner = httpcore.SyncBackend()
        self._streams: weakref.WeakSet[_DeadlineStream] = weakref.WeakSet()
        self._lock = threading.Lock()

    def connect_tcp(
        self,
        host: str,
        port: int,
        timeout: float | None = None,
        local_address: str | None = None,
        socket_options: Iterable[Any] | None = None,
    ) -> httpcore.NetworkStream:
        inner = self._inner.connect_tcp(
            host, port, _clamp(timeout, httpcore.ConnectTimeout), local_address, socket_options
        )
        stream = _DeadlineStream(inner)
        with self._lock:
            self._streams.add(stream)
        return stream

    def connect_unix_socket(
        self,
        path: str,
        timeout: float | None = None,
        socket_options: Iterable[Any] | None = None,
    ) -> httpcore.NetworkStream:
        inner = self._inner.connect_unix_socket(
            path, _clamp(timeout, httpcore.ConnectTimeout), socket_options
        )
        stream = _DeadlineStream(inner)
        with self._lock:
            self._streams.add(stream)
        return stream

    def sleep(self, seconds: float) -> None:
        self._inner.sleep(seconds)

    def abort_all(self) -> None:
        with self._lock:
            streams = list(self._streams)
        for stream in streams:
            stream.abort()


# httpcore's exceptions as httpx's, most specific first (what httpx's own transport does).
_EXCEPTIONS: tuple[tuple[type[Exception], type[httpx.HTTPError]], ...] = (
    (httpcore.ConnectTimeout, httpx.ConnectTimeout),
    (httpcore.ReadTimeout, httpx.ReadTimeout),
    (httpcore.WriteTimeout, httpx.WriteTimeout),
    (httpcore.PoolTimeout, httpx.PoolTimeout),
    (httpcore.TimeoutException, httpx.TimeoutException),
    (httpcore.ConnectError, httpx.ConnectError),
    (httpcore.ReadError, httpx.ReadError),
    (httpcore.WriteError, httpx.WriteError),
    (httpcore.NetworkError, httpx.NetworkError),
    (httpcore.UnsupportedProtocol, httpx.UnsupportedProtocol),
    (httpcore.RemoteProtocolError, httpx.RemoteProtocolError),
    (httpcore.LocalProtocolError, httpx.LocalProtocolError),
    (httpcore.ProtocolError, httpx.ProtocolError),
)


@contextlib.contextmanager
def _as_httpx() -> Iterator[None]:
    try:
        yield
    except httpcore.ProxyError as exc:  # not used (no proxies), but keep it an httpx error
        raise httpx.ProxyError(str(exc)) from exc
    except Exception as exc:
        for source, target in _EXCEPTIONS:
            if isinstance(exc, source):
                raise target(str(exc)) from exc
        raise


class _Body(httpx.SyncByteStream):
    def __init__(self, stream: Iterable[bytes]) -> None:
        self._stream = stream

    def __iter__(self) -> Iterator[bytes]:
        with _as_httpx():
            yield from self._stream

    def close(self) -> None:
        close = getattr(self._stream, "close", None)
        if callable(close):
            close()


class PollTransport(httpx.BaseTransport):
    """HTTP/1.1 over httpcore whose every socket wait ends by the thread's :class:`Deadline`.

    What ``httpx.HTTPTransport`` does (one small connection pool, TLS, exceptions mapped
    to httpx's), on a network backend that clamps each wait to the deadline set by
    :func:`bounded` — so a target trickling its head one byte at a time is cut off by
    the deadline, not kept alive by each byte — and can :meth:`abort` every wait.
    The system's proxy settings do not apply.
    """

    def __init__(self, *, max_connections: int = 2, max_keepalive_connections: int = 1) -> None:
        self._backend = _DeadlineBackend()
        self._pool = httpcore.ConnectionPool(
            ssl_context=httpx.create_ssl_context(),
            max_connections=max_connections,
            max_keepalive_connections=max_keepalive_connections,
            network_backend=self._backend,
        )

    def handle_request(self, request: httpx.Request) -> httpx.Response:
        req = httpcore.Request(
            method=request.method,
            url=httpcore.URL(
                scheme=request.url.raw_scheme,
                host=request.url.raw_host,
                port=request.url.port,
                target=request.url.raw_path,
            ),
            headers=request.headers.raw,
            content=request.stream,
            extensions=request.extensions,
        )
        with _as_httpx():
            resp = self._pool.handle_request(req)
        assert isinstance(resp.stream, Iterable)
        return httpx.Response(
            status_code=resp.status,
            headers=resp.headers,
            stream=_Body(resp.stream),
            extensions=resp.extensions,
        )

    def abort(self) -> None:
        """End every socket wait now (from any thread): the exporter is stopping."""
        self._backend.abort_all()

    def close(self) -> None:
        self._pool.close()


def _refused(exc: BaseException) -> bool:
    """Somewhere in the exception chain, a refused connection."""
    seen: set[int] = set()
    cur: BaseException | None = exc
    while cur is not None and id(cur) not in seen:
        seen.add(id(cur))
        if isinstance(cur, ConnectionRefusedError):
            return True
        cur = cur.__cause__ or cur.__context__
    return "refused" in str(exc).lower()


def fetch(
    transport: httpx.BaseTransport,
    url: str,
    *,
    timeout_s: float,
    max_bytes: int,
    headers: dict[str, str] | None = None,
    deadline: Deadline | None = None,
    secrets: Sequence[str] = (),
) -> FetchResult:
    """GET ``url`` by ``deadline`` and within ``timeout_s``, body at most ``max_bytes``.

    Never raises. With a :class:`PollTransport` the whole exchange, head included,
    ends by the earlier of the two. ``secrets`` (header values, keys) are masked in
    any error detail, which also never quotes a request the HTTP stack refused.
    Talks to the transport directly: no cookies, redirects or auth layers, which
    halves httpx's CPU per request (this runs for every target every few seconds).
    """
    t0 = time.perf_counter()
    m0 = time.monotonic()
    end = m0 + timeout_s
    if deadline is not None:
        end = min(end, deadline.end)
    scope = Deadline(end, deadline.cancel if deadline is not None else None)

    def fail(reason: str, detail: str, status: int | None = None) -> FetchResult:
        return FetchResult(None, reason, detail, time.perf_counter() - t0, status)

    def error_text(exc: BaseException, prefix: str = "") -> str:
        return scrub(f"{prefix}{type(exc).__name__}: {exc}", secrets)[:200]

    try:
        request = httpx.Request("GET", url, headers={**DEFAULT_HEADERS, **(headers or {})})
    except Exception as exc:  # a header value httpx cannot encode: say which, not what
        return fail("error", f"request not sent: {type(exc).__name__} in its headers or URL")
    request.extensions["timeout"] = httpx.Timeout(timeout_s).as_dict()
    try:
        with bounded(scope):
            if scope.remaining() <= 0:
                raise httpx.ConnectTimeout("the poll's deadline passed")
            resp = transport.handle_request(request)
            try:
                status = resp.status_code
                if status >= 400:
                    kind = "http_5xx" if status >= 500 else "http_4xx"
                    return fail(kind, f"HTTP {status}", status)
                length = resp.headers.get("content-length")
                if length is not None and length.isdigit() and int(length) > max_bytes:
                    return fail("too_large", f"Content-Length {length} > {max_bytes}", status)
                chunks: list[bytes] = []
                size = 0
                for chunk in resp.stream:  # type: ignore[union-attr]
                    size += len(chunk)
                    if size > max_bytes:
                        return fail("too_large", f"body over {max_bytes} bytes", status)
                    if time.monotonic() > end:
                        budget = f"{end - m0:.3g}"
                        return fail("timeout", f"body not complete within {budget} s", status)
                    chunks.append(chunk)
                body = b"".join(chunks)
                encoding = resp.headers.get("content-encoding", "identity").lower()
                if encoding not in ("identity", ""):
                    decoded = _decode(body, encoding, max_bytes)
                    if decoded is None:
                        return fail("too_large", f"decoded body over {max_bytes} bytes", status)
                    body = decoded
                return FetchResult(body, None, "", time.perf_counter() - t0, status)
            finally:
                resp.close()
    except httpx.TimeoutException:
        if scope.cancelled:
            return fail("timeout", "cut short: the exporter is stopping")
        return fail("timeout", f"no complete answer within {max(0.0, end - m0):.3g} s")
    except httpx.ConnectError as exc:
        if _refused(exc):
            return fail("refused", "connection refused")
        return fail("error", error_text(exc, "connect: "))
    except httpx.LocalProtocolError as exc:
        # Our own request was refused by the HTTP stack (its message quotes the
        # offending header value): name the failure only.
        return fail("error", f"request not sent: {type(exc).__name__} (bad header or URL)")
    except (httpx.HTTPError, OSError, zlib.error, ValueError) as exc:
        return fail("error", error_text(exc))


def _decode(body: bytes, encoding: str, max_bytes: int) -> bytes | None:
    """Inflate a body the server compressed anyway, bounded (a zip bomb is a fault too)."""
    if encoding not in ("gzip", "deflate"):
        raise ValueError(f"unsupported Content-Encoding {encoding!r}")
    inflater = zlib.decompressobj(31 if encoding == "gzip" else 15)
    out = inflater.decompress(body, max_bytes + 1)
    if len(out) > max_bytes or inflater.unconsumed_tail:
        return None
    return out
