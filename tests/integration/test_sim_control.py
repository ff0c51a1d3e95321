"""The simulator's control port answers loopback tools only: a web page (a cross-site form or
fetch, a DNS-rebinding page) cannot reload or degrade it; its numbers are bounded."""

from __future__ import annotations

import socket
import time
from collections.abc import Callable

import httpx
import pytest

from tests.fixtures.sim import SimHandle

pytestmark = pytest.mark.integration


def raw(port: int, request: bytes) -> tuple[int, bytes]:
    """Send bytes as a browser would put them on the wire; (status, body)."""
    with socket.create_connection(("127.0.0.1", port), timeout=5) as sock:
        sock.sendall(request)
        data = b""
        while chunk := sock.recv(65536):
            data += chunk
            head, sep, body = data.partition(b"\r\n\r\n")
            if sep and b"content-length:" in head.lower():
                length = int(head.lower().split(b"content-length:")[1].split(b"\r\n")[0])
                if len(body) >= length:
                    break
    return int(data.split(b" ", 2)[1]), data.partition(b"\r\n\r\n")[2]


def test_cross_site_requests_are_refused(sim_factory: Callable[..., SimHandle]) -> None:
    sim = sim_factory(["--time-scale", "50"])
    port, url = sim.control_port, sim.control_url
    before = sim.state()
    # A page's <form method=post enctype=text/plain> / fetch(no-cors): any Origin, text/plain.
    form = (
        b"POST /reload HTTP/1.1\r\nHost: 127.0.0.1:%d\r\nOrigin: http://evil.example\r\n"
        b"Content-Type: text/plain\r\nContent-Length: 20\r\nConnection: close\r\n\r\n"
        b'{"variant": "ngram"}' % port
    )
    status, _ = raw(port, form)
    assert status == 403
    no_origin = form.replace(b"Origin: http://evil.example\r\n", b"")
    status, body = raw(port, no_origin)
    assert status == 415 and b"application/json" in body
    for headers, content in (
        ({}, b""),  # no body, no type: fetch(url, {method: "POST", mode: "no-cors"})
        ({"Content-Type": "application/x-www-form-urlencoded"}, b"variant=ngram"),
        ({"Content-Type": "multipart/form-data; boundary=x"}, b"--x--"),
    ):
        r = httpx.post(url + "/reload", content=content, headers=headers)
        assert r.status_code == 415, (headers, r.status_code)
    # DNS rebinding: the page's own name in Host, even with JSON; reading /state too.
    for host in (f"evil.example:{port}", "evil.example", f"127.0.0.1:{port + 1}", "127.0.0.1"):
        r = httpx.post(url + "/reload", json={"variant": "ngram"}, headers={"Host": host})
        assert r.status_code == 403, host
        assert httpx.get(url + "/state", headers={"Host": host}).status_code == 403
    r = httpx.post(url + "/degrade", json={"factor": 50}, headers={"Origin": "http://evil.example"})
    assert r.status_code == 403
    r = httpx.post(url + "/degrade", json={"factor": 50}, headers={"Origin": "null"})
    assert r.status_code == 403
    after = sim.state()
    assert after["generation"] == before["generation"] == 1
    assert after["variant"] == "baseline" and after["degrade"]["factor"] == 1.0

    # Loopback tools sending JSON (what `specload stack reload` sends) still work.
    for host in (f"127.0.0.1:{port}", f"localhost:{port}", f"LOCALHOST:{port}", f"[::1]:{port}"):
        assert httpx.get(url + "/state", headers={"Host": host}).status_code == 200, host
    r = httpx.post(
        url + "/degrade",
        json={"factor": 1, "after": 0},
        headers={"Origin": f"http://localhost:{port}"},
    )
    assert r.status_code == 200 and r.json() == {"factor": 1, "after": 0}
    r = httpx.post(url + "/reload", json={"variant": "ngram"}, timeout=10.0)
    assert r.status_code == 202
    deadline = time.monotonic() + 20
    while sim.state()["generation"] < 2 and time.monotonic() < deadline:
        time.sleep(0.05)
    assert sim.state()["variant"] == "ngram"


@pytest.mark.parametrize(
    ("path", "body", "needle"),
    [
        ("/reload", b'{"load_time": 1e308}', "load_time 1e+308: must be a number in [0, 86400]"),
        ("/reload", b'{"load_time": 1e400}', "not JSON"),
        ("/reload", b'{"load_time": true}', "load_time: must be a number"),
        ("/reload", b'{"load_time": -1}', "load_time -1: must be"),
        ("/reload", b'{"variant": ["ngram"]}', "variant: must be a string"),
        ("/degrade", b'{"factor": 1e308}', "factor 1e+308: must be a number in (0, 1000]"),
        ("/degrade", b'{"factor": 0}', "factor 0: must be"),
        ("/degrade", b'{"after": 1e12}', "after 1e+12: must be a number in [0, 86400]"),
        ("/degrade", b'{"factor": "3"}', "factor: must be a number"),
    ],
)
def test_control_numbers_are_bounded(
    sim_factory: Callable[..., SimHandle], path: str, body: bytes, needle: str
) -> None:
    sim = sim_factory(["--time-scale", "50"])
    r = httpx.post(
        sim.control_url + path, content=body, headers={"Content-Type": "application/json"}
    )
    assert r.status_code == 400, r.text
    assert needle in r.json()["error"], r.text
    state = sim.state()
    assert state["generation"] == 1 and state["degrade"]["factor"] == 1.0
