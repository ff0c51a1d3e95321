"""Hostile answers to the load client, in process: a 2xx of the wrong content type, error
answers on a kept-alive connection, ``Retry-After``, and the pacing of failing users.

The loopback servers here answer each request with the next canned bytes and count the
connections they accept. Through Locust (the reactor path, real timing):
tests/integration/test_load_hostile.py.
"""

from __future__ import annotations

import email.utils
import gzip
import itertools
import json
import re
import socket
import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path
from typing import Any

import orjson
import pytest

from specload.load.chat import ChatRequester, ChatSettings
from specload.load.connection import Connection
from specload.load.failures import (
    BACKOFF_FIRST_S,
    BACKOFF_MAX_S,
    RETRY_AFTER_MAX_S,
    RequestFailed,
    backoff_s,
    pause_s,
)
from specload.load.metrics import FIXED_ERROR_KINDS, ClientMetrics
from specload.load.response import (
    MAX_DRAIN_BYTES,
    ResponseParser,
    content_type_matches,
    parse_retry_after,
)
from specload.prompts import Prompt
from specload.records.request import ERROR_KINDS, RequestRecord
from specload.urls import parse_server_url
from tests.fixtures.canned import CannedServer

pytestmark = pytest.mark.unit

ROOT = Path(__file__).resolve().parents[2]
PROMPT = Prompt("p1", "math", ({"role": "user", "content": "hi"},), 100)
SECRET = "sk-hostile-test-key"

SSE_HEAD = (
    b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ntransfer-encoding: chunked\r\n\r\n"
)


def sse_ok() -> bytes:
    events = [
        {"choices": [{"delta": {"content": "a"}}], "usage": {"completion_tokens": 1}},
        {
            "choices": [{"delta": {"content": "b"}, "finish_reason": "stop"}],
            "usage": {"completion_tokens": 2},
        },
    ]
    body = b"".join(b"data: " + orjson.dumps(e) + b"\n\n" for e in events) + b"data: [DONE]\n\n"
    return SSE_HEAD + b"%x\r\n%s\r\n0\r\n\r\n" % (len(body), body)


def json_ok() -> bytes:
    message = orjson.dumps(
        {
            "choices": [{"message": {"content": "ab"}, "finish_reason": "stop"}],
            "usage": {"prompt_tokens": 3, "completion_tokens": 2},
        }
    )
    return b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: %d\r\n\r\n%s" % (
        len(message),
        message,
    )


def answer(status: bytes, body: bytes, *headers: bytes, chunked: bool = False) -> bytes:
    head = b"HTTP/1.1 " + status + b"\r\n" + b"".join(h + b"\r\n" for h in headers)
    if chunked:
        return head + b"transfer-encoding: chunked\r\n\r\n%x\r\n%s\r\n0\r\n\r\n" % (len(body), body)
    return head + b"content-length: %d\r\n\r\n%s" % (len(body), body)


HTML = b"<html><body><h1>Sign in to the proxy</h1></body></html>"


def requester(server: CannedServer, **kwargs: Any) -> ChatRequester:
    settings = ChatSettings(model="m", api_key=SECRET, timeout_s=10.0, **kwargs)
    return ChatRequester(parse_server_url(f"http://127.0.0.1:{server.port}"), settings)


# -- content type --------------------------------------------------------------------------


def test_content_type_is_a_fixed_error_class_exported_from_zero() -> None:
    assert "content_type" in ERROR_KINDS and "content_type" in FIXED_ERROR_KINDS
    metrics = ClientMetrics()
    metrics.observe(RequestRecord("math", "s", "v", "m", 0.0, 0.0, ok=True))
    errors = {
        s.labels["kind"]: s.value
        for fam in metrics.collect()
        if fam.name == "specload_client_errors"
        for s in fam.samples
    }
    assert errors["content_type"] == 0


