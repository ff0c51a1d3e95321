"""Hostile servers on loopback against the real client: floods of interim heads, header
lines, empty lines, chunk-size and trailer bytes; bad chunk sizes; bare-LF heads; encoded
streams; a ``[DONE]`` followed by a body held open or never ending.

Each request must end at once — a named ``protocol`` (or ``content_encoding``) failure,
or complete at ``[DONE]`` — and the client's memory must stay flat under the floods.
The client runs in a subprocess with gevent's patching (the reactor path, as Locust
runs it: the C fast path, and pure Python with ``SPECLOAD_FASTPATH=0``); the servers
run in this process, write at most :data:`FLOOD_CAP` bytes per connection and count
connections. The request timeout is far beyond the wait any case may need, so a case
that waits for it fails on its error kind, not on a clock.
"""

from __future__ import annotations

import gzip
import json
import os
import socket
import subprocess
import sys
import textwrap
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import orjson
import pytest

pytestmark = pytest.mark.unit

ROOT = Path(__file__).resolve().parents[2]
FLOOD_CAP = 256 * 2**20  # bytes a flood writes per connection at most (the test's bound)
REQUEST_TIMEOUT_S = 60.0
MAX_GROWTH_MB = 50.0  # the goal: under 200 MB in all; the client's own share


def event(payload: bytes | dict[str, Any]) -> bytes:
    if isinstance(payload, dict):
        payload = orjson.dumps(payload)
    return b"data: " + payload + b"\n\n"


def chunk(data: bytes) -> bytes:
    return b"%x\r\n%s\r\n" % (len(data), data)


def token(i: int) -> bytes:
    return event({"choices": [{"delta": {"content": "t"}}], "usage": {"completion_tokens": i}})


SSE_HEAD = b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\n"
CHUNKED_HEAD = SSE_HEAD + b"transfer-encoding: chunked\r\n\r\n"
TWO = chunk(token(1)) + chunk(token(2))
DONE = chunk(event(b"[DONE]"))
END = b"0\r\n\r\n"


class Endless:
    """A flood: ``head`` once, then ``unit`` again and again (up to :data:`FLOOD_CAP`)."""

    def __init__(self, head: bytes, unit: bytes) -> None:
        self.head = head
        self.unit = unit


class Hold:
    """Keep the connection open after what was sent, sending nothing more."""


Answer = bytes | Endless | tuple[bytes, Hold]


