"""What a step of an MoE decoder costs on a GPU: shared-sequence verification, padding, graph modes.

Pure PyTorch (no vLLM), so it runs wherever torch does; the forecast's MoE correction
(``specload/predict/moe.py``) reads the JSON it writes. A random-weight stack of ``--layers``
decoder layers of a large MoE's shape (defaults: hidden 7168, 256 routed experts + 1 shared,
top-8, expert intermediate 2048 — DeepSeek-V3's), bf16. Each layer: RMSNorm, a query
projection, attention of the step's rows over a fixed cache of ``--context`` positions, the
output projection, RMSNorm, the router's GEMM and top-k (computed and discarded: the routing
is *constructed*, so that the number of unique experts is an axis the script controls), the
shared expert, and the routed experts (only those woken are read). Weights of one routed
layer: 3·E·hidden·inter·2 bytes (22.5 GB at the defaults); ``--layers`` is capped to what fits
in 85% of the free device memory (the JSON says how many ran).

Measured (each time the median of ``--repeats`` timed steps after ``--warmup``, CUDA events on
a GPU, ``perf_counter`` on a CPU; one step = one forward of the whole stack):

``grid``        rows n = 1..9 by unique experts per layer U from top_k to min(E, n·top_k):
                time against (rows, U) — the forecast fits time = a + b·rows + e·U on it
``layouts``     n tokens as ONE sequence (consecutive tokens keep each of the previous
                token's experts with probability ``--overlap``, else draw fresh) against n
                sequences of one token (independent routing), n = 1..9: unique experts woken
                and time. The overlap is constructed: a real router's is a property of the
                trained model and its text, which random weights do not have
``padding``     n = 1..16 rows against the same rows padded to the next capture size
                (``--capture-sizes``), the padded rows routed like row 0 (no new experts:
                the rows' own cost) or independently (the worst case: new experts too)
``graph_modes`` one full CUDA graph of the step against piecewise graphs (per layer, the
                attention run eagerly between them, as vLLM's piecewise mode does) against
                eager, at ``--batch-sizes``

Two implementations of the routed experts (``impl``): ``loop``, one GEMM per woken expert
(plain PyTorch, any build), and ``grouped``, ``torch._grouped_mm`` — one grouped GEMM per
projection, as a fused MoE kernel does — used only once it matched ``loop`` on one step.
``--main-impl`` (default ``loop``) runs the first grid and the layouts, padding and graph-mode
sections; each other implementation in ``--impls`` then runs a grid of its own, last.

A global deadline (``--deadline-s``, default 450) stops the run between measurements and
writes what was measured, naming what was skipped and why; the JSON is also rewritten after
every section. A measurement that fails (out of memory, an operator missing) is skipped with
its error, never dropped silently.

JSON (``format`` = ``specload-moe-step/1``)::

    {"format": "specload-moe-step/1", "complete": bool, "elapsed_s": float,
     "device": "NVIDIA H200" | "cpu", "device_type": "cuda" | "cpu", "torch": "2.x",
     "timer": "cuda_events" | "perf_counter", "dtype": "bfloat16",
     "shape": {"hidden", "experts", "top_k", "shared", "expert_intermediate", "layers",
               "layers_requested", "heads", "head_dim", "context"},
     "settings": {"repeats", "warmup", "overlap", "seed", "deadline_s", "capture_sizes",
                  "batch_sizes", "impls", "main_impl", "mode", "quick", "notes"},
     "units": {field: unit},
     "measurements": {"grid": [...], "layouts": [...], "padding": [...], "graph_modes": [...]},
     "skipped": [{"section", "what", "why"}]}

Every measurement row has ``time_ms`` / ``min_ms`` / ``max_ms`` (ms per step of the whole
stack: median, fastest, slowest of the repeats) and ``unique_experts`` (routed experts woken
per layer, the mean over the layers), plus its section's keys: grid {impl, mode, rows};
layouts {layout: "one_sequence" | "independent", tokens, sequences, overlap}; padding {rows,
padded_rows, pad_routing: "none" | "same" | "fresh", impl, mode}; graph_modes {rows, mode:
"full" | "piecewise" | "eager", impl}.

    python bench/gpu/moe_step.py --out moe_step.json                  # a GPU, the defaults
    python bench/gpu/moe_step.py --device cpu --quick --out /tmp/m.json  # a smoke run

This module imports torch only inside the functions that run the model, so the JSON writer
and the routing constructors can be imported where torch is not installed (the unit tests).
It imports nothing from ``specload``; the format string is duplicated in
``specload/predict/moe.py`` and a test checks that both agree.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import random
import statistics
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

FORMAT = "specload-moe-step/1"

UNITS = {
    "time_ms": "milliseconds per step of the whole stack, median of the repeats",
    "min_ms": "milliseconds, the fastest repeat",
    "max_ms": "milliseconds, the slowest repeat",
    "unique_experts": "routed experts woken per layer (mean over the layers)",
    "rows": "token rows in the step",
    "tokens": "tokens verified in the step",
    "sequences": "sequences the step's tokens belong to",
    "padded_rows": "rows computed after padding to the capture size",
    "overlap": "probability that a token keeps each expert of the previous token",
    "elapsed_s": "seconds, the whole run",
}


@dataclass(frozen=True)
class Shape:
    hidden: int = 7168
    experts: int = 256
    top_k: int = 8
    shared: int = 1
    expert_intermediate: int = 2048
    layers: int = 3
    heads: int = 16
    head_dim: int = 128
    context: int = 1024

    def layer_bytes(self, itemsize: int = 2) -> int:
        """Bytes of one layer's weights."""
        routed = 3 * self.experts * self.hidden * self.expert_intermediate
        shared = 3 * self.shared * self.hidden * self.expert_intermediate
        attn = 2 * self.hidden * self.heads * self.head_dim + self.hidden * self.experts
        cache = 2 * self.heads * self.context * self.head_dim
        return (routed + shared + attn + cache) * itemsize


