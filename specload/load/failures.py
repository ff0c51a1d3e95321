"""How a request fails: :class:`RequestFailed`, raised by the HTTP client's parts.

Its ``kind`` is the record's ``error_kind``: ``refused``, ``reset`` (connection lost
or closed mid-response), ``protocol`` (not HTTP, or framing the reader cannot parse:
a bad chunk size line, heads over their caps, conflicting lengths — the detail names
the rule broken), ``timeout``, ``http_<status>``, ``content_type`` (a 2xx answer of
another content type than the request asked for), ``content_encoding`` (a 2xx answer
with a content or transfer coding the client did not ask for, e.g. gzip; the detail:
the coding);
the chat requester adds the meter's kinds (``malformed``, ``malformed_usage``, …).
``retry_after_s``: the wait a failed response asked for (``Retry-After``, seconds).

The pacing of a user after failed requests (:func:`pause_s`, applied by the Locust
user): so a target answering only errors is not flooded.
"""

from __future__ import annotations

BACKOFF_FIRST_S = 0.25  # the wait after a first failed request
BACKOFF_MAX_S = 8.0  # the longest, from the 6th failed request in a row on
RETRY_AFTER_MAX_S = 60.0  # a longer Retry-After is waited for this long


def backoff_s(failures: int) -> float:
    """The wait after the ``failures``-th failed request in a row: 0.25 s, 0.5, 1, 2, 4,
    then 8 s; 0 without failures."""
    if failures <= 0:
        return 0.0
    return min(BACKOFF_MAX_S, BACKOFF_FIRST_S * 2.0 ** min(failures - 1, 16))


def pause_s(failures: int, retry_after_s: float | None) -> float:
    """The wait before the next request after ``failures`` failed ones in a row: the
    backoff, or ``Retry-After`` (at most :data:`RETRY_AFTER_MAX_S`) when that is longer."""
    wait = backoff_s(failures)
    if retry_after_s is not None and retry_after_s > wait:
        wait = min(retry_after_s, RETRY_AFTER_MAX_S)
    return wait


class RequestFailed(Exception):
    """A request that failed, with its error class (``kind``)."""

    def __init__(
        self,
        kind: str,
        detail: str = "",
        status: int | None = None,
        retry_after_s: float | None = None,
    ) -> None:
        super().__init__(f"{kind}: {detail}" if detail else kind)
        self.kind = kind
        self.detail = detail
        self.status = status
        self.retry_after_s = retry_after_s


class Stale(Exception):
    """A kept-alive connection the server had closed; retry on a fresh one."""
