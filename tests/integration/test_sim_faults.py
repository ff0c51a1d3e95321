"""Faults on demand, each at rate 1, and the server survives all of them."""

from __future__ import annotations

import json
import socket
import time
from collections.abc import Callable

import httpx
import pytest

from specload.sse import DONE, SSEDecoder
from tests.fixtures.sim import SimHandle

pytestmark = pytest.mark.integration

BODY = {"messages": [{"role": "user", "content": "x"}], "max_tokens": 40, "stream": True}
FIXED = [
    "--timing",
    "fixed",
    "--fixed-ttft",
    "0.01",
    "--fixed-itl",
    "0.002",
    "--fixed-reasoning-tokens",
    "30",
    "--fixed-content-tokens",
    "10",
]


def raw_stream(url: str) -> tuple[list[bytes], bytes]:
    """Events and any bytes left over, reading until the server ends or drops the stream."""
    decoder = SSEDecoder()
    events: list[bytes] = []
    with httpx.stream("POST", url + "/v1/chat/completions", json=BODY, timeout=10) as r:
        assert r.status_code == 200
        for data in r.iter_raw():
            events.extend(decoder.feed(data))
    return events, decoder.pending


@pytest.mark.parametrize(("kind", "status"), [("http500", 500), ("http503", 503), ("http429", 429)])
def test_status_faults(sim_factory: Callable[..., SimHandle], kind: str, status: int) -> None:
    sim = sim_factory([*FIXED, "--fault-rate", f"{kind}=1"])
    r = httpx.post(sim.url + "/v1/chat/completions", json=BODY, timeout=10)
    assert r.status_code == status
    assert r.json()["error"]["code"] == status


def test_reset_mid_stream(sim_factory: Callable[..., SimHandle]) -> None:
    sim = sim_factory([*FIXED, "--fault-rate", "reset=1"])
    with pytest.raises(httpx.HTTPError):
        raw_stream(sim.url)
    assert httpx.get(sim.url + "/health").status_code == 200


def test_malformed_chunk(sim_factory: Callable[..., SimHandle]) -> None:
    sim = sim_factory([*FIXED, "--fault-rate", "malformed=1"])
    events, _ = raw_stream(sim.url)
    bad = []
    for e in events:
        if e == DONE:
            continue
        try:
            json.loads(e)
        except json.JSONDecodeError:
            bad.append(e)
    assert len(bad) == 1
    assert events[-1] == DONE


def test_no_done(sim_factory: Callable[..., SimHandle]) -> None:
    sim = sim_factory([*FIXED, "--fault-rate", "no-done=1"])
    events, pending = raw_stream(sim.url)
    assert events and DONE not in events and not pending
    assert json.loads(events[-1])["choices"][0]["finish_reason"] == "stop"


@pytest.mark.serial  # a 3 s timeout measured to 0.1 s
def test_stall_longer_than_client_timeout(sim_factory: Callable[..., SimHandle]) -> None:
    sim = sim_factory([*FIXED, "--fault-rate", "stall=1", "--stall-seconds", "3"])
    start = time.monotonic()
    with pytest.raises(httpx.ReadTimeout):
        with httpx.stream(
            "POST", sim.url + "/v1/chat/completions", json=BODY, timeout=httpx.Timeout(10, read=0.5)
        ) as r:
            for _ in r.iter_raw():
                pass
    assert time.monotonic() - start < 3
    # Without a timeout the stream completes after the stall.
    start = time.monotonic()
    events, _ = raw_stream(sim.url)
    assert events[-1] == DONE
    assert time.monotonic() - start >= 2.9


def test_garbage_and_disconnects_do_not_crash(sim_factory: Callable[..., SimHandle]) -> None:
    sim = sim_factory(["--time-scale", "50"])
    for payload in (
        b"GARBAGE\r\n\r\n",
        b"GET / HTTP/1.1\r\nContent-Length: x\r\n\r\n",
        b"POST /v1/chat/completions HTTP/1.1\r\nContent-Length: 1000\r\n\r\n{",
    ):
        with socket.create_connection(("127.0.0.1", sim.port), timeout=2) as s:
            s.sendall(payload)
    assert httpx.get(sim.url + "/health").status_code == 200
    assert sim.proc.poll() is None