@pytest.mark.parametrize(
    ("value", "expect", "ok"),
    [
        (b"text/event-stream", b"text/event-stream", True),
        (b"Text/Event-Stream; charset=utf-8", b"text/event-stream", True),
        (b"text/html; charset=utf-8", b"text/event-stream", False),
        (b"application/json", b"text/event-stream", False),
        (b"application/json; charset=utf-8", b"application/json", True),
        (b"application/problem+json", b"application/json", True),
        (b"text/json", b"application/json", False),
        (b"text/html", b"application/json", False),
        (b"", b"application/json", False),
    ],
)
def test_content_type_matching(value: bytes, expect: bytes, ok: bool) -> None:
    assert content_type_matches(value, expect) is ok


def test_parser_fails_a_2xx_of_another_content_type_and_reads_it_to_the_end() -> None:
    got: list[bytes] = []
    p = ResponseParser(lambda d, now: got.append(d), expect=b"text/event-stream")
    wire = answer(b"200 OK", HTML, b"Content-Type: text/html; charset=utf-8", chunked=True)
    done = False
    for i in range(len(wire)):  # byte by byte
        done = p.feed(wire[i : i + 1], 0.0)
    assert done and p.keep_alive and not got  # nothing reaches the meter
    with pytest.raises(RequestFailed) as exc:
        p.result()
    assert exc.value.kind == "content_type" and exc.value.status == 200
    assert exc.value.detail.startswith("text/html; charset=utf-8 (expected text/event-stream)")
    assert "Sign in to the proxy" in exc.value.detail


def test_parser_truncates_a_long_content_type_and_takes_one_without_any() -> None:
    p = ResponseParser(lambda d, now: None, expect=b"application/json")
    assert p.feed(answer(b"200 OK", b"", b"Content-Type: text/" + b"x" * 5000), 0.0)
    with pytest.raises(RequestFailed) as exc:
        p.result()
    assert exc.value.kind == "content_type" and len(exc.value.detail) < 120
    got: list[bytes] = []
    p = ResponseParser(lambda d, now: got.append(d), expect=b"application/json")
    assert p.feed(answer(b"200 OK", b"{}"), 0.0)  # no Content-Type: taken as the one asked
    assert p.result() == 200 and got == [b"{}"]


def test_a_streamed_request_answered_with_html_is_content_type_not_no_done(canned: Any) -> None:
    page = answer(b"200 OK", HTML, b"Content-Type: text/html; charset=utf-8")
    server = canned([page, sse_ok()])
    chat = requester(server)
    try:
        r = chat.send(PROMPT, "s")
        assert not r.ok and r.error_kind == "content_type", (r.error_kind, r.error_detail)
        assert r.http_status == 200 and r.tokens_output == 0
        assert r.error_detail is not None and "text/html" in r.error_detail
        assert r.e2e_s is not None and r.end_s >= r.start_s
        again = chat.send(PROMPT, "s")  # the page was read whole: same connection
        assert again.ok and again.tokens_output == 2
        assert server.connections == 1
    finally:
        chat.close()


def test_a_non_streamed_request_answered_with_html_is_content_type(canned: Any) -> None:
    server = canned([answer(b"200 OK", HTML, b"Content-Type: text/html"), json_ok()])
    chat = requester(server, stream=False)
    try:
        r = chat.send(PROMPT, "s")
        assert not r.ok and r.error_kind == "content_type"
        assert r.error_detail is not None
        assert r.error_detail.startswith("text/html (expected application/json)")
        assert chat.send(PROMPT, "s").ok and server.connections == 1
    finally:
        chat.close()


def test_a_streamed_request_answered_with_json_is_content_type(canned: Any) -> None:
    server = canned([json_ok()])
    chat = requester(server)
    try:
        r = chat.send(PROMPT, "s")
        assert r.error_kind == "content_type" and r.error_detail is not None
        assert "application/json (expected text/event-stream)" in r.error_detail
    finally:
        chat.close()


