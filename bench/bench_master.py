"""The master's ceiling: records absorbed, step latency and memory, against synthetic workers.

A distributed ``specload run`` is one master and N Locust workers; every completed request
travels to the master as a record (``specload:records``, :mod:`specload.load.messages`), the
master merges it (``LoadSession._on_records`` -> ``_publish``: the aggregates, the client
metrics, ``requests.jsonl``, the sweep's level window), and it sends ``specload:step`` to every
worker at each step change and ``specload:budget`` on ``specload:want``. Its event loop is one
core. This benchmark finds where that core saturates.

**The master** is the real one: ``specload run --workers 0 --expect-workers N`` (the sweep's
master, the path of ``specload run --workers N``), pinned with ``taskset -c 0``, run in a
wrapper (``--child-master``) that only takes timestamps: the Locust runner's
``handle_message`` counts each message by type with its handler's thread CPU and, for the
records and heartbeats, the message's age on arrival (the sender's stamp ``bench_sent``, an
extra key the master's parsers ignore; one host, one clock); ``LoadSession.set_step`` logs
when each step change was sent; every 0.25 s (or, when the event loop is held by a backlog,
from inside the message handler) it samples the records published (``session.published``:
the master's own count), the process's CPU (its zmq I/O thread included) and the main
thread's, RSS, the event loop's lag and the workers' states. Levels ``--warmup 1s
--duration 2s`` (``--mode duration``, no budget: two step changes per level) or
``--warmup 0 --requests R`` (``--mode requests``: budgeted, the want/grant path, R = two
seconds of the nominal rate), each level ``--concurrency N*U+i`` (U users per worker, 4):
each level also spawns users on every worker, as a sweep does. ``--metrics-url off``,
``--metrics-address off``, against ``bench/fixed_server.c`` (only the readiness gate talks
to it).

**The workers** are synthetic (``--child-gen``, pinned to core 1, up to 256 per process):
each is a zmq DEALER speaking Locust's worker protocol with ``locust.rpc``'s ``Message``
(``client_ready``, ``spawning``/``spawning_complete`` on ``spawn``, ``client_stopped`` and
``client_ready`` on ``stop``, a heartbeat a second, a ``stats`` report every 3 s built by
Locust's own ``RequestStats`` from the records it sent, ``quit``) and specload's
(``specload:records`` every 0.25 s, with ``started``, ``seq``, ``budget_left``,
``step_started``, the first one as soon as it is connected, as a real worker's follows its
init; it follows ``specload:step`` and ``specload:budget``, and ``specload:pace``'s hold).
It completes ``rate`` requests a second for ``--load-s`` from its first spawn: on a steady
schedule without a budget; in a step with a budget, with closed-loop users (as many as the
spawn gave it, each request ``users / rate`` long) that take budget or wait, the first
waiting one sending ``specload:want``, as ``LoadSession.request_started`` does. Each record
is one of a pool
built with :class:`RequestRecord` (``--records reasoning``: a reasoning model's answers,
200-4,000 output tokens around 1,000, ITL around 13.6 ms a token with 1% stalls, the two ITL
histograms, arrivals every 0.5 s — about 3 kB of msgpack each) or the real records of
``tests/data/vllm-0.32.0/runs`` (``--records captured``: a tiny model, 64 tokens, ~1.4 kB),
sent as a worker sends them (``to_dict(include_histograms=True, include_token_ids=True)``)
with its step, worker id and fresh times. A send that finds zmq's queue full is retried as
Locust's ``@retry`` does (1, 3, 5 s) and its records kept for the next flush, as
``LoadSession.flush`` does. Each worker logs when each step arrived, and the longest silence
of the master's heartbeats (a real specload worker quits after
``MASTER_SILENCE_TIMEOUT_S`` = 5 s).

**The ramp**: for each worker count N (``--workers-list``), first an idle stage (rate 0: the
master's cost and memory per connected worker), then the offered total doubles from
``--start-total`` records/s (at most ``--max-per-worker`` a worker) until a stage
saturates — the master absorbs under 95% of what was sent over the load window, or its
process uses >= 95% of its core, or the records' age on arrival grows through the window —
plus ``--past`` stages beyond it. After the load window the stage waits (up to
``--catchup-s``) for the master to publish every record sent, then stops the run (SIGINT)
and checks the counts: emitted by the workers, sent, published by the master.

    .venv/bin/python bench/bench_master.py [--quick] [--workers-list 1,4,16,64,256]
        [--idle-list 1024] [--stages 16:125,16:250 [--repeat K]] [--real-workers K]
        [--mode duration|requests] [--records reasoning|captured] [--load-s 10]
        [--json FILE] [--out table.md] [--workdir DIR [--profile]]

``--stages WORKERS:RATE,...`` runs those stages instead of the ramps. ``--real-workers K``
adds K real Locust workers (``specload/sweep/locustfile.py`` against the fixed server,
core 1) and reports whether they quit on their own (their master silent for 5 s).
``--workdir DIR`` keeps each stage's files (the master's samples and step log, the
workers' status, the run's results); ``--profile`` runs the master under cProfile
(``DIR/stage-K/master.prof``; it slows the master: not for the figures). SIGUSR2 to a
master prints every greenlet's stack to its log.

Each stage holds /tmp/specload-bench.lock (other benchmarks take it too) and starts when
the machine's processes use at most ``--max-busy`` cores (waiting up to ``--max-wait`` s,
then it runs anyway and the row says how busy it was); every row has the load average and
the CPU of every other process over its load window. ``--tree DIR`` measures a snapshot of
the code (``git archive COMMIT | tar -x -C DIR``, COMMIT in ``DIR/.bench-commit``).
``--quick``: one worker count, two short stages, under a minute. Results:
bench/results/master.md.
"""

from __future__ import annotations

import argparse
import contextlib
import fcntl
import gzip
import itertools
import json
import math
import os
import random
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
CAPTURED = ROOT / "tests" / "data" / "vllm-0.32.0" / "runs"

USERS_PER_WORKER = 4
WORKERS_PER_GEN = 256  # synthetic workers per generator process
FLUSH_S = 0.25  # specload.load.session.FLUSH_INTERVAL_S
HEARTBEAT_S = 1.0  # locust.runners.HEARTBEAT_INTERVAL
REPORT_S = 3.0  # locust.runners.WORKER_REPORT_INTERVAL
SILENCE_S = 5.0  # specload.load.plugin.MASTER_SILENCE_TIMEOUT_S
RETRY_DELAYS = (1.0, 3.0, 5.0)  # locust.util.exception_handler.retry
SAMPLE_S = 0.25


# --------------------------------------------------------------------------------------
# records
# --------------------------------------------------------------------------------------


