"""``specload demo``: the whole story on the local stack, no GPU needed.

The reference deployment's own experiment (``docs/demo.md``), on a simulated vLLM that runs
:data:`~specload.stack.rules.DEMO_TIME_SCALE` times faster than it (every figure is printed
beside its reading on the reference scale: times x the time scale, rates / it). Stages, in
order (each a small function over a shared :class:`DemoContext`):

1. ``specload stack up`` under ``OUT/stack`` on free ports: one simulated server ``baseline``
   (the deployment), the exporter, Prometheus — switched to the *demo profile* of the rules
   (``deploy/prometheus/demo``, rendered from the same source as production by
   :mod:`specload.stack.rules`: shorter windows and ``for:``, the same thresholds) — and
   Alertmanager, whose committed webhook receiver the demo plays;
2. the baseline sweep over the reference's four prompt types at ``max_tokens`` 4096, as the
   reference measured (``specload run --record-token-ids``, client metrics scraped by the
   stack's Prometheus): per type median TPOT against the reference's table, how many requests
   reached their answer; ``baseline export``, served by the exporter;
3. the reference's fifth prompt (long reasoning) at the same budget: it ends inside reasoning,
   and the sweep's truncation guard says so — while ``specload predict`` runs beside it;
4. the prediction of the n-gram variant from the baseline sweep alone, as the decision it
   supports (``… slower at concurrency 1, … at 4: not worth a 30-minute reload``);
5. ``stack reload baseline --as ngram``, watched live in Prometheus;
6. the reloaded server under steady load: ``SpecloadTPOTRegression`` goes pending, fires and
   reaches the webhook (each moment printed);
7. the ngram sweep and the comparison, then the prediction of stage 4 beside what was
   measured (``specload predict --measured``);
8. the alert state from Prometheus, Alertmanager and the webhook;
9. ``stack down`` (also on Ctrl-C and errors; ``--keep-stack`` keeps it), then one verdict
   per variant, where the report is, and the wall time.

The facts of the story are written to ``OUT/demo.json`` as they are learnt.

The chapters: :mod:`.stack` (stages 1 and 9's ``stack down``), :mod:`.sweeps` (2, 3),
:mod:`.prediction` (4, and 7's check of it), :mod:`.reload` (5), :mod:`.alerts` (6, 8),
:mod:`.comparison` (7), :mod:`.verdicts` (the last screen); beside them :mod:`.context`
(:class:`DemoContext`), :mod:`.constants`, :mod:`.webhook` (Alertmanager's receiver) and
:mod:`.figures` (every figure read out of a sweep's ``summary.json``). The stack, the
comparison, the report and the prediction are library calls (:mod:`specload.stack.control`,
:mod:`specload.compare`, :mod:`specload.report.pages`, :mod:`specload.predict.pipeline`);
only the sweeps and the stack's parts are processes of their own.
"""

from __future__ import annotations

import argparse
import math
import shutil
import signal
import time
from pathlib import Path
from types import FrameType

from specload.commands.demo.alerts import alert_state, alert_under_load
from specload.commands.demo.comparison import ngram_sweep_and_compare
from specload.commands.demo.constants import (
    DEFAULTS,
    FIFTH_REQUESTS,
    REFERENCE_TPOT_MS,
    REFERENCE_TYPES,
    SERVER,
)
from specload.commands.demo.context import DemoContext, Stage
from specload.commands.demo.prediction import predict_variant, predicted_against_measured
from specload.commands.demo.reload import reload_watched
from specload.commands.demo.stack import _down, stack_down, stack_up
from specload.commands.demo.sweeps import baseline_sweep, fifth_prompt
from specload.commands.demo.verdicts import verdicts
from specload.durations import parse_duration
from specload.errors import UsageError
from specload.prompts import MAX_TOKENS_LIMIT
from specload.results.writer import prepare_out_dir
from specload.stack.control import part_health
from specload.stack.state import load

STAGES: list[Stage] = [
    stack_up,
    baseline_sweep,
    fifth_prompt,
    predict_variant,
    reload_watched,
    alert_under_load,
    ngram_sweep_and_compare,
    alert_state,
    stack_down,
    verdicts,
]


