"""The readiness gate: wait until ``/health`` and ``/v1/models`` answer, with a timeout.

vLLM does not listen at all while it loads (connections are refused), so a
run started too early would measure nothing but errors. The gate polls both
endpoints, reports a countdown through ``on_wait``, and raises
:class:`UsageError` naming the host when the timeout passes (exit 3).

Refused connections, timeouts, 5xx and a server that lists no model yet are waited
for; an answer that waiting cannot change ends the wait at once with one line that
says what to do (exit 2): 401/403 (the API key), 404 (a URL that is not the server's
base), a redirect (where it points), TLS on one side only, a ``--model`` the server
does not list. The operator's SIGINT/SIGTERM end any wait (:class:`Interrupted`).
"""

from __future__ import annotations

import socket
import ssl
import time
from collections.abc import Callable
from dataclasses import dataclass
from urllib.parse import urljoin, urlsplit, urlunsplit

import httpx

from specload.errors import UsageError
from specload.urls import ServerURL, redact_url

# on_wait(seconds_left, last_problem)
WaitCallback = Callable[[float, str], None]
# How often a wait asks whether the operator stopped the run (SIGINT, SIGTERM).
STOP_CHECK_S = 0.1
MODELS_SHOWN = 10  # the models named when --model is not one of them


@dataclass(frozen=True)
class Ready:
    models: tuple[str, ...]
    server_version: str | None
    waited_s: float
    # specload's simulator: its time scale (real seconds per reference second), from /version
    time_scale: float | None = None


def _problem(exc: Exception) -> str:
    if isinstance(exc, httpx.ConnectError):
        return "connection refused"
    if isinstance(exc, httpx.TimeoutException):
        return "timed out"
    if isinstance(exc, httpx.HTTPStatusError):
        return f"HTTP {exc.response.status_code}"
    return f"{type(exc).__name__}: {exc}"


class Interrupted(Exception):
    """A wait ended by the operator (SIGINT, SIGTERM); ``reason`` names the signal."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


def _ssl_error(exc: BaseException) -> ssl.SSLError | None:
    """The TLS error behind an httpx error, if there is one."""
    seen: BaseException | None = exc
    for _ in range(8):  # a cause chain is short; never loop on a cycle
        if seen is None:
            return None
        if isinstance(seen, ssl.SSLError):
            return seen
        seen = seen.__cause__ or seen.__context__
    return None


def speaks_tls(url: ServerURL, timeout_s: float = 2.0) -> bool:
    """True when the target's port completes a TLS handshake (certificate not checked)."""
    host, port = url.host_port
    context = ssl.create_default_context()
    context.check_hostname = False
    context.verify_mode = ssl.CERT_NONE
    try:
        with (
            socket.create_connection((host, port), timeout=timeout_s) as raw,
            context.wrap_socket(raw, server_hostname=host),
        ):
            return True
    except (OSError, ValueError):
        return False


def _base_suggestion(url: ServerURL) -> str | None:
    """The server's base URL for a ``--host`` that names a path (a pasted endpoint URL)."""
    parts = urlsplit(url.root)
    if not parts.path.strip("/"):
        return None
    path = parts.path
    # http://h:8000/v1/chat/completions -> http://h:8000; a prefix before /v1 is kept
    cut = path.find("/v1/")
    prefix = path[:cut] if cut >= 0 else ""
    return redact_url(urlunsplit((parts.scheme, parts.netloc, prefix, "", "")))


def _endpoint_base(location: str, path: str) -> str | None:
    """The base URL a redirect of ``path`` points to (``https://h`` for ``https://h/health``)."""
    for suffix in (path, "/v1/models", "/health"):
        if location.rstrip("/").endswith(suffix):
            return location.rstrip("/")[: -len(suffix)] or None
    return None


def permanent(
    url: ServerURL, exc: Exception, *, api_key: bool = False, what: str = "--host"
) -> UsageError | None:
    """The one-line error for an answer that waiting will not change, else None.

    401/403 (the API key), 404 (a URL that is not the server's base), a redirect, TLS
    spoken on one side only. Refused connections, timeouts, 5xx and a loading server are
    transient: waited for.
    """
    head = f"{what} {url.display}"
    if isinstance(exc, httpx.HTTPStatusError):
        response = exc.response
        status = response.status_code
        path = urlsplit(str(response.request.url)).path or "/"
        if status in (401, 403):
            if api_key:
                hint = "the server refuses the API key given (--api-key or env SPECLOAD_API_KEY)"
            else:
                hint = "the server wants an API key: give it with --api-key or env SPECLOAD_API_KEY"
            return UsageError(f"{head}: {path} answers HTTP {status}: {hint}")
        if status == 404:
            base = _base_suggestion(url)
            hint = (
                f"use --host {base} (the server's base URL, not an endpoint's)"
                if base
                else "no OpenAI-compatible API at this address"
            )
            return UsageError(f"{head}: {path} answers HTTP 404 (not found): {hint}")
        if 300 <= status < 400:
            location = response.headers.get("location")
            if not location:
                return UsageError(f"{head}: {path} answers a redirect (HTTP {status}) to nowhere")
            target = redact_url(urljoin(str(response.request.url), location))
            base = _endpoint_base(target, path)
            return UsageError(
                f"{head}: {path} redirects (HTTP {status}) to {target}"
                + (f": use --host {base}" if base else "")
            )
        if status == 400 and url.root.startswith("http://") and speaks_tls(url):
            return _tls_error(url, head)
        return None
    if url.root.startswith("https://"):
        tls = _ssl_error(exc)
        if tls is not None and isinstance(exc, httpx.ConnectError):
            reason = getattr(tls, "reason", None) or type(tls).__name__
            if isinstance(tls, ssl.SSLCertVerificationError):
                detail = getattr(tls, "verify_message", None) or reason
                return UsageError(f"{head}: the server's TLS certificate is not trusted ({detail})")
            plain = redact_url("http://" + url.root[len("https://") :])
            return UsageError(f"{head}: the port does not speak TLS ({reason}): use --host {plain}")
        return None
    if isinstance(exc, httpx.RemoteProtocolError | httpx.ReadError) and speaks_tls(url):
        return _tls_error(url, head)
    return None


