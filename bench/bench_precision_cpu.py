"""Client CPU of ``specload run --precision``: with the checks against without (goal <= +3%).

Under ``--precision`` the sweep's master re-computes the interval of the level's median TPOT
(:class:`specload.results.stopping.PrecisionRule`) every time the window's requests grew by
4%, from five blocks of the concurrency on. This benchmark runs the real ``specload run``
at 256 closed-loop streams against ``bench/fixed_server.c`` (built with ``cc -O2``; TTFT
50 ms, ITL 5 ms, 400 tokens per answer, one token per chunk: bench/results/client.md's
set-up), in two arms with the same ``--requests`` budget:

- **off**: no ``--precision``;
- **on**: ``--precision 0.1%`` (the tightest the option takes) with the target out of
  reach, so the looks run for the whole window: a fixed-timing server's TPOT is exact to
  microseconds, so even 0.1% would be met soon after the first interval. The measured
  process's wrapper of ``PrecisionRule.look`` sets the rule's target below 0 before each
  look: every look computes its interval in full and none stops the level — what a level
  whose target is out of reach in its budget costs, the most looks a level can take (the
  ``stop`` column says ``budget``). ``--tree DIR`` measures a snapshot of the code (e.g. a
  ``git archive`` of one commit) while others edit the checkout.

The arms alternate over ``--rounds`` rounds (off, on | on, off | off, on ...: each round's
pair shares its minutes of the machine). Per run, over the level's measured window only:

- **client CPU**: user+system seconds of the master and its worker processes (the master's
  ``getrusage``, the workers' from psutil, read at the window's two edges), per completed
  request; and the **master's** alone (the same with ``--workers 0``);
- **looks** (on arm): the count, their CPU (``PrecisionRule.look`` timed in place with
  ``time.thread_time``: a direct attribution, free of the run-to-run noise) and their wall
  time — each look holds the master's event loop for that long;
- delivered throughput, median TPOT and TTFT (``summary.json``), and the machine's
  **other CPU** (cores used by every other process in the window) with the load average.

The figure against the goal is each round's ratio on / off of CPU per request (client and
master), their median and spread; beside it the looks' own CPU over the rest of the
client's (``look share``), which needs no second run.

    .venv/bin/python bench/bench_precision_cpu.py [--rounds 3] [--requests 5000] \\
        [--warmup 5] [--workers 0] [--precision 0.1%] [--json runs.json] [--out table.md]

Each run holds /tmp/specload-bench.lock (other benchmarks take it too) and starts when the
machine's processes use at most ``--max-busy`` cores (waiting up to ``--max-wait`` s, then
it runs anyway and the table says how busy the machine was). ``BENCH_PROFILE=FILE`` runs
the master of the *on* runs under cProfile on the thread's CPU clock (``FILE.N.prof``; it
slows the master, so profiled runs' CPU figures are not comparable; e.g. ``--arms on
--rounds 1``). ``--child`` is internal (the measured process). Results:
bench/results/precision_cpu.md.
"""

from __future__ import annotations

import argparse
import contextlib
import fcntl
import hashlib
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import fixed_servers  # bench/, beside this script
from bench_client_servers import cpu_steal, machine_busy, proc_cpu, stop_both
from fixed_servers import Timing, build_c_server, free_port, server_command

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent


# --------------------------------------------------------------------------------------
# the measured process: `specload run` with timestamp-only wrappers
# --------------------------------------------------------------------------------------


