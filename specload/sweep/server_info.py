"""What the server tells about itself, for ``summary.json``'s ``server_info``.

``specload predict`` reads it to know the baseline's engine path
(:func:`specload.predict.engine_path.detect`): the vLLM version (``GET /version``, from the
readiness gate), the served model's ``max_model_len`` (``GET /v1/models``), the ``*_info``
families of ``/metrics`` (``vllm:cache_config_info`` …: their labels, small and bounded)
and, with ``specload run --server-log FILE``, what the server's startup log says
(:func:`specload.vllm_log.from_server_log`).

Bounded and never secret: at most :data:`MAX_FAMILIES` info families of
:data:`MAX_LABELS` labels, values cut to :data:`MAX_VALUE_CHARS`; labels whose name looks
like a credential are left out. Each part that could not be read is absent (and named in
``unread``), never guessed.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import httpx

from specload.errors import UsageError
from specload.urls import ServerURL
from specload.vllm_log import from_server_log

MAX_FAMILIES = 8
MAX_LABELS = 64
MAX_VALUE_CHARS = 120
MAX_LOG_BYTES = 64 << 20  # a startup log is kilobytes
TIMEOUT_S = 5.0
# Labels every vLLM sample carries (not information about the server) or that could hold
# a credential.
_SKIP_LABELS = frozenset({"engine", "model_name"})
_SECRET = re.compile(r"key|token|secret|passw|auth|credential", re.IGNORECASE)
_INFO_SAMPLE = re.compile(r"^(vllm:[A-Za-z0-9_:]*_info)\{(.*)\}\s+\S+\s*$")
_LABEL = re.compile(r'([A-Za-z_][A-Za-z0-9_]*)="((?:[^"\\]|\\.)*)"')


def info_families(text: str) -> dict[str, dict[str, str]]:
    """The labels of each ``vllm:*_info`` family of a /metrics page (its first sample)."""
    out: dict[str, dict[str, str]] = {}
    for line in text.splitlines():
        m = _INFO_SAMPLE.match(line)
        if m is None or m.group(1) in out:
            continue
        if len(out) >= MAX_FAMILIES:
            break
        labels: dict[str, str] = {}
        for name, raw in _LABEL.findall(m.group(2)):
            if name in _SKIP_LABELS or _SECRET.search(name) or len(labels) >= MAX_LABELS:
                continue
            value = raw.replace('\\"', '"').replace("\\\\", "\\")
            labels[name] = value[:MAX_VALUE_CHARS]
        out[m.group(1)] = labels
    return out


def max_model_len(body: Any, model: str | None) -> int | None:
    """``max_model_len`` of ``model`` (else the first model) in a /v1/models answer."""
    data = body.get("data") if isinstance(body, dict) else None
    if not isinstance(data, list):
        return None
    entries = [m for m in data if isinstance(m, dict)]
    chosen = next((m for m in entries if m.get("id") == model), entries[0] if entries else None)
    value = chosen.get("max_model_len") if chosen else None
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def read_log(path: str) -> str:
    """The server log's text (``--server-log``); a one-line error when it cannot be read."""
    try:
        p = Path(path)
        if p.stat().st_size > MAX_LOG_BYTES:
            raise UsageError(f"--server-log {path}: over {MAX_LOG_BYTES >> 20} MiB")
        return p.read_text(errors="replace")
    except OSError as exc:
        raise UsageError(f"--server-log {path}: {exc.strerror or exc}") from None


def gather(
    url: ServerURL,
    *,
    version: str | None,
    simulator: bool,
    model: str | None,
    api_key: str | None = None,
    metrics_url: str | None = None,
    server_log: str | None = None,
    transport: httpx.BaseTransport | None = None,
) -> dict[str, Any]:
    """``server_info`` for summary.json (see the module doc); ``server_log``: a file path."""
    info: dict[str, Any] = {"vllm_version": version, "simulator": simulator}
    unread: list[str] = []
    headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
    with httpx.Client(timeout=TIMEOUT_S, headers=headers, transport=transport) as client:
        try:
            response = client.get(url.models)
            response.raise_for_status()
            info["max_model_len"] = max_model_len(response.json(), model)
        except (httpx.HTTPError, ValueError, OSError):
            unread.append("/v1/models")
        if metrics_url:
            try:
                response = client.get(metrics_url)
                response.raise_for_status()
                info["metrics_info"] = info_families(response.text)
            except (httpx.HTTPError, OSError):
                unread.append("/metrics")
    if server_log is not None:
        facts = from_server_log(read_log(server_log))
        if facts:
            info["log"] = facts
        else:
            unread.append(f"--server-log {server_log}: no line of a vLLM startup log")
    if unread:
        info["unread"] = unread
    return info