def reasoning_records(n: int, seed: int = 1) -> list[dict[str, Any]]:
    """``n`` records of a reasoning model's answers, as a worker sends them."""
    from specload.histogram import Histogram  # noqa: PLC0415
    from specload.records.request import RequestRecord  # noqa: PLC0415

    rng = random.Random(seed)
    categories = ("math", "coding", "long_reasoning", "explanation", "chat")
    out = []
    for i in range(n):
        reasoning = min(3500, max(50, int(rng.lognormvariate(math.log(700), 0.6))))
        content = min(1500, max(1, int(rng.lognormvariate(math.log(250), 0.5))))
        total = reasoning + content
        ttft = rng.lognormvariate(math.log(0.25), 0.5)
        decode = rng.lognormvariate(math.log(0.0136), 0.08)  # this request's decode step
        token_hist, chunk_hist = Histogram(), Histogram()
        t = ttft
        ttfct = ttft
        arrivals = [[round(ttft, 6), 1.0]]
        next_sample = ttft + 0.5
        for k in range(1, total):
            gap = decode * rng.lognormvariate(0.0, 0.15)
            if rng.random() < 0.01:  # another request's prefill in the batch
                gap += rng.uniform(0.05, 0.2)
            token_hist.add(gap)
            chunk_hist.add(gap)
            t += gap
            if k == reasoning:
                ttfct = t
            if t >= next_sample:
                arrivals.append([round(t, 6), float(k + 1)])
                next_sample = t + 0.5
        if arrivals[-1][1] != total:
            arrivals.append([round(t, 6), float(total)])
        record = RequestRecord(
            category=categories[i % len(categories)],
            step="",
            variant="bench",
            model="bench-model",
            start_s=0.0,
            end_s=t,
            ok=True,
            http_status=200,
            max_tokens=8192,
            ttft_s=ttft,
            ttfct_s=ttfct,
            e2e_s=t,
            tpot_s=(t - ttft) / (total - 1),
            tokens_reasoning=reasoning,
            tokens_content=content,
            tokens_output=total,
            prompt_tokens=rng.randint(50, 4000),
            chunks=total,
            finish_reason="stop",
            arrivals=arrivals,
            itl_token_hist=token_hist,
            itl_chunk_hist=chunk_hist,
        )
        out.append(record.to_dict(include_histograms=True, include_token_ids=True))
    return out


def captured_records() -> list[dict[str, Any]]:
    """The real records of tests/data/vllm-0.32.0/runs (tiny model, 64 tokens)."""
    out = []
    for path in sorted(CAPTURED.glob("*.requests.jsonl.gz")):
        with gzip.open(path, "rt") as fh:
            for line in fh:
                d = json.loads(line)
                d.update(prompt_ids=None, output_ids=None, content_start=None)
                out.append(d)
    return out


# --------------------------------------------------------------------------------------
# the synthetic workers (--child-gen)
# --------------------------------------------------------------------------------------


