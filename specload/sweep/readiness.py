"""The readiness gate: wait until ``/health`` and ``/v1/models`` answer, with a timeout.

vLLM does not listen at all while it loads (connections are refused), so a
run started too early would measure nothing but errors. The gate polls both
endpoints, reports a countdown through ``on_wait``, and raises
:class:`UsageError` naming the host when the timeout passes.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass

import httpx

from specload.errors import UsageError
from specload.urls import ServerURL

# on_wait(seconds_left, last_problem)
WaitCallback = Callable[[float, str], None]


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


def probe(url: ServerURL, api_key: str | None = None, timeout_s: float = 5.0) -> tuple[str, ...]:
    """One check: ``/health`` answers 200 and ``/v1/models`` lists a model; returns model ids."""
    headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
    with httpx.Client(timeout=timeout_s, headers=headers) as client:
        client.get(url.health).raise_for_status()
        response = client.get(url.models)
        response.raise_for_status()
        body = response.json()
    ids = tuple(str(m["id"]) for m in body.get("data", []) if isinstance(m, dict) and "id" in m)
    if not ids:
        raise ValueError("/v1/models lists no model")
    return ids


def is_refusing(url: ServerURL, timeout_s: float = 2.0) -> bool:
    """True when the target does not answer ``/health`` with 200 (refused, reset, timeout, 5xx)."""
    try:
        httpx.get(url.health, timeout=timeout_s).raise_for_status()
    except (httpx.HTTPError, OSError):
        return True
    return False


def server_version(url: ServerURL, timeout_s: float = 5.0) -> str | None:
    return version_info(url, timeout_s)[0]


def version_info(url: ServerURL, timeout_s: float = 5.0) -> tuple[str | None, float | None]:
    """``/version``: the server's version, and the simulator's time scale when it is one."""
    try:
        response = httpx.get(url.version, timeout=timeout_s)
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
) -> Ready:
    """Poll until ready; raise :class:`UsageError` after ``timeout_s``."""
    start = clock()
    problem = "not checked yet"
    while True:
        try:
            models = probe(url, api_key, timeout_s=min(5.0, max(timeout_s, 0.5)))
        except (httpx.HTTPError, ValueError, OSError) as exc:
            problem = _problem(exc)
        else:
            version, scale = version_info(url)
            return Ready(models, version, clock() - start, scale)
        left = timeout_s - (clock() - start)
        if left <= 0:
            raise UsageError(
                f"{what} {url.root}: not ready after {timeout_s:g}s "
                f"(/health and /v1/models: {problem})",
                exit_code=3,
            )
        if on_wait is not None:
            on_wait(left, problem)
        sleep(min(interval_s, left))