def add_arguments(parser: argparse.ArgumentParser) -> None:
    def default(key: str) -> str:
        normal, quick = DEFAULTS[key]
        return f"default {normal}" + ("" if quick == normal else f"; --quick {quick}")

    parser.add_argument(
        "--out",
        default="demo-results",
        metavar="DIR",
        help="where results and the stack's state go (default demo-results/)",
    )
    parser.add_argument(
        "--quick",
        action="store_true",
        help="shorter sweeps (about 3 minutes in all) with the same story, for tests",
    )
    parser.add_argument(
        "--keep-stack",
        action="store_true",
        help="leave the stack running when the demo completes (Prometheus, "
        "Alertmanager…); Ctrl-C or an error still stops it",
    )
    parser.add_argument("--concurrency", help=f"levels ({default('concurrency')})")
    parser.add_argument("--warmup", help=f"warm-up per level ({default('warmup')})")
    parser.add_argument("--duration", help=f"measured window per level ({default('duration')})")
    parser.add_argument(
        "--max-tokens",
        type=int,
        help=f"max_tokens per request ({default('max_tokens')}, as the reference measured)",
    )
    parser.add_argument(
        "--time-scale",
        type=float,
        help="run the simulated server this many times faster than the reference deployment, "
        f"ratios kept ({default('time_scale')}: the demo profile's clock)",
    )
    parser.add_argument(
        "--load-time", help=f"the simulated (re)load time, wall clock ({default('load_time')})"
    )
    parser.add_argument(
        "--scrape-interval",
        help=f"Prometheus scrape and exporter poll ({default('scrape_interval')})",
    )
    parser.add_argument("--seed", type=int, default=0, help="seed of the prompts")


def _resolve(args: argparse.Namespace) -> None:
    """Defaults filled in and every option checked — before anything starts (a bad
    ``--duration`` is one line now, not after the stack is up and a sweep has run)."""
    # specload.sweep.plan imports the load generator's package (gevent, its HTTP client),
    # which the sweeps' own processes run: here only to check the levels, not for --help
    from specload.sweep.plan import build_plan  # noqa: PLC0415

    for key, (normal, quick) in DEFAULTS.items():
        if getattr(args, key) is None:
            setattr(args, key, quick if args.quick else normal)
    args.max_tokens = int(args.max_tokens)
    if not 1 <= args.max_tokens <= MAX_TOKENS_LIMIT:
        raise UsageError(
            f"--max-tokens: {args.max_tokens} must be between 1 and {MAX_TOKENS_LIMIT:,}"
        )
    args.time_scale = float(args.time_scale)
    if not (math.isfinite(args.time_scale) and args.time_scale > 0):
        raise UsageError(f"--time-scale: {args.time_scale} must be positive")
    args.load_time_s = parse_duration(args.load_time, name="--load-time", allow_zero=False)
    parse_duration(args.scrape_interval, name="--scrape-interval", allow_zero=False)
    # The sweeps' levels and windows, checked as `specload run` will check them.
    build_plan(
        concurrency=args.concurrency,
        request_rate=None,
        max_concurrency=None,
        warmup=args.warmup,
        duration=args.duration,
        requests=None,
    )


OUTPUTS = (
    "baseline",
    "fifth-prompt",
    "prediction",
    "ngram-steady",
    "ngram",
    "comparison",
    "stack",
    "demo.json",
)


def _clear_previous(out: Path) -> None:
    """Remove a previous demo's outputs from ``out`` (results files are appended to)."""
    state_dir = out / "stack"
    previous = load(state_dir)
    if previous is not None and any(part_health(p) != "stopped" for p in previous.parts):
        raise UsageError(
            f"--out: a stack is still running in {state_dir} (--keep-stack?); stop it with "
            f"`specload stack down --state-dir {state_dir}` or give another --out"
        )
    present = [name for name in OUTPUTS if (out / name).exists()]
    if present and not (out / "demo.json").exists():
        raise UsageError(
            f"--out {str(out)!r}: holds {', '.join(present)} not written by the "
            "demo; give an empty or new directory"
        )
    for name in present:
        path = out / name
        if path.is_dir():
            shutil.rmtree(path)
        else:
            path.unlink()


def _raise_interrupt(signum: int, frame: FrameType | None) -> None:
    raise KeyboardInterrupt


def _minutes(seconds: float) -> str:
    return f"{int(seconds // 60)} min {seconds % 60:02.0f} s"


def run(args: argparse.Namespace) -> int:
    _resolve(args)
    out = prepare_out_dir(args.out).resolve()
    _clear_previous(out)
    ctx = DemoContext(args, out, out / "stack")
    ctx.record("options", {k: getattr(args, k) for k in (*DEFAULTS, "quick", "keep_stack")})
    previous = signal.signal(signal.SIGTERM, _raise_interrupt)
    code = 0
    try:
        for stage in STAGES:
            stage(ctx)
    except KeyboardInterrupt:
        ctx.say("demo interrupted: stopping the stack")
        code = 130
    finally:
        try:
            _down(ctx)
        finally:
            signal.signal(signal.SIGTERM, previous)
    wall_s = time.monotonic() - ctx.started
    ctx.record("wall_s", round(wall_s, 1))
    ctx.say(f"demo {'done' if code == 0 else 'stopped'} in {_minutes(wall_s)} (wall time)")
    return code


__all__ = [
    "FIFTH_REQUESTS",
    "REFERENCE_TPOT_MS",
    "REFERENCE_TYPES",
    "SERVER",
    "STAGES",
    "DemoContext",
    "Stage",
    "add_arguments",
    "predict_variant",
    "predicted_against_measured",
    "run",
]
