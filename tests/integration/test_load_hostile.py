"""Locust users against hostile loopback servers: a target answering only errors is
not flooded (one connection per user, the backoff schedule, Retry-After honoured), and
an HTML page in place of a stream is ``content_type``.

The servers (``tests.fixtures.canned``, one answer for every request) run in this process
and stamp, per connection, when each request arrived and when its answer was sent; Locust
runs as a real process (the reactor path).
"""

from __future__ import annotations

from typing import Any

import pytest

from specload.load.failures import pause_s

pytestmark = pytest.mark.integration

USERS = 4
SECONDS = 3.0
# Server-side stamps: the client sleeps after it read the answer, so the gap from the
# answer's send to the next request is at least the wait (less a timer's jitter).
TIMER_SLACK_S = 0.01


def too_many(retry_after: bytes | None) -> bytes:
    body = b'{"error":{"message":"rate limited","code":429}}'
    extra = b"Retry-After: %s\r\n" % retry_after if retry_after else b""
    return (
        b"HTTP/1.1 429 Too Many Requests\r\ncontent-type: application/json\r\n%s"
        b"content-length: %d\r\n\r\n%s" % (extra, len(body), body)
    )


def max_requests(seconds: float, retry_after_s: float | None) -> int:
    """The most requests one user can send in ``seconds`` when every one fails."""
    count, t = 1, 0.0
    while t + pause_s(count, retry_after_s) <= seconds:
        t += pause_s(count, retry_after_s)
        count += 1
    return count


def test_max_requests_follows_the_schedule() -> None:
    assert max_requests(3.0, None) == 4  # 0, 0.25, 0.75, 1.75 (then 3.75)
    assert max_requests(3.0, 1.0) == 4  # 0, 1, 2, 3 (then 5: the backoff is 2 s by then)
    # 0, 0.25, 0.75, 1.75, 3.75, 7.75, 15.75 (then 23.75: 8 s each from the 6th wait on)
    assert max_requests(20.0, None) == 7


@pytest.mark.parametrize("retry_after", [None, b"1"], ids=["no-retry-after", "retry-after-1"])
def test_a_target_answering_only_429_is_not_flooded(
    canned: Any, run_locust: Any, retry_after: bytes | None
) -> None:
    server = canned([too_many(retry_after)], repeat_last=True)
    run = run_locust(server.url, users=USERS, seconds=SECONDS, args=["--model", "m"])
    assert run.returncode in (0, 1), run.stderr[-2000:]
    assert "Traceback" not in run.stderr
    every = run.records + run.unfinished
    assert every and {r["error_kind"] for r in run.records} == {"http_429"}
    assert all(r["http_status"] == 429 and "rate limited" in r["error_detail"] for r in run.records)
    with server.lock:
        connections = [list(c) for c in server.stamps if c]
    # One connection per user: error answers are read whole and the connection kept.
    assert len(connections) <= USERS, [len(c) for c in connections]
    assert sum(map(len, connections)) == len(every)
    wait = None if retry_after is None else float(retry_after)
    most = max_requests(SECONDS + 0.1, wait)
    for stamps in connections:
        assert len(stamps) <= most, stamps
        # The k-th wait: the backoff after k failures, at least Retry-After.
        for k in range(1, len(stamps)):
            gap = stamps[k][0] - stamps[k - 1][1]
            assert gap >= pause_s(k, wait) - TIMER_SLACK_S, (k, gap, stamps)
    assert len(every) <= USERS * most


def test_an_html_page_instead_of_a_stream_is_content_type(canned: Any, run_locust: Any) -> None:
    page = b"<html><body>Please sign in</body></html>"
    server = canned(
        [
            b"HTTP/1.1 200 OK\r\ncontent-type: text/html; charset=utf-8\r\n"
            b"content-length: %d\r\n\r\n%s" % (len(page), page)
        ],
        repeat_last=True,
    )
    run = run_locust(server.url, users=2, seconds=2, args=["--model", "m"])
    assert run.returncode in (0, 1), run.stderr[-2000:]
    assert run.records and {r["error_kind"] for r in run.records} == {"content_type"}
    for r in run.records:
        assert r["http_status"] == 200 and r["tokens_output"] == 0
        assert r["error_detail"].startswith("text/html; charset=utf-8 (expected text/event-stream)")
        assert "Please sign in" in r["error_detail"]
    with server.lock:
        assert len([c for c in server.stamps if c]) <= 2
    assert len(run.records) <= 2 * max_requests(2.1, None)