def child(args: argparse.Namespace, run_argv: list[str]) -> None:
    from gevent import monkey  # noqa: PLC0415

    monkey.patch_all()
    import resource  # noqa: PLC0415

    import psutil  # noqa: PLC0415

    import specload.sweep.session  # noqa: F401, PLC0415  (Locust, as `specload run` does)
    from specload import cli  # noqa: PLC0415
    from specload.load.reactor import get_reactor  # noqa: PLC0415
    from specload.results.stopping import PrecisionRule  # noqa: PLC0415
    from specload.sweep.driver import SweepDriver  # noqa: PLC0415

    me = psutil.Process()

    def mark() -> dict[str, float]:
        ru = resource.getrusage(resource.RUSAGE_SELF)
        workers = 0.0
        for p in me.children(recursive=True):
            with contextlib.suppress(psutil.Error):
                t = p.cpu_times()
                workers += t.user + t.system
        reactor = get_reactor()  # the master's streams (none with --workers)
        return {
            "wall": time.time(),
            "master_cpu": ru.ru_utime + ru.ru_stime,
            "master_sys": ru.ru_stime,
            "workers_cpu": workers,
            "wakeups": reactor.wakeups,
            "reads": reactor.reads,
        }

    marks: dict[str, Any] = {}
    # (wall at its end, n, thread CPU s, wall s, half-width)
    looks: list[tuple[float, int, float, float, float | None]] = []

    orig_look = PrecisionRule.look

    def look(self: Any, *args: Any, **kwargs: Any) -> bool:
        # The fixed server's TPOT is exact to microseconds: any target would be met within a
        # few hundred requests. Out of reach, every look runs in full and none stops.
        self.target = -1.0
        c0, w0 = time.thread_time(), time.perf_counter()
        precise = orig_look(self, *args, **kwargs)
        c1, w1 = time.thread_time(), time.perf_counter()
        looks.append((time.time(), len(self.values), c1 - c0, w1 - w0, self.half_width))
        return bool(precise)

    orig_open = SweepDriver._open_window

    def open_window(self: Any, state: Any) -> None:
        orig_open(self, state)
        marks["start"] = mark()

    orig_run_window = SweepDriver._run_window

    def run_window(self: Any, state: Any, window: Any, step: str) -> None:
        orig_run_window(self, state, window, step)
        if window is state.window:
            marks["end"] = mark()

    PrecisionRule.look = look  # type: ignore[method-assign]
    SweepDriver._open_window = open_window  # type: ignore[method-assign]
    SweepDriver._run_window = run_window  # type: ignore[method-assign]

    profile = os.environ.get("BENCH_PROFILE_OUT")
    if profile:
        import cProfile  # noqa: PLC0415

        prof = cProfile.Profile(time.thread_time)  # CPU time: the hub's idle waits are not counted
        code = prof.runcall(cli.main, run_argv)
        prof.dump_stats(profile)
    else:
        code = cli.main(run_argv)
    Path(args.child_out).write_text(json.dumps({"exit_code": code, "marks": marks, "looks": looks}))


# --------------------------------------------------------------------------------------
# the parent: server, runs, figures
# --------------------------------------------------------------------------------------


def rules_fingerprint(tree: Path) -> str:
    """``COMMIT+HASH``: the commit of ``tree`` (``git rev-parse`` in a checkout; the first
    line of ``tree/.bench-commit`` in an archive) and a short hash of the stopping rules'
    code as it is on disk (results/stopping.py, results/bootstrap.py, sweep/driver.py):
    other sessions may change it between runs."""
    h = hashlib.sha256()
    for rel in (
        "specload/results/stopping.py",
        "specload/results/bootstrap.py",
        "specload/sweep/driver.py",
    ):
        h.update((tree / rel).read_bytes())
    stamp = tree / ".bench-commit"
    if stamp.exists():
        head = stamp.read_text().split("\n", 1)[0].strip()[:10]
    else:
        head = subprocess.run(
            ["git", "rev-parse", "--short", "HEAD"],
            check=False,
            cwd=tree,
            capture_output=True,
            text=True,
        ).stdout.strip()
    return f"{head or '?'}+{h.hexdigest()[:8]}"


def tree_cpu(pid: int) -> float:
    """User+system seconds of ``pid`` and its live descendants (psutil)."""
    import psutil  # noqa: PLC0415

    total = 0.0
    with contextlib.suppress(psutil.Error):
        p = psutil.Process(pid)
        for q in [p, *p.children(recursive=True)]:
            with contextlib.suppress(psutil.Error):
                t = q.cpu_times()
                total += t.user + t.system
    return total


