"""Faulty targets over real sockets: each reports up 0 with its reason, the rest are unaffected,
the exporter (a real process) keeps answering and its memory stays bounded."""

from __future__ import annotations

import socketserver
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import httpx
import psutil
import pytest
import yaml
from prometheus_client.parser import text_string_to_metric_families

from tests.fixtures.exporter import free_port, vllm_page

pytestmark = pytest.mark.integration

PAGE = vllm_page("ngram").encode()
HUGE_BYTES = 50 * 1024 * 1024


def _read_request(rfile: object) -> None:
    while True:
        line = rfile.readline()  # type: ignore[attr-defined]
        if not line or line in (b"\r\n", b"\n"):
            return


def _good(h: socketserver.StreamRequestHandler) -> None:
    h.wfile.write(b"HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nConnection: close\r\n")
    h.wfile.write(b"Content-Length: %d\r\n\r\n" % len(PAGE) + PAGE)


def _status_500(h: socketserver.StreamRequestHandler) -> None:
    body = b"Internal Server Error"
    h.wfile.write(b"HTTP/1.1 500 Internal Server Error\r\nConnection: close\r\n")
    h.wfile.write(b"Content-Length: %d\r\n\r\n" % len(body) + body)


def _malformed(h: socketserver.StreamRequestHandler) -> None:
    body = PAGE[: len(PAGE) // 2] + b"\nthis is { not an exposition\n" + PAGE[len(PAGE) // 2 :]
    h.wfile.write(b"HTTP/1.1 200 OK\r\nConnection: close\r\n")
    h.wfile.write(b"Content-Length: %d\r\n\r\n" % len(body) + body)


def _huge(h: socketserver.StreamRequestHandler) -> None:
    """50 MB of plausible exposition, no Content-Length: only the cap can stop it."""
    h.wfile.write(b"HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nConnection: close\r\n\r\n")
    line = b'vllm:filler_bucket{le="1.0",model_name="m"} 1.0\n'
    chunk = line * (65536 // len(line))
    sent = 0
    try:
        while sent < HUGE_BYTES:
            h.wfile.write(chunk)
            sent += len(chunk)
    except OSError:
        pass  # the exporter hung up, as it should


def _slow(h: socketserver.StreamRequestHandler) -> None:
    """Headers at once, then the body a line every 0.3 s: each read is quick, the whole is not."""
    h.wfile.write(b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\nConnection: close\r\n\r\n" % len(PAGE))
    try:
        for line in PAGE.splitlines(keepends=True)[:20]:
            h.wfile.write(line)
            h.wfile.flush()
            time.sleep(0.3)
    except OSError:
        pass


def _trickle(h: socketserver.StreamRequestHandler) -> None:
    """The response head a byte every 20 ms, for minutes: each read is quick (httpx's
    per-read timeout restarts on every byte), only the poll's deadline ends it."""
    try:
        for byte in b"HTTP/1.1 200 OK\r\nX-Padding: " + b"a" * 100_000:
            h.wfile.write(bytes([byte]))
            h.wfile.flush()
            time.sleep(0.02)
    except OSError:
        pass


def _hang(h: socketserver.StreamRequestHandler) -> None:
    """Accept, read the request, answer nothing until the client gives up."""
    h.connection.settimeout(30)
    try:
        h.connection.recv(1)
    except OSError:
        pass


class _Server(socketserver.ThreadingTCPServer):
    daemon_threads = True
    allow_reuse_address = True


def serve(behaviour: Callable[[socketserver.StreamRequestHandler], None]) -> _Server:
    class Handler(socketserver.StreamRequestHandler):
        def handle(self) -> None:
            _read_request(self.rfile)
            behaviour(self)

    server = _Server(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server


@pytest.fixture
def fault_servers() -> Iterator[dict[str, str]]:
    servers = {
        "good": serve(_good),
        "http500": serve(_status_500),
        "malformed": serve(_malformed),
        "huge": serve(_huge),
        "hang": serve(_hang),
        "slow": serve(_slow),
        "trickle": serve(_trickle),
    }
    urls = {k: f"http://127.0.0.1:{s.server_address[1]}" for k, s in servers.items()}
    urls["refused"] = f"http://127.0.0.1:{free_port()}"
    yield urls
    for s in servers.values():
        s.shutdown()
        s.server_close()


EXPECTED = {
    "refused": "refused",
    "hang": "timeout",
    "slow": "timeout",
    "trickle": "timeout",
    "http500": "http_5xx",
    "malformed": "malformed",
    "huge": "too_large",
}


def scrape(port: int) -> dict[str, list[tuple[dict[str, str], float, str]]]:
    text = httpx.get(f"http://127.0.0.1:{port}/metrics", timeout=5).text
    out: dict[str, list[tuple[dict[str, str], float, str]]] = {}
    for fam in text_string_to_metric_families(text):
        out[fam.name] = [(s.labels, s.value, s.name) for s in fam.samples]
    return out


def test_faults_are_contained(fault_servers: dict[str, str], tmp_path: Path) -> None:
    port = free_port()
    config = {
        "port": port,
        "interval": "0.5s",
        "targets": [
            {"variant": name, "url": url, "timeout": "2s"} for name, url in fault_servers.items()
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
        ps = psutil.Process(proc.pid)
        peak_rss = 0
        deadline = time.monotonic() + 40
        fams: dict[str, list[tuple[dict[str, str], float, str]]] = {}
        while time.monotonic() < deadline:
            time.sleep(0.25)
            peak_rss = max(peak_rss, ps.memory_info().rss)
            try:
                fams = scrape(port)
            except httpx.HTTPError:
                continue
            errors = {
                (lab["variant"], lab["reason"]): val
                for lab, val, name in fams.get("specload_target_scrape_errors", [])
                if name.endswith("_total")
            }
            if all(errors.get((v, r), 0) >= 2 for v, r in EXPECTED.items()):
                break
        else:
            pytest.fail(f"faults not all seen twice: {fams.get('specload_target_scrape_errors')}")
        assert proc.poll() is None, "the exporter died"
        ups = {lab["variant"]: val for lab, val, _ in fams["specload_target_up"]}
        assert ups == {"good": 1.0, **dict.fromkeys(EXPECTED, 0.0)}
        for variant, reason in EXPECTED.items():
            for other in ("refused", "timeout", "http_5xx", "malformed", "too_large"):
                if other != reason:
                    assert errors[(variant, other)] == 0, (variant, other)
        assert all(errors[("good", r)] == 0 for r in EXPECTED.values())
        acc = {
            lab["variant"]: val
            for lab, val, _ in fams["specload_spec_decode_acceptance_ratio"]
            if lab["window"] == "lifetime"
        }
        assert set(acc) == {"good"}  # only the good target has derived families
        # 50 MB answers are cut at the 8 MB cap: memory stays far below the response size.
        assert peak_rss < 200 * 1024 * 1024, f"peak RSS {peak_rss / 2**20:.0f} MB"
        print(f"exporter peak RSS with a 50 MB target: {peak_rss / 2**20:.0f} MB")
        # The hanging target holds up nobody: the good one's polls stay quick.
        durations = {
            lab["variant"]: val for lab, val, _ in fams["specload_target_scrape_duration_seconds"]
        }
        assert durations["good"] < 0.5 <= durations["hang"]
        assert httpx.get(f"http://127.0.0.1:{port}/-/healthy", timeout=5).text == "ok\n"
    finally:
        proc.terminate()
        proc.wait(15)
    assert proc.returncode == 0