def gen_main(args: argparse.Namespace) -> None:
    from gevent import monkey  # noqa: PLC0415

    monkey.patch_all()
    import resource  # noqa: PLC0415
    import socket  # noqa: PLC0415
    import uuid  # noqa: PLC0415

    import gevent  # noqa: PLC0415
    import gevent.event  # noqa: PLC0415
    import zmq.green as zmq  # noqa: PLC0415
    from locust import __version__  # noqa: PLC0415
    from locust.rpc.protocol import Message  # noqa: PLC0415
    from locust.stats import RequestStats  # noqa: PLC0415

    templates = reasoning_records(args.pool) if args.records == "reasoning" else captured_records()
    ctx = zmq.Context()
    host = socket.gethostname()
    rate = args.rate
    load_s = args.load_s
    shared: dict[str, Any] = {"t0": None, "lags": [], "quit": 0}

    def load_on(now: float) -> bool:
        t0 = shared["t0"]
        return t0 is not None and t0 <= now < t0 + load_s

    class Synth:
        def __init__(self, index: int) -> None:
            self.index = index
            self.id = f"{host}_{uuid.uuid4().hex}"
            sock = ctx.socket(zmq.DEALER)
            sock.setsockopt(zmq.TCP_KEEPALIVE, 1)
            sock.setsockopt(zmq.TCP_KEEPALIVE_IDLE, 30)
            sock.setsockopt(zmq.IDENTITY, self.id.encode())
            sock.connect(f"tcp://127.0.0.1:{args.port}")
            self.sock = sock
            self.rng = random.Random(args.seed * 100003 + index)
            self.stats = RequestStats()
            self.state = "ready"
            self.users = 0
            self.stop_timeout = 0.0
            self.step = "run"
            self.seq = 0
            self.budget: int | None = None
            self.asked = False
            self.waiting = 0
            self.woken = gevent.event.Event()
            self.user_greenlets = 0
            self.held = False
            self.acc = 0.0
            self.last = 0.0
            self.pending: list[dict[str, Any]] = []
            self.started = 0
            self.step_started = 0
            self.sent_state: tuple[int, int] = (-1, -1)
            self.emitted = 0
            self.sent_records = 0
            self.messages: dict[str, int] = {}
            self.send_again = 0  # sends that found zmq's queue full (retried)
            self.send_failed = 0  # sends given up after the retries
            self.steps: list[list[Any]] = []  # [seq, name, budget, received wall]
            self.grants = 0
            self.asked_at = 0.0
            self.grant_rtts: list[float] = []
            self.heard: float | None = None
            self.max_silence = 0.0
            self.silences = 0  # silences > SILENCE_S (a real worker would have quit)
            self.connected = gevent.event.Event()
            self.done = False
            self.joined_at = 0.0

        # -- sending, as Locust's Client.send (+ @retry) and LoadSession.flush do --------
        def send(self, kind: str, data: Any) -> bool:
            raw = Message(kind, data, self.id).serialize()  # type: ignore[no-untyped-call]
            for delay in (*RETRY_DELAYS, None):
                try:
                    self.sock.send(raw, zmq.NOBLOCK)
                except zmq.ZMQError:
                    if delay is None:
                        self.send_failed += 1
                        return False
                    self.send_again += 1
                    gevent.sleep(delay)
                    continue
                self.messages[kind] = self.messages.get(kind, 0) + 1
                return True
            return False

        def produce(self, now: float) -> None:
            """Without a budget: complete the requests due since the last call."""
            dt = now - self.last
            self.last = now
            if self.budget is not None or not self.on(now):
                self.acc = 0.0
                return
            self.acc += rate * dt
            n = int(self.acc)
            self.acc -= n
            self.started += n
            self.step_started += n
            for _ in range(n):
                self.complete(self.step, now - self.rng.random() * FLUSH_S)

        def on(self, now: float) -> bool:
            return not self.held and self.state == "running" and load_on(now)

        def complete(self, step: str, end: float) -> None:
            d = dict(templates[self.rng.randrange(len(templates))])
            d["step"] = step
            d["worker"] = self.id
            d["end_s"] = end
            d["start_s"] = end - (d["e2e_s"] or 0.0)
            self.pending.append(d)
            self.stats.log_request("CHAT", d["category"], int((d["e2e_s"] or 0.0) * 1000), 0)
            self.emitted += 1

        def wake(self) -> None:
            event, self.woken = self.woken, gevent.event.Event()
            event.set()

        def user(self, k: int) -> None:
            """With a budget: a closed-loop user, as LoadSession.request_started has it."""
            while not self.done and k < self.users:
                if self.budget is None or not self.on(time.time()):
                    self.woken.wait(timeout=1.0)  # a step with a budget wakes it
                    continue
                if self.budget <= 0:
                    self.waiting += 1
                    if not self.asked:
                        self.asked = True
                        self.asked_at = time.time()
                        self.send("specload:want", {"seq": self.seq, "waiting": self.waiting})
                    self.woken.wait(timeout=1.0)
                    self.waiting -= 1
                    continue
                self.budget -= 1
                self.started += 1
                self.step_started += 1
                step = self.step
                gevent.sleep(max(1, self.users) / rate)  # the request, `users / rate` long
                self.complete(step, time.time())

        def flush(self) -> None:
            if not self.pending and self.sent_state == (self.started, self.seq):
                return
            batch, self.pending = self.pending, []
            self.sent_state = (self.started, self.seq)
            payload = {
                "records": batch,
                "started": self.started,
                "seq": self.seq,
                "budget_left": self.budget,
                "step_started": self.step_started,
                "backoffs": [],
                "bench_sent": time.time(),
            }
            if self.send("specload:records", payload):
                self.sent_records += len(batch)
            else:
                self.pending[:0] = batch

        # -- greenlets -------------------------------------------------------------------
        def flush_loop(self) -> None:
            gevent.sleep(self.rng.random() * FLUSH_S)  # workers out of phase
            while not self.done:
                self.produce(time.time())
                self.flush()
                gevent.sleep(FLUSH_S)

        def heartbeat_loop(self) -> None:
            while not self.done:
                now = time.time()
                data = {
                    "state": self.state,
                    "current_cpu_usage": 10.0,
                    "current_memory_usage": 60_000_000,
                    "bench_sent": now,
                }
                self.send("heartbeat", data)
                if self.heard is not None and shared["t0"] is not None:
                    self.silence(now)
                gevent.sleep(HEARTBEAT_S)

        def silence(self, now: float) -> None:
            gap = now - (self.heard or now)
            if gap > self.max_silence:
                if gap > SILENCE_S >= self.max_silence:
                    self.silences += 1
                self.max_silence = gap

        def report_loop(self) -> None:
            gevent.sleep(self.rng.random() * REPORT_S)
            while not self.done:
                self.report()
                gevent.sleep(REPORT_S)

        def report(self) -> None:
            self.produce(time.time())
            self.flush()  # specload flushes at each stats report
            data = {
                "stats": self.stats.serialize_stats(),
                "stats_total": self.stats.total.get_stripped_report(),
                "errors": self.stats.serialize_errors(),
                "user_classes_count": {"SweepUser": self.users},
                "user_count": self.users,
            }
            self.stats.errors = {}
            self.send("stats", data)

        def stop_later(self, stop_timeout: float) -> None:
            self.send("client_stopped", None)
            gevent.sleep(stop_timeout)
            self.send("client_ready", __version__)
            self.state = "ready"

        def recv_loop(self) -> None:
            while not self.done:
                msg = Message.unserialize(self.sock.recv())  # type: ignore[no-untyped-call]
                now = time.time()
                kind = msg.type
                if kind == "ack":
                    self.joined_at = now
                    self.connected.set()
                    # the first message (a real worker's follows its init within ms): the
                    # master answers it with the step in force
                    self.flush()
                elif kind == "spawn":
                    self.send("spawning", None)
                    self.stop_timeout = float(msg.data.get("stop_timeout") or 0.0)
                    counts = msg.data["user_classes_count"]
                    self.users = int(sum(counts.values()))
                    self.state = "running"
                    if rate > 0:
                        for k in range(self.user_greenlets, self.users):
                            gevent.spawn(self.user, k)
                        self.user_greenlets = max(self.user_greenlets, self.users)
                    if shared["t0"] is None:
                        shared["t0"] = now
                    self.last = max(self.last, now)
                    self.send(
                        "spawning_complete",
                        {"user_classes_count": counts, "user_count": self.users},
                    )
                elif kind == "stop":
                    self.produce(now)
                    self.state = "stopped"
                    self.users = 0  # its users stopped: the next report says so
                    self.user_greenlets = 0
                    gevent.spawn(self.stop_later, self.stop_timeout)
                elif kind == "quit":
                    self.state = "stopped"
                    self.report()
                    self.send("quit", None)
                    self.done = True
                    shared["quit"] += 1
                elif kind == "heartbeat":
                    if self.heard is not None and shared["t0"] is not None:
                        self.silence(now)
                    self.heard = now
                elif kind == "specload:step":
                    d = msg.data or {}
                    seq = int(d.get("seq", 0))
                    self.steps.append([seq, d.get("name"), d.get("budget"), now])
                    if seq >= self.seq:
                        self.produce(now)  # what was due belongs to the step before
                        if seq > self.seq:
                            self.step_started = 0
                        self.seq = seq
                        self.step = str(d.get("name"))
                        b = d.get("budget")
                        self.budget = None if b is None else int(b)
                        self.asked = False
                        self.wake()
                elif kind == "specload:budget":
                    d = msg.data or {}
                    if int(d.get("seq", -1)) == self.seq and self.budget is not None:
                        self.grants += 1
                        if self.asked_at:
                            self.grant_rtts.append(now - self.asked_at)
                            self.asked_at = 0.0
                        self.budget += int(d.get("add", 0))
                        self.asked = False
                        self.wake()
                elif kind == "specload:pace":
                    self.held = bool((msg.data or {}).get("hold"))

        def summary(self) -> dict[str, Any]:
            return {
                "id": self.id,
                "emitted": self.emitted,
                "sent_records": self.sent_records,
                "pending": len(self.pending),
                "messages": self.messages,
                "send_again": self.send_again,
                "send_failed": self.send_failed,
                "grants": self.grants,
                "grant_rtt_s": sorted(self.grant_rtts),
                "max_silence_s": self.max_silence,
                "silences": self.silences,
                "steps": self.steps,
                "joined_at": self.joined_at,
            }

    def lag_loop() -> None:
        while True:
            t = time.perf_counter()
            gevent.sleep(0.1)
            shared["lags"].append(time.perf_counter() - t - 0.1)

    def write_status(final: bool) -> None:
        ru = resource.getrusage(resource.RUSAGE_SELF)
        status = {
            "t": time.time(),
            "t0": shared["t0"],
            "emitted": sum(s.emitted for s in synths),
            "sent_records": sum(s.sent_records for s in synths),
            "pending": sum(len(s.pending) for s in synths),
            "connected": sum(1 for s in synths if s.connected.is_set()),
            "cpu_s": ru.ru_utime + ru.ru_stime,
            "final": final,
        }
        if final:
            lags = sorted(shared["lags"]) or [0.0]
            status["lag_max_s"] = lags[-1]
            status["lag_p99_s"] = lags[int(0.99 * (len(lags) - 1))]
            status["workers"] = [s.summary() for s in synths]
        tmp = Path(args.status + ".tmp")
        tmp.write_text(json.dumps(status))
        tmp.replace(args.status)

    synths = [Synth(i) for i in range(args.count)]
    for s in synths:
        gevent.spawn(s.recv_loop)
        s.send("client_ready", __version__)
    for s in synths:
        if not s.connected.wait(timeout=30):
            s.send("client_ready", __version__)  # as Locust's connect_to_master retries
    for s in synths:
        s.connected.wait(timeout=30)
        gevent.spawn(s.flush_loop)
        gevent.spawn(s.heartbeat_loop)
        gevent.spawn(s.report_loop)
    gevent.spawn(lag_loop)
    deadline = time.time() + args.max_s
    while shared["quit"] < len(synths) and time.time() < deadline:
        write_status(False)
        gevent.sleep(0.5)
    gevent.sleep(0.2)  # the last sends leave
    write_status(True)
    os._exit(0)


