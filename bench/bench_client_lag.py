"""The client's own lag, busy share and overhead at 256 streams, with and without its core.

Where ``client_saturated``'s limits come from (``specload/records/clientload.py``). Each run:
``bench/fixed_server.c`` (built with ``cc -O2``; TTFT 50 ms, ITL 5 ms, 400 tokens, one per
chunk, with vLLM's per-request timing on its final usage chunk: the request parsed, its first
and last chunk written, on its own clock) pinned to ``--server-cpu``; the real ``specload run``
(closed loop, one level of ``--streams`` users) pinned to ``--client-cpu``; and, for a
``hog`` condition, a busy loop pinned to the client's core at a nice level (``hog0``: as
important as the client, so the kernel shares the core about evenly; ``hog10``, ``hog19``:
less); an ``itlN`` condition has no hog but a server ITL of N ms instead (``itl1``: five times
the tokens per second, more than one core of the client can read). From each run's
``summary.json``: the level's client lag (p50, p99, max), the busy share,
``client_saturated``, median TTFT and TPOT against the server's schedule, the client-minus-
server TTFT and ITL (median, p90: what the server's own timing says the client and the
network added), the share of 0-s chunk gaps (reads holding several chunks) and the output
tokens/s against the offered load ``streams x tokens / (TTFT + (tokens - 1) x ITL)``.

Conditions run interleaved, round by round, each holding /tmp/specload-bench.lock (other
benchmarks take it too) and starts once every process together keeps at most
``--max-busy`` cores busy over 3 s (waiting up to ``--max-wait`` s); the CPU every other
process used during the run is recorded (``other CPU``: this machine is shared).

    .venv/bin/python bench/bench_client_lag.py --rounds 3 --conditions none,hog19,hog10,hog0 \\
        --json /tmp/client_lag.json --out /tmp/client_lag.md
"""

from __future__ import annotations

import argparse
import contextlib
import fcntl
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(Path(__file__).resolve().parent))

from fixed_servers import free_port, start_server  # noqa: E402

LOCK = "/tmp/specload-bench.lock"


def build(exe: Path) -> str:
    subprocess.run(
        ["cc", "-O2", "-o", str(exe), str(ROOT / "bench" / "fixed_server.c")], check=True
    )
    return str(exe)


def busy_jiffies() -> int:
    """Busy jiffies of every CPU (user, nice, system, irq, softirq)."""
    line = Path("/proc/stat").read_text().splitlines()[0].split()
    n = [int(x) for x in line[1:]]
    return n[0] + n[1] + n[2] + n[5] + n[6]


