"""A real exporter process with an API key and a URL password, at DEBUG: the targets get their
credentials, and neither /-/targets, /metrics nor the log shows them; a key with a trailing
newline stops the exporter at start with one line that does not show it."""

from __future__ import annotations

import base64
import os
import socketserver
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
import yaml

from tests.fixtures.exporter import free_port, vllm_page

pytestmark = pytest.mark.integration

KEY = "sk-SECRETKEY-0123456789"
PASSWORD = "hunter2-PASSWORD"
TOKEN = base64.b64encode(f"scraper:{PASSWORD}".encode()).decode()
PAGE = vllm_page("ngram").encode()
EXPORTER = [sys.executable, "-m", "specload", "exporter"]


class _Server(socketserver.ThreadingTCPServer):
    daemon_threads = True
    allow_reuse_address = True


@pytest.fixture
def recording_target() -> Iterator[tuple[str, list[str]]]:
    """A vLLM-like target that records each request's Authorization header and, being
    hostile, answers /version with an error page quoting it back."""
    seen: list[str] = []

    class Handler(socketserver.StreamRequestHandler):
        def handle(self) -> None:
            while True:
                request = self.rfile.readline()
                if not request:
                    return
                auth = ""
                while True:
                    line = self.rfile.readline()
                    if line in (b"\r\n", b"\n", b""):
                        break
                    name, _, value = line.decode("latin-1").partition(":")
                    if name.lower() == "authorization":
                        auth = value.strip()
                seen.append(auth)
                if b"/version" in request:
                    body = f"who are you, {auth}?".encode()
                    head = b"HTTP/1.1 401 Unauthorized\r\n"
                else:
                    body, head = PAGE, b"HTTP/1.1 200 OK\r\n"
                self.wfile.write(head + b"Content-Length: %d\r\n\r\n" % len(body) + body)

    server = _Server(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield f"127.0.0.1:{server.server_address[1]}", seen
    server.shutdown()
    server.server_close()


def test_credentials_are_sent_and_shown_nowhere(
    recording_target: tuple[str, list[str]], tmp_path: Path
) -> None:
    hostport, seen = recording_target
    port = free_port()
    config = {
        "port": port,
        "interval": "0.5s",
        "targets": [
            {"variant": "keyed", "url": f"http://{hostport}", "api_key_env": "THE_KEY"},
            {"variant": "basic", "url": f"http://scraper:{PASSWORD}@{hostport}/v1"},
        ],
    }
    cfg_path = tmp_path / "exporter.yaml"
    cfg_path.write_text(yaml.safe_dump(config))
    err_path = tmp_path / "exporter.err"
    with err_path.open("wb") as err:
        proc = subprocess.Popen(
            [*EXPORTER, "--config", str(cfg_path), "--log-level", "DEBUG"],
            stdout=subprocess.DEVNULL,
            stderr=err,
            env={**os.environ, "THE_KEY": KEY},
        )
    try:
        deadline = time.monotonic() + 20
        targets: list[dict[str, object]] = []
        while time.monotonic() < deadline:
            time.sleep(0.25)
            try:
                targets = httpx.get(f"http://127.0.0.1:{port}/-/targets", timeout=5).json()
            except httpx.HTTPError:
                continue
            if all(t["up"] for t in targets) and len(seen) >= 6:
                break
        else:
            pytest.fail(f"targets not up: {targets}")
        assert f"Bearer {KEY}" in seen and f"Basic {TOKEN}" in seen
        assert {t["variant"]: t["url"] for t in targets} == {
            "keyed": f"http://{hostport}",
            "basic": f"http://{hostport}",
        }
        shown = [
            httpx.get(f"http://127.0.0.1:{port}{path}", timeout=5).text
            for path in ("/-/targets", "/metrics")
        ]
    finally:
        proc.terminate()
        proc.wait(15)
    log = err_path.read_text()
    assert "DEBUG" in log  # the log level took: httpcore's trace is there
    for text in (*shown, log):
        assert KEY not in text and PASSWORD not in text and TOKEN not in text


def test_a_key_with_a_trailing_newline_stops_the_exporter_at_start(tmp_path: Path) -> None:
    config = {
        "port": free_port(),
        "targets": [{"variant": "a", "url": "http://127.0.0.1:9", "api_key_env": "THE_KEY"}],
    }
    cfg_path = tmp_path / "exporter.yaml"
    cfg_path.write_text(yaml.safe_dump(config))
    try:
        result = subprocess.run(
            [*EXPORTER, "--config", str(cfg_path), "--log-level", "DEBUG"],
            check=False,
            capture_output=True,
            text=True,
            timeout=20,
            env={**os.environ, "THE_KEY": KEY + "\n"},
        )
    except subprocess.TimeoutExpired:
        pytest.fail("the exporter started with a key it cannot send")
    assert result.returncode == 2
    assert result.stderr.count("\n") == 1 and "targets[0].api_key_env" in result.stderr
    assert KEY not in result.stderr + result.stdout