QUICK = Shape(
    hidden=256,
    experts=16,
    top_k=4,
    shared=1,
    expert_intermediate=128,
    layers=2,
    heads=4,
    head_dim=32,
    context=128,
)


# --- routing, constructed (no torch) -------------------------------------------------------

Routes = list[list[int]]  # per row, its top_k distinct experts


def route_independent(n: int, experts: int, top_k: int, rng: random.Random) -> Routes:
    """n independent tokens: each picks top_k distinct experts uniformly."""
    return [rng.sample(range(experts), top_k) for _ in range(n)]


def route_sequence(n: int, experts: int, top_k: int, overlap: float, rng: random.Random) -> Routes:
    """n consecutive tokens of one sequence: each keeps every expert of the previous token
    with probability ``overlap`` and draws the rest uniformly from the experts it does not
    hold yet."""
    routes: Routes = []
    for _ in range(n):
        if not routes:
            routes.append(rng.sample(range(experts), top_k))
            continue
        kept = [e for e in routes[-1] if rng.random() < overlap]
        free = [e for e in range(experts) if e not in kept]
        routes.append(kept + rng.sample(free, top_k - len(kept)))
    return routes


def route_pool(n: int, unique: int, experts: int, top_k: int, rng: random.Random) -> Routes:
    """n rows that wake exactly ``unique`` distinct experts (top_k <= unique <= n·top_k and
    <= experts): a random pool of that many, dealt round-robin, top_k distinct per row."""
    if not top_k <= unique <= min(experts, n * top_k):
        raise ValueError(f"unique experts {unique} outside {top_k}..{min(experts, n * top_k)}")
    pool = rng.sample(range(experts), unique)
    return [[pool[(r * top_k + j) % unique] for j in range(top_k)] for r in range(n)]


def pad_routes(
    routes: Routes, padded: int, how: str, experts: int, top_k: int, rng: random.Random
) -> Routes:
    """``routes`` padded to ``padded`` rows: the extra rows route like row 0 (``same``) or
    independently (``fresh``)."""
    extra = padded - len(routes)
    if how == "same":
        return routes + [list(routes[0]) for _ in range(extra)]
    return routes + route_independent(extra, experts, top_k, rng)


def unique_experts(routes: Routes) -> int:
    return len({e for row in routes for e in row})