def _tls_error(url: ServerURL, head: str) -> UsageError:
    secure = redact_url("https://" + url.root[len("http://") :])
    return UsageError(f"{head}: the port speaks TLS (HTTPS), not plain HTTP: use --host {secure}")


def probe(
    url: ServerURL,
    api_key: str | None = None,
    timeout_s: float = 5.0,
    transport: httpx.BaseTransport | None = None,
) -> tuple[str, ...]:
    """One check: ``/health`` answers 200 and ``/v1/models`` lists a model; returns model ids."""
    headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
    with httpx.Client(timeout=timeout_s, headers=headers, transport=transport) as client:
        client.get(url.health).raise_for_status()
        response = client.get(url.models)
        response.raise_for_status()
        body = response.json()
    data = body.get("data", []) if isinstance(body, dict) else []
    ids = tuple(str(m["id"]) for m in data if isinstance(m, dict) and "id" in m)
    if not ids:
        raise ValueError("/v1/models lists no model")
    return ids


def is_refusing(
    url: ServerURL, timeout_s: float = 2.0, transport: httpx.BaseTransport | None = None
) -> bool:
    """True when the target does not answer ``/health`` with 200 (refused, reset, timeout, 5xx)."""
    try:
        with httpx.Client(timeout=timeout_s, transport=transport) as client:
            client.get(url.health).raise_for_status()
    except (httpx.HTTPError, OSError):
        return True
    return False


def server_version(url: ServerURL, timeout_s: float = 5.0) -> str | None:
    return version_info(url, timeout_s)[0]


def version_info(
    url: ServerURL, timeout_s: float = 5.0, transport: httpx.BaseTransport | None = None
) -> tuple[str | None, float | None]:
    """``/version``: the server's version, and the simulator's time scale when it is one."""
    try:
        with httpx.Client(timeout=timeout_s, transport=transport) as client:
            response = client.get(url.version)
        response.raise_for_status()
        body = response.json()
        version = body.get("version")
        sim = body.get("specload_simulator")
        scale = sim.get("time_scale") if isinstance(sim, dict) else None
    except (httpx.HTTPError, ValueError, AttributeError, OSError):
        return None, None
    time_scale = None
    if isinstance(scale, int | float) and not isinstance(scale, bool) and scale > 0:
        time_scale = float(scale)
    return (str(version) if version is not None else None), time_scale


def check_model(model: str | None, models: tuple[str, ...]) -> None:
    """``--model`` must be one the server lists: else every request would fail (exit 2)."""
    if not model or model in models:
        return
    shown = ", ".join(models[:MODELS_SHOWN])
    if len(models) > MODELS_SHOWN:
        shown += f" and {len(models) - MODELS_SHOWN} more"
    raise UsageError(f"--model {model!r}: the server does not serve it; it lists {shown}")


def wait_ready(
    url: ServerURL,
    *,
    timeout_s: float,
    api_key: str | None = None,
    interval_s: float = 0.5,
    on_wait: WaitCallback | None = None,
    clock: Callable[[], float] = time.monotonic,
    sleep: Callable[[float], None] = time.sleep,
    what: str = "--host",
    model: str | None = None,
    stop: Callable[[], str | None] | None = None,
    transport: httpx.BaseTransport | None = None,
) -> Ready:
    """Poll until ready; raise :class:`UsageError` after ``timeout_s``.

    An answer that waiting will not change (:func:`permanent`) raises at once (exit 2);
    so does a ``model`` the server does not list. ``stop()`` (a signal's name, or None)
    is asked before every probe and every ``STOP_CHECK_S`` of the sleeps between them:
    :class:`Interrupted` when it names one.
    """
    start = clock()
    problem = "not checked yet"

    def check_stop() -> None:
        reason = stop() if stop is not None else None
        if reason is not None:
            raise Interrupted(reason)

    while True:
        check_stop()
        try:
            models = probe(
                url, api_key, timeout_s=min(5.0, max(timeout_s, 0.5)), transport=transport
            )
        except (httpx.HTTPError, ValueError, OSError) as exc:
            error = permanent(url, exc, api_key=bool(api_key), what=what)
            if error is not None:
                raise error from None
            problem = _problem(exc)
        else:
            check_model(model, models)
            version, scale = version_info(url, transport=transport)
            return Ready(models, version, clock() - start, scale)
        left = timeout_s - (clock() - start)
        if left <= 0:
            raise UsageError(
                f"{what} {url.display}: not ready after {timeout_s:g}s "
                f"(/health and /v1/models: {problem})",
                exit_code=3,
            )
        if on_wait is not None:
            on_wait(left, problem)
        pause_end = clock() + min(interval_s, left)
        while (pause := pause_end - clock()) > 0:
            sleep(min(pause, STOP_CHECK_S))
            check_stop()