def run_one(
    arm: str, args: argparse.Namespace, c_exe: str, tmp: Path, index: int
) -> dict[str, Any]:
    port = free_port()
    timing = Timing(args.ttft, args.itl, args.tokens)
    server = fixed_servers.start_server(
        server_command("c", port, timing, c_exe=c_exe), port, cpu=args.server_cpu
    )
    child_out = tmp / f"child-{index}.json"
    results_dir = tmp / f"results-{index}"
    run_argv = [
        *("run", "--host", f"http://127.0.0.1:{port}"),
        *("--concurrency", str(args.streams), "--warmup", f"{args.warmup:g}s"),
        *("--requests", str(args.requests), "--max-tokens", str(args.tokens)),
        *("--metrics-url", "off", "--metrics-address", "off", "--progress", "off"),
        *("--no-plots", "--drain-timeout", "30s", "--workers", str(args.workers)),
        *("--out", str(results_dir), "--variant", f"bench-precision-{arm}"),
    ]
    if arm == "on":
        run_argv += ["--precision", args.precision]
    cmd = [sys.executable, str(Path(__file__).resolve()), "--child", "--child-out", str(child_out)]
    if args.client_cpu >= 0:
        cmd = ["taskset", "-c", str(args.client_cpu), *cmd]
    tree = str(Path(args.tree).resolve())
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([tree, os.environ.get("PYTHONPATH", "")])}
    env.pop("BENCH_PROFILE_OUT", None)
    if arm == "on" and os.environ.get("BENCH_PROFILE"):
        env["BENCH_PROFILE_OUT"] = f"{os.environ['BENCH_PROFILE']}.{index}.prof"
    load_before = os.getloadavg()[0]
    samples: list[tuple[float, float, float, dict[str, tuple[int, int, int]]]] = []
    proc = subprocess.Popen([*cmd, "--", *run_argv], env=env, cwd=tree)
    try:
        while proc.poll() is None:
            with contextlib.suppress(OSError, IndexError, ValueError):
                samples.append((time.time(), tree_cpu(proc.pid), proc_cpu(server.pid), cpu_steal()))
            time.sleep(0.5)
    finally:
        stop_both(proc, server)
    if not child_out.exists():
        raise RuntimeError(f"the measured run failed (exit {proc.returncode})")
    data = json.loads(child_out.read_text())
    summary = json.loads((results_dir / "summary.json").read_text())
    level = summary["levels"][0]
    start, end = data["marks"]["start"], data["marks"]["end"]
    lo, hi = start["wall"], end["wall"]
    window_s = hi - lo
    master = end["master_cpu"] - start["master_cpu"]
    workers = end["workers_cpu"] - start["workers_cpu"]
    completed = int(level["completed"])
    inside = [x for x in data["looks"] if lo <= x[0] <= hi]
    row: dict[str, Any] = {
        "arm": arm,
        "index": index,
        "time": time.strftime("%H:%M:%S", time.gmtime(lo)),
        "window_s": window_s,
        "completed": completed,
        "client_cpu_s": master + workers,
        "master_cpu_s": master,
        "master_sys_s": end["master_sys"] - start["master_sys"],
        "master_user_s": master - (end["master_sys"] - start["master_sys"]),
        "wakeups": end["wakeups"] - start["wakeups"],
        "reads": end["reads"] - start["reads"],
        "workers_cpu_s": workers,
        "client_ms_per_request": 1000 * (master + workers) / completed,
        "master_ms_per_request": 1000 * master / completed,
        "client_cores": (master + workers) / window_s,
        "looks": len(inside),
        "look_cpu_s": sum(x[2] for x in inside),
        "look_wall_s": sum(x[3] for x in inside),
        "look_max_ms": 1000 * max((x[3] for x in inside), default=0.0),
        "look_last_n": inside[-1][1] if inside else 0,
        # n, CPU s, wall s, half-width
        "look_log": [[x[1], round(x[2], 5), round(x[3], 5), x[4]] for x in inside],
        "stop_reason": level.get("stop_reason"),
        "precision_half_width": level.get("precision_half_width"),
        "precision_requests": level.get("precision_requests"),
        "tok_s": level.get("output_throughput"),
        "median_tpot_ms": level.get("median_tpot_ms"),
        "median_ttft_ms": level.get("median_ttft_ms"),
        "load_before": load_before,
        "load_after": os.getloadavg()[0],
        "exit_code": data["exit_code"],
    }
    # cores used by every other process in the window (other sessions' tests, ...)
    win = [s for s in samples if lo <= s[0] <= hi]
    if len(win) >= 2:
        (t1, k1, v1, st1), (t2, k2, v2, st2) = win[0], win[-1]
        ticks = os.sysconf("SC_CLK_TCK")
        busy_all = sum(st2[c][0] - st1[c][0] for c in st1) / ticks / (t2 - t1)
        row["server_cores"] = (v2 - v1) / (t2 - t1)
        row["other_cores"] = busy_all - (k2 - k1) / (t2 - t1) - row["server_cores"]
    return row


def quiet_then_lock(args: argparse.Namespace) -> tuple[float, float]:
    """Wait (up to --max-wait) for a quiet machine; returns (cores busy, seconds waited)."""
    waited = 0.0
    busy = 0.0
    while True:
        busy = machine_busy(3.0)
        waited += 3.0
        if busy <= args.max_busy or waited >= args.max_wait:
            return busy, waited
        print(f"waiting for a quiet machine: {busy:.2f} cores busy", flush=True)