# --------------------------------------------------------------------------------------
# the master (--child-master): `specload run` with timestamp-only wrappers
# --------------------------------------------------------------------------------------


def master_main(args: argparse.Namespace, run_argv: list[str]) -> None:
    from gevent import monkey  # noqa: PLC0415

    monkey.patch_all()
    import resource  # noqa: PLC0415

    import gevent  # noqa: PLC0415

    import specload.sweep.session  # noqa: F401, PLC0415  (Locust, as `specload run` does)
    from specload import cli  # noqa: PLC0415
    from specload.load import get_session  # noqa: PLC0415
    from specload.sweep import backend as backend_mod  # noqa: PLC0415

    samples = open(args.samples, "w")  # noqa: SIM115
    page = os.sysconf("SC_PAGE_SIZE")
    st: dict[str, Any] = {
        "msgs": {},
        "cpu": {},
        "age": {"records": [0, 0.0, 0.0], "heartbeat": [0, 0.0, 0.0]},  # n, sum, max
        "next": 0.0,
        "records_in": 0,
    }

    def rss() -> int:
        with open("/proc/self/statm") as fh:
            return int(fh.read().split()[1]) * page

    def sample(env: Any, runner: Any, src: str, lag: float | None) -> None:
        now = time.perf_counter()
        st["next"] = now + SAMPLE_S
        ru = resource.getrusage(resource.RUSAGE_SELF)
        states: dict[str, int] = {}
        for c in list(runner.clients.values()):
            states[c.state] = states.get(c.state, 0) + 1
        session = get_session(env)
        row = {
            "t": time.time(),
            "src": src,
            "published": session.published,
            "records_in": st["records_in"],
            "cpu": ru.ru_utime + ru.ru_stime,
            "cpu_main": time.thread_time(),
            "rss": rss(),
            "lag": lag,
            "clients": states,
            "lost": session.lost_requests(),
            "msgs": dict(st["msgs"]),
            "handler_cpu": dict(st["cpu"]),
            "age": {k: list(v) for k, v in st["age"].items()},
        }
        for v in st["age"].values():
            v[0], v[1], v[2] = 0, 0.0, 0.0
        samples.write(json.dumps(row) + "\n")
        samples.flush()

    def install(env: Any, runner: Any) -> None:
        session = get_session(env)
        steps = open(args.steps, "w")  # noqa: SIM115
        orig_handle = runner.handle_message
        msgs, cpu, age = st["msgs"], st["cpu"], st["age"]

        def handle_message(client_id: str, msg: Any) -> None:
            kind = msg.type
            data = msg.data
            sent = data.get("bench_sent") if isinstance(data, dict) else None
            c0 = time.thread_time()
            if sent is not None:
                a = age["records" if kind == "specload:records" else "heartbeat"]
                x = time.time() - sent
                a[0] += 1
                a[1] += x
                if x > a[2]:
                    a[2] = x
            orig_handle(client_id, msg)
            if sent is not None and kind == "specload:records":  # synthetic workers' only
                st["records_in"] += len(data.get("records") or ())
            msgs[kind] = msgs.get(kind, 0) + 1
            cpu[kind] = cpu.get(kind, 0.0) + time.thread_time() - c0
            if time.perf_counter() >= st["next"] + SAMPLE_S:  # the loop is held: sample here
                sample(env, runner, "handler", None)

        runner.handle_message = handle_message
        orig_set_step = session.set_step

        def set_step(name: str, budget: int | None = None) -> None:
            t = time.time()
            orig_set_step(name, budget)
            steps.write(
                json.dumps(
                    [session.step_seq, name, budget, t, time.time() - t, len(runner.clients)]
                )
                + "\n"
            )
            steps.flush()

        session.set_step = set_step  # type: ignore[method-assign]

        def sampler() -> None:
            while True:
                t = time.perf_counter()
                gevent.sleep(SAMPLE_S)
                sample(env, runner, "loop", time.perf_counter() - t - SAMPLE_S)

        sample(env, runner, "start", None)
        gevent.spawn(sampler)

    orig_init = backend_mod.LocustBackend.__init__

    def init(self: Any, *a: Any, **kw: Any) -> None:
        orig_init(self, *a, **kw)
        install(self.env, self.runner)

    backend_mod.LocustBackend.__init__ = init  # type: ignore[method-assign]

    def dump_greenlets() -> None:  # SIGUSR2: every greenlet's stack (a hang, diagnosed)
        from gevent.util import format_run_info  # noqa: PLC0415

        sys.stderr.write("\n".join(format_run_info()) + "\n")
        sys.stderr.flush()

    gevent.signal_handler(signal.SIGUSR2, dump_greenlets)
    profile = os.environ.get("BENCH_MASTER_PROFILE")
    if profile:  # the master's CPU by function (slows it: not for the figures)
        import cProfile  # noqa: PLC0415

        prof = cProfile.Profile(time.thread_time)
        code = prof.runcall(cli.main, run_argv)
        prof.dump_stats(profile)
    else:
        code = cli.main(run_argv)
    samples.close()
    sys.exit(code)


# --------------------------------------------------------------------------------------
# the parent: machine, stages, figures
# --------------------------------------------------------------------------------------