class HostileServer:
    """Answers each request with the next answer (the last one for ever after)."""

    def __init__(self, answers: list[Answer]) -> None:
        self.answers = list(answers)
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.port = self.listener.getsockname()[1]
        self.connections = 0
        self.lock = threading.Lock()
        self.stop = threading.Event()
        threading.Thread(target=self._serve, daemon=True).start()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def _serve(self) -> None:
        while True:
            try:
                conn, _ = self.listener.accept()
            except OSError:
                return
            with self.lock:
                self.connections += 1
            threading.Thread(target=self._talk, args=(conn,), daemon=True).start()

    def _next(self) -> Answer:
        with self.lock:
            return self.answers.pop(0) if len(self.answers) > 1 else self.answers[0]

    def _talk(self, conn: socket.socket) -> None:
        buf = b""
        with conn:
            try:
                while True:
                    while b"\r\n\r\n" not in buf:
                        data = conn.recv(65536)
                        if not data:
                            return
                        buf += data
                    head, _, rest = buf.partition(b"\r\n\r\n")
                    length = 0
                    for line in head.split(b"\r\n"):
                        name, _, value = line.partition(b":")
                        if name.strip().lower() == b"content-length":
                            length = int(value)
                    while len(rest) < length:
                        data = conn.recv(65536)
                        if not data:
                            return
                        rest += data
                    buf = rest[length:]
                    answer = self._next()
                    if isinstance(answer, Endless):
                        conn.sendall(answer.head)
                        block = answer.unit * max(1, 65536 // len(answer.unit))
                        sent = len(answer.head)
                        while sent < FLOOD_CAP and not self.stop.is_set():
                            conn.sendall(block)  # until the client closes (an OSError)
                            sent += len(block)
                        return
                    if isinstance(answer, tuple):
                        conn.sendall(answer[0])
                        while not self.stop.wait(0.05):  # held open until the test ends
                            pass
                        return
                    conn.sendall(answer)
            except OSError:
                return

    def close(self) -> None:
        self.stop.set()
        self.listener.close()


@pytest.fixture
def hostile() -> Iterator[Callable[[list[Answer]], HostileServer]]:
    servers: list[HostileServer] = []

    def start(answers: list[Answer]) -> HostileServer:
        servers.append(HostileServer(answers))
        return servers[-1]

    yield start
    for server in servers:
        server.close()


# The client: each case's requests in turn, each one's record and how much the process's
# peak resident memory rose during it (the peak reset before it, where the kernel allows).
CLIENT = textwrap.dedent(
    """
    import json, sys, time
    from gevent import monkey
    monkey.patch_all()
    from specload.load.chat import ChatRequester, ChatSettings
    from specload.prompts import Prompt
    from specload.urls import parse_server_url

    def status(field):
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith(field + ":"):
                    return int(line.split()[1]) / 1024.0
        return 0.0

    def reset_peak():
        try:
            with open("/proc/self/clear_refs", "w") as f:
                f.write("5")
            return True
        except OSError:
            return False

    prompt = Prompt("p", "math", ({"role": "user", "content": "hi"},), 100)
    out = []
    for case in json.loads(sys.argv[1]):
        chat = ChatRequester(
            parse_server_url(case["url"]),
            ChatSettings(model="m", timeout_s=float(sys.argv[2])),
        )
        for _ in range(case["requests"]):
            before = status("VmRSS")
            reset = reset_peak()
            t0 = time.monotonic()
            r = chat.send(prompt, "s")
            out.append({
                "case": case["name"], "ok": r.ok, "kind": r.error_kind,
                "detail": r.error_detail, "tokens": r.tokens_output,
                "wall_s": time.monotonic() - t0,
                "growth_mb": (status("VmHWM") if reset else status("VmRSS")) - before,
            })
        chat.close()
    print(json.dumps(out))
    """
)


def run_client(cases: list[dict[str, Any]], *, fastpath: bool = True) -> list[dict[str, Any]]:
    env = dict(os.environ, SPECLOAD_FASTPATH="1" if fastpath else "0")
    proc = subprocess.run(
        [sys.executable, "-c", CLIENT, json.dumps(cases), str(REQUEST_TIMEOUT_S)],
        check=False,
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=240,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "Traceback" not in proc.stderr, proc.stderr[-3000:]
    out: list[dict[str, Any]] = json.loads(proc.stdout.strip().splitlines()[-1])
    return out


FLOODS: dict[str, tuple[Endless, str]] = {
    # name: (the flood, what the failure's detail says)
    "interim-heads": (Endless(b"", b"HTTP/1.1 100 Continue\r\n\r\n"), "interim (1xx) responses"),
    "early-hints": (
        Endless(b"", b"HTTP/1.1 103 Early Hints\r\nLink: </style.css>; rel=preload\r\n\r\n"),
        "interim (1xx) responses",
    ),
    "header-lines": (Endless(b"HTTP/1.1 200 OK\r\n", b"X-Flood: aaaaaaaa\r\n"), "lines"),
    "one-header-line": (Endless(b"HTTP/1.1 200 OK\r\nX-Flood: ", b"a"), "bytes"),
    "empty-lines": (Endless(b"", b"\r\n"), "bytes"),
    "chunk-size-line": (Endless(CHUNKED_HEAD + TWO, b"0"), "chunk size too long"),
    "chunk-extension": (Endless(CHUNKED_HEAD + TWO + b"5;", b"x"), "chunk extension over"),
    "trailers": (Endless(CHUNKED_HEAD + TWO + b"0\r\n", b"X-T: y\r\n"), "trailer section over"),
}

BAD: dict[str, tuple[bytes, str, str]] = {
    # name: (answer, error kind, what the detail says)
    "negative-chunk-size": (CHUNKED_HEAD + TWO + b"-6\r\n" + DONE + END, "protocol", "not hex"),
    "0x-chunk-size": (CHUNKED_HEAD + b"0x5\r\nhello\r\n" + END, "protocol", "not hex"),
    "no-crlf-after-data": (CHUNKED_HEAD + chunk(token(1))[:-2] + b"XX" + END, "protocol", "CRLF"),
    "length-and-chunked": (
        SSE_HEAD + b"content-length: 10\r\ntransfer-encoding: chunked\r\n\r\n" + TWO + DONE + END,
        "protocol",
        "both transfer-encoding and content-length",
    ),
    "two-lengths": (
        SSE_HEAD + b"content-length: 10\r\ncontent-length: 12\r\n\r\n" + b"x" * 12,
        "protocol",
        "conflicting content-length",
    ),
    "negative-length": (
        SSE_HEAD + b"content-length: -1\r\n\r\n" + event(b"[DONE]"),
        "protocol",
        "content-length not digits",
    ),
    "gzip-stream": (
        SSE_HEAD
        + b"content-encoding: gzip\r\ntransfer-encoding: chunked\r\n\r\n"
        + chunk(gzip.compress(token(1) + token(2) + event(b"[DONE]")))
        + END,
        "content_encoding",
        "gzip",
    ),
}

GOOD: dict[str, bytes] = {
    "bare-lf-head": CHUNKED_HEAD.replace(b"\r\n", b"\n") + TWO + DONE + END,
    "mixed-line-ends": SSE_HEAD.replace(b"OK\r\n", b"OK\n")
    + b"transfer-encoding: chunked\n\r\n"
    + TWO
    + DONE
    + END,
    "interim-then-ok": b"HTTP/1.1 100 Continue\r\n\r\n" * 3 + CHUNKED_HEAD + TWO + DONE + END,
}


@pytest.mark.timeout(300)
def test_floods_and_bad_framing_fail_at_once_with_flat_memory(
    hostile: Callable[[list[Answer]], HostileServer],
) -> None:
    cases = []
    for name, (flood, _) in FLOODS.items():
        cases.append({"name": name, "url": hostile([flood]).url, "requests": 1})
    for name, (answer, _, _) in BAD.items():
        cases.append({"name": name, "url": hostile([answer]).url, "requests": 1})
    for name, answer in GOOD.items():
        cases.append({"name": name, "url": hostile([answer]).url, "requests": 2})
    results = run_client(cases)
    by_case: dict[str, list[dict[str, Any]]] = {}
    for r in results:
        by_case.setdefault(r["case"], []).append(r)
    for name, (_, rule) in FLOODS.items():
        (r,) = by_case[name]
        assert r["kind"] == "protocol" and rule in r["detail"], r
        assert r["growth_mb"] < MAX_GROWTH_MB, r
    for name, (_, kind, rule) in BAD.items():
        (r,) = by_case[name]
        assert r["kind"] == kind and rule in r["detail"], r
    for name in GOOD:
        assert all(r["ok"] and r["tokens"] == 2 for r in by_case[name]), by_case[name]
    # Nothing waited for the request timeout (60 s): a behaviour, the bound is loose.
    assert max(r["wall_s"] for r in results) < REQUEST_TIMEOUT_S / 4, results


@pytest.mark.timeout(300)
@pytest.mark.parametrize("fastpath", [True, False], ids=["c-fast-path", "pure-python"])
def test_a_stream_ends_at_done_whatever_follows(
    hostile: Callable[[list[Answer]], HostileServer], fastpath: bool
) -> None:
    ok = CHUNKED_HEAD + TWO + DONE + END
    servers = {
        # the rest of the body never comes: complete at [DONE]; the next on a new connection
        "held-open": hostile([(CHUNKED_HEAD + TWO + DONE, Hold()), ok]),
        # more chunks, endless: the same, and nothing after [DONE] is counted
        "endless-after-done": hostile([Endless(CHUNKED_HEAD + TWO + DONE, chunk(token(9))), ok]),
        # events after [DONE] in the same read are not counted either
        "events-after-done": hostile([CHUNKED_HEAD + TWO + DONE + chunk(token(3)) + END, ok]),
        # a close-delimited stream held open after [DONE]
        "close-delimited": hostile(
            [(SSE_HEAD + b"\r\n" + token(1) + token(2) + event(b"[DONE]"), Hold()), ok]
        ),
        # a Content-Length longer than what comes
        "length-short": hostile(
            [
                (
                    SSE_HEAD
                    + b"content-length: 100000\r\n\r\n"
                    + token(1)
                    + token(2)
                    + event(b"[DONE]"),
                    Hold(),
                ),
                ok,
            ]
        ),
    }
    cases = [{"name": n, "url": s.url, "requests": 2} for n, s in servers.items()]
    results = run_client(cases, fastpath=fastpath)
    assert len(results) == 2 * len(servers)
    for r in results:
        assert r["ok"] and r["kind"] is None and r["tokens"] == 2, r
    assert max(r["wall_s"] for r in results) < REQUEST_TIMEOUT_S / 4, results
    for name, server in servers.items():
        # a body that did not end: its connection is not reused; one that did end, is
        assert server.connections == (1 if name == "events-after-done" else 2), name