def test_an_error_detail_never_quotes_the_api_key(canned: Any) -> None:
    echo = b"<pre>Authorization: Bearer " + SECRET.encode() + b"</pre>"
    server = canned(
        [
            answer(b"200 OK", echo, b"Content-Type: text/html"),
            answer(b"401 Unauthorized", echo, b"Content-Type: text/html"),
        ]
    )
    chat = requester(server)
    try:
        for kind in ("content_type", "http_401"):
            r = chat.send(PROMPT, "s")
            assert r.error_kind == kind and r.error_detail is not None
            assert SECRET not in r.error_detail and "<api key>" in r.error_detail
    finally:
        chat.close()


# -- error answers keep the connection ----------------------------------------------------


@pytest.mark.parametrize("chunked", [False, True], ids=["content-length", "chunked"])
def test_a_complete_error_answer_keeps_the_connection(canned: Any, chunked: bool) -> None:
    busy = answer(b"429 Too Many Requests", b'{"error":"slow down"}', chunked=chunked)
    server = canned([busy, busy, sse_ok()])
    chat = requester(server)
    try:
        for _ in range(2):
            r = chat.send(PROMPT, "s")
            assert r.error_kind == "http_429" and r.error_detail == '{"error":"slow down"}'
            assert chat.retry_after_s is None
        assert chat.send(PROMPT, "s").ok
        assert server.connections == 1 and len(server.requests) == 3
    finally:
        chat.close()


def test_an_error_answer_with_connection_close_is_not_reused(canned: Any) -> None:
    closing = answer(b"503 Service Unavailable", b"reloading", b"Connection: close")
    server = canned([closing, sse_ok()])
    chat = requester(server)
    try:
        assert chat.send(PROMPT, "s").error_kind == "http_503"
        assert chat.send(PROMPT, "s").ok
        assert server.connections == 2
    finally:
        chat.close()


def test_an_error_body_too_long_to_drain_closes_the_connection(canned: Any) -> None:
    huge = answer(b"500 Internal Server Error", b"x" * (4 * MAX_DRAIN_BYTES))
    server = canned([huge, sse_ok()])
    chat = requester(server)
    try:
        r = chat.send(PROMPT, "s")
        assert r.error_kind == "http_500" and r.error_detail is not None
        assert len(r.error_detail) <= 200
        assert chat.send(PROMPT, "s").ok
        assert server.connections == 2
    finally:
        chat.close()


# -- Retry-After ---------------------------------------------------------------------------


def test_retry_after_seconds_and_dates() -> None:
    now = 1_700_000_000.0
    assert parse_retry_after(b" 1 ", now) == 1.0
    assert parse_retry_after(b"120", now) == 120.0
    assert parse_retry_after(b"2.5", now) == 2.5
    assert parse_retry_after(b"-3", now) == 0.0
    in_5s = email.utils.formatdate(now + 5, usegmt=True).encode()
    assert parse_retry_after(in_5s, now) == pytest.approx(5.0)
    past = email.utils.formatdate(now - 3600, usegmt=True).encode()
    assert parse_retry_after(past, now) == 0.0
    for bad in (b"", b"soon", b"nan", b"inf", b"Mon, 99 Foo 2024 99:99:99 GMT"):
        assert parse_retry_after(bad, now) is None, bad


def test_retry_after_of_an_error_answer_reaches_the_requester(canned: Any) -> None:
    date = email.utils.formatdate(time.time() + 30, usegmt=True).encode()
    server = canned(
        [
            answer(b"429 Too Many Requests", b"", b"Retry-After: 1"),
            answer(b"503 Service Unavailable", b"", b"Retry-After: " + date),
            sse_ok(),
        ]
    )
    chat = requester(server)
    try:
        assert chat.send(PROMPT, "s").error_kind == "http_429" and chat.retry_after_s == 1.0
        assert chat.send(PROMPT, "s").error_kind == "http_503"
        assert chat.retry_after_s is not None and 25 < chat.retry_after_s <= 30
        assert chat.send(PROMPT, "s").ok and chat.retry_after_s is None
    finally:
        chat.close()


