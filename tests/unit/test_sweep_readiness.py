"""The readiness gate against a loopback server that becomes ready late."""

from __future__ import annotations

import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from specload.errors import UsageError
from specload.sweep.ports import free_port
from specload.sweep.readiness import is_refusing, wait_ready
from specload.urls import parse_server_url

pytestmark = pytest.mark.unit


class _Handler(BaseHTTPRequestHandler):
    healthy = True
    models: list[str] = ["tiny"]
    seen: list[str] = []

    def do_GET(self):
        self.seen.append(self.path)
        if self.path == "/health":
            self.send_response(200 if self.healthy else 503)
            self.end_headers()
        elif self.path == "/v1/models":
            body = json.dumps({"data": [{"id": m} for m in self.models]}).encode()
            self.send_response(200)
            self.send_header("content-length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)
        elif self.path == "/version":
            body = b'{"version": "0.32.0"}'
            self.send_response(200)
            self.send_header("content-length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)
        else:
            self.send_response(404)
            self.end_headers()

    def log_message(self, *args):
        pass


@pytest.fixture
def server():
    handler = type("H", (_Handler,), {"healthy": True, "models": ["tiny"], "seen": []})
    httpd = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    yield httpd, handler
    httpd.shutdown()
    httpd.server_close()


def test_ready_with_models_and_version(server):
    httpd, _ = server
    # /v1 in the base URL must not double
    url = parse_server_url(f"http://127.0.0.1:{httpd.server_port}/v1/")
    ready = wait_ready(url, timeout_s=5)
    assert ready.models == ("tiny",) and ready.server_version == "0.32.0"
    assert not is_refusing(url)


def test_waits_with_countdown_until_healthy(server):
    httpd, handler = server
    handler.healthy = False
    url = parse_server_url(f"127.0.0.1:{httpd.server_port}")
    calls = []

    def on_wait(left, problem):
        calls.append((left, problem))
        if len(calls) == 3:
            handler.healthy = True

    ready = wait_ready(url, timeout_s=10, interval_s=0.01, on_wait=on_wait)
    assert ready.models == ("tiny",)
    assert len(calls) == 3 and calls[0][1] == "HTTP 503"
    assert calls[0][0] > calls[2][0]  # counting down


def test_no_models_is_not_ready(server):
    httpd, handler = server
    handler.models = []
    url = parse_server_url(f"127.0.0.1:{httpd.server_port}")
    with pytest.raises(UsageError, match="no model"):
        wait_ready(url, timeout_s=0.2, interval_s=0.05)


def test_unreachable_host_after_timeout_is_one_line():
    port = free_port()
    url = parse_server_url(f"http://127.0.0.1:{port}")
    with pytest.raises(UsageError) as err:
        wait_ready(url, timeout_s=0.3, interval_s=0.05)
    text = str(err.value)
    assert text == (
        f"--host http://127.0.0.1:{port}: not ready after 0.3s "
        "(/health and /v1/models: connection refused)"
    )
    assert err.value.exit_code == 3
    assert is_refusing(url)
