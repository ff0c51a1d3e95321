"""The client metrics listener: loopback by default, and a taken port is one line naming it
and how to choose another — at once for ``specload run`` (before the readiness gate), if
taken meanwhile when it binds, and under plain Locust — never a run serving nothing."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from specload.load.options import DEFAULT_METRICS_ADDRESS
from specload.sweep.ports import free_port

pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parents[2]
LOAD = ["--progress", "off", "--no-plots", "--max-tokens", "16"]


@pytest.fixture
def taken_port() -> Iterator[int]:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        sock.listen()
        yield int(sock.getsockname()[1])


def message(port: int) -> str:
    return (
        f"specload: error: --metrics-address 127.0.0.1:{port}: port {port} is in use "
        "(another run?); choose another with --metrics-address HOST:PORT "
        "(env SPECLOAD_METRICS_ADDRESS; 127.0.0.1:0 for any free port) or off"
    )


def run(argv: list[str], timeout: float = 60) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        argv,
        capture_output=True,
        text=True,
        timeout=timeout,
        cwd=ROOT,
        check=False,
        env={**os.environ, "PYTHONUNBUFFERED": "1"},
    )


def test_the_default_is_loopback() -> None:
    assert DEFAULT_METRICS_ADDRESS == "127.0.0.1:9647"


def test_a_taken_port_is_one_line_before_the_readiness_gate(taken_port, tmp_path) -> None:
    nothing = free_port()  # no server: the gate would wait its 30 s
    started = time.monotonic()
    result = run(
        [
            sys.executable,
            "-m",
            "specload",
            "run",
            "--host",
            f"http://127.0.0.1:{nothing}",
            "--ready-timeout",
            "30s",
            "--metrics-address",
            f"127.0.0.1:{taken_port}",
            "--out",
            str(tmp_path / "r"),
            *LOAD,
        ]
    )
    assert time.monotonic() - started < 20
    assert result.returncode == 2, result.stderr
    assert result.stderr.strip().splitlines() == [message(taken_port)]


def test_a_port_taken_after_the_check_is_the_same_line(sweep_sim, taken_port, tmp_path) -> None:
    """The port is taken between the early check and the listener (the check is skipped
    here): the listener's failure is the same one line, exit 2, and the run stops."""
    sim = sweep_sim(["--time-scale", "10"])
    code = (
        "import sys, specload.sweep.settings as s\n"
        "s.check_metrics_port = lambda text: None\n"
        "from specload.cli import main\n"
        "sys.exit(main(sys.argv[1:]))\n"
    )
    result = run(
        [
            sys.executable,
            "-c",
            code,
            "run",
            "--host",
            sim.url,
            "--concurrency",
            "1",
            "--warmup",
            "0",
            "--duration",
            "1",
            "--metrics-address",
            f"127.0.0.1:{taken_port}",
            "--out",
            str(tmp_path / "r"),
            *LOAD,
        ]
    )
    assert result.returncode == 2, result.stderr
    assert result.stderr.strip().splitlines() == [message(taken_port)]
    assert not (tmp_path / "r" / "requests.jsonl").read_bytes()  # nothing was sent


def test_plain_locust_refuses_a_taken_port(load_sim, taken_port, tmp_path) -> None:
    sim = load_sim(["--timing", "fixed", "--fixed-ttft", "0.05", "--fixed-itl", "0.01"])
    result = run(
        [
            sys.executable,
            "-m",
            "locust",
            "-f",
            str(ROOT / "locustfiles" / "chat.py"),
            "--headless",
            "-u",
            "1",
            "-r",
            "1",
            "-t",
            "3s",
            "--host",
            sim.url,
            "--metrics-address",
            f"127.0.0.1:{taken_port}",
        ]
    )
    assert result.returncode != 0
    assert message(taken_port) in result.stderr
    assert "Traceback" not in result.stderr
