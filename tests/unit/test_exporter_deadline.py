"""One deadline per poll, head included: a target dripping its response head a byte at a
time is a timeout, and stopping the poller cuts every poll short (loopback hostile servers)."""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Callable, Iterator

import pytest

from exporter.config import TargetConfig
from exporter.fetch import Deadline, FetchResult, PollTransport, fetch
from exporter.poller import Poller
from exporter.target import TargetMonitor
from specload.urls import parse_server_url

pytestmark = pytest.mark.unit

HEAD = b"HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nX-Padding: " + b"a" * 100_000


def _read_request(conn: socket.socket) -> None:
    data = b""
    while b"\r\n\r\n" not in data:
        more = conn.recv(4096)
        if not more:
            return
        data += more


def trickle(conn: socket.socket) -> None:
    """The response head one byte every 20 ms (for minutes): each read is quick."""
    for byte in HEAD:
        conn.sendall(bytes([byte]))
        time.sleep(0.02)


def hang(conn: socket.socket) -> None:
    """Read the request, answer nothing."""
    conn.recv(1)


@pytest.fixture
def hostile() -> Iterator[Callable[[Callable[[socket.socket], None]], str]]:
    socks: list[socket.socket] = []

    def start(behaviour: Callable[[socket.socket], None]) -> str:
        srv = socket.create_server(("127.0.0.1", 0))
        socks.append(srv)

        def serve() -> None:
            while True:
                try:
                    conn, _ = srv.accept()
                except OSError:
                    return
                socks.append(conn)
                threading.Thread(target=handle, args=(conn,), daemon=True).start()

        def handle(conn: socket.socket) -> None:
            try:
                _read_request(conn)
                behaviour(conn)
            except OSError:
                pass  # the client hung up, as it should
            finally:
                conn.close()

        threading.Thread(target=serve, daemon=True).start()
        return f"http://127.0.0.1:{srv.getsockname()[1]}"

    yield start
    for s in socks:
        s.close()


def fetch_in_thread(**kwargs: object) -> tuple[FetchResult | None, float]:
    """Run fetch with a guard: on code without the deadline it would drip for minutes."""
    out: list[FetchResult] = []
    t0 = time.monotonic()
    thread = threading.Thread(target=lambda: out.append(fetch(**kwargs)), daemon=True)  # type: ignore[arg-type]
    thread.start()
    thread.join(10)
    return (out[0] if out else None), time.monotonic() - t0


def test_a_trickling_head_is_a_timeout_at_the_deadline(hostile: Callable[..., str]) -> None:
    url = hostile(trickle)
    transport = PollTransport()
    try:
        res, took = fetch_in_thread(
            transport=transport, url=url + "/metrics", timeout_s=1.0, max_bytes=1 << 20
        )
    finally:
        transport.close()
    assert res is not None, "fetch still running after 10 s"
    assert res.reason == "timeout", res
    assert 0.9 < took < 2.0, took


def test_the_poll_deadline_also_bounds_a_later_request(hostile: Callable[..., str]) -> None:
    url = hostile(hang)
    transport = PollTransport()
    try:
        res, took = fetch_in_thread(
            transport=transport,
            url=url + "/metrics",
            timeout_s=5.0,
            max_bytes=1 << 20,
            deadline=Deadline.after(0.5),  # what /metrics left to /version
        )
    finally:
        transport.close()
    assert res is not None and res.reason == "timeout"
    assert took < 1.5, took


def test_stop_cuts_polls_under_way_short(hostile: Callable[..., str]) -> None:
    monitors = [
        TargetMonitor(
            TargetConfig(variant=name, url=parse_server_url(hostile(behaviour))),
            timeout_s=30.0,
            max_bytes=1 << 20,
        )
        for name, behaviour in (("trickle", trickle), ("hang", hang))
    ]
    poller = Poller(monitors, interval_s=60.0)
    poller.start()
    time.sleep(0.5)  # both polls are waiting on their target now
    t0 = time.monotonic()
    poller.stop()
    assert time.monotonic() - t0 < 1.0