def describe(r: dict[str, Any]) -> str:
    text = (
        f"{r['time']} {r['arm']:>3}: {r['completed']} requests in {r['window_s']:.1f} s; client "
        f"{r['client_cpu_s']:.2f} CPU-s = {r['client_ms_per_request']:.3f} ms/request "
        f"({r['client_cores']:.0%} of a core), master {r['master_ms_per_request']:.3f} ms/request; "
        f"other {r.get('other_cores', float('nan')):.2f} cores, load {r['load_before']:.1f}"
    )
    if r["arm"] == "on":
        text += (
            f"; {r['looks']} looks, {r['look_cpu_s']:.2f} CPU-s "
            f"({r['look_cpu_s'] / max(r['client_cpu_s'] - r['look_cpu_s'], 1e-9):.2%} "
            "of the rest), "
            f"longest {r['look_max_ms']:.0f} ms; stop {r['stop_reason']}, "
            f"±{100 * (r['precision_half_width'] or 0):.2f}%"
        )
    return text


def rounds_table(rows: list[dict[str, Any]]) -> str:
    lines = [
        "| round | arm | time UTC | requests | window s | client CPU-s | client ms/request "
        "| master ms/request | client less looks ms/request | master sys share | reads/wake-up "
        "| client cores | other cores | load | looks | look CPU-s "
        "| longest look ms | median TPOT ms | tok/s | stop |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        on = r["arm"] == "on"
        looks = str(r["looks"]) if on else "-"
        look_cpu = f"{r['look_cpu_s']:.2f}" if on else "-"
        longest = f"{r['look_max_ms']:.0f}" if on else "-"
        lines.append(
            f"| {r['round']} | {r['arm']} | {r['time']} | {r['completed']} | {r['window_s']:.1f} "
            f"| {r['client_cpu_s']:.2f} | {r['client_ms_per_request']:.3f} "
            f"| {r['master_ms_per_request']:.3f} "
            f"| {1000 * (r['client_cpu_s'] - r['look_cpu_s']) / r['completed']:.3f} "
            f"| {r['master_sys_s'] / max(r['master_cpu_s'], 1e-9):.0%} "
            f"| {r['reads'] / max(r['wakeups'], 1):.1f} | {r['client_cores']:.2f} "
            f"| {r.get('other_cores', float('nan')):.2f} | {r['load_before']:.1f} "
            f"| {looks} | {look_cpu} | {longest} "
            f"| {r['median_tpot_ms'] or float('nan'):.3f} | {r['tok_s'] or 0:.0f} "
            f"| {r['stop_reason']} |"
        )
    return "\n".join(lines)


def ratios(rows: list[dict[str, Any]]) -> tuple[str, dict[str, Any]]:
    by_round: dict[int, dict[str, dict[str, Any]]] = {}
    for r in rows:
        by_round.setdefault(r["round"], {})[r["arm"]] = r
    lines = [
        "| round | client ms/request off → on | ratio client | master ms/request off → on "
        "| ratio master | look CPU / rest of client (on run) |",
        "|---|---|---|---|---|---|",
    ]
    client_r, master_r, look_r = [], [], []
    for k in sorted(by_round):
        pair = by_round[k]
        if "on" not in pair or "off" not in pair:
            continue
        off, on = pair["off"], pair["on"]
        rc = on["client_ms_per_request"] / off["client_ms_per_request"]
        rm = on["master_ms_per_request"] / off["master_ms_per_request"]
        rl = on["look_cpu_s"] / max(on["client_cpu_s"] - on["look_cpu_s"], 1e-9)
        client_r.append(rc)
        master_r.append(rm)
        look_r.append(rl)
        lines.append(
            f"| {k} | {off['client_ms_per_request']:.3f} → {on['client_ms_per_request']:.3f} "
            f"| {rc - 1:+.2%} | {off['master_ms_per_request']:.3f} → "
            f"{on['master_ms_per_request']:.3f} | {rm - 1:+.2%} | {rl:.2%} |"
        )
    stats: dict[str, Any] = {}
    for name, vals in (("client", client_r), ("master", master_r), ("look", look_r)):
        if vals:
            stats[name] = {
                "median": statistics.median(vals),
                "min": min(vals),
                "max": max(vals),
                "mean": statistics.fmean(vals),
                "sd": statistics.stdev(vals) if len(vals) > 1 else 0.0,
            }
    if stats:
        c, m, lk = stats["client"], stats["master"], stats["look"]
        lines.append(
            f"| **median (min … max)** | | **{c['median'] - 1:+.2%}** "
            f"({c['min'] - 1:+.2%} … {c['max'] - 1:+.2%}) | | **{m['median'] - 1:+.2%}** "
            f"({m['min'] - 1:+.2%} … {m['max'] - 1:+.2%}) | **{lk['median']:.2%}** "
            f"({lk['min']:.2%} … {lk['max']:.2%}) |"
        )
    return "\n".join(lines), stats


def parent(args: argparse.Namespace) -> None:
    rows: list[dict[str, Any]] = []
    t_start = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="specload-bench-precision-") as tmpname:
        tmp = Path(tmpname)
        # our own copy: another benchmark may be running the shared one (text file busy)
        c_exe = build_c_server(tmp / "fixed-server-c")
        index = 0
        for k in range(args.rounds):
            order = ("off", "on") if k % 2 == 0 else ("on", "off")
            for arm in (a for a in order if a in args.arms.split(",")):
                busy, waited = quiet_then_lock(args)
                try:
                    with open(args.lock, "a") as lock:
                        fcntl.flock(lock, fcntl.LOCK_EX)
                        code = rules_fingerprint(Path(args.tree))
                        row = run_one(arm, args, c_exe, tmp, index)
                except (RuntimeError, OSError, ValueError, KeyError) as exc:
                    print(f"{arm}: run {index} failed: {exc}", flush=True)
                    index += 1
                    continue
                row.update(round=k, code=code, busy_before=busy, waited_s=waited)
                index += 1
                rows.append(row)
                print(describe(row), flush=True)
    elapsed = time.monotonic() - t_start
    ratio_text, stats = ratios(rows)
    head = (
        f"{args.streams} streams, --requests {args.requests}, warm-up {args.warmup:g} s, "
        f"--workers {args.workers}, --precision {args.precision} (on arm), C server "
        f"TTFT {args.ttft * 1000:g} ms ITL {args.itl * 1000:g} ms {args.tokens} tokens; "
        f"client CPU {args.client_cpu if args.client_cpu >= 0 else 'not pinned'}, server CPU "
        f"{args.server_cpu}; {len(rows)} runs in {elapsed:.0f} s"
    )
    text = f"{head}\n\n{rounds_table(rows)}\n\n{ratio_text}\n"
    if args.json:
        Path(args.json).write_text(
            json.dumps({"args": vars(args), "rows": rows, "stats": stats}, indent=1)
        )
    if args.out:
        Path(args.out).write_text(text)
    print(text)


