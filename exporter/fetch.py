"""One bounded HTTP GET: a deadline for the whole exchange and a cap on the body.

A target that hangs, drips bytes or sends 50 MB is a fault with a reason, not a
stuck poller or an out-of-memory exporter. Reasons are a small fixed set so
``specload_target_scrape_errors_total{reason}`` stays bounded.
"""

from __future__ import annotations

import asyncio
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


async def _get(
    client: httpx.AsyncClient, url: str, headers: dict[str, str], max_bytes: int
) -> FetchResult:
    t0 = time.perf_counter()

    def fail(reason: str, detail: str, status: int | None = None) -> FetchResult:
        return FetchResult(None, reason, detail, time.perf_counter() - t0, status)

    async with client.stream("GET", url, headers=headers) as resp:
        status = resp.status_code
        if status >= 400:
            return fail("http_5xx" if status >= 500 else "http_4xx", f"HTTP {status}", status)
        length = resp.headers.get("content-length")
        if length is not None and length.isdigit() and int(length) > max_bytes:
            return fail("too_large", f"Content-Length {length} > {max_bytes}", status)
        chunks: list[bytes] = []
        size = 0
        async for chunk in resp.aiter_raw():
            size += len(chunk)
            if size > max_bytes:
                return fail("too_large", f"body over {max_bytes} bytes", status)
            chunks.append(chunk)
        raw = b"".join(chunks)
        encoding = resp.headers.get("content-encoding", "").lower()
        if encoding in ("gzip", "deflate", "br", "zstd"):
            decoded = _decode(raw, encoding, max_bytes)
            if decoded is None:
                return fail("too_large", f"decoded body over {max_bytes} bytes", status)
            raw = decoded
        return FetchResult(raw, None, "", time.perf_counter() - t0, status)


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


def _decode(raw: bytes, encoding: str, max_bytes: int) -> bytes | None:
    """Decompress with a bound (a zip bomb is a fault too)."""
    if encoding in ("gzip", "deflate"):
        wbits = 31 if encoding == "gzip" else 15
        d = zlib.decompressobj(wbits)
        out = d.decompress(raw, max_bytes + 1)
        if len(out) > max_bytes or d.unconsumed_tail:
            return None
        return out
    raise httpx.DecodingError(f"unsupported content-encoding {encoding}")


async def fetch(
    client: httpx.AsyncClient,
    url: str,
    *,
    timeout_s: float,
    max_bytes: int,
    headers: dict[str, str] | None = None,
) -> FetchResult:
    """GET ``url`` within ``timeout_s`` overall, body at most ``max_bytes``; never raises."""
    t0 = time.perf_counter()
    # Uncompressed: on a LAN the CPU to inflate costs more than the bytes.
    hdrs = {"Accept": "text/plain;version=0.0.4", "Accept-Encoding": "identity", **(headers or {})}

    def fail(reason: str, detail: str) -> FetchResult:
        return FetchResult(None, reason, detail, time.perf_counter() - t0)

    try:
        return await asyncio.wait_for(_get(client, url, hdrs, max_bytes), timeout_s)
    except TimeoutError:
        return fail("timeout", f"no answer within {timeout_s:g} s")
    except httpx.TimeoutException:
        return fail("timeout", f"no answer within {timeout_s:g} s")
    except httpx.ConnectError as exc:
        if _refused(exc):
            return fail("refused", "connection refused")
        return fail("error", f"connect: {exc or type(exc).__name__}")
    except (httpx.HTTPError, OSError, zlib.error) as exc:
        return fail("error", f"{type(exc).__name__}: {exc}"[:200])
