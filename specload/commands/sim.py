"""``specload sim``: serve a simulated vLLM 0.32 (also ``python -m simulator``).

Durations on the command line (``--load-time``, ``--stall-seconds``,
``--degrade-after``, the ``--fixed-*`` timings) are wall-clock seconds;
``--time-scale`` divides only the cost model's step times. Every number has
bounds (:mod:`simulator.limits`); a value outside them, ``inf`` or ``nan`` is a
one-line error naming the flag and the limit (exit status 2).
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import logging
import math
import sys
from pathlib import Path

from simulator.costmodel import CostModel, parse_assignments
from simulator.engine import SchedulerLimits
from simulator.faults import FAULT_KINDS, FaultConfig, parse_fault_every, parse_fault_rates
from simulator.limits import check_flag
from simulator.server import FixedTiming, SimConfig, SimServer
from simulator.spec_metrics import SPEC_METRICS_LEVELS
from simulator.variants import VARIANTS, variant_named
from specload.durations import parse_duration
from specload.errors import UsageError
from specload.profile.tracefile import ALLREDUCE_KERNEL_EXAMPLES

_UVICORN_MESSAGES = (
    "Started server process",
    "Waiting for application startup.",
    "Application startup complete.",
    "Uvicorn running on",
    "Shutting down",
)


class _VllmFormatter(logging.Formatter):
    """``INFO 11-29 10:03:07 [api_server.py:1] …`` like vLLM; uvicorn's own lines like uvicorn."""

    def format(self, record: logging.LogRecord) -> str:
        message = record.getMessage()
        if message.startswith(_UVICORN_MESSAGES):
            return f"{record.levelname}:     {message}"
        stamp = self.formatTime(record, "%m-%d %H:%M:%S")
        where = "api_server.py" if "server" in message.lower() else "core.py"
        if message.startswith(("Loading safetensors", "Loading weights", "Model loading")):
            where = "default_loader.py"
        elif message.startswith(("Capturing CUDA", "Graph capturing")):
            where = "gpu_model_runner.py"
        return f"{record.levelname} {stamp} [{where}:{record.lineno}] {message}"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    g = parser.add_argument_group("server")
    g.add_argument(
        "--variant", default="baseline", help=f"service variant preset ({', '.join(VARIANTS)})"
    )
    g.add_argument("--port", type=int, default=8000, help="API port (default 8000)")
    g.add_argument("--host", default="127.0.0.1", help="API host (default 127.0.0.1)")
    g.add_argument("--model", default="moonshotai/Kimi-K2.5", help="served model name")
    g.add_argument(
        "--time-scale", type=float, default=1.0, help="run the cost model F times faster"
    )
    g.add_argument("--seed", type=int, default=0, help="seed for workloads, acceptance and faults")
    g.add_argument(
        "--load-time", default="0", help="seconds the API port stays closed at (re)start"
    )
    g.add_argument(
        "--control-port", type=int, default=None, help="loopback control port (/state, /reload)"
    )
    g.add_argument(
        "--log-file", type=Path, default=None, help="also write vLLM-like log lines here"
    )
    g.add_argument(
        "--profiler-dir", type=Path, default=None, help="enable /start_profile and /stop_profile"
    )
    g.add_argument("--profiler-max-steps", type=int, default=300, help="steps recorded per profile")
    g.add_argument(
        "--allreduce-kernel",
        default="nccl",
        help=f"all-reduce kernel family in traces ({', '.join(ALLREDUCE_KERNEL_EXAMPLES)})",
    )
    g.add_argument("--tp", type=int, default=8, help="tensor-parallel size (default 8)")
    g.add_argument(
        "--reasoning-field",
        default="reasoning",
        help="delta field for reasoning: reasoning (vLLM >=0.16), reasoning_content, both",
    )
    g.add_argument(
        "--per-request-spec-decode-metrics",
        choices=SPEC_METRICS_LEVELS,
        default="none",
        help="vLLM 0.32's metrics.speculative_decoding in each response: none, summary, "
        "detailed (speculative variants only)",
    )
    g.add_argument(
        "--enable-per-request-metrics",
        action="store_true",
        help="vLLM 0.32's per-request timing in each response's metrics (TTFT, queue, "
        "generation time, mean ITL, tokens per second), as vLLM's flag of that name",
    )
    g.add_argument(
        "--dev-mode",
        choices=("on", "off"),
        default="on",
        help="serve POST /reset_prefix_cache (vLLM: VLLM_SERVER_DEV_MODE=1); off: 404",
    )
    g.add_argument(
        "--enable-prefix-caching",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="vLLM's automatic prefix caching (on by default, as in vLLM): cached prompt "
        "blocks skip their prefill; --no-enable-prefix-caching computes every prompt token",
    )
    g.add_argument(
        "--max-model-len",
        type=int,
        default=262144,
        help="longest prompt plus output a request may have, as vLLM's (default 262144)",
    )
    g.add_argument(
        "--max-num-seqs",
        type=int,
        default=256,
        help="most requests in one batch, as vLLM's (default 256)",
    )
    g.add_argument(
        "--max-num-batched-tokens",
        type=int,
        default=8192,
        help="most tokens one engine step schedules, as vLLM's (default 8192)",
    )
    g.add_argument(
        "--kv-cache-tokens",
        type=int,
        default=400_000,
        help="KV-cache capacity in tokens: a request whose prompt does not fit waits "
        "(default 400000)",
    )
    m = parser.add_argument_group("cost model and variant")
    m.add_argument(
        "--cost", action="append", metavar="NAME=VALUE", help="override a cost-model parameter"
    )
    m.add_argument(
        "--spec", action="append", metavar="NAME=VALUE", help="override a variant parameter"
    )
    m.add_argument(
        "--num-speculative-tokens", type=int, default=None, help="draft tokens per step (k)"
    )
    t = parser.add_argument_group("fixed timing (accuracy tests)")
    t.add_argument(
        "--timing",
        choices=("model", "fixed"),
        default="model",
        help="model: step times from the cost model and the batch; fixed: every stream "
        "on the --fixed-* timings (default model)",
    )
    t.add_argument(
        "--fixed-ttft",
        default="0.1",
        help="--timing fixed: first chunk this long after arrival (default 0.1 s)",
    )
    t.add_argument(
        "--fixed-itl",
        default="0.02",
        help="--timing fixed: then one chunk every ITL (default 0.02 s)",
    )
    t.add_argument(
        "--fixed-itl-jitter",
        default="0",
        metavar="J",
        help="--timing fixed: each request's ITL is --fixed-itl x a factor drawn once per "
        "request, uniform in [1-J, 1+J], from the --seed'ed RNG: the true median ITL stays "
        "--fixed-itl (J in [0, 0.9); default 0, no jitter)",
    )
    t.add_argument(
        "--fixed-tokens-per-chunk",
        type=int,
        default=1,
        help="--timing fixed: tokens in each chunk (default 1)",
    )
    t.add_argument(
        "--fixed-reasoning-tokens",
        type=int,
        default=64,
        help="--timing fixed: reasoning tokens of every response (default 64)",
    )
    t.add_argument(
        "--fixed-content-tokens",
        type=int,
        default=32,
        help="--timing fixed: content (answer) tokens of every response, after the "
        "reasoning (default 32)",
    )
    f = parser.add_argument_group("faults and degradation")
    f.add_argument(
        "--fault-rate",
        action="append",
        metavar="KIND=RATE",
        help=f"kinds: {', '.join(FAULT_KINDS)}",
    )
    f.add_argument(
        "--fault-every",
        action="append",
        metavar="KIND=N",
        help="the fault on every Nth chat request (the Nth, 2Nth, ...), e.g. stall=5",
    )
    f.add_argument("--stall-seconds", default="30", help="how long a stall fault holds a stream")
    f.add_argument("--degrade-after", default=None, help="multiply step time after S seconds")
    f.add_argument("--degrade-factor", type=float, default=2.0, help="factor for --degrade-after")


