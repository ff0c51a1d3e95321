"""Benchmark of the load generator against a fixed-timing server.

For each stream count: start the server pinned to one core, run specload's
Locust users (a LocalRunner in *this* process, pinned to another core) at
that concurrency, warm up, then measure a window:

- throughput: output tokens of requests that ended in the window / window,
  as a share of the offered load ``streams * tokens / (ttft + (tokens/k - 1) * itl)``;
- median TTFT and TPOT of requests started in the window, against truth;
- output tokens per client CPU-second (this process's user+system CPU in the window),
  CPU microseconds per token and the kernel's share of them;
- reads per reactor wake-up, share of reads taken by the C fused reader, reads
  without a kernel arrival stamp;
- share of chunk gaps that were 0 s (events read together).

    python bench/bench_client.py --streams 32,64,128,256,512 --out /tmp/client-table.md

``--server``: ``c`` (bench/fixed_server.c, the default), ``py`` (bench/fixed_server.py),
``uvloop`` (bench/fixed_server_uvloop.py, an independent server of another make) or
``sim`` (the simulator's fixed timing). ``specload run`` itself against the C and uvloop
servers, with where the gap goes: bench/bench_client_servers.py.

BENCH_TTFT_DIST=1 also prints TTFT percentiles. The client's SPECLOAD_* switches
(docs/load.md) apply, e.g. SPECLOAD_FASTPATH=0 for the pure-Python path.
"""

from __future__ import annotations

import argparse
import os
import resource
import statistics
import subprocess
import time
from pathlib import Path

from gevent import monkey

monkey.patch_all()

import fixed_servers  # noqa: E402  (bench/, beside this script)
import gevent  # noqa: E402
from fixed_servers import Timing, free_port, server_command  # noqa: E402
from locust import events  # noqa: E402
from locust.argument_parser import parse_options  # noqa: E402
from locust.env import Environment  # noqa: E402

from specload.load import RequestRecord, get_session, set_step, subscribe  # noqa: E402
from specload.load.reactor import get_reactor  # noqa: E402
from specload.load.user import ChatUser  # noqa: E402

HERE = Path(__file__).resolve().parent


def cpu_s() -> float:
    ru = resource.getrusage(resource.RUSAGE_SELF)
    return ru.ru_utime + ru.ru_stime


def sys_s() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_stime


def start_server(args: argparse.Namespace, port: int) -> subprocess.Popen[bytes]:
    timing = Timing(args.ttft, args.itl, args.tokens, args.tokens_per_chunk)
    return fixed_servers.start_server(
        server_command(args.server, port, timing), port, cpu=args.server_cpu
    )