def cpu_jiffies() -> tuple[int, int]:
    """(busy, all) jiffies of the whole machine, from /proc/stat."""
    v = [int(x) for x in Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:]]
    busy = v[0] + v[1] + v[2] + v[5] + v[6] + v[7]
    return busy, sum(v[:8])


def proc_cpu(pid: int) -> float:
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return 0.0
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def machine_busy(seconds: float) -> float:
    """Cores busy (all processes) over the next ``seconds``."""
    b0, _ = cpu_jiffies()
    time.sleep(seconds)
    b1, _ = cpu_jiffies()
    return (b1 - b0) / os.sysconf("SC_CLK_TCK") / seconds


def quiet(args: argparse.Namespace) -> tuple[float, float]:
    """Wait (up to --max-wait) for a quiet machine; returns (cores busy, seconds waited)."""
    waited = 0.0
    while True:
        busy = machine_busy(3.0)
        waited += 3.0
        if busy <= args.max_busy or waited >= args.max_wait:
            return busy, waited
        print(f"  waiting for a quiet machine: {busy:.2f} cores busy", flush=True)


def free_port() -> int:
    import socket  # noqa: PLC0415

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def read_jsonl(path: Path) -> list[Any]:
    if not path.exists():
        return []
    out = []
    for line in path.read_text().splitlines():
        with contextlib.suppress(json.JSONDecodeError):
            out.append(json.loads(line))
    return out


def read_json(path: Path) -> dict[str, Any] | None:
    try:
        data: dict[str, Any] = json.loads(path.read_text())
    except (OSError, json.JSONDecodeError):
        return None
    return data


def last_sample(path: Path) -> dict[str, Any] | None:
    try:
        with path.open("rb") as fh:
            fh.seek(0, os.SEEK_END)
            size = fh.tell()
            fh.seek(max(0, size - 65536))
            lines = fh.read().splitlines()
    except OSError:
        return None
    for line in reversed(lines):
        with contextlib.suppress(json.JSONDecodeError):
            row: dict[str, Any] = json.loads(line)
            return row
    return None


def stop_proc(proc: subprocess.Popen[bytes], sig: int, wait_s: float) -> None:
    if proc.poll() is None:
        with contextlib.suppress(ProcessLookupError):
            proc.send_signal(sig)
    try:
        proc.wait(wait_s)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()


def run_stage(
    args: argparse.Namespace, n: int, rate: float, tmp: Path, index: int, server_port: int
) -> dict[str, Any]:
    port = free_port()
    d = tmp / f"stage-{index}"
    d.mkdir()
    samples_path, steps_path = d / "samples.jsonl", d / "steps.jsonl"
    level_s = 3.0
    levels = max(8, math.ceil((args.load_s + args.catchup_s + 30) / level_s))
    conc = ",".join(str(n * USERS_PER_WORKER + i) for i in range(levels))
    window = ["--warmup", "1s", "--duration", "2s"]
    if args.mode == "requests":
        per_level = max(8, int(n * rate * 2.0))
        window = ["--warmup", "0", "--requests", str(per_level)]
    run_argv = [
        *("run", "--host", f"http://127.0.0.1:{server_port}", "--concurrency", conc, *window),
        *("--workers", "0", "--expect-workers", str(n + args.real_workers)),
        *("--master-bind-port", str(port)),
        *("--metrics-url", "off", "--metrics-address", "off", "--progress", "off"),
        *("--no-plots", "--prefix-cache-reset", "off", "--drain-timeout", "10s"),
        *("--out", str(d / "results"), "--variant", "bench-master"),
    ]
    me = str(Path(__file__).resolve())
    tree = str(Path(args.tree).resolve())
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([tree, os.environ.get("PYTHONPATH", "")])}
    if args.profile:
        env["BENCH_MASTER_PROFILE"] = str(d / "master.prof")
    master_cmd = [
        *("taskset", "-c", str(args.master_cpu), sys.executable, me, "--child-master"),
        *("--samples", str(samples_path), "--steps", str(steps_path), "--", *run_argv),
    ]
    load_before = os.getloadavg()
    log = (d / "master.log").open("wb")
    master = subprocess.Popen(master_cmd, env=env, cwd=tree, stdout=log, stderr=subprocess.STDOUT)
    gens: list[tuple[subprocess.Popen[bytes], Path]] = []
    reals: list[subprocess.Popen[bytes]] = []
    t_start = time.time()
    try:
        while not samples_path.exists() and master.poll() is None and time.time() < t_start + 60:
            time.sleep(0.1)
        if master.poll() is not None:
            raise RuntimeError(f"the master exited with {master.returncode} (see {d}/master.log)")
        left = n
        g = 0
        while left > 0:
            k = min(WORKERS_PER_GEN, left)
            status = d / f"gen-{g}.json"
            cmd = [
                *("taskset", "-c", str(args.gen_cpu), sys.executable, me, "--child-gen"),
                *("--port", str(port), "--count", str(k), "--rate", str(rate)),
                *("--load-s", str(args.load_s), "--records", args.records, "--pool", "200"),
                *("--status", str(status), "--seed", str(g + 1)),
                *("--max-s", str(args.load_s + args.catchup_s + 120)),
            ]
            glog = (d / f"gen-{g}.log").open("wb")
            gens.append(
                (subprocess.Popen(cmd, env=env, cwd=tree, stdout=glog, stderr=glog), status)
            )
            left -= k
            g += 1
        reals = []
        for k in range(args.real_workers):
            rlog = (d / f"real-{k}.log").open("wb")
            cmd = [
                *("taskset", "-c", str(args.gen_cpu), sys.executable, "-m", "locust", "-f"),
                str(Path(tree) / "specload" / "sweep" / "locustfile.py"),
                *("--worker", "--master-host", "127.0.0.1", "--master-port", str(port)),
            ]
            reals.append(subprocess.Popen(cmd, env=env, cwd=tree, stdout=rlog, stderr=rlog))
        # the load: from the first spawn, --load-s; then the catch-up
        rss_peak = 0
        outcome = "caught up"
        busy0: tuple[int, int] | None = None
        other: dict[str, Any] = {}
        t_load_end: float | None = None
        while True:
            time.sleep(0.5)
            if master.poll() is not None:
                outcome = f"master exited ({master.returncode})"
                break
            sts = [read_json(s) for _, s in gens]
            last = last_sample(samples_path)
            if last is not None:
                rss_peak = max(rss_peak, int(last["rss"]))
                if rss_peak > args.rss_limit_mb * 1e6:
                    outcome = f"aborted: master RSS over {args.rss_limit_mb} MB"
                    break
            t0s = [s["t0"] for s in sts if s and s.get("t0")]
            if len(t0s) < len(gens):
                if time.time() > t_start + 90:
                    outcome = "no load: workers never spawned"
                    break
                continue
            t0 = min(t0s)
            now = time.time()
            if busy0 is None and now >= t0 + 1.0:
                busy0 = cpu_jiffies()
                other = {"t": now, "master": proc_cpu(master.pid), "gens": 0.0}
                other["gens"] = sum(proc_cpu(p.pid) for p, _ in gens)
            if now < t0 + args.load_s:
                continue
            if t_load_end is None:
                t_load_end = now
                if busy0 is not None:
                    b1, _ = cpu_jiffies()
                    ticks = os.sysconf("SC_CLK_TCK")
                    span = now - other["t"]
                    ours = proc_cpu(master.pid) - other["master"]
                    ours += sum(proc_cpu(p.pid) for p, _ in gens) - other["gens"]
                    other = {
                        "machine_cores": (b1 - busy0[0]) / ticks / span,
                        "other_cores": ((b1 - busy0[0]) / ticks - ours) / span,
                    }
                other["loadavg_end"] = list(os.getloadavg())
            emitted = sum(int(s["emitted"]) for s in sts if s)
            if last is not None and int(last["records_in"]) >= emitted:
                outcome = "caught up"
                break
            if now > t0 + args.load_s + args.catchup_s:
                outcome = f"not caught up in {args.catchup_s:g} s"
                break
        t_end = time.time()
        stop_proc(master, signal.SIGINT, 60.0)
        for p in [*(p for p, _ in gens), *reals]:
            try:
                p.wait(30)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait()
    finally:
        for p in [*(p for p, _ in gens), *reals]:
            if p.poll() is None:
                p.kill()
                p.wait()
        if master.poll() is None:
            master.kill()
            master.wait()
        log.close()
    finals = [read_json(s) for _, s in gens]
    quits = []  # real workers that quit on their own: their master went silent
    for k in range(args.real_workers):
        text = (d / f"real-{k}.log").read_text(errors="replace")
        quits += [line for line in text.splitlines() if "MASTER_SILENCE_TIMEOUT_S" in line]
    other["real_workers"] = args.real_workers
    other["real_workers_quit"] = quits
    return analyse(
        args,
        n,
        rate,
        samples=read_jsonl(samples_path),
        steps=read_jsonl(steps_path),
        gens=[f for f in finals if f],
        outcome=outcome,
        t_end=t_end,
        extra={
            "stage": index,
            "master_exit": master.returncode,
            "load_before": list(load_before),
            **other,
        },
    )