def _port(value: int, name: str, allow_zero: bool = True) -> int:
    if not (0 if allow_zero else 1) <= value <= 65535:
        raise UsageError(f"{name} {value}: not a TCP port")
    return value


def _duration(text: str, flag: str) -> float:
    return check_flag(flag, parse_duration(text, name=flag), shown=text)


def _jitter(text: str) -> float:
    """``--fixed-itl-jitter J``: a number in [0, 0.9), else one line naming the bound."""
    flag = "--fixed-itl-jitter"
    try:
        value = float(text)
    except ValueError:
        value = math.nan  # not a number: the bound's own message
    return check_flag(flag, value, shown=text.strip())


def build_config(args: argparse.Namespace) -> SimConfig:
    variant = variant_named(args.variant)
    overrides = parse_assignments(args.spec, "--spec")
    if args.num_speculative_tokens is not None:
        check_flag("--num-speculative-tokens", args.num_speculative_tokens)
        overrides["num_speculative_tokens"] = str(args.num_speculative_tokens)
    variant = variant.with_overrides(overrides)
    check_flag("--tp", args.tp)
    cost = CostModel(tp=args.tp).with_overrides(parse_assignments(args.cost, "--cost"))
    check_flag("--time-scale", args.time_scale)
    if args.reasoning_field not in ("reasoning", "reasoning_content", "both"):
        raise UsageError(
            f"--reasoning-field {args.reasoning_field!r}: use reasoning, reasoning_content or both"
        )
    if args.allreduce_kernel not in ALLREDUCE_KERNEL_EXAMPLES:
        raise UsageError(
            f"--allreduce-kernel {args.allreduce_kernel!r}: unknown "
            f"(known: {', '.join(ALLREDUCE_KERNEL_EXAMPLES)})"
        )
    for name in (
        "max_model_len",
        "max_num_seqs",
        "max_num_batched_tokens",
        "kv_cache_tokens",
        "profiler_max_steps",
    ):
        check_flag(f"--{name.replace('_', '-')}", getattr(args, name))
    check_flag("--degrade-factor", args.degrade_factor)
    jitter = _jitter(str(args.fixed_itl_jitter))
    if jitter and args.timing != "fixed":
        raise UsageError(f"--fixed-itl-jitter {args.fixed_itl_jitter}: only with --timing fixed")
    fixed = None
    if args.timing == "fixed":
        for name in ("fixed_tokens_per_chunk", "fixed_reasoning_tokens", "fixed_content_tokens"):
            check_flag(f"--{name.replace('_', '-')}", getattr(args, name))
        if args.fixed_reasoning_tokens + args.fixed_content_tokens < 1:
            raise UsageError(
                "--fixed-reasoning-tokens + --fixed-content-tokens: must be at least 1"
            )
        fixed = FixedTiming(
            ttft_s=_duration(args.fixed_ttft, "--fixed-ttft"),
            itl_s=_duration(args.fixed_itl, "--fixed-itl"),
            tokens_per_chunk=args.fixed_tokens_per_chunk,
            reasoning_tokens=args.fixed_reasoning_tokens,
            content_tokens=args.fixed_content_tokens,
            itl_jitter=jitter,
        )
    if args.per_request_spec_decode_metrics != "none":
        flag = f"--per-request-spec-decode-metrics {args.per_request_spec_decode_metrics}"
        if not variant.speculative:
            raise UsageError(
                f"{flag}: requires speculative decoding (vLLM: --speculative-config); "
                f"--variant {variant.name} does not speculate"
            )
        if fixed is not None:
            raise UsageError(f"{flag}: --timing fixed does not speculate")
    if (
        args.profiler_dir is not None
        and args.profiler_dir.exists()
        and not args.profiler_dir.is_dir()
    ):
        raise UsageError(f"--profiler-dir {args.profiler_dir}: not a directory")
    return SimConfig(
        variant=variant,
        host=args.host,
        port=_port(args.port, "--port"),
        model=args.model,
        time_scale=args.time_scale,
        seed=args.seed,
        load_time_s=_duration(args.load_time, "--load-time"),
        control_port=None
        if args.control_port is None
        else _port(args.control_port, "--control-port"),
        log_file=args.log_file,
        profiler_dir=None if args.profiler_dir is None else args.profiler_dir.resolve(),
        profiler_max_steps=args.profiler_max_steps,
        reasoning_field=args.reasoning_field,
        cost=cost,
        limits=SchedulerLimits(
            max_num_seqs=args.max_num_seqs,
            max_num_batched_tokens=args.max_num_batched_tokens,
            kv_cache_tokens=args.kv_cache_tokens,
        ),
        max_model_len=args.max_model_len,
        faults=FaultConfig(
            parse_fault_rates(args.fault_rate),
            stall_seconds=_duration(args.stall_seconds, "--stall-seconds"),
            every=parse_fault_every(args.fault_every),
        ),
        fixed=fixed,
        degrade_after_s=None
        if args.degrade_after is None
        else _duration(args.degrade_after, "--degrade-after"),
        degrade_factor=args.degrade_factor,
        allreduce_family=args.allreduce_kernel,
        variant_overrides=overrides,
        spec_decode_metrics=args.per_request_spec_decode_metrics,
        per_request_metrics=args.enable_per_request_metrics,
        dev_mode=args.dev_mode == "on",
        prefix_caching=args.enable_prefix_caching,
    )


