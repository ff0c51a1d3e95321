"""Secrets out of everything specload shows: URLs' userinfo, API keys, header values.

The one implementation, used by the exporter and by ``specload run``.

A target URL may carry ``user:password@`` and a target may have an API key. Both
are needed by the requests only: the config keeps the URL without its userinfo
(what ``/-/targets``, logs and errors show) and the credentials apart, out of
``repr``. Error text that could quote a request (an exception from the HTTP
stack) goes through :func:`scrub` before it is stored or logged.
"""

from __future__ import annotations

import base64
import logging
import re
from collections.abc import Iterable
from typing import Final
from urllib.parse import unquote

#: What a redacted secret reads as.
MASK: Final = "***"

_URL_USERINFO = re.compile(r"(?i)\b([a-z][a-z0-9+.-]*://)[^/?#\s@'\"]*@")


def split_userinfo(url: str) -> tuple[str, str | None]:
    """``http://u:p@h:8000/x`` → (``http://h:8000/x``, ``u:p``); (url, None) without userinfo.

    The authority ends at the first ``/``, ``?`` or ``#`` and the userinfo at its last
    ``@``, as :func:`urllib.parse.urlsplit` reads it, so the two never disagree.
    """
    scheme, sep, rest = url.partition("://")
    prefix = scheme + sep if sep else ""
    if not sep:
        rest = url
    ends = [i for i in (rest.find(c) for c in "/?#") if i >= 0]
    end = min(ends) if ends else len(rest)
    userinfo, at, hostport = rest[:end].rpartition("@")
    if not at:
        return url, None
    return prefix + hostport + rest[end:], userinfo


def redact_url(url: str) -> str:
    """The URL with any userinfo replaced by ``***`` (``http://***@h:8000``)."""
    clean, userinfo = split_userinfo(url)
    if userinfo is None:
        return url
    scheme, sep, rest = clean.partition("://")
    return f"{scheme}{sep}{MASK}@{rest}" if sep else f"{MASK}@{clean}"


def basic_auth(userinfo: str) -> str:
    """The ``Authorization`` value for a URL's ``user:password`` (percent-decoded, UTF-8)."""
    user, _, password = userinfo.partition(":")
    token = f"{unquote(user)}:{unquote(password)}".encode()
    return "Basic " + base64.b64encode(token).decode("ascii")


def scrub(text: str, secrets: Iterable[str] = ()) -> str:
    """``text`` with URL userinfo and every secret (as written, or as ``repr`` shows it) masked.

    Secrets shorter than 4 characters are left alone (masking them would garble text
    without hiding anything).
    """
    out = _URL_USERINFO.sub(lambda m: m.group(1) + MASK + "@", text)
    forms: set[str] = set()
    for secret in secrets:
        for s in (secret, secret.strip()):
            if len(s) < 4:
                continue
            forms.add(s)
            forms.add(repr(s)[1:-1])  # escapes as in "Illegal header value 'Bearer …\\n'"
            forms.add(repr(s.encode("utf-8", "backslashreplace"))[2:-1])  # as in b'…'
    for form in sorted(forms, key=len, reverse=True):
        if form in out:
            out = out.replace(form, MASK)
    return out


class ScrubFilter(logging.Filter):
    """A handler filter masking ``secrets`` (and URL userinfo) in every record it passes.

    On the handlers, not a logger: it sees the records of every library (httpcore's
    DEBUG trace quotes the exceptions it raises) and the formatted tracebacks.
    """

    def __init__(self, secrets: Iterable[str]) -> None:
        super().__init__()
        self.secrets = tuple(s for s in secrets if s)

    def filter(self, record: logging.LogRecord) -> bool:
        message = record.getMessage()
        clean = scrub(message, self.secrets)
        if clean != message:
            record.msg, record.args = clean, None
        if record.exc_info and not record.exc_text:
            record.exc_text = logging.Formatter().formatException(record.exc_info)
        if record.exc_text:
            record.exc_text = scrub(record.exc_text, self.secrets)
        if record.stack_info:
            record.stack_info = scrub(record.stack_info, self.secrets)
        return True


def scrub_logs(secrets: Iterable[str], logger: logging.Logger | None = None) -> ScrubFilter:
    """Install a :class:`ScrubFilter` on every handler of ``logger`` (default: the root)."""
    flt = ScrubFilter(secrets)
    for handler in (logger or logging.getLogger()).handlers:
        handler.addFilter(flt)
    return flt