def at(samples: list[dict[str, Any]], t: float, key: str) -> float:
    """``key`` of the last sample at or before ``t`` (the first one if none)."""
    best = samples[0]
    for s in samples:
        if s["t"] <= t:
            best = s
        else:
            break
    return float(best[key])


def analyse(
    args: argparse.Namespace,
    n: int,
    rate: float,
    *,
    samples: list[dict[str, Any]],
    steps: list[list[Any]],
    gens: list[dict[str, Any]],
    outcome: str,
    t_end: float,
    extra: dict[str, Any],
) -> dict[str, Any]:
    row: dict[str, Any] = {
        "workers": n,
        "rate_per_worker": rate,
        "offered": n * rate,
        "mode": args.mode,
        "records": args.records,
        "outcome": outcome,
        **extra,
    }
    workers = [w for g in gens for w in g.get("workers", [])]
    t0s = [g["t0"] for g in gens if g.get("t0")]
    if not samples or not t0s or not workers:
        row["error"] = "no samples or no load"
        return row
    t0 = min(t0s)
    lo, hi = t0 + 1.0, t0 + args.load_s  # the load window, its first second left out
    emitted = sum(w["emitted"] for w in workers)
    caught = next((s["t"] for s in samples if s["t"] >= hi and s["records_in"] >= emitted), None)
    span = hi - lo
    win = [s for s in samples if lo <= s["t"] <= hi]
    published_end = int(samples[-1]["published"])
    synthetic_end = int(samples[-1]["records_in"])  # of the synthetic workers, published
    row.update(
        emitted=emitted,
        sent=sum(w["sent_records"] for w in workers),
        pending_at_end=sum(w["pending"] for w in workers),
        published=published_end,
        real_records=published_end - synthetic_end,
        not_published=emitted - synthetic_end,
        emitted_per_s=emitted / args.load_s,
        absorbed_per_s=(at(samples, hi, "published") - at(samples, lo, "published")) / span,
        arrived_per_s=(at(samples, hi, "records_in") - at(samples, lo, "records_in")) / span,
        master_cores=(at(samples, hi, "cpu") - at(samples, lo, "cpu")) / span,
        master_main_cores=(at(samples, hi, "cpu_main") - at(samples, lo, "cpu_main")) / span,
        rss_connected_mb=at(samples, t0 - 0.01, "rss") / 1e6,
        rss_start_mb=float(samples[0]["rss"]) / 1e6,
        rss_peak_mb=max(float(s["rss"]) for s in samples) / 1e6,
        rss_end_mb=float(samples[-1]["rss"]) / 1e6,
        send_again=sum(w["send_again"] for w in workers),
        send_failed=sum(w["send_failed"] for w in workers),
        max_silence_s=max(w["max_silence_s"] for w in workers),
        silenced_workers=sum(1 for w in workers if w["silences"]),
        gen_lag_max_s=max(g.get("lag_max_s", 0.0) for g in gens),
        gen_lag_p99_s=max(g.get("lag_p99_s", 0.0) for g in gens),
        gen_cores=sum(g["cpu_s"] for g in gens) / max(1e-9, t_end - t0),
        missing_max=max(s["clients"].get("missing", 0) for s in samples),
        lost_max=max(int(s["lost"]) for s in samples),
        loop_lag_max_s=max((s["lag"] or 0.0) for s in win) if win else None,
        handler_samples=sum(1 for s in win if s["src"] == "handler"),
    )
    # records' age on arrival: mean and max in the window; first vs last quarter
    ages = [(s["t"], s["age"]["records"]) for s in win if s["age"]["records"][0]]
    if ages:
        k = max(1, len(ages) // 4)
        first, lastq = ages[:k], ages[-k:]
        row["age_mean_s"] = sum(a[1] for _, a in ages) / sum(a[0] for _, a in ages)
        row["age_max_s"] = max(a[2] for _, a in ages)
        row["age_first_s"] = sum(a[1] for _, a in first) / sum(a[0] for _, a in first)
        row["age_last_s"] = sum(a[1] for _, a in lastq) / sum(a[0] for _, a in lastq)
    hb = [s["age"]["heartbeat"] for s in win if s["age"]["heartbeat"][0]]
    if hb:
        row["hb_age_max_s"] = max(a[2] for a in hb)
    # the master's CPU per message kind over the window
    if len(win) >= 2:
        a, b = win[0], win[-1]
        per: dict[str, Any] = {}
        for kind, c in b["handler_cpu"].items():
            m = b["msgs"].get(kind, 0) - a["msgs"].get(kind, 0)
            cs = c - a["handler_cpu"].get(kind, 0.0)
            per[kind] = {"per_s": m / (b["t"] - a["t"]), "cpu_share": cs / (b["t"] - a["t"])}
        row["by_kind"] = per
        recs = b["records_in"] - a["records_in"]
        if recs:
            row["records_us"] = (
                1e6
                * (
                    b["handler_cpu"].get("specload:records", 0.0)
                    - a["handler_cpu"].get("specload:records", 0.0)
                )
                / recs
            )
    # backlog at the load's end, and when it was published
    row["backlog_at_end"] = emitted - int(at(samples, hi, "records_in"))
    row["catchup_s"] = None if caught is None else max(0.0, caught - hi)
    # step changes: the master's send -> each worker's first receipt (a worker that
    # connects again is sent the step in force again: not a new change)
    got: dict[int, list[float]] = {}
    for w in workers:
        earliest: dict[int, float] = {}
        for seq, _name, _budget, t in w["steps"]:
            earliest.setdefault(int(seq), float(t))
        for seq, t in earliest.items():
            got.setdefault(seq, []).append(t)
    busy_end = caught if caught is not None else t_end
    lat_last, lat_med, send, missed = [], [], [], 0
    sent_at = [float(x[3]) for x in steps if t0 - 0.5 <= float(x[3]) <= busy_end]
    for seq, _name, _budget, t_send, dur, _clients in steps:
        if not lo - 0.5 <= t_send <= busy_end:  # while the load or its backlog lasts
            continue
        times = [t for t in got.get(int(seq), []) if t >= t_send]
        if len(times) < len(workers):
            missed += 1
            continue
        lat_last.append(max(times) - t_send)
        lat_med.append(statistics.median(times) - t_send)
        send.append(float(dur))  # the master's set_step: its sends to every worker
    row["steps_measured"] = len(lat_last)
    row["steps_missed"] = missed
    if lat_last:
        lat_last.sort()
        row["step_last_ms_median"] = 1000 * statistics.median(lat_last)
        row["step_last_ms_max"] = 1000 * lat_last[-1]
        row["step_median_ms"] = 1000 * statistics.median(lat_med)
        row["step_send_ms_median"] = 1000 * statistics.median(send)
        row["step_send_ms_max"] = 1000 * max(send)
    # the sweep's clock: a step change is due every 1 s (warm-up) or 2 s (window); a
    # longer gap is its driver waiting for the event loop
    edges = [t0, *sent_at, busy_end]
    row["step_gap_max_s"] = max(b - a for a, b in itertools.pairwise(edges))
    row["saturated"] = saturated(row)
    return row


def saturated(row: dict[str, Any]) -> bool:
    if row.get("error") or row["offered"] == 0:
        return False
    if row["absorbed_per_s"] < 0.95 * row["emitted_per_s"]:
        return True
    if row["master_cores"] >= 0.95:
        return True
    first, last = row.get("age_first_s"), row.get("age_last_s")
    return first is not None and last is not None and last > max(0.5, 2 * first)


def describe(r: dict[str, Any]) -> str:
    if r.get("error"):
        return f"N={r['workers']} rate {r['rate_per_worker']:g}/s: {r['error']} ({r['outcome']})"
    age = f"age {r.get('age_mean_s', 0) * 1000:.0f}/{r.get('age_max_s', 0) * 1000:.0f} ms"
    step = (
        f"step {r['step_last_ms_median']:.1f}/{r['step_last_ms_max']:.1f} ms"
        if "step_last_ms_median" in r
        else "step -"
    )
    return (
        f"N={r['workers']:>4} {r['rate_per_worker']:>7g}/s each = {r['offered']:>7g}/s: emitted "
        f"{r['emitted_per_s']:>7.0f}/s absorbed {r['absorbed_per_s']:>7.0f}/s, master "
        f"{r['master_cores']:.0%} ({r.get('records_us', 0):.0f} us/record), {age}, {step}, "
        f"RSS {r['rss_connected_mb']:.0f}->{r['rss_peak_mb']:.0f} MB, backlog "
        f"{r['backlog_at_end']} caught up in {r['catchup_s']}, lost {r['not_published']}, "
        f"missing {r['missing_max']}, silenced {r['silenced_workers']}, other "
        f"{r.get('other_cores', float('nan')):.2f} cores [{r['outcome']}]"
        + (" SATURATED" if r["saturated"] else "")
    )


def commit_of(tree: Path) -> str:
    mark = tree / ".bench-commit"
    if mark.exists():
        return mark.read_text().strip()
    head = subprocess.run(
        ["git", "rev-parse", "--short", "HEAD"],
        cwd=tree,
        capture_output=True,
        text=True,
        check=False,
    ).stdout.strip()
    dirty = subprocess.run(
        ["git", "status", "--porcelain", "specload"],
        cwd=tree,
        capture_output=True,
        text=True,
        check=False,
    ).stdout.strip()
    return f"{head or '?'}{'+dirty' if dirty else ''}"


def parent(args: argparse.Namespace) -> None:
    from fixed_servers import Timing, build_c_server, server_command, start_server  # noqa: PLC0415

    rows: list[dict[str, Any]] = []
    tree = Path(args.tree).resolve()
    commit = commit_of(tree)
    started = time.time()
    with tempfile.TemporaryDirectory(prefix="specload-bench-master-") as tmpname:
        tmp = Path(args.workdir or tmpname)
        tmp.mkdir(parents=True, exist_ok=True)
        exe = build_c_server(tmp / "fixed-server-c")
        server_port = free_port()
        server = start_server(
            server_command("c", server_port, Timing(0.05, 0.005, 16), c_exe=exe),
            server_port,
            cpu=args.gen_cpu,
        )
        index = 0
        try:
            for stages, stop in plan(args):
                past = -1
                for n, rate in stages:
                    if args.quick and index >= 2:
                        break
                    busy, waited = quiet(args)
                    with open(args.lock, "a") as lock:
                        try:
                            fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
                        except BlockingIOError:
                            print(f"  waiting for {args.lock} (another benchmark)", flush=True)
                            fcntl.flock(lock, fcntl.LOCK_EX)
                        try:
                            row = run_stage(args, n, rate, tmp, index, server_port)
                        except (RuntimeError, OSError) as exc:
                            print(f"N={n} rate {rate:g}: stage failed: {exc}", flush=True)
                            index += 1
                            continue
                    row.update(busy_before=busy, waited_s=waited, commit=commit)
                    index += 1
                    rows.append(row)
                    print(describe(row), flush=True)
                    if row.get("saturated") and past < 0:
                        past = 0
                    elif past >= 0:
                        past += 1
                    if stop and past >= args.past:
                        break
                    if args.json:  # as it goes: a long run keeps what it measured
                        write_json(args, rows, commit, started)
        finally:
            server.kill()
            server.wait()
    if args.json:
        write_json(args, rows, commit, started)
    text = tables(rows, args, commit)
    if args.out:
        Path(args.out).write_text(text)
    print(text)


def plan(args: argparse.Namespace) -> list[tuple[list[tuple[int, float]], bool]]:
    """Series of (workers, rate per worker) stages; True: a ramp, stopped past saturation."""
    if args.stages:
        pairs = [x.split(":") for x in args.stages.split(",") if x]
        stages = [(int(a), float(b)) for a, b in pairs for _ in range(args.repeat)]
        return [(stages, False)]
    out: list[tuple[list[tuple[int, float]], bool]] = []
    for n in [int(x) for x in args.workers_list.split(",") if x]:
        rates = [0.0]
        total = args.start_total
        while total / n <= args.max_per_worker and len(rates) < args.max_stages:
            rates.append(round(total / n, 3))
            total *= 2
        out.append(([(n, r) for r in rates], True))
    for n in [int(x) for x in args.idle_list.split(",") if x]:
        out.append(([(n, 0.0)], False))
    return out


def write_json(args: argparse.Namespace, rows: list[dict[str, Any]], commit: str, t: float) -> None:
    meta = {
        "commit": commit,
        "started": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(t)),
        "args": {k: v for k, v in vars(args).items() if k != "child"},
        "cpus": os.cpu_count(),
        "cpu_model": next(
            (
                line.split(":", 1)[1].strip()
                for line in Path("/proc/cpuinfo").read_text().splitlines()
                if line.startswith("model name")
            ),
            "?",
        ),
    }
    Path(args.json).write_text(json.dumps({"meta": meta, "rows": rows}, indent=1))


