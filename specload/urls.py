"""Base-URL handling: the one place that knows where ``/v1`` goes.

Users pass ``http://h:8000``, ``http://h:8000/``, ``http://h:8000/v1`` or
``http://h:8000/v1/``; all mean the same server, and no request ever goes to
``/v1/v1`` (a trap seen in practice).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from urllib.parse import urlsplit, urlunsplit

from specload.errors import UsageError
from specload.redact import redact_url, scrub

__all__ = ["ServerURL", "parse_server_url", "redact_text", "redact_url"]


_BRACKETED = re.compile(r"\[[0-9A-Fa-f:.]+(%[A-Za-z0-9._~-]+)?\](:[0-9]*)?")


def redact_text(text: str) -> str:
    """Every URL's userinfo in free text (a log line, an error) replaced by ``***``."""
    return scrub(text)


@dataclass(frozen=True)
class ServerURL:
    """A server's root (scheme://host:port[/prefix]) with its well-known paths."""

    root: str

    @property
    def api(self) -> str:
        """The OpenAI-compatible API base, ending in ``/v1`` (no trailing slash)."""
        return self.root + "/v1"

    @property
    def chat_completions(self) -> str:
        return self.api + "/chat/completions"

    @property
    def completions(self) -> str:
        return self.api + "/completions"

    @property
    def models(self) -> str:
        return self.api + "/models"

    @property
    def health(self) -> str:
        return self.root + "/health"

    @property
    def metrics(self) -> str:
        return self.root + "/metrics"

    @property
    def version(self) -> str:
        return self.root + "/version"

    @property
    def host_port(self) -> tuple[str, int]:
        parts = urlsplit(self.root)
        assert parts.hostname is not None
        default = 443 if parts.scheme == "https" else 80
        return parts.hostname, parts.port or default

    @property
    def display(self) -> str:
        """The root as shown and stored: userinfo (a password) replaced by ``***``."""
        return redact_url(self.root)

    def join(self, path: str) -> str:
        """Root plus ``path`` (``/start_profile``), exactly one slash between."""
        return self.root + "/" + path.lstrip("/")


def parse_server_url(url: str, *, name: str = "--host") -> ServerURL:
    """Normalise a user-given base URL; raise :class:`UsageError` naming ``name``."""
    text = url.strip()
    if "://" not in text:
        text = "http://" + text
    shown = repr(redact_url(url))  # never a password in an error
    try:
        parts = urlsplit(text)
        hostname = parts.hostname
    except ValueError:  # e.g. an unbalanced IPv6 bracket: "http://[::1:8000"
        raise UsageError(f"{name}: {shown} is not a valid URL") from None
    if parts.scheme not in ("http", "https") or not hostname:
        raise UsageError(f"{name}: {shown} is not an http(s) URL")
    hostport = parts.netloc.rpartition("@")[2]
    bracketed = "[" in hostport or "]" in hostport
    if bracketed and not _BRACKETED.fullmatch(hostport):  # "[::1]x:80", "[::1]]:80"
        raise UsageError(f"{name}: {shown} is not a valid URL")
    try:
        _ = parts.port
    except ValueError:
        raise UsageError(f"{name}: {shown} has an invalid port") from None
    if parts.query or parts.fragment:
        raise UsageError(f"{name}: {shown} must not carry a query or fragment")
    path = parts.path.rstrip("/")
    while path.endswith("/v1"):
        path = path[: -len("/v1")].rstrip("/")
    return ServerURL(urlunsplit((parts.scheme, parts.netloc, path, "", "")))
