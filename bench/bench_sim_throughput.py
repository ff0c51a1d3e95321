"""Benchmark: streamed chunks/s of the simulator on one core at 512 concurrent streams.

The simulator runs pinned to one core (``taskset -c 0``); a lean raw-socket
client (uvloop, keep-alive, one request after another per stream) is pinned to
another core and counts SSE events. Reported: chunks/s the client received, the
simulator's scheduling lag (p50/p99 of step wake-ups vs their deadlines, from
``GET /state`` on the control port) and the simulator's CPU use.

    .venv/bin/python bench/bench_sim_throughput.py --streams 512 --seconds 20 \\
        --time-scale 14 --out bench/results/sim_throughput.md

``--server floor`` runs bench/step_floor.c instead (built with ``cc -O2``): a C
loop doing only the unavoidable part, one write per stream per step at a fixed
``--step-ms``, with the same lag measure: what this machine allows.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import shutil
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import uvloop

REQUEST = (
    b"POST /v1/chat/completions HTTP/1.1\r\nhost: x\r\ncontent-type: application/json\r\n"
    b"x-specload-category: %s\r\ncontent-length: %d\r\n\r\n%s"
)
CATEGORIES = (b"coding", b"math", b"structured", b"explanation")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class StreamClient(asyncio.Protocol):
    """One keep-alive connection sending requests back to back and counting SSE events."""

    def __init__(self, stats: dict[str, int], body: bytes, index: int) -> None:
        self.stats = stats
        self.body = body
        self.index = index
        self.transport: asyncio.Transport | None = None
        self.tail = b""

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]
        self.send()

    def send(self) -> None:
        assert self.transport is not None
        category = CATEGORIES[self.index % len(CATEGORIES)]
        self.index += 1
        self.transport.write(REQUEST % (category, len(self.body), self.body))

    def data_received(self, data: bytes) -> None:
        buf = self.tail + data
        self.stats["chunks"] += buf.count(b"data: {")
        if b"data: [DONE]" in buf:
            self.stats["requests"] += 1
            self.tail = b""
            self.send()
        else:
            self.tail = buf[-16:]

    def connection_lost(self, exc: Exception | None) -> None:
        self.stats["lost"] += 1


async def drive(port: int, streams: int, seconds: float, max_tokens: int) -> dict[str, float]:
    loop = asyncio.get_running_loop()
    stats = {"chunks": 0, "requests": 0, "lost": 0}
    body = json.dumps(
        {
            "messages": [{"role": "user", "content": "benchmark " * 50}],
            "max_tokens": max_tokens,
            "stream": True,
        }
    ).encode()
    conns = []
    for i in range(streams):
        transport, _ = await loop.create_connection(
            lambda i=i: StreamClient(stats, body, i), "127.0.0.1", port
        )
        conns.append(transport)
    # Warm-up: every stream admitted and decoding (a few chunks each), then 1 s more.
    deadline = time.monotonic() + 30
    while stats["chunks"] < 4 * streams and time.monotonic() < deadline:
        await asyncio.sleep(0.05)
    await asyncio.sleep(1.0)
    start_chunks, start = stats["chunks"], time.monotonic()
    await asyncio.sleep(seconds)
    elapsed = time.monotonic() - start
    result = {
        "chunks_per_s": (stats["chunks"] - start_chunks) / elapsed,
        "requests": stats["requests"],
        "lost": stats["lost"],
    }
    for t in conns:
        t.close()
    return result


def cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--streams", type=int, default=512)
    ap.add_argument("--seconds", type=float, default=20.0)
    ap.add_argument("--time-scale", type=float, default=14.0)
    ap.add_argument("--max-tokens", type=int, default=400)
    ap.add_argument("--variant", default="baseline")
    ap.add_argument("--sim-core", default="0")
    ap.add_argument("--client-core", default="1")
    ap.add_argument("--server", choices=("sim", "floor"), default="sim")
    ap.add_argument("--step-ms", type=float, default=20.0, help="floor: step period")
    ap.add_argument(
        "--extra-ms",
        type=float,
        default=0.0,
        help="floor: fixed CPU work added to each step (calibrated in ms)",
    )
    ap.add_argument("--out", type=Path, default=None)
    args = ap.parse_args()
    port, control = free_port(), free_port()
    taskset = shutil.which("taskset")
    pin = [taskset, "-c", args.sim_core] if taskset else []
    if args.server == "floor":
        return run_floor(args, port, pin)
    sim = subprocess.Popen(
        [
            *pin,
            sys.executable,
            "-m",
            "simulator",
            "--port",
            str(port),
            "--control-port",
            str(control),
            "--variant",
            args.variant,
            "--time-scale",
            str(args.time_scale),
            "--max-num-seqs",
            str(args.streams),
        ],
        stderr=subprocess.DEVNULL,
    )
    try:
        for _ in range(200):
            try:
                urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=1)
                break
            except OSError:
                time.sleep(0.05)
        if taskset:
            os.sched_setaffinity(0, {int(args.client_core)})
        cpu0, wall0 = cpu_seconds(sim.pid), time.monotonic()
        result = uvloop.run(drive(port, args.streams, args.seconds, args.max_tokens))
        cpu = (cpu_seconds(sim.pid) - cpu0) / (time.monotonic() - wall0)
        state = json.loads(
            urllib.request.urlopen(f"http://127.0.0.1:{control}/state", timeout=5).read()
        )
    finally:
        sim.terminate()
        sim.wait(timeout=10)
    load = os.getloadavg()[0]
    lines = [
        f"- streams: {args.streams}, variant {args.variant}, --time-scale {args.time_scale}, "
        f"max_tokens {args.max_tokens}, {args.seconds:.0f} s measured after warm-up",
        f"- simulator pinned to core {args.sim_core} (taskset: {'yes' if taskset else 'no'}), "
        f"client on core {args.client_core}; 1-min load average at the end: {load:.1f}",
        f"- **chunks/s received: {result['chunks_per_s']:,.0f}**",
        f"- scheduling lag p50 {1000 * state['scheduling_lag_p50_s']:.2f} ms, "
        f"**p99 {1000 * state['scheduling_lag_p99_s']:.2f} ms** "
        f"({state['scheduling_lag_samples']} step wake-ups)",
        f"- server side: {state['requests_served']} requests admitted, "
        f"{state['tokens_sent']:,} tokens sent "
        f"in {state['scheduling_lag_samples']} steps",
        f"- simulator CPU: {100 * cpu:.0f}% of one core, i.e. "
        f"**{result['chunks_per_s'] / max(cpu, 1e-9):,.0f} chunks per CPU-second** "
        f"(the rate a dedicated core sustains); requests completed {result['requests']}, "
        f"connections lost {result['lost']}",
    ]
    report("\n".join(lines), args.out)
    return 0


def report(text: str, out: Path | None, tag: str = "") -> None:
    """Print a run's lines and append them, stamped, to the results file."""
    print(text)
    if out is not None:
        stamp = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())
        with out.open("a") as fh:
            fh.write(f"\n### {stamp}{tag}\n\n{text}\n")


