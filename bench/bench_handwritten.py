"""The three hand-written parts against the library each replaces, side by side, interleaved.

specload writes its own Prometheus text parser, HTTP load client and simulator HTTP layer
where a library exists. This measures each against that library in one run, alternating
A, B, A, B ... so that the VM's periodic stalls and other jobs hit both alike, and prints the
ratio (library cost / hand-written cost) with its spread over the rounds.

1. ``promtext``: CPU per parse (``time.process_time``) of the real vLLM 0.32 n-gram page
   (tests/data/vllm-0.32.0/metrics_ngram.txt) by ``specload.promtext.parse`` and by
   ``prometheus_client.parser.text_string_to_metric_families`` (consumed fully): every family,
   and the exporter's set (``parse(text, exporter.vllm_metrics.keep, buckets=False)`` as
   exporter/target.py calls it, against the library parsing everything and keeping the same
   families: it has no filter).
2. ``client``: 256 streams against bench/fixed_server.c (pinned to CPU 1; 50 ms TTFT, 5 ms ITL,
   400 tokens, one token per chunk, continuous usage on every chunk). Each client runs in its
   own process pinned to CPU 0 and measures its own user+system CPU (``getrusage``) in the
   window: specload's ``ChatRequester`` (256 greenlets, one requester each; C fast path, and
   ``SPECLOAD_FASTPATH=0``), Locust's ``FastHttpSession`` (the ``FastHttpUser`` client,
   geventhttpclient; 256 greenlets, one session each, ``stream=True``, lines read with
   ``readline``) and ``httpx.AsyncClient`` (asyncio, 256 tasks on one client,
   ``client.stream`` + ``aiter_lines``). The two library readers parse each ``data:`` line
   with orjson and take ``usage.completion_tokens`` (continuous usage), stamping tokens with
   ``perf_counter`` at parse time.
3. ``server``: simulator/http.py against aiohttp (both on uvloop, pinned to CPU 1), each a
   minimal server streaming N copies of one vLLM-sized SSE event per request, one event per
   stream every ITL from one ticker (the simulator's pattern: a loop writes to every active
   stream); the client is a small uvloop Protocol client (this process, CPU 0) with 256
   kept-alive connections counting events. Figure: server process CPU (``/proc/PID/stat``)
   per event delivered.

    .venv/bin/python bench/bench_handwritten.py            # all three, ~4 min
    .venv/bin/python bench/bench_handwritten.py --parts promtext --rounds 5

aiohttp is not a dependency: ``--aiohttp-python`` (default ``$AIOHTTP_PYTHON``, else
/tmp/aiohttp-venv/bin/python) is an interpreter with aiohttp and uvloop, e.g.
``python3 -m venv /tmp/aiohttp-venv && /tmp/aiohttp-venv/bin/pip install aiohttp uvloop``.
bench/results/handwritten.md records a run.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
PAGE = REPO / "tests/data/vllm-0.32.0/metrics_ngram.txt"

# -- shared ------------------------------------------------------------------------------------


def load_avg() -> str:
    return " ".join(Path("/proc/loadavg").read_text().split()[:3])


def spread(values: list[float]) -> str:
    return f"{min(values):.2f}-{max(values):.2f}"


# -- part 1: promtext --------------------------------------------------------------------------


def part_promtext(args: argparse.Namespace) -> list[dict]:
    sys.path.insert(0, str(REPO))
    from prometheus_client.parser import text_string_to_metric_families  # noqa: PLC0415

    from exporter.vllm_metrics import keep  # noqa: PLC0415
    from specload.promtext import parse  # noqa: PLC0415

    text = PAGE.read_text()

    def hand_all() -> None:
        parse(text)

    def lib_all() -> None:
        for _ in text_string_to_metric_families(text):
            pass

    def hand_keep() -> None:
        parse(text, keep, buckets=False)

    def lib_keep() -> None:
        [f for f in text_string_to_metric_families(text) if keep(f.name)]

    # sanity: the two see the same families, and the filtered set is non-empty
    lib_names = {f.name for f in text_string_to_metric_families(text)}
    kept = [f.name for f in text_string_to_metric_families(text) if keep(f.name)]
    assert kept, "the exporter's filter keeps nothing"
    ours = parse(text)
    n_samples = sum(len(f.samples) for f in ours.values())
    print(
        f"page {PAGE.name}: {len(text)} bytes, {text.count(chr(10))} lines, "
        f"{len(lib_names)} families (prometheus_client), {n_samples} samples (promtext); "
        f"exporter's filter keeps {len(kept)} families",
        flush=True,
    )

    def cpu_ms(fn, n: int) -> float:
        t0 = time.process_time()
        for _ in range(n):
            fn()
        return (time.process_time() - t0) * 1000 / n

    for fn in (hand_all, lib_all, hand_keep, lib_keep):  # warm-up
        cpu_ms(fn, 3)
    res: dict[str, list[float]] = {k: [] for k in ("hand_all", "lib_all", "hand_keep", "lib_keep")}
    n = args.parse_iterations
    for r in range(args.rounds):
        for name, fn in (
            ("hand_all", hand_all),
            ("lib_all", lib_all),
            ("hand_keep", hand_keep),
            ("lib_keep", lib_keep),
        ):
            res[name].append(cpu_ms(fn, n))
        print(
            f"round {r + 1}: " + ", ".join(f"{k} {v[-1]:.3f} ms" for k, v in res.items()),
            flush=True,
        )
    rows = []
    for what, h, lib in (
        ("every family", "hand_all", "lib_all"),
        ("exporter's set", "hand_keep", "lib_keep"),
    ):
        ratios = [b / a for a, b in zip(res[h], res[lib], strict=True)]
        rows.append(
            {
                "part": f"promtext, {what}",
                "hand": f"{statistics.median(res[h]):.2f} ms CPU/page",
                "lib": f"{statistics.median(res[lib]):.2f} ms CPU/page",
                "ratio": statistics.median(ratios),
                "spread": spread(ratios),
                "conditions": f"{args.rounds} rounds x {n} parses each, interleaved; "
                f"load {load_avg()}",
            }
        )
    return rows


# -- part 2: load clients ----------------------------------------------------------------------

PROMPT_BODY = (
    b'{"model":"fixed-timing","messages":[{"role":"user","content":"hi"}],"max_tokens":400,'
    b'"stream":true,"stream_options":{"include_usage":true,"continuous_usage_stats":true}}'
)


def _summarise(
    reqs: list[tuple[float, float, float, float, int]],
    t1: float,
    t2: float,
    cpu: float,
    a: argparse.Namespace,
) -> dict:
    """reqs: (start wall, first-token wall, end wall, ttft_s, tpot_s, tokens) per request."""
    tokens = 0.0
    ttfts, tpots = [], []
    for start, first, end, ttft, tpot, n in reqs:
        if end > first and n > 0:
            overlap = max(0.0, min(end, t2) - max(first, t1))
            tokens += n * overlap / (end - first)
        if start >= t1 and end <= t2 and ttft is not None and tpot is not None:
            ttfts.append(ttft)
            tpots.append(tpot)
    offered = a.streams * a.tokens / (a.ttft + (a.tokens - 1) * a.itl)
    return {
        "tok_per_cpu_s": tokens / max(cpu, 1e-9),
        "share": tokens / (t2 - t1) / offered,
        "ttft_err": statistics.median(ttfts) / a.ttft - 1 if ttfts else float("nan"),
        "tpot_err": statistics.median(tpots) / a.itl - 1 if tpots else float("nan"),
        "cpu_share": cpu / (t2 - t1),
        "requests": len(ttfts),
    }


def _cpu_s() -> float:
    import resource  # noqa: PLC0415

    ru = resource.getrusage(resource.RUSAGE_SELF)
    return ru.ru_utime + ru.ru_stime


def client_specload(a: argparse.Namespace) -> dict:
    from gevent import monkey  # noqa: PLC0415

    monkey.patch_all()
    import gevent  # noqa: PLC0415

    sys.path.insert(0, str(REPO))
    from specload.load.chat import ChatRequester, ChatSettings  # noqa: PLC0415
    from specload.prompts import Prompt  # noqa: PLC0415
    from specload.urls import parse_server_url  # noqa: PLC0415

    url = parse_server_url(f"http://127.0.0.1:{a.port}")
    settings = ChatSettings(model="fixed-timing", max_tokens=a.tokens)
    prompt = Prompt("p1", "math", ({"role": "user", "content": "hi"},), a.tokens)
    reqs: list = []
    stop = [False]

    def user() -> None:
        req = ChatRequester(url, settings)
        while not stop[0]:
            r = req.send(prompt, "measure")
            if r.ok:
                first = r.start_s + (r.ttft_s or 0.0)
                reqs.append((r.start_s, first, r.end_s, r.ttft_s, r.tpot_s, r.tokens_output))

    gl = [gevent.spawn(user) for _ in range(a.streams)]
    gevent.sleep(a.warmup)
    t1, c1 = time.time(), _cpu_s()
    gevent.sleep(a.duration)
    t2, c2 = time.time(), _cpu_s()
    stop[0] = True
    del gl
    return _summarise(reqs, t1, t2, c2 - c1, a)


def _gevent_reader(resp_stream, t0: float) -> tuple[float | None, float, int]:
    """Read SSE lines; tokens from continuous usage. Returns (first token perf, last perf, n)."""
    import orjson  # noqa: PLC0415

    loads = orjson.loads
    first = None
    last = t0
    n = 0
    readline = resp_stream.readline
    while True:
        line = readline(b"\n")
        if not line:
            break
        if line.startswith(b"data: "):
            payload = line[6:].rstrip()
            if payload == b"[DONE]":
                break
            ev = loads(payload)
            usage = ev.get("usage")
            if usage:
                k = usage.get("completion_tokens", 0)
                if k > n:
                    now = time.perf_counter()
                    if first is None:
                        first = now
                    last = now
                    n = k
    return first, last, n


def client_fasthttp(a: argparse.Namespace) -> dict:
    from gevent import monkey  # noqa: PLC0415

    monkey.patch_all()
    import gevent  # noqa: PLC0415
    from locust.contrib.fasthttp import FastHttpSession  # noqa: PLC0415
    from locust.event import EventHook  # noqa: PLC0415

    request_event = EventHook()  # what a Locust Environment passes; no listeners here
    reqs: list = []
    stop = [False]
    headers = {"Content-Type": "application/json", "Accept": "text/event-stream"}

    def user() -> None:
        s = FastHttpSession(f"http://127.0.0.1:{a.port}", request_event=request_event, user=None)
        while not stop[0]:
            start = time.time()
            t0 = time.perf_counter()
            resp = s.request(
                "POST", "/v1/chat/completions", data=PROMPT_BODY, headers=headers, stream=True
            )
            first, last, n = _gevent_reader(resp.stream, t0)
            end = time.time()
            if first is not None and n > 1:
                reqs.append(
                    (start, start + first - t0, end, first - t0, (last - first) / (n - 1), n)
                )

    gl = [gevent.spawn(user) for _ in range(a.streams)]
    gevent.sleep(a.warmup)
    t1, c1 = time.time(), _cpu_s()
    gevent.sleep(a.duration)
    t2, c2 = time.time(), _cpu_s()
    stop[0] = True
    del gl
    return _summarise(reqs, t1, t2, c2 - c1, a)


def client_httpx(a: argparse.Namespace) -> dict:
    import asyncio  # noqa: PLC0415

    import httpx  # noqa: PLC0415
    import orjson  # noqa: PLC0415

    reqs: list = []
    stop = [False]
    headers = {"Content-Type": "application/json", "Accept": "text/event-stream"}
    out: dict = {}

    async def user(client: httpx.AsyncClient) -> None:
        loads = orjson.loads
        while not stop[0]:
            start = time.time()
            t0 = time.perf_counter()
            first = None
            last = t0
            n = 0
            async with client.stream(
                "POST", "/v1/chat/completions", content=PROMPT_BODY, headers=headers
            ) as resp:
                async for line in resp.aiter_lines():
                    if line.startswith("data: "):
                        payload = line[6:]
                        if payload == "[DONE]":
                            break
                        usage = loads(payload).get("usage")
                        if usage:
                            k = usage.get("completion_tokens", 0)
                            if k > n:
                                now = time.perf_counter()
                                if first is None:
                                    first = now
                                last = now
                                n = k
            end = time.time()
            if first is not None and n > 1:
                reqs.append(
                    (start, start + first - t0, end, first - t0, (last - first) / (n - 1), n)
                )

    async def main() -> None:
        limits = httpx.Limits(max_connections=a.streams, max_keepalive_connections=a.streams)
        async with httpx.AsyncClient(
            base_url=f"http://127.0.0.1:{a.port}", limits=limits, timeout=60.0
        ) as client:
            tasks = [asyncio.create_task(user(client)) for _ in range(a.streams)]
            await asyncio.sleep(a.warmup)
            t1, c1 = time.time(), _cpu_s()
            await asyncio.sleep(a.duration)
            t2, c2 = time.time(), _cpu_s()
            stop[0] = True
            out.update(_summarise(reqs, t1, t2, c2 - c1, a))
            for t in tasks:
                t.cancel()

    asyncio.run(main())
    return out


CLIENTS = {
    "specload": client_specload,
    "specload-py": client_specload,
    "fasthttp": client_fasthttp,
    "httpx": client_httpx,
}


def part_client(args: argparse.Namespace) -> list[dict]:
    from fixed_servers import Timing, free_port, server_command, start_server  # noqa: PLC0415

    port = free_port()
    timing = Timing(args.ttft, args.itl, args.tokens)
    server = start_server(server_command("c", port, timing), port, cpu=args.server_cpu)
    kinds = args.clients.split(",")
    res: dict[str, list[dict]] = {k: [] for k in kinds}
    try:
        for r in range(args.rounds):
            for kind in kinds:
                env = dict(os.environ)
                if kind == "specload-py":
                    env["SPECLOAD_FASTPATH"] = "0"
                cmd = [
                    "taskset",
                    "-c",
                    str(args.client_cpu),
                    sys.executable,
                    __file__,
                    "_client",
                    kind,
                    "--port",
                    str(port),
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
                ]
                proc = subprocess.run(
                    cmd,
                    env=env,
                    capture_output=True,
                    text=True,
                    check=False,
                    timeout=args.warmup + args.duration + 60,
                )
                if proc.returncode != 0:
                    print(proc.stderr[-2000:], file=sys.stderr)
                    raise SystemExit(f"client {kind} failed")
                row = json.loads(proc.stdout.strip().splitlines()[-1])
                res[kind].append(row)
                print(
                    f"round {r + 1} {kind:12s}: {row['tok_per_cpu_s']:8.0f} tok/CPU-s, "
                    f"{row['share']:.1%} of load, TTFT {row['ttft_err']:+.1%}, "
                    f"TPOT {row['tpot_err']:+.2%}, CPU {row['cpu_share']:.0%}, "
                    f"{row['requests']} reqs; load {load_avg()}",
                    flush=True,
                )
    finally:
        server.kill()
        server.wait()
    rows = []
    base = "specload"
    cond = (
        f"{args.streams} streams, fixed_server.c {args.ttft * 1000:.0f} ms TTFT / "
        f"{args.itl * 1000:.0f} ms ITL / {args.tokens} tokens; {args.warmup:g}+"
        f"{args.duration:g} s per run, {args.rounds} rounds interleaved; load {load_avg()}"
    )

    def med(rs: list[dict], key: str) -> float:
        vals = [x[key] for x in rs if x[key] == x[key]]  # a run without a whole request: NaN
        return statistics.median(vals) if vals else float("nan")

    def desc(rs: list[dict]) -> str:
        return (
            f"{med(rs, 'tok_per_cpu_s'):,.0f} tok/CPU-s; {med(rs, 'share'):.1%} of load; "
            f"TTFT {med(rs, 'ttft_err'):+.1%}, TPOT {med(rs, 'tpot_err'):+.2%}"
        )

    for kind in kinds:
        if kind == base or base not in res:
            continue
        # a run too short for any request to finish in it counts no tokens: no ratio
        ratios = [
            h["tok_per_cpu_s"] / lib["tok_per_cpu_s"]
            for h, lib in zip(res[base], res[kind], strict=True)
            if lib["tok_per_cpu_s"] > 0
        ] or [float("nan")]
        rows.append(
            {
                "part": f"load client vs {kind}",
                "hand": desc(res[base]),
                "lib": desc(res[kind]),
                "ratio": statistics.median(ratios),
                "spread": spread(ratios),
                "conditions": cond,
            }
        )
    return rows


# -- part 3: simulator HTTP layer vs aiohttp ----------------------------------------------------

EVENT = (
    b'data: {"id":"chatcmpl-bench","object":"chat.completion.chunk","created":0,'
    b'"model":"fixed-timing","choices":[{"index":0,"delta":{"content":" tok"},'
    b'"finish_reason":null}],"usage":{"prompt_tokens":16,"completion_tokens":1,'
    b'"total_tokens":17}}\n\n'
)
DONE = b"data: [DONE]\n\n"


def _ticker(itl: float, each_tick) -> object:
    """A coroutine calling ``each_tick()`` every ``itl`` seconds on absolute deadlines."""
    import asyncio  # noqa: PLC0415

    async def run() -> None:
        loop = asyncio.get_running_loop()
        due = loop.time()
        while True:
            due += itl
            delay = due - loop.time()
            if delay > 0:
                await asyncio.sleep(delay)
            else:
                due = loop.time()
            r = each_tick()
            if r is not None:
                await r

    return run()


def server_hand(a: argparse.Namespace) -> None:

    import uvloop  # noqa: PLC0415

    sys.path.insert(0, str(REPO))
    from simulator.http import serve  # noqa: PLC0415

    streams: dict = {}  # conn -> events left

    def handler(req, conn) -> None:
        if req.method == "POST":
            conn.start_stream()
            streams[conn] = a.chunks
        else:
            conn.respond(404, b"{}")

    def tick() -> None:
        for conn, left in list(streams.items()):
            if conn.closed:
                del streams[conn]
                continue
            conn.send(EVENT)
            if left == 1:
                del streams[conn]
                conn.send(DONE)
                conn.end_stream()
            else:
                streams[conn] = left - 1

    async def main() -> None:
        await serve(handler, "127.0.0.1", a.port)
        print("ready", flush=True)
        await _ticker(a.itl, tick)

    uvloop.run(main())


def server_aiohttp(a: argparse.Namespace) -> None:
    import asyncio  # noqa: PLC0415

    import uvloop  # noqa: PLC0415
    from aiohttp import web  # noqa: PLC0415

    streams: dict = {}  # response -> [events left, done future]

    async def handler(request: web.Request) -> web.StreamResponse:
        await request.read()
        resp = web.StreamResponse(headers={"Content-Type": "text/event-stream; charset=utf-8"})
        resp.enable_chunked_encoding()
        await resp.prepare(request)
        done = asyncio.get_running_loop().create_future()
        streams[resp] = [a.chunks, done]
        try:
            await done
            await resp.write_eof()
        except Exception:
            pass
        return resp

    async def tick() -> None:
        for resp, st in list(streams.items()):
            try:
                await resp.write(EVENT)
                st[0] -= 1
                if st[0] == 0:
                    await resp.write(DONE)
                    del streams[resp]
                    st[1].set_result(None)
            except Exception as exc:
                streams.pop(resp, None)
                if not st[1].done():
                    st[1].set_exception(exc)

    async def main() -> None:
        app = web.Application()
        app.router.add_post("/v1/chat/completions", handler)
        runner = web.AppRunner(app, access_log=None)
        await runner.setup()
        await web.TCPSite(runner, "127.0.0.1", a.port, backlog=2048).start()
        print("ready", flush=True)
        await _ticker(a.itl, tick)

    uvloop.run(main())


def _proc_cpu_s(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _sse_client(
    port: int, streams: int, warmup: float, duration: float
) -> tuple[int, float, float, int]:
    """256 kept-alive connections, each POSTing again when its stream ends; counts events.

    Returns (events in window, t1, t2, streams completed)."""
    import asyncio  # noqa: PLC0415

    import uvloop  # noqa: PLC0415

    request = (
        b"POST /v1/chat/completions HTTP/1.1\r\nHost: 127.0.0.1\r\n"
        b"Content-Type: application/json\r\nAccept: text/event-stream\r\n"
        b"Content-Length: %d\r\n\r\n%s" % (len(PROMPT_BODY), PROMPT_BODY)
    )
    count = [0, 0]

    class P(asyncio.Protocol):
        def connection_made(self, t) -> None:
            self.t = t
            self.tail = b""
            t.write(request)

        def data_received(self, data: bytes) -> None:
            count[0] += data.count(b"data: {")
            tail = self.tail + data[-8:]
            if tail.endswith(b"\r\n0\r\n\r\n"):
                count[1] += 1
                self.tail = b""
                self.t.write(request)
            else:
                self.tail = tail[-8:]

    out: list = []

    async def main() -> None:
        loop = asyncio.get_running_loop()
        conns = [await loop.create_connection(P, "127.0.0.1", port) for _ in range(streams)]
        await asyncio.sleep(warmup)
        e1, t1 = count[0], time.time()
        out.append(t1)
        await asyncio.sleep(duration)
        out.extend([count[0] - e1, time.time(), count[1]])
        for t, _ in conns:
            t.close()

    uvloop.run(main())
    t1, events, t2, done = out
    return events, t1, t2, done


def part_server(args: argparse.Namespace) -> list[dict]:
    import socket  # noqa: PLC0415

    aio_py = args.aiohttp_python
    servers = {
        "simulator/http.py": (sys.executable, "_server-hand"),
        "aiohttp": (aio_py, "_server-aiohttp"),
    }
    res: dict[str, list[dict]] = {k: [] for k in servers}
    for r in range(args.rounds):
        for name, (py, sub) in servers.items():
            with socket.socket() as s:
                s.bind(("127.0.0.1", 0))
                port = s.getsockname()[1]
            proc = subprocess.Popen(
                [
                    "taskset",
                    "-c",
                    str(args.server_cpu),
                    py,
                    __file__,
                    sub,
                    "--port",
                    str(port),
                    "--itl",
                    str(args.server_itl),
                    "--chunks",
                    str(args.chunks),
                ],
                stdout=subprocess.PIPE,
                text=True,
            )
            try:
                assert proc.stdout is not None
                assert proc.stdout.readline().strip() == "ready"
                # server CPU over the client's window: sampled at its edges
                events, t1, t2, done = _windowed(args, port, proc.pid)
            finally:
                proc.kill()
                proc.wait()
            cpu = events[1]
            row = {
                "us_per_event": cpu / max(events[0], 1) * 1e6,
                "share": events[0] / (t2 - t1) / (args.streams / args.server_itl),
                "cpu_share": cpu / (t2 - t1),
                "streams_done": done,
            }
            res[name].append(row)
            print(
                f"round {r + 1} {name:18s}: {row['us_per_event']:6.2f} µs server CPU/event, "
                f"{row['share']:.1%} of {args.streams / args.server_itl:.0f} events/s, "
                f"server CPU {row['cpu_share']:.0%}, {done} streams; load {load_avg()}",
                flush=True,
            )
    h, lib = res["simulator/http.py"], res["aiohttp"]
    ratios = [b["us_per_event"] / a["us_per_event"] for a, b in zip(h, lib, strict=True)]

    def desc(rs: list[dict]) -> str:
        return (
            f"{statistics.median(x['us_per_event'] for x in rs):.2f} µs CPU/event; "
            f"{statistics.median(x['share'] for x in rs):.1%} of offered, server CPU "
            f"{statistics.median(x['cpu_share'] for x in rs):.0%}"
        )

    return [
        {
            "part": "simulator HTTP layer vs aiohttp",
            "hand": desc(h),
            "lib": desc(lib),
            "ratio": statistics.median(ratios),
            "spread": spread(ratios),
            "conditions": f"{args.streams} streams x {args.chunks} events of {len(EVENT)} B, "
            f"one per {args.server_itl * 1000:g} ms, both on uvloop; "
            f"{args.warmup:g}+{args.duration:g} s per run, {args.rounds} rounds "
            f"interleaved; load {load_avg()}",
        }
    ]


def _windowed(
    args: argparse.Namespace, port: int, pid: int
) -> tuple[tuple[int, float], float, float, int]:
    """Run the SSE client here; a thread samples the server's CPU at the window's edges."""
    import threading  # noqa: PLC0415

    marks: dict[str, float] = {}

    def sampler() -> None:
        time.sleep(args.warmup)
        marks["c1"] = _proc_cpu_s(pid)
        time.sleep(args.duration)
        marks["c2"] = _proc_cpu_s(pid)

    th = threading.Thread(target=sampler, daemon=True)
    th.start()
    events, t1, t2, done = _sse_client(port, args.streams, args.warmup, args.duration)
    th.join()
    return (events, marks["c2"] - marks["c1"]), t1, t2, done


# -- main --------------------------------------------------------------------------------------


def main() -> int:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--parts", default="promtext,client,server")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--parse-iterations", type=int, default=40)
    ap.add_argument("--clients", default="specload,fasthttp,httpx,specload-py")
    ap.add_argument("--streams", type=int, default=256)
    ap.add_argument("--ttft", type=float, default=0.05)
    ap.add_argument("--itl", type=float, default=0.005)
    ap.add_argument("--tokens", type=int, default=400)
    ap.add_argument("--warmup", type=float, default=3.0)
    ap.add_argument("--duration", type=float, default=8.0)
    ap.add_argument("--chunks", type=int, default=100, help="part 3: events per stream")
    ap.add_argument("--server-itl", type=float, default=0.01, help="part 3: s between events")
    ap.add_argument("--server-cpu", type=int, default=1)
    ap.add_argument("--client-cpu", type=int, default=0)
    ap.add_argument(
        "--aiohttp-python", default=os.environ.get("AIOHTTP_PYTHON", "/tmp/aiohttp-venv/bin/python")
    )
    ap.add_argument("--out", default="", help="also write the table (Markdown) here")
    if len(sys.argv) > 1 and sys.argv[1].startswith("_"):
        sub = sys.argv.pop(1)
        kind = sys.argv.pop(1) if sub == "_client" else ""
        ap.add_argument("--port", type=int)
        a = ap.parse_args()
        if sub == "_client":
            print(json.dumps(CLIENTS[kind](a)), flush=True)
            os._exit(0)
        (server_hand if sub == "_server-hand" else server_aiohttp)(a)
        return 0
    args = ap.parse_args()
    os.sched_setaffinity(0, {args.client_cpu})
    print(f"start: load average {load_avg()}", flush=True)
    rows: list[dict] = []
    parts = args.parts.split(",")
    if "promtext" in parts:
        rows += part_promtext(args)
    if "client" in parts:
        rows += part_client(args)
    if "server" in parts:
        rows += part_server(args)
    lines = [
        "| part | hand-written | library | ratio (library cost / ours) | spread | conditions |",
        "|---|---|---|---|---|---|",
    ]
    for r in rows:
        lines.append(
            f"| {r['part']} | {r['hand']} | {r['lib']} | {r['ratio']:.2f}x | "
            f"{r['spread']} | {r['conditions']} |"
        )
    print("\n".join(lines))
    print(f"end: load average {load_avg()}")
    if args.out:
        Path(args.out).write_text("\n".join(lines) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
