"""Benchmark: exporter CPU per poll cycle over 8 targets with real-size vLLM pages.

Goal: <= 20 ms CPU per cycle, spec decode on. The pages are the real
vLLM 0.32 n-gram page captured in tests/data (about 55 KB, 640 lines), served
by a separate process on 8 loopback ports whose counters move every request,
so only the exporter's own work is measured: httpx fetch, parse, derive.

    .venv/bin/python bench/bench_exporter.py [--cycles 200] [--targets 8]

Prints a Markdown table; bench/results/exporter.md records a run.
"""

from __future__ import annotations

import argparse
import os
import platform
import statistics
import subprocess
import sys
import textwrap
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from prometheus_client import generate_latest  # noqa: E402

from exporter.app import Exporter  # noqa: E402
from exporter.config import ExporterConfig, TargetConfig  # noqa: E402
from exporter.vllm_metrics import keep  # noqa: E402
from specload.promtext import parse  # noqa: E402
from specload.urls import parse_server_url  # noqa: E402

SERVER = textwrap.dedent(
    """
    import re, sys, threading
    from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
    page = open(sys.argv[1]).read()
    n = int(sys.argv[2])
    count = [0]
    def render():
        count[0] += 1
        k = count[0]
        # Move every counter a little so each poll sees a fresh page.
        return re.sub(r"_total(\\{[^}]*\\}) ([0-9.e+]+)$",
                      lambda m: "_total%s %r" % (m.group(1), float(m.group(2)) + k),
                      page, flags=re.M).encode()
    class H(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"
        def do_GET(self):
            body = render() if self.path == "/metrics" else b'{"version": "0.32.0"}'
            self.send_response(200)
            self.send_header("Content-Type", "text/plain; version=0.0.4")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)
        def log_message(self, *a):
            pass
    ports = []
    for _ in range(n):
        s = ThreadingHTTPServer(("127.0.0.1", 0), H)
        ports.append(s.server_address[1])
        threading.Thread(target=s.serve_forever, daemon=True).start()
    print(" ".join(map(str, ports)), flush=True)
    sys.stdin.read()
    """
)


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--cycles", type=int, default=100)
    ap.add_argument("--targets", type=int, default=8)
    ap.add_argument("--interval", type=float, default=0.5)
    ap.add_argument("--page", default=str(REPO / "tests/data/vllm-0.32.0/metrics_ngram.txt"))
    args = ap.parse_args()
    page = Path(args.page)
    server = subprocess.Popen(
        [sys.executable, "-c", SERVER, str(page), str(args.targets)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert server.stdout is not None
        ports = [int(p) for p in server.stdout.readline().split()]
        targets = tuple(
            TargetConfig(f"v{i}", parse_server_url(f"http://127.0.0.1:{p}"), timeout_s=5.0)
            for i, p in enumerate(ports)
        )
        # The production path: a thread per target on a common schedule.
        ex = Exporter(ExporterConfig(targets=targets, interval_s=args.interval), sources=[])
        ex.start(serve=False)
        try:
            time.sleep(2 * args.interval)  # warm-up: connections, /version, first readings
            cpu: list[float] = []  # CPU of one round, every target's last poll summed
            wall: list[float] = []
            polls0 = ex.poller.stats.polls_total
            p0 = time.process_time()
            last = polls0
            while (ex.poller.stats.polls_total - polls0) < args.cycles * len(targets):
                time.sleep(args.interval / 4)
                s = ex.poller.stats
                if s.polls_total - last >= len(targets):
                    last = s.polls_total
                    assert s.round_cpu_s is not None and s.round_duration_s is not None
                    cpu.append(s.round_cpu_s * 1000)
                    wall.append(s.round_duration_s * 1000)
            rounds = (ex.poller.stats.polls_total - polls0) / len(targets)
            process_ms = (time.process_time() - p0) * 1000 / rounds
            views = ex.views()
            assert all(v.up for v in views), [v.last_error_detail for v in views]
            failed = sum(sum(v.errors_total.values()) for v in views)
            assert failed == 0, f"{failed} polls failed: the figure would include reconnects"
            assert all(v.derived and "interval" in v.derived.acceptance_ratio for v in views)
            t0 = time.process_time()
            for _ in range(50):
                generate_latest(ex.registry)
            scrape_ms = (time.process_time() - t0) * 1000 / 50
        finally:
            ex.stop()
    finally:
        server.stdin.close()  # type: ignore[union-attr]
        server.wait(10)
    t0 = time.process_time()
    sum(range(10_000_000))
    calib_ms = (time.process_time() - t0) * 1000
    text = page.read_text()
    t0 = time.process_time()
    for _ in range(100):
        parse(text, keep, buckets=False)  # as the exporter does
    parse_keep_ms = (time.process_time() - t0) * 10
    t0 = time.process_time()
    for _ in range(100):
        parse(text)
    parse_full_ms = (time.process_time() - t0) * 10
    q = statistics.quantiles(cpu, n=10)
    print(
        f"## exporter poll cycle: {args.targets} targets, page {page.name} "
        f"({page.stat().st_size / 1024:.0f} KB, {page.read_text().count(chr(10))} lines)\n"
    )
    print(
        f"machine: {platform.processor() or platform.machine()}, {os.cpu_count()} cores, "
        f"Python {platform.python_version()}; {args.cycles} cycles\n"
    )
    print("| measure | median | p90 | mean |")
    print("|---|---|---|---|")
    print(
        f"| poll threads CPU per round, summed (ms) | {statistics.median(cpu):.2f} | {q[8]:.2f} | "
        f"{statistics.fmean(cpu):.2f} |"
    )
    print(
        f"| wall time of a round, slowest target (ms) | {statistics.median(wall):.2f} | "
        f"{statistics.quantiles(wall, n=10)[8]:.2f} | {statistics.fmean(wall):.2f} |"
    )
    print(f"| whole-process CPU per round (ms) | | | {process_ms:.2f} |")
    print(f"| one scrape of the exporter's /metrics, CPU (ms) | | | {scrape_ms:.2f} |")
    print(f"| promtext.parse of one page, exporter's filter (ms) | | | {parse_keep_ms:.2f} |")
    print(f"| promtext.parse of one page, every family (ms) | | | {parse_full_ms:.2f} |")
    print(
        f"\nmachine speed check: sum(range(10**7)) took {calib_ms:.0f} ms of CPU "
        "(about 100 ms on an unloaded modern core)"
    )
    goal = process_ms <= 20.0
    print(f"goal <= 20 ms CPU per round (whole process): {'met' if goal else 'NOT met'}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