def run_floor(args: argparse.Namespace, port: int, pin: list[str]) -> int:
    exe = Path("/tmp/specload-step-floor")
    here = Path(__file__).resolve().parent
    subprocess.run(["cc", "-O2", "-o", str(exe), str(here / "step_floor.c")], check=True)
    server = subprocess.Popen(
        [
            *pin,
            str(exe),
            str(port),
            str(args.step_ms / 1000),
            str(args.max_tokens),
            str(args.extra_ms / 1000),
        ],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert server.stdout is not None
        server.stdout.readline()  # "listening on ..."
        if pin:
            os.sched_setaffinity(0, {int(args.client_core)})
        cpu0, wall0 = cpu_seconds(server.pid), time.monotonic()
        result = uvloop.run(drive(port, args.streams, args.seconds, args.max_tokens))
        cpu = (cpu_seconds(server.pid) - cpu0) / (time.monotonic() - wall0)
    finally:
        server.terminate()
        out, _ = server.communicate(timeout=10)
    fields = out.split()
    stats = dict(zip(fields[::2], fields[1::2], strict=False))
    load = os.getloadavg()[0]
    text = "\n".join(
        [
            f"- **floor** (bench/step_floor.c): streams {args.streams}, one write per stream "
            f"every {args.step_ms:g} ms + {args.extra_ms:g} ms of busy work per step, "
            f"{args.seconds:.0f} s measured after warm-up; "
            f"1-min load average at the end: {load:.1f}",
            f"- chunks/s received: {result['chunks_per_s']:,.0f}; server CPU {100 * cpu:.0f}% "
            f"of one core ({result['chunks_per_s'] / max(cpu, 1e-9):,.0f} chunks per CPU-second)",
            f"- scheduling lag p50 {1000 * float(stats['lag_p50_s']):.2f} ms, "
            f"**p99 {1000 * float(stats['lag_p99_s']):.2f} ms** ({stats['steps']} step wake-ups)",
        ]
    )
    report(text, args.out, " (floor)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
