"""One bounded HTTP GET: a deadline for the whole exchange and a cap on the body.

A target that hangs, drips bytes or sends 50 MB is a fault with a reason, not a
stuck poller or an out-of-memory exporter. Every socket wait is bounded by the
timeout and the body loop checks the overall deadline after each chunk, so a
poll ends within about the timeout (at most twice it: connect, then the last
read). Reasons are a small fixed set so ``specload_target_scrape_errors_total{reason}``
stays bounded.
"""

from __future__ import annotations

import time
import zlib
from dataclasses import dataclass

import httpx

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
) -> FetchResult:
    """GET ``url`` within about ``timeout_s``, body at most ``max_bytes``; never raises.

    Talks to the transport directly: no cookies, redirects or auth layers, which
    halves httpx's CPU per request (this runs for every target every few seconds).
    """
    t0 = time.perf_counter()
    deadline = time.monotonic() + timeout_s

    def fail(reason: str, detail: str, status: int | None = None) -> FetchResult:
        return FetchResult(None, reason, detail, time.perf_counter() - t0, status)

    request = httpx.Request("GET", url, headers={**DEFAULT_HEADERS, **(headers or {})})
    request.extensions["timeout"] = httpx.Timeout(timeout_s).as_dict()
    try:
        resp = transport.handle_request(request)
        try:
            status = resp.status_code
            if status >= 400:
                return fail("http_5xx" if status >= 500 else "http_4xx", f"HTTP {status}", status)
            length = resp.headers.get("content-length")
            if length is not None and length.isdigit() and int(length) > max_bytes:
                return fail("too_large", f"Content-Length {length} > {max_bytes}", status)
            chunks: list[bytes] = []
            size = 0
            for chunk in resp.stream:  # type: ignore[union-attr]
                size += len(chunk)
                if size > max_bytes:
                    return fail("too_large", f"body over {max_bytes} bytes", status)
                if time.monotonic() > deadline:
                    return fail("timeout", f"body not complete within {timeout_s:g} s", status)
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
        return fail("timeout", f"no answer within {timeout_s:g} s")
    except httpx.ConnectError as exc:
        if _refused(exc):
            return fail("refused", "connection refused")
        return fail("error", f"connect: {exc or type(exc).__name__}")
    except (httpx.HTTPError, OSError, zlib.error, ValueError) as exc:
        return fail("error", f"{type(exc).__name__}: {exc}"[:200])


def _decode(body: bytes, encoding: str, max_bytes: int) -> bytes | None:
    """Inflate a body the server compressed anyway, bounded (a zip bomb is a fault too)."""
    if encoding not in ("gzip", "deflate"):
        raise ValueError(f"unsupported Content-Encoding {encoding!r}")
    inflater = zlib.decompressobj(31 if encoding == "gzip" else 15)
    out = inflater.decompress(body, max_bytes + 1)
    if len(out) > max_bytes or inflater.unconsumed_tail:
        return None
    return out
