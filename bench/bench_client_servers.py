"""`specload run` against two fixed-timing servers of different make, and where the gap goes.

For each run: start a server pinned to one core (``bench/fixed_server.c``, built with
``cc -O2``, or ``bench/fixed_server_uvloop.py``), run the real ``specload run``
(closed loop, one level) in a child process pinned to another core, and report

- offered load: what the server would deliver to ``streams`` always-busy users,
  ``streams x tokens / (TTFT + (chunks - 1) x ITL)``;
- delivered output tokens/s in the window (``specload run``'s own figure: tokens that
  *arrived* in the window, from each record's ``arrivals``) and its share of offered;
- output tokens per client CPU-second (the child's user+system CPU in the window);
- median TTFT and TPOT (``specload run``'s) against the server's timing;

and where the gap (offered - delivered) goes, as shares of the offered load. The child
is ``specload run`` itself with a few wrappers that only take timestamps (nothing is
changed in what runs): every user's time in the window is cut into

- **spawn**: before the user's first request (Locust starting the users);
- **TTFT excess**: from ``send + TTFT`` to the first token (request transit, the
  server's read delay and its lateness on the first chunk);
- **stream excess**: first to last token beyond ``(chunks - 1) x ITL`` (the last
  chunk's lateness minus the first's);
- **turnaround**: from the last byte of a request to the same user's next send, itself
  cut into *wake* (last byte's kernel arrival stamp → ``send`` returns: read batching,
  the reactor's round, the user greenlet's wake-up), *publish* (``LoadSession.complete``:
  aggregates, metrics, ``requests.jsonl``, the driver's window accounting, Locust's
  events), *loop* (Locust's task loop, ``request_started``, waiting behind other
  greenlets) and *build* (the request's body and record, until ``start_s``);

each multiplied by the offered rate per user (tokens / cycle). What is left between this
prediction and the measured share is the **window edges** (where the window cuts the
users' cycles: with users in step, a window that opens while they all wait for a first
token counts fewer tokens) and the arrival-sample interpolation. Server-side lateness: the
uvloop server measures every chunk's (write time - deadline, kept per second; the window's
seconds are read from its stats file); for both servers the client's TTFT/stream excess
shows it.

Also per run: the wake cut again (last byte -> the reactor ends the stream -> the user
runs -> ``meter.finish`` -> ``send`` returns), how clumped the request ends are (share
of them in the busiest tenth of the window's 10-ms bins: users in step put them all
there), requests in flight at the window's edges, the spawn time of the users, the
window's throughput by the older definitions (requests ended in it; prorated), reads
without a kernel stamp, the CPU every other process used meanwhile (``other CPU``: this
machine is shared) and, for the uvloop server, the client's requests matched to the
server's (same port and clock): TTFT excess = send -> parsed by the server + its lateness
on the first chunk + written -> the client's arrival stamp (a first token read together
with the next chunk carries that chunk's stamp).

    .venv/bin/python bench/bench_client_servers.py --servers c,uvloop --repeat 4 \\
        --warmup 8 --duration 20 --json /tmp/servers.json --out /tmp/servers.md

Each run holds /tmp/specload-bench.lock (other benchmarks take it too) and starts when the
machine's processes use at most ``--max-busy`` cores (waiting up to ``--max-wait`` s).
What-if switches (they change what runs; results say which): ``BENCH_SPREAD_S=0`` starts
every user's first request at once (as before specload/sweep/locustfile.py's
``START_SPREAD_S``), ``BENCH_MIXED=1`` lets every other user skip the ``gevent.sleep(0)``
Locust puts between tasks (a within-run A/B: ``styles`` in the JSON). ``--child`` is
internal (the measured process).
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
from fixed_servers import Timing, build_c_server, free_port, server_command

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent


# --------------------------------------------------------------------------------------
# the measured process: `specload run` with timestamp-only wrappers
# --------------------------------------------------------------------------------------


def child(args: argparse.Namespace) -> None:
    from gevent import monkey  # noqa: PLC0415

    monkey.patch_all()
    import resource  # noqa: PLC0415

    import specload.sweep.session  # noqa: F401, PLC0415  (Locust, as `specload run` does)
    from specload import cli  # noqa: PLC0415
    from specload.load import meter as meter_mod  # noqa: PLC0415
    from specload.load.chat import ChatRequester  # noqa: PLC0415
    from specload.load.reactor import Reactor, get_reactor  # noqa: PLC0415
    from specload.load.session import LoadSession  # noqa: PLC0415
    from specload.sweep.backend import LocustBackend  # noqa: PLC0415
    from specload.sweep.driver import SweepDriver  # noqa: PLC0415

    perf = time.perf_counter

    def cpu() -> tuple[float, float]:
        ru = resource.getrusage(resource.RUSAGE_SELF)
        return ru.ru_utime + ru.ru_stime, ru.ru_stime

    def mark() -> dict[str, float]:
        c, s = cpu()
        r = get_reactor()
        return {
            "wall": time.time(),
            "perf": perf(),
            "cpu": c,
            "sys": s,
            "reads": r.reads,
            "wakeups": r.wakeups,
            "fast_reads": r.fast_reads,
            "unstamped": r.unstamped_reads,
        }

    # wall - perf, to put records' wall times (start_s, end_s) on perf_counter's clock
    offsets = []
    for _ in range(5):
        a = perf()
        w = time.time()
        b = perf()
        offsets.append((b - a, w - (a + b) / 2))
    offset = min(offsets)[1]

    # (user, t_in, t_out, record, when the reactor saw the response end)
    sends: list[tuple[int, float, float, Any, float | None]] = []
    completes: dict[int, tuple[float, float]] = {}  # id(record) -> publish start, end
    marks: dict[str, Any] = {}

    ended: dict[int, float] = {}  # fd -> when the reactor saw its response end
    ports: dict[int, int] = {}  # id(record) -> the connection's local port
    finishes: dict[int, tuple[float, float]] = {}  # id(record) -> meter.finish start, end

    orig_send = ChatRequester.send

    def send(self: Any, prompt: Any, step: str) -> Any:
        t_in = perf()
        record = orig_send(self, prompt, step)
        t_out = perf()
        sock = self.connection._sock
        fd = sock.fileno() if sock is not None else -1
        sends.append((id(self), t_in, t_out, record, ended.pop(fd, None)))
        if sock is not None:
            ports[id(record)] = sock.getsockname()[1]
        return record

    orig_finish_stream = Reactor._finish

    def reactor_finish(self: Any, fd: int, stream: Any, error: Any) -> None:
        ended[fd] = perf()
        orig_finish_stream(self, fd, stream, error)

    meter_cls = meter_mod.StreamMeter
    orig_meter_finish = meter_cls.finish

    def meter_finish(self: Any, record: Any, end: float, tokenizer: Any = None) -> None:
        t1 = perf()
        orig_meter_finish(self, record, end, tokenizer)
        finishes[id(record)] = (t1, perf())

    orig_complete = LoadSession.complete

    def complete(self: Any, record: Any) -> None:
        t1 = perf()
        orig_complete(self, record)
        completes[id(record)] = (t1, perf())

    orig_open = SweepDriver._open_window

    def open_window(self: Any, state: Any) -> None:
        orig_open(self, state)
        marks["start"] = mark()

    orig_run_window = SweepDriver._run_window

    def run_window(self: Any, state: Any, window: Any, step: str) -> None:
        orig_run_window(self, state, window, step)
        if window is state.window:
            marks["end"] = mark()

    orig_start = LocustBackend.start

    def backend_start(self: Any, level: Any) -> None:
        marks.setdefault("spawn_call", perf())
        orig_start(self, level)
        marks.setdefault("spawn_returned", perf())

    ChatRequester.send = send  # type: ignore[method-assign]
    Reactor._finish = reactor_finish  # type: ignore[method-assign]
    meter_cls.finish = meter_finish  # type: ignore[method-assign]
    LoadSession.complete = complete  # type: ignore[method-assign]
    SweepDriver._open_window = open_window  # type: ignore[method-assign]
    SweepDriver._run_window = run_window  # type: ignore[method-assign]
    LocustBackend.start = backend_start  # type: ignore[method-assign]

    # What-if switches (diagnostics: they change behaviour, the figures say so).
    from locust.user.task import DefaultTaskSet  # noqa: PLC0415

    from specload.sweep import locustfile  # noqa: PLC0415

    spread = os.environ.get("BENCH_SPREAD_S")
    if spread is not None:  # 0: every user's first request at once (before the spread)
        locustfile.START_SPREAD_S = float(spread)
    styles: dict[int, str] = {}  # id(requester) -> "zero-sleep" / "no-zero-sleep"
    if os.environ.get("BENCH_MIXED"):
        # Within one run: every other user skips the gevent.sleep(0) Locust puts between
        # its tasks after a request that got an answer; the others keep it. Same clumps,
        # same minute of the machine, two answers.
        orig_sleep = DefaultTaskSet._sleep
        orig_init = ChatRequester.__init__

        def tagged_init(self: Any, *a: Any, **kw: Any) -> None:
            orig_init(self, *a, **kw)
            styles[id(self)] = "zero-sleep" if len(styles) % 2 else "no-zero-sleep"

        def mixed_sleep(self: Any, seconds: float) -> None:
            requester = getattr(self.user, "_requester", None)
            style = styles.get(id(requester)) if requester is not None else None
            if seconds > 0 or style != "no-zero-sleep":
                orig_sleep(self, seconds)  # type: ignore[no-untyped-call]

        ChatRequester.__init__ = tagged_init  # type: ignore[method-assign]
        DefaultTaskSet._sleep = mixed_sleep  # type: ignore[method-assign]

    out_dir = Path(args.results_dir)
    argv = [
        "run",
        "--host",
        args.host,
        "--concurrency",
        str(args.streams),
        "--warmup",
        f"{args.warmup:g}s",
        "--duration",
        f"{args.duration:g}s",
        "--max-tokens",
        str(args.tokens),
        "--metrics-url",
        "off",
        "--metrics-address",
        "127.0.0.1:0",
        "--progress",
        "off",
        "--no-plots",
        "--drain-timeout",
        "30s",
        "--out",
        str(out_dir),
        "--variant",
        args.label,
    ]
    code = cli.main(argv)
    summary = json.loads((out_dir / "summary.json").read_text())
    result = analyse(args, summary, sends, completes, finishes, marks, offset)
    result["exit_code"] = code
    if styles:
        result["styles"] = {
            style: analyse(
                args,
                summary,
                [x for x in sends if styles.get(x[0]) == style],
                completes,
                finishes,
                marks,
                offset,
                subset=True,
            )
            for style in ("zero-sleep", "no-zero-sleep")
        }
    # the window's requests for the server's log: [port, t0 (perf clock), TTFT, E2E]
    lo, hi = result["window_start"], result["window_end"]
    result["client_log"] = [
        [ports[id(r)], r.start_s - offset, r.ttft_s, r.e2e_s]
        for _, _, _, r, _ in sends
        if id(r) in ports and r.ok and lo <= r.start_s <= hi and r.ttft_s is not None
    ]
    Path(args.child_out).write_text(json.dumps(result))


def _overlap(a: float, b: float, lo: float, hi: float) -> float:
    """Signed overlap of [a, b] with [lo, hi] (negative when b < a)."""
    if b >= a:
        return max(0.0, min(b, hi) - max(a, lo))
    return -max(0.0, min(a, hi) - max(b, lo))


def analyse(
    args: argparse.Namespace,
    summary: dict[str, Any],
    sends: list[tuple[int, float, float, Any, float | None]],
    completes: dict[int, tuple[float, float]],
    finishes: dict[int, tuple[float, float]],
    marks: dict[str, Any],
    offset: float,
    *,
    subset: bool = False,
) -> dict[str, Any]:
    """The run's figures; ``subset``: of these users' requests only (their share of what
    they would get, their own medians)."""
    level = summary["levels"][0]
    start, end = marks["start"], marks["end"]
    lo, hi = start["wall"], end["wall"]
    width = hi - lo
    n_chunks = -(-args.tokens // args.tokens_per_chunk)
    stream_nom = (n_chunks - 1) * args.itl
    cycle_nom = args.ttft + stream_nom
    rate_user = args.tokens / cycle_nom  # offered tokens/s per always-busy user
    offered = args.streams * rate_user
    delivered = level["output_throughput"]
    duration = level["duration"]
    window_tokens = delivered * duration
    # recomputed from the records, every step (as the driver does)
    recount = sum(x[3].tokens_between(lo, hi) for x in sends)
    # the same window by the older definitions: the tokens of the requests that ended in
    # it, and each request's tokens prorated by the part of [start + TTFT, end] inside it
    ended_in = sum(x[3].tokens_output for x in sends if lo <= x[3].end_s < hi)
    prorated = 0.0
    for x in sends:
        r = x[3]
        first = r.start_s + args.ttft
        if r.end_s > first:
            prorated += r.tokens_output * _overlap(first, r.end_s, lo, hi) / (r.end_s - first)

    users: dict[int, list[tuple[float, float, Any, float | None]]] = {}
    for uid, t_in, t_out, r, seen in sends:
        users.setdefault(uid, []).append((t_in, t_out, r, seen))
    parts = dict.fromkeys(
        ("spawn", "ttft_excess", "stream_excess", "wake", "publish", "loop", "build", "failed"), 0.0
    )
    gaps: list[float] = []
    wakes: list[float] = []
    # the wake, cut: last byte -> the reactor ends the stream (read), -> the user runs
    # again (resume), -> meter.finish done (finish), -> send returns (rest)
    wake_cuts: dict[str, list[float]] = {"read": [], "resume": [], "finish": [], "rest": []}
    publish: list[float] = []
    inflight_start = inflight_end = 0
    in_window: list[Any] = []
    spawn_first: list[float] = []
    for seq in users.values():
        seq.sort(key=lambda x: x[0])
        first_send = seq[0][2].start_s
        spawn_first.append(seq[0][0])
        parts["spawn"] += _overlap(lo - 1e9, first_send, lo, hi) if first_send > lo else 0.0
        for i, (_t_in, t_out, r, seen) in enumerate(seq):
            s = r.start_s
            e = r.end_s
            if s < lo < e:
                inflight_start += 1
            if s < hi < e:
                inflight_end += 1
            if r.step == level["name"]:
                in_window.append(r)
            if r.ok and r.ttft_s is not None:
                ft = s + r.ttft_s
                parts["ttft_excess"] += _overlap(s + args.ttft, ft, lo, hi)
                parts["stream_excess"] += _overlap(ft + stream_nom, e, lo, hi)
            else:  # a failed request: all its time is lost
                parts["failed"] += _overlap(s, e, lo, hi)
            if i + 1 < len(seq):
                n_in, _n_out, nr, _ = seq[i + 1]
                last_byte = e - offset  # perf clock
                pub = completes.get(id(r), (t_out, t_out))
                # wake: last byte -> send returned; publish; loop -> next send; build
                bounds = [
                    ("wake", e, t_out + offset),
                    ("publish", pub[0] + offset, pub[1] + offset),
                    ("loop", pub[1] + offset, n_in + offset),
                    ("build", n_in + offset, nr.start_s),
                ]
                # (between t_out and the publish start nothing runs: the same greenlet)
                for name, a, b in bounds:
                    parts[name] += _overlap(a, b, lo, hi)
                if lo <= e <= hi:
                    gaps.append(nr.start_s - e)
                    wakes.append(t_out - last_byte)
                    publish.append(pub[1] - pub[0])
                    fin = finishes.get(id(r))
                    if seen is not None and fin is not None:
                        wake_cuts["read"].append(seen - last_byte)
                        wake_cuts["resume"].append(fin[0] - seen)
                        wake_cuts["finish"].append(fin[1] - fin[0])
                        wake_cuts["rest"].append(t_out - fin[1])
            elif r.ok:
                # the user's last request: after it the drain holds new ones (from hi on)
                parts["loop"] += _overlap(e, hi, lo, hi)
    n_users = len(users) if subset else args.streams
    user_s = n_users * width
    shares = {k: v / user_s for k, v in parts.items()}  # of the offered load
    predicted = 1.0 - sum(shares.values())
    share = delivered / offered
    if subset:  # these users' tokens in the window, of what they would get
        share = recount / duration / (n_users * rate_user)
    spawn_first.sort()
    ok = [r for r in in_window if r.ok]
    # clumping: request ends per 10-ms bin of the window (users spread evenly over their
    # cycle would give streams / cycle x 10 ms in every bin)
    bins: dict[int, int] = {}
    for x in sends:
        e = x[3].end_s
        if lo <= e < hi:
            bins[int((e - lo) * 100)] = bins.get(int((e - lo) * 100), 0) + 1
    counts = sorted((bins.get(b, 0) for b in range(int(width * 100))), reverse=True)
    busiest = sum(counts[: max(1, len(counts) // 10)]) / max(1, sum(counts))
    e2es = [r.e2e_s for r in ok]
    own_ttft = statistics.median([r.ttft_s for r in ok]) if ok else None
    own_tpot = statistics.median([r.tpot_s for r in ok if r.tpot_s is not None]) if ok else None
    stream_x = [r.e2e_s - r.ttft_s - stream_nom for r in ok]
    cpu_s = end["cpu"] - start["cpu"]
    reads = end["reads"] - start["reads"]
    truth_tpot = stream_nom / (args.tokens - 1)
    return {
        "streams": args.streams,
        "window_start": lo,
        "window_end": hi,
        "window_s": width,
        "duration_s": duration,
        "offered_tok_s": offered,
        "tok_s": delivered,
        "share": share,
        "recount_share": recount / duration / offered,
        "ended_share": ended_in / duration / offered,
        "prorated_share": prorated / duration / offered,
        "window_tokens": window_tokens,
        "median_ttft_ms": level["median_ttft_ms"],
        "ttft_err": level["median_ttft_ms"] / (args.ttft * 1000) - 1,
        "median_tpot_ms": level["median_tpot_ms"],
        "tpot_err": level["median_tpot_ms"] / (truth_tpot * 1000) - 1,
        "p99_ttft_ms": level["p99_ttft_ms"],
        # exact medians of these users' requests started in the window
        "own_ttft_err": own_ttft / args.ttft - 1 if own_ttft is not None else None,
        "own_tpot_err": own_tpot / truth_tpot - 1 if own_tpot is not None else None,
        "mean_e2e_excess_ms": (statistics.fmean(e2es) - cycle_nom) * 1000 if e2es else None,
        "median_stream_excess_ms": statistics.median(stream_x) * 1000 if stream_x else None,
        "tok_per_cpu_s": window_tokens / cpu_s if cpu_s > 0 else None,
        "cpu_share": cpu_s / width,
        "sys_share": (end["sys"] - start["sys"]) / cpu_s if cpu_s > 0 else None,
        "reads_per_wakeup": reads / max(1, end["wakeups"] - start["wakeups"]),
        "fast_share": (end["fast_reads"] - start["fast_reads"]) / max(1, reads),
        # reads without a kernel arrival stamp, before the window and in it (the reactor
        # stops batching reads for good past 16)
        "unstamped_before": start.get("unstamped"),
        "unstamped_window": end.get("unstamped", 0) - start.get("unstamped", 0),
        "completed": level["completed"],
        "failed": level["failed"],
        "users_held": level.get("users_held"),
        "inflight_start": inflight_start,
        "inflight_end": inflight_end,
        "spawn_s": (spawn_first[-1] - marks["spawn_call"]) if spawn_first else None,
        "spawn_first_s": (spawn_first[0] - marks["spawn_call"]) if spawn_first else None,
        "parts": shares,
        "predicted_share": predicted,
        "edges": share - predicted,
        "turnaround_ms": _pcts(gaps),
        "wake_ms": _pcts(wakes),
        "wake_cuts_ms": {k: _pcts(v) for k, v in wake_cuts.items()},
        "publish_ms": _pcts(publish),
        "coalesced": level.get("coalesced_chunk_share"),
        "ends_in_busiest_tenth": busiest,
    }


def _pcts(values: list[float]) -> dict[str, float]:
    if not values:
        return {}
    v = sorted(values)
    out = {f"p{int(q * 100)}": v[int(q * (len(v) - 1))] * 1000 for q in (0.1, 0.5, 0.9, 0.99)}
    out["mean"] = statistics.fmean(v) * 1000
    out["max"] = v[-1] * 1000
    return out


# --------------------------------------------------------------------------------------
# the orchestrator
# --------------------------------------------------------------------------------------


def code_fingerprint() -> str:
    """A short hash of the client's code (specload/load, specload/sweep, the extension):
    other sessions may change it between runs."""
    h = hashlib.sha256()
    for folder in ("specload/load", "specload/sweep"):
        for path in sorted((ROOT / folder).glob("*")):
            if path.suffix in (".py", ".c", ".so"):
                h.update(path.name.encode())
                h.update(path.read_bytes())
    return h.hexdigest()[:10]


def proc_cpu(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def cpu_steal() -> dict[str, tuple[int, int, int]]:
    """Per CPU: (busy, idle, steal) jiffies from /proc/stat."""
    out = {}
    for line in Path("/proc/stat").read_text().splitlines():
        if line.startswith("cpu") and line[3:4].isdigit():
            name, *v = line.split()
            n = [int(x) for x in v]
            out[name] = (n[0] + n[1] + n[2] + n[5] + n[6], n[3] + n[4], n[7])
    return out


def machine_busy(seconds: float) -> float:
    """Cores busy (all processes) over the next ``seconds``."""
    a = cpu_steal()
    time.sleep(seconds)
    b = cpu_steal()
    return sum(b[c][0] - a[c][0] for c in a) / os.sysconf("SC_CLK_TCK") / seconds


def stop_both(proc: subprocess.Popen[Any], server: subprocess.Popen[Any]) -> None:
    """End the measured run (killed if still going) and the server (asked, then killed)."""
    if proc.poll() is None:
        proc.kill()
    proc.wait()
    server.terminate()
    try:
        server.wait(10)
    except subprocess.TimeoutExpired:
        server.kill()
        server.wait()


def start_server(
    kind: str, args: argparse.Namespace, port: int, stats_file: str, c_exe: str | None
) -> subprocess.Popen[bytes]:
    timing = Timing(args.ttft, args.itl, args.tokens, args.tokens_per_chunk, args.reasoning_tokens)
    cmd = server_command(kind, port, timing, c_exe=c_exe, stats_file=stats_file)
    return fixed_servers.start_server(cmd, port, cpu=args.server_cpu)


def match_requests(
    data: dict[str, Any], client_log: list[list[float]], args: argparse.Namespace
) -> dict[str, Any]:
    """The client's requests matched to the server's (same port, server t0 just after the
    client's send; one clock): TTFT excess = send -> parsed by the server (read) +
    the server's lateness on the first chunk (lag) + written -> arrival stamp (transit)."""
    by_port: dict[int, list[list[float]]] = {}
    for row in data.get("requests_log", []):
        by_port.setdefault(int(row[0]), []).append(row)
    for rows in by_port.values():
        rows.sort(key=lambda x: x[1])
    cuts: dict[str, list[float]] = {
        "read": [],
        "lag": [],
        "transit": [],
        "last_lag": [],
        "last_transit": [],
    }
    n_chunks = -(-args.tokens // args.tokens_per_chunk)
    for port, t0, ttft, e2e in client_log:
        rows = by_port.get(int(port), [])
        match = next((x for x in rows if t0 - 5e-4 <= x[1] <= t0 + 0.5), None)
        if match is None:
            continue
        _, s0, first_w, last_w = match
        cuts["read"].append(s0 - t0)
        cuts["lag"].append(first_w - (s0 + args.ttft))
        cuts["transit"].append(t0 + ttft - first_w)
        cuts["last_lag"].append(last_w - (s0 + args.ttft + (n_chunks - 1) * args.itl))
        cuts["last_transit"].append(t0 + e2e - last_w)
    out: dict[str, Any] = {"matched": len(cuts["read"]), "of": len(client_log)}
    for name, values in cuts.items():
        if values:
            out[name] = {
                "p50": statistics.median(values) * 1000,
                "mean": statistics.fmean(values) * 1000,
            }
    return out


def server_lag(
    stats_file: str, lo: float, hi: float, client_log: list[list[float]], args: argparse.Namespace
) -> dict[str, Any]:
    """Chunk lateness (ms) of the uvloop server over the whole seconds inside [lo, hi],
    and the client's requests of the window matched to the server's."""
    try:
        data = json.loads(Path(stats_file).read_text())
    except (OSError, ValueError):
        return {}
    bucket = float(data["bucket_s"])
    fine = int(data.get("fine_buckets", 10**9))

    def mid(b: int) -> float:  # as bench/fixed_server_uvloop.py's bucket_mid
        return (b + 0.5) * bucket if b < fine else (b - fine + 10 + 0.5) * 1e-3

    hist: dict[int, int] = {}
    firsts: list[float] = []
    turn: list[float] = []
    for sec, h in data["lag"].items():
        if lo <= int(sec) and int(sec) + 1 <= hi:
            for b, c in h.items():
                hist[int(b)] = hist.get(int(b), 0) + c
    for sec, v in data["first_lag"].items():
        if lo <= int(sec) and int(sec) + 1 <= hi:
            firsts.extend(v)
    for sec, v in data["turnaround"].items():
        if lo <= int(sec) and int(sec) + 1 <= hi:
            turn.extend(v)
    n = sum(hist.values())
    out: dict[str, Any] = {"chunks": n, "early": data.get("early", 0)}
    if n:
        total = 0.0
        for q in (0.5, 0.9, 0.99, 0.999):
            rank = int(q * (n - 1))
            seen = 0
            for b in sorted(hist):
                seen += hist[b]
                if seen > rank:
                    out[f"lag_p{q * 100:g}_ms"] = mid(b) * 1000
                    break
        total = sum(mid(b) * c for b, c in hist.items())
        out["late_10ms_share"] = sum(c for b, c in hist.items() if mid(b) >= 0.01) / n
        out["lag_mean_ms"] = total / n * 1000
    if firsts:
        firsts.sort()
        out["first_lag_p50_ms"] = firsts[len(firsts) // 2] * 1000
    if turn:
        turn.sort()
        out["turnaround_p50_ms"] = turn[len(turn) // 2] * 1000
        out["turnaround_mean_ms"] = statistics.fmean(turn) * 1000
    out["requests"] = match_requests(data, client_log, args)
    return out


def run_one(
    kind: str, args: argparse.Namespace, c_exe: str | None, tmp: Path, index: int
) -> dict[str, Any]:
    port = free_port()
    stats_file = str(tmp / f"lag-{kind}-{index}.json")
    load_before = os.getloadavg()
    server = start_server(kind, args, port, stats_file, c_exe)
    child_out = tmp / f"child-{kind}-{index}.json"
    results_dir = tmp / f"results-{kind}-{index}"
    cmd = [
        "taskset",
        "-c",
        str(args.client_cpu),
        sys.executable,
        str(Path(__file__).resolve()),
        "--child",
        "--host",
        f"http://127.0.0.1:{port}",
        "--child-out",
        str(child_out),
        "--results-dir",
        str(results_dir),
        "--label",
        f"bench-{kind}",
        "--streams",
        str(args.streams),
        "--warmup",
        str(args.warmup),
        "--duration",
        str(args.duration),
        "--ttft",
        str(args.ttft),
        "--itl",
        str(args.itl),
        "--tokens",
        str(args.tokens),
        "--tokens-per-chunk",
        str(args.tokens_per_chunk),
    ]
    env = dict(os.environ)
    samples: list[tuple[float, float, dict[str, tuple[int, int, int]], float]] = []
    proc = subprocess.Popen(cmd, env=env, cwd=str(ROOT))
    try:
        while proc.poll() is None:
            with contextlib.suppress(OSError, IndexError, ValueError):
                samples.append((time.time(), proc_cpu(server.pid), cpu_steal(), proc_cpu(proc.pid)))
            time.sleep(0.5)
    finally:
        stop_both(proc, server)
    if not child_out.exists():
        raise RuntimeError(f"the measured run failed (exit {proc.returncode})")
    result: dict[str, Any] = json.loads(child_out.read_text())
    lo, hi = result["window_start"], result["window_end"]
    inside = [s for s in samples if lo <= s[0] <= hi]
    if len(inside) >= 2:
        (t1, c1, st1, k1), (t2, c2, st2, k2) = inside[0], inside[-1]
        result["server_cpu"] = (c2 - c1) / (t2 - t1)
        ticks = os.sysconf("SC_CLK_TCK")
        busy_all = sum(st2[c][0] - st1[c][0] for c in st1) / ticks / (t2 - t1)
        # cores used by every other process meanwhile (other sessions' tests, ...)
        result["other_cpu"] = busy_all - (c2 - c1) / (t2 - t1) - (k2 - k1) / (t2 - t1)
        steal = {}
        for cpu_name in st1:
            busy = st2[cpu_name][0] - st1[cpu_name][0]
            idle = st2[cpu_name][1] - st1[cpu_name][1]
            stl = st2[cpu_name][2] - st1[cpu_name][2]
            tot = busy + idle + stl
            steal[cpu_name] = {"busy": busy / tot if tot else 0, "steal": stl / tot if tot else 0}
        result["cpus"] = steal
    result["server"] = kind
    result["load_before"] = load_before[0]
    result["load_after"] = os.getloadavg()[0]
    result["time"] = time.strftime("%H:%M:%S", time.gmtime(lo))
    if kind == "uvloop":
        result["server_lag"] = server_lag(stats_file, lo, hi, result["client_log"], args)
    del result["client_log"]
    return result


PART_LABELS = (
    ("spawn", "spawn"),
    ("ttft_excess", "TTFT excess"),
    ("stream_excess", "stream excess"),
    ("wake", "wake"),
    ("publish", "publish"),
    ("loop", "loop"),
    ("build", "build"),
    ("failed", "failed"),
)


def describe(r: dict[str, Any]) -> str:
    p = r["parts"]
    lag = r.get("server_lag") or {}
    lag_text = (
        f"; server lag p50/p99 {lag.get('lag_p50_ms', 0):.2f}/{lag.get('lag_p99_ms', 0):.2f} ms"
        if lag
        else ""
    )
    return (
        f"{r['time']} {r['server']:6s} code {r.get('code', '?')} load {r['load_before']:.2f}: "
        f"{r['tok_s']:7.0f} tok/s = "
        f"{r['share']:.2%} of {r['offered_tok_s']:.0f}; TTFT {r['median_ttft_ms']:.2f} ms "
        f"({r['ttft_err']:+.1%}), TPOT {r['median_tpot_ms']:.3f} ms ({r['tpot_err']:+.2%}); "
        f"{r['tok_per_cpu_s']:.0f} tok/CPU-s (client CPU {r['cpu_share']:.0%}, server "
        f"{r.get('server_cpu', 0):.0%}, others {r.get('other_cpu', 0):.0%}); "
        f"gap {1 - r['share']:.2%} = "
        + " + ".join(f"{label} {p[k]:.2%}" for k, label in PART_LABELS if abs(p[k]) >= 5e-5)
        + f" + edges {-r['edges']:+.2%}; turnaround p50/p90/p99 "
        f"{r['turnaround_ms'].get('p50', 0):.2f}/{r['turnaround_ms'].get('p90', 0):.2f}/"
        f"{r['turnaround_ms'].get('p99', 0):.2f} ms; in flight at start/end "
        f"{r['inflight_start']}/{r['inflight_end']}; spawn {r['spawn_s'] * 1000:.0f} ms" + lag_text
    )


def table(rows: list[dict[str, Any]]) -> str:
    lines = [
        "| time UTC | server | load avg | offered tok/s | delivered tok/s | share | median TTFT ms "
        "(err) | median TPOT ms (err) | tok per client CPU-s | client CPU | server CPU | "
        "other CPU | server lag p50/p99 ms |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        lag = r.get("server_lag") or {}
        lag_text = (
            f"{lag['lag_p50_ms']:.2f} / {lag['lag_p99_ms']:.2f}" if "lag_p50_ms" in lag else "-"
        )
        lines.append(
            f"| {r['time']} | {r['server']} | {r['load_before']:.2f} | {r['offered_tok_s']:.0f} | "
            f"{r['tok_s']:.0f} | {r['share']:.2%} | {r['median_ttft_ms']:.2f} "
            f"({r['ttft_err']:+.1%}) | {r['median_tpot_ms']:.3f} ({r['tpot_err']:+.2%}) | "
            f"{r['tok_per_cpu_s']:.0f} | {r['cpu_share']:.0%} | {r.get('server_cpu', 0):.0%} | "
            f"{r.get('other_cpu', 0):.0%} | {lag_text} |"
        )
    lines += [
        "",
        "| time UTC | server | gap | "
        + " | ".join(label for _, label in PART_LABELS[:-1])
        + " | edges | turnaround p50 / p90 / p99 ms | in flight start/end |",
        "|---|---|---|" + "---|" * (len(PART_LABELS) - 1) + "---|---|---|",
    ]
    for r in rows:
        p = r["parts"]
        t = r["turnaround_ms"]
        lines.append(
            f"| {r['time']} | {r['server']} | {1 - r['share']:.2%} | "
            + " | ".join(f"{p[k]:.2%}" for k, _ in PART_LABELS[:-1])
            + f" | {-r['edges']:+.2%} | {t.get('p50', 0):.2f} / {t.get('p90', 0):.2f} / "
            f"{t.get('p99', 0):.2f} | {r['inflight_start']}/{r['inflight_end']} |"
        )
    return "\n".join(lines) + "\n"


def parent(args: argparse.Namespace) -> None:
    kinds = [k.strip() for k in args.servers.split(",") if k.strip()]
    rows: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory(prefix="specload-bench-servers-") as tmpname:
        tmp = Path(tmpname)
        # our own copy: another benchmark may be running the shared one (text file busy)
        c_exe = build_c_server(tmp / "fixed-server-c") if "c" in kinds else None
        index = 0
        for _ in range(args.repeat):
            for kind in kinds:  # interleaved: both servers see the same minutes
                waited = 0.0
                while waited < args.max_wait:
                    busy = machine_busy(3.0)
                    waited += 3.0
                    if busy <= args.max_busy and (
                        args.max_load is None or os.getloadavg()[0] <= args.max_load
                    ):
                        break
                    print(
                        f"waiting for a quiet machine: {busy:.2f} cores busy, load "
                        f"{os.getloadavg()[0]:.2f}",
                        flush=True,
                    )
                try:
                    # one benchmark at a time on this machine (the others take this lock too)
                    with open(args.lock, "a") as lock:
                        fcntl.flock(lock, fcntl.LOCK_EX)
                        code = code_fingerprint()  # the child imports it at its start
                        row = run_one(kind, args, c_exe, tmp, index)
                        row["code"] = code
                except (RuntimeError, OSError, ValueError, KeyError) as exc:
                    print(f"{kind}: run {index} failed: {exc}", flush=True)
                    index += 1
                    continue
                index += 1
                rows.append(row)
                print(describe(row), flush=True)
    if args.json:
        Path(args.json).write_text(json.dumps(rows, indent=1))
    text = table(rows)
    if args.out:
        Path(args.out).write_text(text)
    print(text)


def main() -> None:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--servers", default="c,uvloop", help="c, uvloop or both (interleaved)")
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--streams", type=int, default=256)
    ap.add_argument("--ttft", type=float, default=0.05)
    ap.add_argument("--itl", type=float, default=0.005)
    ap.add_argument("--tokens", type=int, default=400)
    ap.add_argument("--tokens-per-chunk", type=int, default=1)
    ap.add_argument(
        "--reasoning-tokens",
        type=int,
        default=0,
        help="uvloop server: reasoning tokens before the content",
    )
    ap.add_argument("--warmup", type=float, default=10.0)
    ap.add_argument("--duration", type=float, default=30.0)
    ap.add_argument("--server-cpu", type=int, default=1)
    ap.add_argument("--client-cpu", type=int, default=0)
    ap.add_argument(
        "--max-load",
        type=float,
        default=None,
        help="wait (up to --max-wait s) until the 1-min load average is below this",
    )
    ap.add_argument(
        "--max-busy",
        type=float,
        default=0.15,
        help="before each run, wait (up to --max-wait s) until the machine's "
        "processes use at most this many cores (over 3 s)",
    )
    ap.add_argument("--max-wait", type=float, default=180.0)
    ap.add_argument(
        "--lock",
        default="/tmp/specload-bench.lock",
        help="held during each run (other benchmarks use it too)",
    )
    ap.add_argument("--out", default="")
    ap.add_argument("--json", default="")
    # internal: the measured child
    ap.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--host", default="", help=argparse.SUPPRESS)
    ap.add_argument("--child-out", default="", help=argparse.SUPPRESS)
    ap.add_argument("--results-dir", default="", help=argparse.SUPPRESS)
    ap.add_argument("--label", default="bench", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child:
        child(args)
    else:
        parent(args)


if __name__ == "__main__":
    main()