def run_level(args: argparse.Namespace, streams: int) -> dict[str, float]:
    port = free_port()
    server = start_server(args, port)
    try:
        options = parse_options(
            [
                "-f",
                "x",
                "--host",
                f"http://127.0.0.1:{port}",
                "--metrics-address",
                "off",
                "--max-tokens",
                str(args.tokens),
                "--prompts",
                "builtin",
            ]
        )
        env = Environment(
            user_classes=[ChatUser], host=options.host, events=events, parsed_options=options
        )
        runner = env.create_local_runner()
        events.init.fire(environment=env, runner=runner, web_ui=None)
        ended: list[tuple[float, float, int]] = []
        window: list[RequestRecord] = []

        def on_record(r: RequestRecord) -> None:
            ended.append((r.start_s, r.end_s, r.tokens_output))
            if r.step == "measure":
                window.append(r)

        subscribe(env, on_record)
        runner.start(streams, spawn_rate=streams)
        gevent.sleep(args.warmup)
        set_step(env, "measure")
        reactor = get_reactor()
        w1, r1, f1 = reactor.wakeups, reactor.reads, reactor.fast_reads
        y1, h1 = reactor.yields, reactor.hub_wakeups
        t1, c1, s1 = time.time(), cpu_s(), sys_s()
        gevent.sleep(args.duration)
        t2, c2, s2 = time.time(), cpu_s(), sys_s()
        w2, r2, f2 = reactor.wakeups, reactor.reads, reactor.fast_reads
        y2, h2 = reactor.yields, reactor.hub_wakeups
        set_step(env, "after")
        # let requests started in the window finish, to measure their latencies
        gevent.sleep(args.ttft + args.tokens / args.tokens_per_chunk * args.itl + 1.0)
        runner.quit()
        session = get_session(env)
        del session
    finally:
        server.kill()
        server.wait()
    # Each request's tokens prorated by the part of it inside the window (tokens flow at a
    # constant rate after the first), so requests ending together do not skew the count.
    tokens = 0.0
    for start, end, n in ended:
        first = start + args.ttft
        if end <= first:
            continue
        overlap = max(0.0, min(end, t2) - max(first, t1))
        tokens += n * overlap / (end - first)
    ok = [r for r in window if r.ok]
    # Exact medians of the raw values (the results use specload.histogram, within 0.5%).
    ttfts = sorted(r.ttft_s for r in ok if r.ttft_s is not None) or [0.0]
    ttft_med = statistics.median(ttfts)
    if os.environ.get("BENCH_TTFT_DIST"):
        qs = (0.01, 0.1, 0.25, 0.5, 0.75, 0.9, 0.99)
        values = [ttfts[int(q * (len(ttfts) - 1))] * 1000 for q in qs]
        print("TTFT ms p1/10/25/50/75/90/99:", " ".join(f"{v:.2f}" for v in values))
    tpot_med = statistics.median([r.tpot_s for r in ok if r.tpot_s is not None] or [0.0])
    chunk_gaps = sum(r.chunks - 1 for r in ok if r.chunks)
    coalesced = sum(r.chunks_coalesced for r in ok)
    n_chunks = -(-args.tokens // args.tokens_per_chunk)
    request_s = args.ttft + (n_chunks - 1) * args.itl
    offered = streams * args.tokens / request_s
    throughput = tokens / (t2 - t1)
    truth_tpot = (n_chunks - 1) * args.itl / (args.tokens - 1)
    return {
        "streams": streams,
        "offered_tok_s": offered,
        "tok_s": throughput,
        "share": throughput / offered,
        "median_ttft_ms": ttft_med * 1000,
        "ttft_err": ttft_med / args.ttft - 1,
        "median_tpot_ms": tpot_med * 1000,
        "tpot_err": tpot_med / truth_tpot - 1,
        "tok_per_cpu_s": tokens / max(c2 - c1, 1e-9),
        "cpu_share": (c2 - c1) / (t2 - t1),
        "sys_share": (s2 - s1) / max(c2 - c1, 1e-9),
        "cpu_us_per_token": (c2 - c1) / max(tokens, 1.0) * 1e6,
        "coalesced": coalesced / chunk_gaps if chunk_gaps else 0.0,
        "failed": sum(1 for r in window if not r.ok),
        "reads_per_wakeup": (r2 - r1) / max(1, w2 - w1),
        "fast_share": (f2 - f1) / max(1, r2 - r1),
        "yields_per_s": (y2 - y1) / (t2 - t1),
        "unstamped": reactor.unstamped_reads,
        "hub_wakeups_per_s": (h2 - h1) / (t2 - t1),
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--streams", default="32,64,128,256,512")
    ap.add_argument("--ttft", type=float, default=0.05)
    ap.add_argument("--itl", type=float, default=0.005)
    ap.add_argument("--tokens", type=int, default=400)
    ap.add_argument("--tokens-per-chunk", type=int, default=1)
    ap.add_argument("--warmup", type=float, default=5.0)
    ap.add_argument("--duration", type=float, default=20.0)
    ap.add_argument(
        "--server",
        choices=("c", "py", "uvloop", "sim"),
        default="c",
        help="fixed-timing server: C (default), Python, the independent uvloop "
        "server (bench/fixed_server_uvloop.py), or the simulator",
    )
    ap.add_argument("--server-cpu", type=int, default=1)
    ap.add_argument("--client-cpu", type=int, default=0)
    ap.add_argument("--out", default="")
    args = ap.parse_args()
    if args.client_cpu is not None:
        os.sched_setaffinity(0, {args.client_cpu})
    rows = []
    for n in [int(x) for x in args.streams.split(",")]:
        row = run_level(args, n)
        rows.append(row)
        print(
            f"{n:4d} streams: {row['tok_s']:8.0f} tok/s = {row['share']:.1%} of offered; "
            f"TTFT {row['median_ttft_ms']:.2f} ms ({row['ttft_err']:+.1%}); "
            f"TPOT {row['median_tpot_ms']:.3f} ms ({row['tpot_err']:+.2%}); "
            f"{row['tok_per_cpu_s']:8.0f} tok/CPU-s (CPU {row['cpu_share']:.0%}, "
            f"{row['cpu_us_per_token']:.1f} us/token, {row['sys_share']:.0%} in the kernel); "
            f"coalesced gaps {row['coalesced']:.1%}; reads/wake-up "
            f"{row['reads_per_wakeup']:.1f}; fast path {row['fast_share']:.0%} of reads; "
            f"yields/s {row['yields_per_s']:.0f}, loop-fd wake-ups/s "
            f"{row['hub_wakeups_per_s']:.0f}; "
            f"unstamped reads {row['unstamped']}; "
            f"failed {row['failed']}",
            flush=True,
        )
    if args.out:
        lines = [
            "| streams | offered tok/s | measured tok/s | share | median TTFT ms (err) | "
            "median TPOT ms (err) | tok per client CPU-s | CPU µs/token (kernel) | client CPU | "
            "reads/wake-up | 0-s chunk gaps |",
            "|---|---|---|---|---|---|---|---|---|---|---|",
        ]
        for r in rows:
            lines.append(
                f"| {r['streams']} | {r['offered_tok_s']:.0f} | {r['tok_s']:.0f} | "
                f"{r['share']:.1%} | {r['median_ttft_ms']:.2f} ({r['ttft_err']:+.1%}) | "
                f"{r['median_tpot_ms']:.3f} ({r['tpot_err']:+.2%}) | {r['tok_per_cpu_s']:.0f} | "
                f"{r['cpu_us_per_token']:.1f} ({r['sys_share']:.0%}) | {r['cpu_share']:.0%} | "
                f"{r['reads_per_wakeup']:.1f} | {r['coalesced']:.1%} |"
            )
        Path(args.out).write_text("\n".join(lines) + "\n")


if __name__ == "__main__":
    main()