def grid_points(n: int, experts: int, top_k: int, count: int) -> list[int]:
    """Unique-expert counts for n rows: from top_k to min(E, n·top_k), ``count`` points."""
    lo, hi = top_k, min(experts, n * top_k)
    if hi == lo:
        return [lo]
    return sorted({round(lo + (hi - lo) * i / (count - 1)) for i in range(count)})


def next_capture(n: int, sizes: Sequence[int]) -> int:
    return next((s for s in sorted(sizes) if s >= n), n)


# --- the result, its writer (no torch) -----------------------------------------------------


class Recorder:
    """The run's JSON document, rewritten to ``out`` after every section."""

    def __init__(self, out: Path, head: dict[str, Any]) -> None:
        self.out = out
        self.started = time.monotonic()
        self.doc: dict[str, Any] = {
            "format": FORMAT,
            "complete": False,
            "elapsed_s": 0.0,
            **head,
            "units": UNITS,
            "measurements": {"grid": [], "layouts": [], "padding": [], "graph_modes": []},
            "skipped": [],
        }

    def add(self, section: str, row: dict[str, Any]) -> None:
        self.doc["measurements"][section].append(row)

    def skip(self, section: str, what: str, why: str) -> None:
        self.doc["skipped"].append({"section": section, "what": what, "why": why})

    def write(self, complete: bool = False) -> None:
        self.doc["complete"] = complete
        self.doc["elapsed_s"] = round(time.monotonic() - self.started, 3)
        write_result(self.out, self.doc)
        done = sum(len(rows) for rows in self.doc["measurements"].values())
        print(f"# {done} measurements at {self.doc['elapsed_s']:.0f} s", flush=True)


