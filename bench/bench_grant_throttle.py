"""A master that falls behind: does the level say so? (``mean_in_flight``, ``in_flight_short``)

One distributed ``specload run`` (a master, ``--expect-workers 2``, and two Locust workers,
the commands of docs/sweep.md) against the simulator's fixed-timing profile (requests of
about 45 ms), one closed-loop level at ``--concurrency 32``. While the level runs, the
master is held for ``--stall-ms`` out of every ``--stall-ms + --run-ms`` (SIGSTOP, SIGCONT):
a master at its ceiling answers as late (bench/results/master.md). Two modes:

- ``duration`` (``--warmup 2s --duration 8s``): the workers' users do not need the master
  to send, so the server keeps its 32 in flight; the records merely wait.
- ``requests`` (``--warmup 0 --requests 3000``): every request needs budget from the master
  (grants of two per waiting user), so the users wait with it: the server gets fewer
  requests in flight than the level names, as 256 users past the real ceiling did.

Per run: the level's ``users_held``, ``mean_in_flight`` over its concurrency, requests/s
and flags. Results: bench/results/in_flight.md.

    .venv/bin/python bench/bench_grant_throttle.py [--stall-ms 200] [--run-ms 200]
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from tests.fixtures.sim import free_port, start_sim  # noqa: E402

PY = sys.executable
LOCUSTFILE = ROOT / "specload" / "sweep" / "locustfile.py"
USERS = 32


def wait_port(port: int, timeout_s: float = 30.0) -> None:
    """Until the master listens on ``port`` (its workers are started after it)."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        with socket.socket() as s:
            if s.connect_ex(("127.0.0.1", port)) == 0:
                return
        time.sleep(0.1)
    raise SystemExit(f"nothing listens on {port} after {timeout_s:g} s")


def stall(pid: int, stall_s: float, run_s: float, stop: threading.Event) -> None:
    """Hold the process ``stall_s`` out of every ``stall_s + run_s`` until ``stop``."""
    while not stop.wait(run_s):
        try:
            os.kill(pid, signal.SIGSTOP)
            time.sleep(stall_s)
        finally:
            os.kill(pid, signal.SIGCONT)


def one(mode: str, stalled: bool, args: argparse.Namespace, work: Path) -> dict[str, Any]:
    master_port = free_port()
    out = work / f"{mode}-{'stalled' if stalled else 'free'}"
    sim = start_sim(
        ["--load-time", "0", "--timing", "fixed", "--fixed-ttft", "0.005",
         "--fixed-itl", "0.002", "--fixed-reasoning-tokens", "10",
         "--fixed-content-tokens", "10"],
        work / f"{out.name}-sim",
    )  # fmt: skip
    procs: list[subprocess.Popen[bytes]] = []
    window = (
        ["--warmup", "2s", "--duration", "8s"]
        if mode == "duration"
        else ["--warmup", "0", "--requests", "3000"]
    )
    stop = threading.Event()
    try:
        host = sim.url
        master = subprocess.Popen(
            [PY, "-m", "specload", "run", "--host", host, "--concurrency", str(USERS), *window,
             *("--workers", "0", "--expect-workers", "2", "--master-bind-port", str(master_port)),
             *("--metrics-address", "off", "--progress", "off", "--no-plots"),
             *("--prefix-cache-reset", "off", "--out", str(out))],
            cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
        )  # fmt: skip
        procs.append(master)
        wait_port(master_port)
        worker = [PY, "-m", "locust", "-f", str(LOCUSTFILE), "--worker",
                  "--master-host", "127.0.0.1", "--master-port", str(master_port)]  # fmt: skip
        for _ in range(2):
            procs.append(
                subprocess.Popen(
                    worker, cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
                )
            )
        if stalled:
            # from the level's start (the workers have connected within a second or two)
            time.sleep(3.0)
            threading.Thread(
                target=stall,
                args=(master.pid, args.stall_ms / 1000, args.run_ms / 1000, stop),
                daemon=True,
            ).start()
        master.wait(timeout=300)
    finally:
        stop.set()
        time.sleep(0.5)
        for p in reversed(procs):
            if p.poll() is None:
                os.kill(p.pid, signal.SIGCONT)
                p.terminate()
        for p in procs:
            try:
                p.wait(timeout=10)
            except subprocess.TimeoutExpired:
                p.kill()
        sim.stop()
    (level,) = json.loads((out / "summary.json").read_text())["levels"]
    return {
        "mode": mode,
        "stalled": f"{args.stall_ms:g}/{args.run_ms:g} ms" if stalled else "no",
        "users_held": level["users_held"],
        "mean_in_flight": level["mean_in_flight"],
        "in_flight_ratio": (level["mean_in_flight"] or 0.0) / USERS,
        "request_throughput": level["request_throughput"],
        "completed": level["completed"],
        "flags": level["flags"],
    }


def main() -> None:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--stall-ms", type=float, default=200.0)
    ap.add_argument("--run-ms", type=float, default=200.0)
    ap.add_argument("--json", default=None)
    args = ap.parse_args()
    rows = []
    with tempfile.TemporaryDirectory(prefix="specload-bench-grants-") as tmp:
        for mode in ("duration", "requests"):
            for stalled in (False, True):
                row = one(mode, stalled, args, Path(tmp))
                rows.append(row)
                print(json.dumps(row), flush=True)
    print(f"\n{os.cpu_count()} cores; load average {os.getloadavg()[0]:.1f}\n")
    print("| mode | master held | users_held | mean_in_flight | ÷ 32 | requests/s | flags |")
    print("|---|---|---|---|---|---|---|")
    for r in rows:
        print(
            f"| {r['mode']} | {r['stalled']} | {r['users_held']:.1f} | "
            f"{r['mean_in_flight']:.1f} | {r['in_flight_ratio']:.2f} | "
            f"{r['request_throughput']:.0f} | {', '.join(r['flags']) or '—'} |"
        )
    if args.json:
        Path(args.json).write_text(json.dumps(rows, indent=1) + "\n")


if __name__ == "__main__":
    main()