# -- the pacing of failing users -----------------------------------------------------------


def test_backoff_schedule() -> None:
    assert (BACKOFF_FIRST_S, BACKOFF_MAX_S, RETRY_AFTER_MAX_S) == (0.25, 8.0, 60.0)
    assert [backoff_s(n) for n in range(9)] == [0, 0.25, 0.5, 1, 2, 4, 8, 8, 8]
    assert backoff_s(10**6) == 8.0
    assert pause_s(1, None) == 0.25
    assert pause_s(1, 1.0) == 1.0  # Retry-After longer than the backoff
    assert pause_s(5, 1.0) == 4.0  # the backoff longer than Retry-After
    assert pause_s(1, 3600.0) == 60.0  # capped
    assert pause_s(0, None) == 0.0


def test_backoffs_are_client_metrics_from_zero() -> None:
    metrics = ClientMetrics()
    r = RequestRecord("math", "s", "v", "m", 0.0, 0.0, error_kind="http_429")
    metrics.observe(r)

    def samples() -> dict[str, float]:
        return {
            s.name: s.value
            for fam in metrics.collect()
            if fam.name.startswith("specload_client_backoff")
            for s in fam.samples
            if s.labels == {"variant": "v", "model": "m", "category": "math", "step": "s"}
        }

    assert samples() == {
        "specload_client_backoffs_total": 0,
        "specload_client_backoff_seconds_total": 0,
    }
    metrics.observe_backoff(r, 0.25)
    metrics.observe_backoff(r, 0.5)
    assert samples() == {
        "specload_client_backoffs_total": 2,
        "specload_client_backoff_seconds_total": 0.75,
    }


# Locust monkey-patches the process it is imported in: the user runs in a subprocess.
USER_SCRIPT = textwrap.dedent(
    """
    import json, sys, time
    from gevent import monkey
    monkey.patch_all()
    import gevent, gevent.pool
    from locust.env import Environment
    from specload.load import get_session, subscribe
    from specload.records.request import RequestRecord
    from specload.load.user import ChatUser

    env = Environment(user_classes=[ChatUser], host="http://127.0.0.1:9")
    plan = json.loads(sys.argv[1])  # per request: [error_kind or null, retry_after_s]
    sends = []
    published = []
    subscribe(env, lambda r: published.append(time.monotonic()))
    get_session(env).metrics_served = True  # as where --metrics-address serves them
    t0 = time.monotonic()

    class Fake:
        retry_after_s = None
        def send(self, prompt, step):
            sends.append(time.monotonic() - t0)
            kind, self.retry_after_s = plan[min(len(sends), len(plan)) - 1]
            now = time.time()
            return RequestRecord(category="math", step=step, variant="v", model="m",
                                 start_s=now, end_s=now, ok=kind is None, error_kind=kind,
                                 e2e_s=0.0)
        def interrupted(self):
            return None
        def close(self):
            pass

    group = gevent.pool.Group()
    u = ChatUser(env)
    u._requester = Fake()
    u.start(group)
    gevent.sleep(float(sys.argv[2]))
    stop_t = time.monotonic()
    killed = u.stop(force=False)  # a graceful stop: ends a backoff at once
    group.join(timeout=5)
    metrics = {
        s.name: s.value
        for fam in get_session(env).metrics.collect()
        if fam.name.startswith("specload_client_backoff")
        for s in fam.samples
    }
    print(json.dumps({"sends": sends, "killed": killed,
                      "stopped_in": time.monotonic() - stop_t, "metrics": metrics}))
    """
)


