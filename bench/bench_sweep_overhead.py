"""Sweep overhead: wall time beyond warm-ups + measured windows + outages (goal <= 2%).

Runs ``specload run`` as a real process against ``bench/fixed_server.py`` (exact
timing: TTFT 50 ms, ITL 5 ms, 200 tokens per answer, so a request takes ~1.05 s)
and reads ``summary.json``: ``wall_time_s`` (first level begun -> drain done),
``planned_s`` (warm-ups + windows), ``outage_s`` and ``overhead_s``. Also
reports the process's whole wall time (start-up, readiness, plots) separately.

    .venv/bin/python bench/bench_sweep_overhead.py [--levels 1,4,16,64] \\
        [--warmup 5] [--duration 30] [--workers 0] [--repeat 1]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from fixed_servers import Timing, free_port, server_command, start_server

ROOT = Path(__file__).resolve().parents[1]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--levels", default="1,4,16,64")
    ap.add_argument("--warmup", default="5")
    ap.add_argument("--duration", default="30")
    ap.add_argument("--workers", type=int, default=0)
    ap.add_argument("--tokens", type=int, default=200)
    ap.add_argument("--repeat", type=int, default=1)
    args = ap.parse_args()
    port = free_port()
    server = start_server(server_command("py", port, Timing(0.05, 0.005, args.tokens)), port)
    try:
        rows = []
        for i in range(args.repeat):
            with tempfile.TemporaryDirectory() as tmp:
                out = Path(tmp) / "run"
                t0 = time.monotonic()
                subprocess.run(
                    [
                        sys.executable,
                        "-m",
                        "specload",
                        "run",
                        "--host",
                        f"http://127.0.0.1:{port}",
                        "--metrics-url",
                        "off",
                        "--metrics-address",
                        "off",
                        "--progress",
                        "off",
                        "--concurrency",
                        args.levels,
                        "--warmup",
                        args.warmup,
                        "--duration",
                        args.duration,
                        "--workers",
                        str(args.workers),
                        "--out",
                        str(out),
                    ],
                    check=True,
                    cwd=ROOT,
                )
                process_s = time.monotonic() - t0
                s = json.loads((out / "summary.json").read_text())
                completed = sum(level["completed"] for level in s["levels"])
                rows.append(
                    (
                        i,
                        s["wall_time_s"],
                        s["planned_s"],
                        s["outage_s"],
                        s["overhead_s"],
                        100 * s["overhead_s"] / s["planned_s"],
                        process_s,
                        completed,
                    )
                )
        load = os.getloadavg()[0]
        print(
            f"levels {args.levels}, warm-up {args.warmup}s, window {args.duration}s, "
            f"workers {args.workers}, {args.tokens} tokens/request, load average {load:.1f}"
        )
        print(
            "| run | sweep wall s | planned s | outage s | overhead s | overhead % "
            "| process wall s | requests |"
        )
        print("|---|---|---|---|---|---|---|---|")
        for row in rows:
            print(
                f"| {row[0]} | {row[1]:.2f} | {row[2]:.2f} | {row[3]:.2f} | {row[4]:.3f} "
                f"| {row[5]:.2f} | {row[6]:.1f} | {row[7]} |"
            )
    finally:
        server.terminate()
        server.wait()


if __name__ == "__main__":
    main()