def main() -> None:
    if "--child" in sys.argv:
        # internal: `--child --child-out FILE -- <specload run argv>`
        i = sys.argv.index("--")
        ap = argparse.ArgumentParser()
        ap.add_argument("--child", action="store_true")
        ap.add_argument("--child-out", required=True)
        child(ap.parse_args(sys.argv[1:i]), sys.argv[i + 1 :])
        return
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--rounds", type=int, default=3, help="pairs of runs (off/on), alternating")
    ap.add_argument("--arms", default="off,on", help="off,on (default), or one of them")
    ap.add_argument("--streams", type=int, default=256)
    ap.add_argument("--requests", type=int, default=5000, help="each run's window (requests)")
    ap.add_argument("--warmup", type=float, default=5.0)
    ap.add_argument("--workers", type=int, default=0)
    ap.add_argument(
        "--precision",
        default="0.1%",
        help="the on arm's --precision: tight enough that no level stops early",
    )
    ap.add_argument("--ttft", type=float, default=0.05)
    ap.add_argument("--itl", type=float, default=0.005)
    ap.add_argument("--tokens", type=int, default=400)
    ap.add_argument("--server-cpu", type=int, default=1)
    ap.add_argument(
        "--client-cpu", type=int, default=0, help="pin the client here (-1: not pinned)"
    )
    ap.add_argument(
        "--max-busy",
        type=float,
        default=0.3,
        help="before each run, wait (up to --max-wait s) until the machine's processes "
        "use at most this many cores (over 3 s)",
    )
    ap.add_argument("--max-wait", type=float, default=20.0)
    ap.add_argument(
        "--lock",
        default="/tmp/specload-bench.lock",
        help="held during each run (other benchmarks use it too)",
    )
    ap.add_argument(
        "--tree",
        default=str(ROOT),
        help="the specload code measured (its package first on the child's path; default "
        "this checkout): e.g. `git archive COMMIT | tar -x -C DIR`, the built "
        "specload/load/_fastpath*.so copied in and COMMIT written to DIR/.bench-commit, to "
        "hold the code still while others edit it",
    )
    ap.add_argument("--out", default="")
    ap.add_argument("--json", default="")
    parent(ap.parse_args())


if __name__ == "__main__":
    main()
