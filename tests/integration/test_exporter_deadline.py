"""A real exporter process against a target trickling its response head and one that hangs:
the trickler is counted as a timeout, and SIGTERM ends the process within ~3 s."""

from __future__ import annotations

import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
import yaml
from prometheus_client.parser import text_string_to_metric_families

from tests.fixtures.exporter import free_port

# SIGTERM answered within ~3 s: alone under pytest -n (tests/fixtures/parallel.py).
pytestmark = [pytest.mark.integration, pytest.mark.serial]


class Hostile:
    """A loopback server: ``trickle`` sends its response head a byte every 20 ms, for
    minutes; ``hang`` reads the request and says nothing."""

    def __init__(self, mode: str) -> None:
        self.mode = mode
        self.sock = socket.create_server(("127.0.0.1", 0))
        self.url = f"http://127.0.0.1:{self.sock.getsockname()[1]}"
        self.conns: list[socket.socket] = []
        threading.Thread(target=self._serve, daemon=True).start()

    def _serve(self) -> None:
        while True:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            self.conns.append(conn)
            threading.Thread(target=self._handle, args=(conn,), daemon=True).start()

    def _handle(self, conn: socket.socket) -> None:
        try:
            conn.recv(65536)
            if self.mode == "hang":
                conn.recv(1)
                return
            for byte in b"HTTP/1.1 200 OK\r\nX-Padding: " + b"a" * 100_000:
                conn.sendall(bytes([byte]))
                time.sleep(0.02)
        except OSError:
            pass
        finally:
            conn.close()

    def close(self) -> None:
        self.sock.close()
        for c in self.conns:
            c.close()


@pytest.fixture
def hostile_targets() -> Iterator[dict[str, str]]:
    servers = {
        name: Hostile(name.removesuffix("_long")) for name in ("trickle", "trickle_long", "hang")
    }
    yield {name: s.url for name, s in servers.items()}
    for s in servers.values():
        s.close()


def errors(port: int) -> dict[tuple[str, str], float]:
    text = httpx.get(f"http://127.0.0.1:{port}/metrics", timeout=5).text
    out: dict[tuple[str, str], float] = {}
    for fam in text_string_to_metric_families(text):
        if fam.name == "specload_target_scrape_errors":
            for s in fam.samples:
                if s.name.endswith("_total"):
                    out[(s.labels["variant"], s.labels["reason"])] = s.value
    return out


def test_trickling_head_times_out_and_sigterm_is_prompt(
    hostile_targets: dict[str, str], tmp_path: Path
) -> None:
    port = free_port()
    config = {
        "port": port,
        "interval": "1s",
        "targets": [
            {"variant": "trickle", "url": hostile_targets["trickle"], "timeout": "1s"},
            # Long timeouts: polls of these are under way when SIGTERM comes.
            {"variant": "trickle_long", "url": hostile_targets["trickle_long"], "timeout": "10s"},
            {"variant": "hang", "url": hostile_targets["hang"], "timeout": "10s"},
        ],
    }
    cfg_path = tmp_path / "exporter.yaml"
    cfg_path.write_text(yaml.safe_dump(config))
    with (tmp_path / "exporter.err").open("wb") as err:
        proc = subprocess.Popen(
            [sys.executable, "-m", "specload", "exporter", "--config", str(cfg_path)],
            stdout=subprocess.DEVNULL,
            stderr=err,
        )
    try:
        deadline = time.monotonic() + 20
        seen: dict[tuple[str, str], float] = {}
        while time.monotonic() < deadline:
            time.sleep(0.25)
            try:
                seen = errors(port)
            except httpx.HTTPError:
                continue
            if seen.get(("trickle", "timeout"), 0) >= 2:
                break
        else:
            pytest.fail(f"the trickling target was never timed out: {seen}")
        others = {r: n for (v, r), n in seen.items() if v == "trickle" and r != "timeout"}
        assert not any(others.values()), others
        targets = httpx.get(f"http://127.0.0.1:{port}/-/targets", timeout=5).json()
        trickler = next(t for t in targets if t["variant"] == "trickle")
        assert trickler["up"] is False and trickler["last_error"] == "timeout"
        assert trickler["state"] != "ready"
        time.sleep(1.5)  # polls of the long-timeout targets are surely under way
        t0 = time.monotonic()
        proc.send_signal(signal.SIGTERM)
        try:
            code = proc.wait(timeout=3.5)
        except subprocess.TimeoutExpired:
            pytest.fail("the exporter did not stop within 3.5 s of SIGTERM")
        print(f"exporter stopped {time.monotonic() - t0:.2f} s after SIGTERM")
        assert code == 0
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(5)