def tables(rows: list[dict[str, Any]], args: argparse.Namespace, commit: str) -> str:
    head = (
        "| workers | per worker /s | offered /s | emitted /s | absorbed /s | master core "
        "| us/record | age mean/max ms | step last median/max ms | RSS MB conn/peak "
        "| backlog | catch-up s | lost | missing | silenced | other cores | outcome |\n"
        + "|"
        + "---|" * 17
    )
    lines = [f"commit {commit}, mode {args.mode}, records {args.records}", "", head]
    for r in rows:
        if r.get("error"):
            continue
        lines.append(
            f"| {r['workers']} | {r['rate_per_worker']:g} | {r['offered']:g} "
            f"| {r['emitted_per_s']:.0f} | {r['absorbed_per_s']:.0f} | {r['master_cores']:.0%} "
            f"| {r.get('records_us', 0):.0f} "
            f"| {r.get('age_mean_s', 0) * 1000:.0f}/{r.get('age_max_s', 0) * 1000:.0f} "
            f"| {r.get('step_last_ms_median', float('nan')):.1f}/"
            f"{r.get('step_last_ms_max', float('nan')):.1f} "
            f"| {r['rss_connected_mb']:.0f}/{r['rss_peak_mb']:.0f} | {r['backlog_at_end']} "
            f"| {r['catchup_s'] if r['catchup_s'] is None else round(r['catchup_s'], 1)} "
            f"| {r['not_published']} | {r['missing_max']} | {r['silenced_workers']} "
            f"| {r.get('other_cores', float('nan')):.2f} "
            f"| {r['outcome']}{' **sat**' if r['saturated'] else ''} |"
        )
    return "\n".join(lines) + "\n"