def _setup_logging(log_file: Path | None) -> None:
    logger = logging.getLogger("simulator")
    logger.setLevel(logging.INFO)
    logger.propagate = False
    formatter = _VllmFormatter()
    handlers: list[logging.Handler] = [logging.StreamHandler(sys.stderr)]
    if log_file is not None:
        try:
            log_file.parent.mkdir(parents=True, exist_ok=True)
            handlers.append(logging.FileHandler(log_file, mode="a", encoding="utf-8"))
        except OSError as exc:
            raise UsageError(f"--log-file {log_file}: {exc.strerror or exc}") from None
    for handler in handlers:
        handler.setFormatter(formatter)
        logger.addHandler(handler)


def run(args: argparse.Namespace) -> int:
    config = build_config(args)
    _setup_logging(config.log_file)
    server = SimServer(config)
    try:
        _run_loop(server)
    except OSError as exc:
        raise UsageError(
            f"--port {config.port} / --control-port {config.control_port}: {exc.strerror or exc}"
        ) from None
    return 0


def _run_loop(server: SimServer) -> None:
    # Everything imported so far lives as long as the process: keep it out of the
    # collector's generations so a full collection never walks it mid-step.
    gc.collect()
    gc.freeze()
    try:
        import uvloop  # noqa: PLC0415 - optional fast loop
    except ImportError:  # pragma: no cover - uvloop is a dependency off Windows
        asyncio.run(server.run())
        return
    uvloop.run(server.run())
