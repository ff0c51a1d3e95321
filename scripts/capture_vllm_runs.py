#!/usr/bin/env python3
"""Capture request records of real vLLM runs into tests/data/vllm-<version>/runs/.

Starts the plain tiny-model server of tests/fixtures/vllm.py once, warms it with a short
``specload run`` of the measurement's own shape (levels, max_tokens: a vLLM CPU server is
much slower on its first requests), then runs ``specload run`` several times against it
(runs a, b, c by default, a short pause between, each once the machine is quiet or after
a two-minute wait) and keeps each run's ``requests.jsonl``, gzipped, as
``plain_<run>.requests.jsonl.gz``. Every run measures the same server, so any difference
between them is run-to-run noise: material for offline tests of comparisons (a "variant"
run against a "baseline" run whose true difference is zero).
Run after scripts/install-vllm.sh:

    .venv/bin/python scripts/capture_vllm_runs.py [--out tests/data/vllm-0.32.0/runs]
"""

from __future__ import annotations

import argparse
import contextlib
import gzip
import resource
import shutil
import statistics
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import psutil

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from specload.results import read_requests  # noqa: E402
from tests.fixtures.sweep import run_specload  # noqa: E402
from tests.fixtures.vllm import VLLM_VERSION, VllmPool, VllmServer, find_vllm_env  # noqa: E402

KIND = "plain"


def run_args(
    server: VllmServer, out: Path, args: argparse.Namespace, requests: int, variant: str
) -> list[str]:
    """``specload run`` against the server: closed loop at ``args.levels``, ``requests``
    measured per level, a fixed max_tokens, greedy, streamed with usage stats."""
    return [
        "run",
        *("--host", server.base_url),
        *("--concurrency", args.levels),
        *("--requests", str(requests)),
        *("--warmup", args.warmup),
        *("--max-tokens", str(args.max_tokens)),
        *("--temperature", "0"),
        *("--variant", variant),
        *("--metrics-address", "off"),
        *("--progress", "off"),
        "--no-plots",
        *("--out", str(out)),
    ]


def machine_busy_s() -> float:
    """CPU seconds every core of the machine spent busy since boot (not idle, not iowait)."""
    t = psutil.cpu_times()
    return float(sum(t) - t.idle - getattr(t, "iowait", 0.0))


def tree_cpu_s(pid: int | None) -> float:
    """CPU seconds of a process and its live children (the vLLM server's processes)."""
    if pid is None:
        return 0.0
    total = 0.0
    try:
        root = psutil.Process(pid)
        procs = [root, *root.children(recursive=True)]
    except psutil.NoSuchProcess:
        return 0.0
    for proc in procs:
        with contextlib.suppress(psutil.NoSuchProcess):
            times = proc.cpu_times()
            total += times.user + times.system
    return total


def children_cpu_s() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


@dataclass
class RunCost:
    """One ``specload run``: its wall time, and the machine's CPU over it, split into the
    capture's own (server, load generator) and everything else on the machine."""

    wall_s: float
    own_cpu_s: float
    other_cpu_s: float

    def describe(self) -> str:
        cores = psutil.cpu_count() or 1
        other = self.other_cpu_s / (self.wall_s * cores)
        return (
            f"{self.wall_s:.1f} s, own CPU {self.own_cpu_s:.0f} s, "
            f"other processes {other:.0%} of the machine's {cores} cores"
        )


def specload(argv: list[str], server: VllmServer, timeout_s: float) -> RunCost:
    """Run ``specload ARGV``; raises with its stderr when it fails."""
    started, busy, own = time.monotonic(), machine_busy_s(), tree_cpu_s(server.pid)
    own_children = children_cpu_s()
    result = run_specload(argv, timeout=timeout_s)
    if result.returncode != 0:
        command = " ".join(argv)
        raise RuntimeError(f"specload {command} exited {result.returncode}:\n{result.stderr}")
    mine = tree_cpu_s(server.pid) - own + children_cpu_s() - own_children
    return RunCost(time.monotonic() - started, mine, machine_busy_s() - busy - mine)


def wait_quiet(limit_s: float, busy_share: float) -> None:
    """Wait (at most ``limit_s``) until the machine is under ``busy_share`` busy over 5 s
    (the idle server takes next to nothing): another process's load crowds the server and
    the client, and more requests get every token in one read (TPOT 0)."""
    deadline = time.monotonic() + limit_s
    while True:
        share = psutil.cpu_percent(interval=5.0) / 100
        if share < busy_share:
            return
        if time.monotonic() > deadline:
            print(
                f"machine still {share:.0%} busy after {limit_s:.0f} s: going on", file=sys.stderr
            )
            return
        print(f"machine {share:.0%} busy: waiting", file=sys.stderr)


