"""How a request fails: :class:`RequestFailed`, raised by the HTTP client's parts.

Its ``kind`` is the record's ``error_kind``: ``refused``, ``reset`` (connection lost
or closed mid-response), ``protocol`` (not HTTP), ``timeout``, ``http_<status>``;
the chat requester adds the meter's kinds (``malformed``, ``malformed_usage``, …).
"""

from __future__ import annotations


class RequestFailed(Exception):
    """A request that failed, with its error class (``kind``)."""

    def __init__(self, kind: str, detail: str = "", status: int | None = None) -> None:
        super().__init__(f"{kind}: {detail}" if detail else kind)
        self.kind = kind
        self.detail = detail
        self.status = status


class Stale(Exception):
    """A kept-alive connection the server had closed; retry on a fresh one."""
