"""Aggregate throughput with 1, 2 and 4 workers, each on a host of its own (a network
namespace: tests/fixtures/netns.py), the target and the master on two more.

The target is the simulator's fixed-timing profile (``specload sim --timing fixed``, bound
to its namespace's address), the master ``specload run --expect-workers N`` and each worker
``locust -f .../specload/sweep/locustfile.py --worker`` (the commands of docs/sweep.md). One
closed-loop level per run; per run: requests/s and output tok/s delivered, median TTFT and
TPOT, and the CPU seconds each part used (target, master, workers: psutil), so the limit can
be named — the target, the machine's cores, or the master.

Needs root (namespaces). Results: bench/results/multihost.md.

    .venv/bin/python bench/bench_multihost.py [--workers 1,2,4] [--users 64] [--duration 20]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import threading
from pathlib import Path
from typing import Any

import psutil

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from specload.sweep import locustfile as sweep_locustfile  # noqa: E402
from tests.fixtures.netns import Network, skip_reason  # noqa: E402

PY = sys.executable
PORT, CONTROL, MASTER_PORT = 8000, 8001, 5557


class CpuWatch(threading.Thread):
    """The last CPU seconds seen of each process (they exit with the run: read as it goes)."""

    def __init__(self) -> None:
        super().__init__(daemon=True)
        self.procs: dict[str, list[subprocess.Popen[bytes]]] = {}
        self.seen: dict[int, float] = {}
        self.stop = threading.Event()

    def run(self) -> None:
        while not self.stop.wait(0.25):
            for procs in list(self.procs.values()):
                for proc in procs:
                    try:
                        t = psutil.Process(proc.pid).cpu_times()
                    except psutil.Error:
                        continue
                    self.seen[proc.pid] = float(t.user + t.system)

    def total(self, role: str) -> float:
        return sum(self.seen.get(p.pid, 0.0) for p in self.procs.get(role, []))


def one(workers: int, args: argparse.Namespace, tmp: Path) -> dict[str, Any]:
    tmp.mkdir(parents=True, exist_ok=True)
    with Network() as net:
        target, master = net.host("target"), net.host("master")
        hosts = [net.host(f"w{i}") for i in range(workers)]
        sim = target.start(
            [PY, "-m", "simulator", "--host", "0.0.0.0", "--port", str(PORT),
             "--control-port", str(CONTROL), "--timing", "fixed", "--fixed-ttft", "0.05",
             "--fixed-itl", str(args.itl), "--fixed-reasoning-tokens", "50",
             "--fixed-content-tokens", "50", "--load-time", "0"],
            tmp / "sim.log",
        )  # fmt: skip
        target.wait_port("127.0.0.1", PORT)
        watch = CpuWatch()
        watch.procs["target"] = [sim]
        watch.start()
        out = tmp / "run"
        run = master.start(
            [PY, "-m", "specload", "run", "--host", f"http://{target.address}:{PORT}",
             "--out", str(out), "--expect-workers", str(workers), "--master-bind-host",
             "0.0.0.0", "--master-bind-port", str(MASTER_PORT), "--concurrency",
             str(args.users), "--duration", f"{args.duration}s", "--warmup", "3s",
             "--max-tokens", "200", "--metrics-address", "off", "--progress", "off",
             "--no-plots"],
            tmp / "master.log",
        )  # fmt: skip
        hosts[0].wait_port(master.address, MASTER_PORT)
        worker = [
            *(PY, "-m", "locust", "-f", sweep_locustfile.__file__, "--worker"),
            *("--master-host", master.address, "--master-port", str(MASTER_PORT)),
            *("--max-tokens", "200"),
        ]
        procs = [h.start(worker, tmp / f"{h.name}.log") for h in hosts]
        watch.procs["master"], watch.procs["workers"] = [run], procs
        code = run.wait(timeout=args.duration + 120)
        watch.stop.set()
        cpu = {role: watch.total(role) for role in ("target", "master", "workers")}
        if code != 0:
            raise SystemExit((tmp / "master.log").read_text()[-2000:])
    summary = json.loads((out / "summary.json").read_text())
    level = summary["levels"][-1]
    return {
        "workers": workers,
        "users": args.users,
        "window_s": level["duration"],
        "completed": level["completed"],
        "requests_per_s": level["request_throughput"],
        "output_tok_s": level["output_throughput"],
        "median_ttft_ms": level["median_ttft_ms"],
        "median_tpot_ms": level["median_tpot_ms"],
        "client_busy_ratio": level.get("client_busy_ratio"),
        "cpu_s": cpu,
    }


def main() -> None:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--workers", default="1,2,4")
    ap.add_argument("--users", type=int, default=256)
    ap.add_argument("--duration", type=int, default=20)
    ap.add_argument("--itl", type=float, default=0.005)
    ap.add_argument("--json", default=None)
    args = ap.parse_args()
    why = skip_reason()
    if why:
        raise SystemExit(why)
    rows = []
    base = Path(f"/tmp/specload-bench-multihost-{os.getpid()}")
    for n in (int(x) for x in args.workers.split(",")):
        row = one(n, args, base / f"w{n}")
        rows.append(row)
        print(json.dumps(row), flush=True)
    print(f"\n{os.cpu_count()} cores; load average {os.getloadavg()[0]:.1f}\n")
    print("| workers | users | requests/s | output tok/s | median TTFT ms | median TPOT ms "
          "| CPU-s target | CPU-s master | CPU-s workers |")  # fmt: skip
    print("|---|---|---|---|---|---|---|---|---|")  # CPU-s: the whole run, warm-up included
    for r in rows:
        c = r["cpu_s"]
        print(
            f"| {r['workers']} | {r['users']} | {r['requests_per_s']:.1f} | "
            f"{r['output_tok_s']:.0f} | {r['median_ttft_ms']:.1f} | {r['median_tpot_ms']:.2f} | "
            f"{c['target']:.1f} | {c['master']:.1f} | {c['workers']:.1f} |"
        )
    if args.json:
        Path(args.json).write_text(json.dumps(rows, indent=1) + "\n")


if __name__ == "__main__":
    main()