def write_result(path: Path, doc: dict[str, Any]) -> None:
    """Write the document atomically (a reader never sees half a file)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(json.dumps(doc, indent=1) + "\n")
    os.replace(tmp, path)


# --- the model (torch) ---------------------------------------------------------------------


class Stack:
    """Random weights of ``shape.layers`` layers and the step's forward pass."""

    def __init__(self, shape: Shape, device: str, dtype: Any, seed: int) -> None:
        import torch  # noqa: PLC0415 (deferred: the writer imports without torch)

        self.torch = torch
        self.shape = shape
        self.device = device
        self.dtype = dtype
        gen = torch.Generator(device=device)
        gen.manual_seed(seed)
        s = shape

        def weight(*dims: int) -> Any:
            w = torch.empty(*dims, device=device, dtype=dtype)
            return w.normal_(0.0, 1.0 / math.sqrt(dims[-1]), generator=gen)

        hd = s.heads * s.head_dim
        inter = s.expert_intermediate
        self.layers = []
        for _ in range(s.layers):
            self.layers.append(
                {
                    "norm1": torch.ones(s.hidden, device=device, dtype=dtype),
                    "norm2": torch.ones(s.hidden, device=device, dtype=dtype),
                    "wq": weight(hd, s.hidden),
                    "wo": weight(s.hidden, hd),
                    "k": weight(1, s.heads, s.context, s.head_dim),
                    "v": weight(1, s.heads, s.context, s.head_dim),
                    "router": weight(s.experts, s.hidden),
                    # nn.Linear layout (out, in): F.linear per expert, and the transposed
                    # view is what torch._grouped_mm wants (stride 1 along its K).
                    "w13": weight(s.experts, 2 * inter, s.hidden),
                    "w2": weight(s.experts, s.hidden, inter),
                    "s13": weight(s.shared, 2 * inter, s.hidden) if s.shared else None,
                    "s2": weight(s.shared, s.hidden, inter) if s.shared else None,
                }
            )

    # The routing of one step, as index tensors built before timing (and before capture).
    def plan(self, routes_per_layer: Sequence[Routes], impl: str) -> list[Any]:
        torch = self.torch
        k = self.shape.top_k
        plans: list[Any] = []
        for routes in routes_per_layer:
            n = len(routes)
            if impl == "loop":
                by_expert: dict[int, list[int]] = {}
                for r, row in enumerate(routes):
                    for e in row:
                        by_expert.setdefault(e, []).append(r)
                plans.append(
                    [
                        (e, torch.tensor(rows, device=self.device, dtype=torch.long))
                        for e, rows in sorted(by_expert.items())
                    ]
                )
            else:  # grouped: slots sorted by expert, each group padded to 8 rows (alignment)
                src: list[int] = []
                counts = [0] * self.shape.experts
                slots = sorted((e, r) for r, row in enumerate(routes) for e in row)
                for e in range(self.shape.experts):
                    rows = [r for ee, r in slots if ee == e]
                    pad = (-len(rows)) % 8
                    src += rows + [n] * pad  # row n: a zero row, its output discarded
                    counts[e] = len(rows) + pad
                offs = torch.tensor(
                    [sum(counts[: e + 1]) for e in range(self.shape.experts)],
                    device=self.device,
                    dtype=torch.int32,
                )
                idx = torch.tensor(src, device=self.device, dtype=torch.long)
                gate = (idx < n).to(self.dtype).unsqueeze(1) / k
                plans.append((idx, offs, gate))
        return plans

    def rmsnorm(self, x: Any, w: Any) -> Any:
        xf = x.float()
        return (xf * self.torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + 1e-6)).to(x.dtype) * w

    def pre(self, layer: dict[str, Any], x: Any) -> Any:
        return self.torch.nn.functional.linear(self.rmsnorm(x, layer["norm1"]), layer["wq"])

    def attention(self, layer: dict[str, Any], q: Any) -> Any:
        s = self.shape
        qh = q.view(1, q.shape[0], s.heads, s.head_dim).transpose(1, 2)
        a = self.torch.nn.functional.scaled_dot_product_attention(qh, layer["k"], layer["v"])
        return a.transpose(1, 2).reshape(q.shape[0], s.heads * s.head_dim)

    def post(self, layer: dict[str, Any], x: Any, a: Any, plan: Any, impl: str) -> Any:
        torch = self.torch
        F = torch.nn.functional
        inter = self.shape.expert_intermediate
        x = x + F.linear(a, layer["wo"])
        h = self.rmsnorm(x, layer["norm2"])
        torch.topk(F.linear(h, layer["router"]), self.shape.top_k)  # the router's cost
        y = torch.zeros_like(h)
        for j in range(self.shape.shared):
            t = F.linear(h, layer["s13"][j])
            y = y + F.linear(F.silu(t[:, :inter]) * t[:, inter:], layer["s2"][j])
        if impl == "loop":
            for e, rows in plan:
                t = F.linear(h.index_select(0, rows), layer["w13"][e])
                out = F.linear(F.silu(t[:, :inter]) * t[:, inter:], layer["w2"][e])
                y.index_add_(0, rows, out, alpha=1.0 / self.shape.top_k)
        else:
            idx, offs, gate = plan
            hz = torch.cat([h, torch.zeros_like(h[:1])])
            t = torch._grouped_mm(
                hz.index_select(0, idx), layer["w13"].transpose(-2, -1), offs=offs
            )
            act = F.silu(t[:, :inter]) * t[:, inter:]
            out = torch._grouped_mm(act, layer["w2"].transpose(-2, -1), offs=offs) * gate
            yz = torch.cat([y, torch.zeros_like(y[:1])])
            yz.index_add_(0, idx, out)
            y = yz[:-1]
        return x + y

    def step(self, x: Any, plans: Sequence[Any], impl: str) -> Any:
        for layer, plan in zip(self.layers, plans, strict=True):
            x = self.post(layer, x, self.attention(layer, self.pre(layer, x)), plan, impl)
        return x