def proc_cpu_s(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def tree_cpu_s(pid: int) -> float:
    """CPU of ``pid`` and its children (the run and its workers, none by default)."""
    total = 0.0
    with contextlib.suppress(OSError):
        total += proc_cpu_s(pid)
        for child in Path(f"/proc/{pid}/task/{pid}/children").read_text().split():
            total += tree_cpu_s(int(child))
    return total


def wait_quiet(max_busy: float, max_wait_s: float) -> float:
    """Wait until every process together keeps at most ``max_busy`` cores busy over 3 s
    (up to ``max_wait_s``); the last sample."""
    deadline = time.time() + max_wait_s
    while True:
        j0 = busy_jiffies()
        time.sleep(3.0)
        busy = (busy_jiffies() - j0) / os.sysconf("SC_CLK_TCK") / 3.0
        if busy <= max_busy or time.time() > deadline:
            return busy


def run_one(condition: str, args: argparse.Namespace, exe: str, tmp: Path, index: int) -> dict:
    port = free_port()
    # itlN: no hog, the server's ITL N ms (more tokens per second than the client can read)
    itl = float(condition[3:]) / 1000 if condition.startswith("itl") else args.itl
    timing = [str(args.ttft), str(itl), str(args.tokens), "1", "1"]  # 1: with metrics
    server = start_server([exe, str(port), *timing], port, cpu=args.server_cpu)
    hog = None
    try:
        if condition.startswith("hog"):
            nice = int(condition[3:] or 0)
            hog = subprocess.Popen(
                [
                    "taskset",
                    "-c",
                    str(args.client_cpu),
                    "nice",
                    "-n",
                    str(nice),
                    sys.executable,
                    "-c",
                    "while True: pass",
                ]
            )
        out = tmp / f"run-{condition}-{index}"
        cmd = [
            "taskset",
            "-c",
            str(args.client_cpu),
            sys.executable,
            "-m",
            "specload",
            "run",
            "--host",
            f"http://127.0.0.1:{port}",
            "--concurrency",
            str(args.streams),
            "--warmup",
            str(args.warmup),
            "--duration",
            str(args.duration),
            "--max-tokens",
            str(args.tokens),
            "--out",
            str(out),
            "--progress",
            "off",
            "--no-plots",
            "--metrics-address",
            "off",
            "--metrics-url",
            "off",
            "--variant",
            f"lag-{condition}",
        ]
        load_before = os.getloadavg()[0]
        t0, j0 = time.time(), busy_jiffies()
        proc = subprocess.Popen(cmd, cwd=str(ROOT), stdout=subprocess.DEVNULL)
        server_cpu0 = proc_cpu_s(server.pid)
        hog_cpu0 = proc_cpu_s(hog.pid) if hog else 0.0
        own = 0.0
        while proc.poll() is None:
            with contextlib.suppress(OSError):
                own = tree_cpu_s(proc.pid)
            time.sleep(0.25)
        t1, j1 = time.time(), busy_jiffies()
        server_cpu = proc_cpu_s(server.pid) - server_cpu0
        hog_cpu = (proc_cpu_s(hog.pid) - hog_cpu0) if hog else 0.0
    finally:
        for p in (hog, server):
            if p is not None:
                p.kill()
                p.wait()
    if proc.returncode != 0:
        raise RuntimeError(f"specload run exited {proc.returncode} ({condition})")
    summary = json.loads((out / "summary.json").read_text())
    level = summary["levels"][0]
    wall = t1 - t0
    everything = (j1 - j0) / os.sysconf("SC_CLK_TCK")
    offered = args.streams * args.tokens / (args.ttft + (args.tokens - 1) * itl)
    return {
        "condition": condition,
        "time": time.strftime("%H:%M:%S", time.gmtime(t0)),
        "load_before": load_before,
        "other_cpu": max(0.0, (everything - server_cpu - hog_cpu - own) / wall),
        "hog_cpu": hog_cpu / wall,
        "completed": level["completed"],
        "lag_p50_ms": 1000 * (level.get("client_lag_p50_s") or 0.0),
        "lag_p99_ms": 1000 * (level.get("client_lag_p99_s") or 0.0),
        "lag_max_ms": 1000 * (level.get("client_lag_max_s") or 0.0),
        "busy": level.get("client_busy_ratio"),
        "saturated": "client_saturated" in level["flags"],
        "ttft_err": level["median_ttft_ms"] / (args.ttft * 1000) - 1.0,
        "tpot_err": level["median_tpot_ms"] / (itl * 1000) - 1.0,
        "ttft_minus_server_ms": level.get("median_ttft_minus_server_ms"),
        "ttft_minus_server_p90_ms": level.get("p90_ttft_minus_server_ms"),
        "itl_minus_server_us": 1000 * (level.get("median_itl_minus_server_ms") or 0.0),
        "itl_minus_server_p90_us": 1000 * (level.get("p90_itl_minus_server_ms") or 0.0),
        "coalesced": level.get("coalesced_chunk_share"),
        "delivered": (level.get("output_throughput") or 0.0) / offered,
        "server_timing_requests": level.get("server_timing_requests"),
    }


def row(r: dict[str, Any]) -> str:
    return (
        f"| {r['time']} | {r['condition']} | {r['other_cpu']:.0%} | {r['hog_cpu']:.0%} "
        f"| {r['lag_p50_ms']:.2f} / {r['lag_p99_ms']:.2f} / {r['lag_max_ms']:.1f} "
        f"| {r['busy']:.2f} | {'**yes**' if r['saturated'] else 'no'} "
        f"| {r['ttft_err']:+.1%} | {r['tpot_err']:+.2%} "
        f"| {r['ttft_minus_server_ms']:.2f} / {r['ttft_minus_server_p90_ms']:.2f} "
        f"| {r['itl_minus_server_us']:+.2f} / {r['itl_minus_server_p90_us']:+.2f} "
        f"| {r['coalesced']:.1%} | {r['delivered']:.2%} |"
    )


HEADER = (
    "| time UTC | condition | other CPU | hog CPU | lag p50 / p99 / max ms | busy "
    "| client_saturated | median TTFT err | median TPOT err "
    "| TTFT - server median / p90 ms | ITL - server median / p90 µs | 0-s gaps "
    "| delivered |\n|---|---|---|---|---|---|---|---|---|---|---|---|---|"
)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    p.add_argument("--streams", type=int, default=256)
    p.add_argument("--warmup", type=float, default=8)
    p.add_argument("--duration", type=float, default=20)
    p.add_argument("--ttft", type=float, default=0.05)
    p.add_argument("--itl", type=float, default=0.005)
    p.add_argument("--tokens", type=int, default=400)
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--conditions", default="none,hog19,hog10,hog0")
    p.add_argument("--client-cpu", type=int, default=0)
    p.add_argument("--server-cpu", type=int, default=1)
    p.add_argument("--max-busy", type=float, default=0.25, help="cores busy before a run")
    p.add_argument("--max-wait", type=float, default=1800, help="seconds to wait for that")
    p.add_argument("--json", type=Path)
    p.add_argument("--out", type=Path)
    args = p.parse_args()
    tmp = Path(tempfile.mkdtemp(prefix="specload-lag-"))
    exe = build(tmp / "fixed_server")
    rows = []
    for index in range(args.rounds):
        for condition in args.conditions.split(","):
            with open(LOCK, "w") as lock:
                fcntl.flock(lock, fcntl.LOCK_EX)
                busy = wait_quiet(args.max_busy, args.max_wait)
                r = run_one(condition, args, exe, tmp, index)
                r["busy_before"] = busy
            print(row(r), flush=True)
            rows.append(r)
            if args.json:
                args.json.write_text(json.dumps(rows, indent=1))
    text = HEADER + "\n" + "\n".join(row(r) for r in rows) + "\n"
    if args.out:
        args.out.write_text(text)
    print(text)


if __name__ == "__main__":
    main()