def run_user(plan: list[list[Any]], seconds: float) -> dict[str, Any]:
    proc = subprocess.run(
        [sys.executable, "-c", USER_SCRIPT, json.dumps(plan), str(seconds)],
        check=False,
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    out: dict[str, Any] = json.loads(proc.stdout.strip().splitlines()[-1])
    return out


def gaps(sends: list[float]) -> list[float]:
    return [b - a for a, b in itertools.pairwise(sends)]


def test_a_user_getting_only_errors_backs_off_and_stops_at_once() -> None:
    out = run_user([["http_429", None]], 2.0)
    # 0, 0.25, 0.75, 1.75: the 5th would be at 3.75
    assert len(out["sends"]) == 4, out
    for gap, want in zip(gaps(out["sends"]), [0.25, 0.5, 1.0], strict=False):
        assert want - 0.005 <= gap < want + 0.1, out
    assert out["killed"] and out["stopped_in"] < 0.5  # mid-wait of 2 s: ended at once
    assert out["metrics"]["specload_client_backoffs_total"] == 4
    assert out["metrics"]["specload_client_backoff_seconds_total"] == 3.75


def test_a_success_resets_the_backoff_and_retry_after_is_honoured() -> None:
    plan = [["refused", None], ["reset", None], [None, None], ["http_503", 0.6], [None, None]]
    out = run_user(plan, 1.6)
    # waits: 0.25, 0.5, none (a success), max(0.25, Retry-After 0.6), then successes
    want = [0.25, 0.5, 0.0, 0.6]
    assert len(out["sends"]) > 5, out
    for gap, w in zip(gaps(out["sends"]), want, strict=False):
        assert w - 0.005 <= gap < w + 0.1, out
    assert out["metrics"]["specload_client_backoffs_total"] == 3
    assert out["metrics"]["specload_client_backoff_seconds_total"] == pytest.approx(1.35)


def test_faults_of_specload_itself_are_not_paced() -> None:
    out = run_user([["client_error", None]], 0.3)
    assert len(out["sends"]) > 50, len(out["sends"])
    assert out["metrics"]["specload_client_backoffs_total"] == 0


# -- content codings and the end of a stream ------------------------------------------------


def test_an_encoded_stream_is_content_encoding_and_none_is_asked_for(canned: Any) -> None:
    encoded = gzip.compress(sse_ok().partition(b"\r\n\r\n")[2])
    page = (
        b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ncontent-encoding: gzip\r\n"
        b"content-length: %d\r\n\r\n%s" % (len(encoded), encoded)
    )
    server = canned([page, sse_ok()])
    chat = requester(server)
    try:
        r = chat.send(PROMPT, "s")
        assert not r.ok and r.error_kind == "content_encoding", (r.error_kind, r.error_detail)
        assert r.error_detail == "gzip" and r.http_status == 200 and r.tokens_output == 0
        assert b"\r\nAccept-Encoding: identity\r\n" in server.requests[0]
        assert chat.send(PROMPT, "s").ok  # on a fresh connection: the encoded body unread
        assert server.connections == 2
    finally:
        chat.close()


class LateEnd:
    """One connection: a stream up to its ``[DONE]``, the body's last chunk only when
    ``release`` is set; then a whole stream for each further request."""

    def __init__(self) -> None:
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.port = self.listener.getsockname()[1]
        self.release = threading.Event()
        self.sent_end = threading.Event()
        self.connections = 0
        threading.Thread(target=self._serve, daemon=True).start()

    def _serve(self) -> None:
        while True:
            try:
                conn, _ = self.listener.accept()
            except OSError:
                return
            self.connections += 1
            threading.Thread(target=self._talk, args=(conn,), daemon=True).start()

    def _talk(self, conn: socket.socket) -> None:
        whole = sse_ok()
        first = self.connections == 1
        with conn:
            try:
                buf = b""
                while True:
                    while b"\r\n\r\n" not in buf:
                        data = conn.recv(65536)
                        if not data:
                            return
                        buf += data
                    head, _, rest = buf.partition(b"\r\n\r\n")
                    found = re.search(rb"(?i)content-length: (\d+)", head)
                    length = int(found.group(1)) if found else 0
                    while len(rest) < length:
                        rest += conn.recv(65536)
                    buf = rest[length:]
                    if first:
                        first = False
                        conn.sendall(whole[: -len(b"0\r\n\r\n")])  # up to [DONE]
                        if self.release.wait(10):
                            conn.sendall(b"0\r\n\r\n")
                            self.sent_end.set()
                    else:
                        conn.sendall(whole)
            except OSError:
                return

    def close(self) -> None:
        self.listener.close()


@pytest.mark.timeout(60)  # a wait for the body's end would hang here: unpatched sockets
@pytest.mark.parametrize("late_end_arrives", [True, False], ids=["end-arrives", "end-never"])
def test_a_stream_is_complete_at_done_and_its_connection_kept_once_its_body_ends(
    late_end_arrives: bool,
) -> None:
    server = LateEnd()
    settings = ChatSettings(model="m", timeout_s=30.0)
    chat = ChatRequester(parse_server_url(f"http://127.0.0.1:{server.port}"), settings)
    try:
        r = chat.send(PROMPT, "s")  # complete at [DONE]: not a wait for the last chunk
        assert r.ok and r.tokens_output == 2 and r.error_kind is None
        if late_end_arrives:
            server.release.set()
            assert server.sent_end.wait(10)  # on loopback: in our socket's buffer now
        again = chat.send(PROMPT, "s")
        assert again.ok and again.tokens_output == 2
        # the body's end read before the next request: the same connection; else a new one
        assert server.connections == (1 if late_end_arrives else 2)
    finally:
        server.release.set()
        chat.close()
        server.close()


class Silent:
    """Accepts connections and holds them: ``read`` whether it reads what comes (then
    never answers), else it reads nothing at all."""

    def __init__(self, *, read: bool) -> None:
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.port = self.listener.getsockname()[1]
        self.read = read
        self.stop = threading.Event()
        self.held: list[socket.socket] = []
        threading.Thread(target=self._serve, daemon=True).start()

    def _serve(self) -> None:
        while not self.stop.is_set():
            try:
                conn, _ = self.listener.accept()
            except OSError:
                return
            self.held.append(conn)
            while self.read and not self.stop.is_set():
                try:
                    if not conn.recv(65536):
                        break
                except OSError:
                    break

    def close(self) -> None:
        self.stop.set()
        self.listener.close()
        for conn in self.held:
            conn.close()


@pytest.mark.timeout(60)  # before: a blocking read or send no gevent timeout interrupts
@pytest.mark.parametrize(
    ("read", "body_bytes"), [(True, 100), (False, 32 * 2**20)], ids=["no-answer", "no-read"]
)
def test_a_server_not_answering_or_not_reading_is_a_timeout(read: bool, body_bytes: int) -> None:
    server = Silent(read=read)
    conn = Connection("127.0.0.1", server.port)
    try:
        with pytest.raises(RequestFailed) as exc:
            conn.request(
                "POST",
                "/v1/chat/completions",
                b"x" * body_bytes,
                b"",
                lambda d, t: None,
                timeout_s=0.5,
            )
        assert exc.value.kind == "timeout"
    finally:
        conn.close()
        server.close()


def test_a_non_streamed_answer_over_the_cap_fails_malformed(
    canned: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    # An endless JSON answer is not held in memory: past the cap the request fails.
    import specload.load.chat as chat_module  # noqa: PLC0415

    monkeypatch.setattr(chat_module, "MAX_JSON_BODY_BYTES", 1000)
    big = b'{"choices": [], "pad": "' + b"x" * 5000 + b'"}'
    head = b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: %d\r\n\r\n"
    server = canned([head % len(big) + big])
    chat = requester(server, stream=False)
    try:
        r = chat.send(PROMPT, "s")
        assert not r.ok and r.error_kind == "malformed"
        assert r.error_detail is not None and "over 1000 bytes" in r.error_detail
    finally:
        chat.close()