class Runner:
    """Builds the callable one timed step runs, per graph mode, and times it."""

    def __init__(self, stack: Stack, warmup: int, repeats: int) -> None:
        self.stack = stack
        self.torch = stack.torch
        self.cuda = stack.device.startswith("cuda")
        self.warmup = warmup
        self.repeats = repeats

    def inputs(self, rows: int) -> Any:
        s = self.stack
        return self.torch.randn(rows, s.shape.hidden, device=s.device, dtype=s.dtype)

    def build(self, routes_per_layer: Sequence[Routes], impl: str, mode: str) -> Callable[[], Any]:
        torch = self.torch
        stack = self.stack
        plans = stack.plan(routes_per_layer, impl)
        x = self.inputs(len(routes_per_layer[0]))
        if mode == "eager":
            return lambda: stack.step(x, plans, impl)
        if not self.cuda:
            raise RuntimeError("CUDA graphs need a CUDA device")
        side = torch.cuda.Stream()
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):
            for _ in range(2):  # warm-up before capture (lazy inits, autotuning)
                stack.step(x, plans, impl)
        torch.cuda.current_stream().wait_stream(side)
        if mode == "full":
            graph = torch.cuda.CUDAGraph()
            with torch.cuda.graph(graph):
                stack.step(x, plans, impl)
            self._keep = (graph, x, plans)
            return graph.replay
        # piecewise: per layer a graph before the attention and one after it; the attention
        # runs eagerly between them and writes into a static buffer, as vLLM's does.
        pool = torch.cuda.graph_pool_handle()
        pieces: list[Callable[[], Any]] = []
        cur = x
        keep: list[Any] = [x, plans]
        for layer, plan in zip(stack.layers, plans, strict=True):
            g1 = torch.cuda.CUDAGraph()
            with torch.cuda.graph(g1, pool=pool):
                q = stack.pre(layer, cur)
            attn_out = torch.empty_like(q)

            def attend(layer: dict[str, Any] = layer, q: Any = q, out: Any = attn_out) -> None:
                out.copy_(stack.attention(layer, q))

            attend()  # its output feeds the next capture
            g2 = torch.cuda.CUDAGraph()
            with torch.cuda.graph(g2, pool=pool):
                cur = stack.post(layer, cur, attn_out, plan, impl)
            pieces += [g1.replay, attend, g2.replay]
            keep += [g1, g2, q, attn_out, cur]
        self._keep = keep

        def run() -> None:
            for piece in pieces:
                piece()

        return run

    def time(self, fn: Callable[[], Any]) -> dict[str, float]:
        torch = self.torch
        with torch.inference_mode():
            for _ in range(self.warmup):
                fn()
            times: list[float] = []
            if self.cuda:
                torch.cuda.synchronize()
                events = [
                    (torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True))
                    for _ in range(self.repeats)
                ]
                for start, end in events:
                    start.record()
                    fn()
                    end.record()
                torch.cuda.synchronize()
                times = [start.elapsed_time(end) for start, end in events]
            else:
                for _ in range(self.repeats):
                    t0 = time.perf_counter()
                    fn()
                    times.append((time.perf_counter() - t0) * 1e3)
        return {
            "time_ms": round(statistics.median(times), 5),
            "min_ms": round(min(times), 5),
            "max_ms": round(max(times), 5),
        }

    def measure(self, routes_per_layer: Sequence[Routes], impl: str, mode: str) -> dict[str, Any]:
        torch = self.torch
        with torch.inference_mode():
            fn = self.build(routes_per_layer, impl, mode)
        timing = self.time(fn)
        self._keep = None
        mean_unique = statistics.fmean(unique_experts(r) for r in routes_per_layer)
        return {"unique_experts": round(mean_unique, 4), **timing}