def main() -> None:
    if "--child-master" in sys.argv:
        i = sys.argv.index("--")
        ap = argparse.ArgumentParser()
        ap.add_argument("--child-master", action="store_true")
        ap.add_argument("--samples", required=True)
        ap.add_argument("--steps", required=True)
        master_main(ap.parse_args(sys.argv[1:i]), sys.argv[i + 1 :])
        return
    if "--child-gen" in sys.argv:
        ap = argparse.ArgumentParser()
        ap.add_argument("--child-gen", action="store_true")
        ap.add_argument("--port", type=int, required=True)
        ap.add_argument("--count", type=int, required=True)
        ap.add_argument("--rate", type=float, required=True)
        ap.add_argument("--load-s", type=float, required=True)
        ap.add_argument("--records", default="reasoning")
        ap.add_argument("--pool", type=int, default=200)
        ap.add_argument("--status", required=True)
        ap.add_argument("--seed", type=int, default=1)
        ap.add_argument("--max-s", type=float, default=300.0)
        gen_main(ap.parse_args())
        return
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--workers-list", default="1,4,16,64,256")
    ap.add_argument(
        "--stages",
        default="",
        help="instead of the ramps: these stages, WORKERS:RATE_PER_WORKER,... (each --repeat "
        "times), e.g. 16:125,16:250",
    )
    ap.add_argument("--repeat", type=int, default=1)
    ap.add_argument(
        "--idle-list", default="", help="worker counts measured idle only (memory, idle CPU)"
    )
    ap.add_argument(
        "--real-workers",
        type=int,
        default=0,
        help="also connect this many real Locust workers (specload/sweep/locustfile.py, "
        "against the fixed server): they quit when their master goes silent for 5 s",
    )
    ap.add_argument("--start-total", type=float, default=500.0, help="records/s of the first stage")
    ap.add_argument("--max-per-worker", type=float, default=2000.0)
    ap.add_argument("--max-stages", type=int, default=9, help="load stages per worker count")
    ap.add_argument("--past", type=int, default=1, help="stages beyond the first saturated one")
    ap.add_argument("--load-s", type=float, default=10.0)
    ap.add_argument("--catchup-s", type=float, default=30.0)
    ap.add_argument("--mode", choices=("duration", "requests"), default="duration")
    ap.add_argument("--records", choices=("reasoning", "captured"), default="reasoning")
    ap.add_argument("--master-cpu", type=int, default=0)
    ap.add_argument("--gen-cpu", type=int, default=1)
    ap.add_argument("--rss-limit-mb", type=float, default=4000.0)
    ap.add_argument("--quick", action="store_true", help="2 workers, 2 short stages")
    ap.add_argument("--max-busy", type=float, default=0.3)
    ap.add_argument("--max-wait", type=float, default=60.0)
    ap.add_argument("--lock", default="/tmp/specload-bench.lock")
    ap.add_argument("--tree", default=str(ROOT))
    ap.add_argument("--json", default="")
    ap.add_argument("--out", default="")
    ap.add_argument("--workdir", default="", help="keep each stage's files here (default: temp)")
    ap.add_argument(
        "--profile",
        action="store_true",
        help="run each master under cProfile (WORKDIR/stage-K/master.prof; slower master)",
    )
    args = ap.parse_args()
    if args.quick:
        args.workers_list = "2"
        args.load_s = 4.0
        args.catchup_s = 10.0
        args.start_total = 200.0
        args.max_wait = min(args.max_wait, 6.0)
    parent(args)


if __name__ == "__main__":
    main()