def store(run_dir: Path, dest: Path) -> None:
    """``run_dir/requests.jsonl`` gzipped to ``dest`` (no name or time in the header)."""
    with (
        (run_dir / "requests.jsonl").open("rb") as src,
        dest.open("wb") as raw,
        gzip.GzipFile(filename="", mode="wb", fileobj=raw, mtime=0) as gz,
    ):
        shutil.copyfileobj(src, gz)


def level_stats(records: list[dict[str, Any]]) -> dict[str, tuple[int, int, int, float]]:
    """Per step, warm-ups included, in the order they came: (ok records, ok records with
    ttft_s and tpot_s, how many of those have tpot_s 0, median TPOT in ms).

    TPOT 0: every token of the request reached the client in one socket read, a crowded
    machine's scheduling (on 2 cores the capture alone keeps about 1.6 busy)."""
    out: dict[str, tuple[int, int, int, float]] = {}
    for step in dict.fromkeys(str(r["step"]) for r in records):
        ok = [r for r in records if r["step"] == step and r["ok"]]
        timed = [r for r in ok if r.get("tpot_s") is not None and r.get("ttft_s") is not None]
        zero = sum(1 for r in timed if r["tpot_s"] == 0)
        median = statistics.median(r["tpot_s"] for r in timed) * 1000 if timed else float("nan")
        out[step] = (len(ok), len(timed), zero, median)
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    default_out = ROOT / "tests" / "data" / f"vllm-{VLLM_VERSION}" / "runs"
    parser.add_argument("--out", type=Path, default=default_out)
    parser.add_argument("--runs", default="a,b,c", help="run names (default a,b,c)")
    parser.add_argument("--levels", default="1,4", help="closed-loop users per level")
    parser.add_argument("--requests", type=int, default=160, help="measured requests per level")
    parser.add_argument("--max-tokens", type=int, default=64)
    parser.add_argument("--warmup", default="2", help="each level's warm-up (s) in every run")
    parser.add_argument(
        "--warm-requests", type=int, default=12, help="requests per level of the first warm run"
    )
    parser.add_argument("--pause", type=float, default=5.0, help="seconds between runs")
    parser.add_argument("--timeout", type=float, default=600.0, help="longest one run (s)")
    parser.add_argument(
        "--quiet-wait",
        type=float,
        default=120.0,
        help="before each run, wait at most this long (s) for the machine to be quiet",
    )
    parser.add_argument(
        "--quiet-share", type=float, default=0.25, help="quiet: under this share of all cores busy"
    )
    args = parser.parse_args(argv)
    env, reason = find_vllm_env()
    if env is None:
        print(f"capture_vllm_runs: {reason}; run scripts/install-vllm.sh", file=sys.stderr)
        return 1
    out: Path = args.out
    out.mkdir(parents=True, exist_ok=True)
    work = Path(tempfile.mkdtemp(prefix="specload-capture-runs-"))
    pool = VllmPool(env, work, max_local=1)
    started = time.monotonic()
    medians: dict[str, dict[str, float]] = {}
    try:
        server = pool.ensure(KIND)
        print(f"{KIND}: ready after {server.ready_after_s:.1f} s", file=sys.stderr)
        wait_quiet(args.quiet_wait, args.quiet_share)
        warm = run_args(server, work / "warm", args, args.warm_requests, "warm")
        print(f"warm run: {specload(warm, server, args.timeout).describe()}", file=sys.stderr)
        for name in args.runs.split(","):
            time.sleep(args.pause)
            wait_quiet(args.quiet_wait, args.quiet_share)
            run_dir = work / f"run-{name}"
            argv = run_args(server, run_dir, args, args.requests, f"{KIND}-{name}")
            cost = specload(argv, server, args.timeout)
            dest = out / f"{KIND}_{name}.requests.jsonl.gz"
            store(run_dir, dest)
            stats = level_stats(read_requests(run_dir))
            medians[name] = {step: stat[-1] for step, stat in stats.items()}
            for step, (ok, timed, zero, median) in stats.items():
                print(
                    f"run {name} {step}: {ok} ok, {timed} with ttft/tpot ({zero} of them 0), "
                    f"median TPOT {median:.2f} ms",
                    file=sys.stderr,
                )
            print(f"run {name}: {cost.describe()} -> {dest}", file=sys.stderr)
    finally:
        pool.stop_all()
    names = list(medians)
    for name in names[1:]:
        for step, median in medians[name].items():
            base = medians[names[0]].get(step)
            if not step.endswith("-warmup") and base:
                ratio = median / base
                print(f"median TPOT {step} {name}/{names[0]}: {ratio:.3f}", file=sys.stderr)
    took = time.monotonic() - started
    print(f"captured into {out} in {took:.0f} s (server log, run folders: {work})", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