# --- the run -------------------------------------------------------------------------------


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--out", type=Path, required=True, help="the JSON file to write")
    p.add_argument("--device", default="cuda", help="cuda (default), cuda:N or cpu")
    p.add_argument("--quick", action="store_true", help="a tiny shape, few repeats (smoke)")
    d = Shape()
    p.add_argument("--hidden", type=int, default=None, help=f"default {d.hidden}")
    p.add_argument("--experts", type=int, default=None, help=f"default {d.experts}")
    p.add_argument("--top-k", type=int, default=None, help=f"default {d.top_k}")
    p.add_argument("--shared", type=int, default=None, help=f"default {d.shared}")
    p.add_argument(
        "--expert-intermediate", type=int, default=None, help=f"default {d.expert_intermediate}"
    )
    p.add_argument("--layers", type=int, default=None, help=f"default {d.layers} (capped to fit)")
    p.add_argument("--context", type=int, default=None, help=f"default {d.context}")
    p.add_argument("--repeats", type=int, default=None, help="default 25 (quick: 5)")
    p.add_argument("--warmup", type=int, default=None, help="default 5 (quick: 2)")
    p.add_argument("--overlap", type=float, default=0.5, help="one sequence's expert reuse")
    p.add_argument("--max-tokens", type=int, default=9, help="k+1 up to this (default 9)")
    p.add_argument("--grid-points", type=int, default=4, help="unique-expert values per n")
    p.add_argument("--layout-draws", type=int, default=3, help="routings drawn per layout")
    p.add_argument("--pad-max", type=int, default=16, help="padding: rows 1..this")
    p.add_argument("--capture-sizes", default="1,2,4,8,16,24,32", help="padding targets")
    p.add_argument("--batch-sizes", default="1,4,16,64", help="graph modes: rows")
    p.add_argument("--impls", default=None, help="grids: loop[,grouped] (default: both)")
    p.add_argument(
        "--main-impl",
        choices=("loop", "grouped"),
        default="loop",
        help="the routed experts in the layouts, padding and graph-mode sections",
    )
    p.add_argument("--deadline-s", type=float, default=450.0, help="stop and write by then")
    p.add_argument("--seed", type=int, default=0)
    return p.parse_args(argv)


def make_shape(args: argparse.Namespace) -> Shape:
    base = QUICK if args.quick else Shape()
    over = {
        "hidden": args.hidden,
        "experts": args.experts,
        "top_k": args.top_k,
        "shared": args.shared,
        "expert_intermediate": args.expert_intermediate,
        "layers": args.layers,
        "context": args.context,
    }
    return Shape(**{**asdict(base), **{k: v for k, v in over.items() if v is not None}})


