"""The fixed-timing servers the client benchmarks measure against, started one way.

``bench/fixed_server.c`` (C, epoll), ``bench/fixed_server.py`` (Python),
``bench/fixed_server_uvloop.py`` (an independent uvloop server) and the simulator's fixed
timing all stream ``tokens`` tokens after ``ttft`` seconds, one chunk every ``itl``.
Imported by the benchmarks that run beside it (``python bench/NAME.py`` puts bench/ on the
path); nothing here imports gevent, so it is safe before and after monkey-patching.
"""

from __future__ import annotations

import socket
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

HERE = Path(__file__).resolve().parent
KINDS = ("c", "py", "uvloop", "sim")


@dataclass(frozen=True)
class Timing:
    ttft: float
    itl: float
    tokens: int
    tokens_per_chunk: int = 1
    reasoning_tokens: int = 0  # uvloop and sim: the first N tokens go in delta.reasoning


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def build_c_server(exe: Path | None = None) -> str:
    """Compile fixed_server.c (default: a shared copy in the temp dir; give your own path
    when another benchmark may be running the shared one: "text file busy")."""
    exe = exe or Path(tempfile.gettempdir()) / "specload-bench-fixed-server"
    subprocess.run(["cc", "-O2", "-o", str(exe), str(HERE / "fixed_server.c")], check=True)
    return str(exe)


def server_command(
    kind: str,
    port: int,
    timing: Timing,
    *,
    c_exe: str | None = None,
    stats_file: str | None = None,
) -> list[str]:
    """The command line of one server ``kind`` (see :data:`KINDS`) on ``port``."""
    t = timing
    if kind == "c":
        exe = c_exe or build_c_server()
        return [exe, str(port), str(t.ttft), str(t.itl), str(t.tokens), str(t.tokens_per_chunk)]
    if kind == "sim":
        return [
            *(sys.executable, "-m", "specload", "sim", "--port", str(port), "--timing", "fixed"),
            *("--fixed-ttft", str(t.ttft), "--fixed-itl", str(t.itl)),
            *("--fixed-tokens-per-chunk", str(t.tokens_per_chunk)),
            *("--fixed-reasoning-tokens", str(t.reasoning_tokens)),
            *("--fixed-content-tokens", str(t.tokens)),
        ]
    script = {"py": "fixed_server.py", "uvloop": "fixed_server_uvloop.py"}.get(kind)
    if script is None:
        raise ValueError(f"unknown server kind {kind!r} (one of {', '.join(KINDS)})")
    cmd = [
        *(sys.executable, str(HERE / script), "--port", str(port)),
        *("--ttft", str(t.ttft), "--itl", str(t.itl), "--tokens", str(t.tokens)),
        *("--tokens-per-chunk", str(t.tokens_per_chunk)),
    ]
    if kind == "uvloop":
        cmd += ["--reasoning-tokens", str(t.reasoning_tokens)]
        if stats_file:
            cmd += ["--stats-file", stats_file]
    return cmd


def start_server(
    cmd: list[str], port: int, *, cpu: int | None = None, timeout_s: float = 30.0
) -> subprocess.Popen[bytes]:
    """Start ``cmd`` (pinned to ``cpu`` when given) and return once ``port`` accepts."""
    name = Path(cmd[0]).name
    if cpu is not None:
        cmd = ["taskset", "-c", str(cpu), *cmd]
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=0.5):
                return proc
        except OSError:
            time.sleep(0.05)
    proc.kill()
    raise SystemExit(f"{name} server on port {port} did not start")
