"""``specload demo``: the whole story on simulated vLLM variants, no GPU needed.

Stages, in order (each a small function over a shared :class:`DemoContext`, so
later stages - exporter, Prometheus, boards, a reload watched live - slot in):

1. start simulated ``baseline`` and ``ngram`` servers (``specload sim``) as processes;
2. sweep each with ``specload run`` (closed loop, a few levels, short windows);
3. compare them (``specload compare``): ngram decodes slower, with its acceptance rate;
4. tell where the results and plots are.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from specload.errors import UsageError
from specload.results.writer import prepare_out_dir
from specload.sweep.ports import free_port
from specload.urls import parse_server_url

VARIANTS = ("baseline", "ngram")


@dataclass
class Target:
    variant: str
    port: int
    process: subprocess.Popen[bytes] | None = None
    log_path: Path | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"


@dataclass
class DemoContext:
    args: argparse.Namespace
    out: Path
    targets: list[Target] = field(default_factory=list)
    results: dict[str, Path] = field(default_factory=dict)
    comparison: Path | None = None
    cleanups: list[Callable[[], None]] = field(default_factory=list)

    def say(self, text: str) -> None:
        print(text, flush=True)


Stage = Callable[[DemoContext], None]


def _specload(*argv: str) -> list[str]:
    return [sys.executable, "-m", "specload", *argv]


def start_targets(ctx: DemoContext) -> None:
    args = ctx.args
    scale = f", time scale {args.time_scale:g}x (ratios kept)" if args.time_scale != 1 else ""
    ctx.say(f"== 1. starting simulated vLLM servers: {', '.join(VARIANTS)}{scale}")
    for variant in VARIANTS:
        target = Target(variant, free_port())
        target.log_path = ctx.out / f"sim-{variant}.log"
        cmd = _specload(
            "sim",
            "--variant",
            variant,
            "--host",
            "127.0.0.1",
            "--port",
            str(target.port),
            "--time-scale",
            f"{args.time_scale:g}",
            "--seed",
            str(args.seed),
        )
        log = target.log_path.open("wb")
        target.process = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT)
        log.close()
        ctx.targets.append(target)
        ctx.cleanups.append(_stopper(target))
    from specload.sweep import readiness  # noqa: PLC0415 (httpx)

    for target in ctx.targets:
        ready = readiness.wait_ready(parse_server_url(target.url), timeout_s=60)
        ctx.say(f"   {target.variant}: {target.url} ready ({ready.models[0]})")


def _stopper(target: Target) -> Callable[[], None]:
    return lambda: _stop(target)


def _stop(target: Target) -> None:
    proc = target.process
    if proc is None or proc.poll() is not None:
        return
    proc.terminate()
    try:
        proc.wait(10)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()


def sweep_targets(ctx: DemoContext) -> None:
    args = ctx.args
    ctx.say(
        f"== 2. sweeping each variant: concurrency {args.concurrency}, warm-up {args.warmup}, "
        f"window {args.duration} per level, max_tokens {args.max_tokens}"
    )
    for target in ctx.targets:
        out = ctx.out / target.variant
        ctx.say(f"-- {target.variant}")
        cmd = _specload(
            "run",
            "--host",
            target.url,
            "--variant",
            target.variant,
            "--concurrency",
            args.concurrency,
            "--warmup",
            args.warmup,
            "--duration",
            args.duration,
            "--max-tokens",
            str(args.max_tokens),
            "--prompt-seed",
            str(args.seed),
            "--out",
            str(out),
            "--metrics-address",
            "off",
            "--progress",
            "auto" if sys.stdout.isatty() else "plain",
        )
        code = subprocess.call(cmd)
        if code != 0:
            raise UsageError(f"demo: the sweep of {target.variant} failed (exit {code}); see {out}")
        ctx.results[target.variant] = out


def compare_results(ctx: DemoContext) -> None:
    from specload.compare.model import compare_runs, load_run  # noqa: PLC0415 (numpy)
    from specload.compare.plots import write_comparison_plots  # noqa: PLC0415 (matplotlib)
    from specload.compare.report import comparison_markdown, headline  # noqa: PLC0415
    from specload.results.writer import atomic_write_text  # noqa: PLC0415

    ctx.say("== 3. comparing ngram against baseline (95% bootstrap confidence intervals)")
    runs = [load_run(ctx.results[v]) for v in VARIANTS]
    comp = compare_runs(runs)
    out = ctx.out / "comparison"
    out.mkdir(exist_ok=True)
    atomic_write_text(out / "comparison.md", comparison_markdown(comp))
    write_comparison_plots(runs, out)
    ctx.comparison = out
    for line in headline(comp):
        ctx.say("   " + line)


def tell_where(ctx: DemoContext) -> None:
    ctx.say("== 4. results")
    for variant, path in ctx.results.items():
        ctx.say(
            f"   {variant}: {path}/summary.md, summary.json, requests.jsonl, tpot.png, "
            "throughput.png"
        )
    if ctx.comparison is not None:
        ctx.say(
            f"   comparison: {ctx.comparison}/comparison.md, compare_tpot.png, "
            "compare_throughput.png"
        )
    ctx.say("   next: specload baseline export " + str(ctx.results.get("baseline", "DIR")))


STAGES: list[Stage] = [start_targets, sweep_targets, compare_results, tell_where]


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--out",
        default="demo-results",
        metavar="DIR",
        help="where results go (default demo-results/)",
    )
    parser.add_argument("--concurrency", default="1,4,16", help="levels (default 1,4,16)")
    parser.add_argument("--warmup", default="3s", help="warm-up per level (default 3s)")
    parser.add_argument("--duration", default="20s", help="measured window per level (default 20s)")
    parser.add_argument(
        "--max-tokens", type=int, default=128, help="max_tokens per request (default 128)"
    )
    parser.add_argument(
        "--time-scale",
        type=float,
        default=2.0,
        help="run the simulated servers this many times faster, ratios kept (default 2)",
    )
    parser.add_argument("--seed", type=int, default=0, help="seed of prompts and simulators")


def run(args: argparse.Namespace) -> int:
    if args.time_scale <= 0:
        raise UsageError(f"--time-scale: {args.time_scale} must be positive")
    out = prepare_out_dir(args.out)
    ctx = DemoContext(args, out)
    start = time.monotonic()
    try:
        for stage in STAGES:
            stage(ctx)
    finally:
        for cleanup in reversed(ctx.cleanups):
            cleanup()
    ctx.say(f"demo done in {time.monotonic() - start:.0f}s")
    return 0


__all__ = ["STAGES", "DemoContext", "Stage", "Target", "add_arguments", "run"]