def fit_layers(shape: Shape, device: str) -> tuple[Shape, str | None]:
    """Cap the layers to 85% of the free device memory."""
    import torch  # noqa: PLC0415 (deferred, as in Stack)

    if not device.startswith("cuda"):
        return shape, None
    free, _total = torch.cuda.mem_get_info(torch.device(device))
    fits = int(0.85 * free // shape.layer_bytes())
    if fits < 1:
        raise SystemExit(
            f"moe_step: one layer needs {shape.layer_bytes() / 1e9:.1f} GB, "
            f"{free / 1e9:.1f} GB free: use fewer --experts or a smaller --hidden"
        )
    if fits < shape.layers:
        note = f"layers capped from {shape.layers} to {fits} to fit {free / 1e9:.0f} GB free"
        return Shape(**{**asdict(shape), "layers": fits}), note
    return shape, None


def run(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    import torch  # noqa: PLC0415 (deferred, as in Stack)

    deadline = time.monotonic() + args.deadline_s
    device = args.device
    if device.startswith("cuda") and not torch.cuda.is_available():
        raise SystemExit("moe_step: no CUDA device here; use --device cpu (with --quick)")
    cuda = device.startswith("cuda")
    requested = make_shape(args)
    shape, cap_note = fit_layers(requested, device)
    repeats = args.repeats or (5 if args.quick else 25)
    warmup = args.warmup or (2 if args.quick else 5)
    impls = (args.impls or "loop,grouped").split(",")
    capture_sizes = [int(v) for v in args.capture_sizes.split(",")]
    batch_sizes = [int(v) for v in args.batch_sizes.split(",")]
    mode = "full" if cuda else "eager"  # the decode path: one full graph per step on a GPU
    name = torch.cuda.get_device_name(torch.device(device)) if cuda else "cpu"
    rec = Recorder(
        args.out,
        {
            "device": name,
            "device_type": "cuda" if cuda else "cpu",
            "torch": torch.__version__,
            "timer": "cuda_events" if cuda else "perf_counter",
            "dtype": "bfloat16",
            "shape": {**asdict(shape), "layers_requested": requested.layers},
            "settings": {
                "repeats": repeats,
                "warmup": warmup,
                "overlap": args.overlap,
                "seed": args.seed,
                "deadline_s": args.deadline_s,
                "capture_sizes": capture_sizes,
                "batch_sizes": batch_sizes,
                "impls": impls,
                "mode": mode,
                "quick": args.quick,
                "notes": [cap_note] if cap_note else [],
            },
        },
    )
    if not cuda:
        torch.set_num_threads(max(1, min(torch.get_num_threads(), os.cpu_count() or 1)))
    t0 = time.monotonic()
    stack = Stack(shape, device, torch.bfloat16, args.seed)
    if cuda:
        torch.cuda.synchronize()
    print(
        f"# {name}, torch {torch.__version__}: {shape.layers} layers "
        f"({shape.layer_bytes() / 1e9:.2f} GB each), built in {time.monotonic() - t0:.1f} s",
        flush=True,
    )
    runner = Runner(stack, warmup, repeats)
    rng = random.Random(args.seed)
    E, K, L = shape.experts, shape.top_k, shape.layers

    def attempt(section: str, what: str, make: Callable[[], dict[str, Any]]) -> None:
        if time.monotonic() > deadline:
            rec.skip(section, what, "deadline")
            return
        try:
            rec.add(section, make())
        except Exception as err:  # an OOM, an operator this build lacks: said, not hidden
            rec.skip(section, what, f"{type(err).__name__}: {' '.join(str(err).split())[:300]}")
            if cuda:
                torch.cuda.synchronize()
                torch.cuda.empty_cache()

    def grid(impl: str) -> None:
        for n in range(1, args.max_tokens + 1):
            for u in grid_points(n, E, K, args.grid_points):
                routes = [route_pool(n, u, E, K, rng) for _ in range(L)]
                attempt(
                    "grid",
                    f"impl={impl} rows={n} unique={u}",
                    lambda r=routes, n=n: {
                        "impl": impl,
                        "mode": mode,
                        "rows": n,
                        **runner.measure(r, impl, mode),
                    },
                )
        rec.write()

    checked: dict[str, bool] = {}

    def impl_ok(impl: str) -> bool:
        """The grouped path is used only once it equals the per-expert loop (checked once)."""
        if impl == "loop":
            return True
        if impl not in checked:
            checked[impl] = False
            if not hasattr(torch, "_grouped_mm"):
                rec.skip("grid", "impl=grouped", f"torch {torch.__version__} has no _grouped_mm")
                return False
            try:
                routes = [route_independent(3, E, K, rng) for _ in range(L)]
                with torch.inference_mode():
                    x = runner.inputs(3)
                    a = stack.step(x, stack.plan(routes, "loop"), "loop").float()
                    b = stack.step(x, stack.plan(routes, "grouped"), "grouped").float()
                err = float((a - b).abs().max() / a.abs().max().clamp_min(1e-6))
                if not err < 0.05:
                    raise RuntimeError(f"grouped differs from loop by {err:.3f} (relative)")
            except Exception as e:
                why = f"{type(e).__name__}: {' '.join(str(e).split())[:300]}"
                rec.skip("grid", "impl=grouped", why)
            else:
                checked[impl] = True
        return checked[impl]

    # The implementation of the layouts, padding and graph-mode sections (and the first grid).
    main = args.main_impl if impl_ok(args.main_impl) else "loop"
    if main != args.main_impl:
        rec.doc["settings"]["notes"].append(f"--main-impl {args.main_impl} failed: loop instead")
    rec.doc["settings"]["main_impl"] = main
    grid(main)

    for n in range(1, args.max_tokens + 1):
        for layout in ("one_sequence", "independent"):
            for draw in range(args.layout_draws):
                if layout == "one_sequence":
                    routes = [route_sequence(n, E, K, args.overlap, rng) for _ in range(L)]
                else:
                    routes = [route_independent(n, E, K, rng) for _ in range(L)]
                attempt(
                    "layouts",
                    f"{layout} tokens={n} draw={draw}",
                    lambda r=routes, n=n, layout=layout, draw=draw: {
                        "layout": layout,
                        "tokens": n,
                        "sequences": 1 if layout == "one_sequence" else n,
                        "overlap": args.overlap if layout == "one_sequence" else None,
                        "draw": draw,
                        "impl": main,
                        "mode": mode,
                        **runner.measure(r, main, mode),
                    },
                )
    rec.write()

    for n in range(1, args.pad_max + 1):
        base = [route_independent(n, E, K, rng) for _ in range(L)]
        padded = next_capture(n, capture_sizes)
        for how in ("none", "same", "fresh"):
            if how != "none" and padded == n:
                continue
            routes = (
                base if how == "none" else [pad_routes(b, padded, how, E, K, rng) for b in base]
            )
            attempt(
                "padding",
                f"rows={n} pad={how}",
                lambda r=routes, n=n, how=how, p=padded: {
                    "rows": n,
                    "padded_rows": p if how != "none" else n,
                    "pad_routing": how,
                    "impl": main,
                    "mode": mode,
                    **runner.measure(r, main, mode),
                },
            )
    rec.write()

    for n in batch_sizes:
        routes = [route_independent(n, E, K, rng) for _ in range(L)]
        for gm in ("full", "piecewise", "eager"):
            if gm != "eager" and not cuda:
                rec.skip("graph_modes", f"rows={n} mode={gm}", "CUDA graphs need a CUDA device")
                continue
            attempt(
                "graph_modes",
                f"rows={n} mode={gm}",
                lambda r=routes, n=n, gm=gm: {
                    "rows": n,
                    "mode": gm,
                    "impl": main,
                    **runner.measure(r, main, gm),
                },
            )
    rec.write()

    for impl in impls:
        if impl != main and impl_ok(impl):
            grid(impl)

    rec.write(complete=not any(s["why"] == "deadline" for s in rec.doc["skipped"]))
    print_table(rec.doc)
    print(f"# wrote {args.out} ({rec.doc['elapsed_s']:.0f} s)", flush=True)
    return 0


def print_table(doc: dict[str, Any]) -> None:
    m = doc["measurements"]
    print("\n## layouts: n tokens of one sequence vs n sequences of one token (median over draws)")
    print(f"{'n':>3} {'seq U':>7} {'seq ms':>9} {'indep U':>8} {'indep ms':>9}")
    by: dict[tuple[int, str], list[dict[str, Any]]] = {}
    for r in m["layouts"]:
        by.setdefault((r["tokens"], r["layout"]), []).append(r)
    for n in sorted({t for t, _ in by}):
        cells = []
        for layout in ("one_sequence", "independent"):
            rows = by.get((n, layout), [])
            u = statistics.fmean(r["unique_experts"] for r in rows) if rows else float("nan")
            t = statistics.median(r["time_ms"] for r in rows) if rows else float("nan")
            cells += [u, t]
        print(f"{n:>3} {cells[0]:>7.1f} {cells[1]:>9.3f} {cells[2]:>8.1f} {cells[3]:>9.3f}")
    print("\n## padding: rows n, padded to P (pad rows routed like row 0 / independently)")
    pad: dict[int, dict[str, dict[str, Any]]] = {}
    for r in m["padding"]:
        pad.setdefault(r["rows"], {})[r["pad_routing"]] = r
    print(f"{'n':>3} {'P':>3} {'n ms':>9} {'same ms':>9} {'fresh ms':>9}")
    for n, cell in sorted(pad.items()):
        p = max(c["padded_rows"] for c in cell.values())
        vals = [
            cell[h]["time_ms"] if h in cell else float("nan") for h in ("none", "same", "fresh")
        ]
        print(f"{n:>3} {p:>3} {vals[0]:>9.3f} {vals[1]:>9.3f} {vals[2]:>9.3f}")
    print("\n## graph modes")
    for r in m["graph_modes"]:
        u = r["unique_experts"]
        print(f"rows {r['rows']:>3} {r['mode']:>9}: {r['time_ms']:.3f} ms (U {u:.1f})")
    print("\n## grid: time (ms) by rows and unique experts per layer")
    for r in m["grid"]:
        print(
            f"{r['impl']:>7} rows {r['rows']:>2} U {r['unique_experts']:>5.1f}: {r['time_ms']:.3f}"
        )
    for s in doc["skipped"]:
        print(f"skipped: {s['section']} {s['what']}: {s['why']}")


if __name__ == "__main__":
    sys.exit(run())
