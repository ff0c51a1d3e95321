"""``specload predict BASELINE_DIR``: forecast a speculative variant from the baseline alone.

Replays vLLM's n-gram proposer over the baseline's recorded token ids (``tokens.jsonl``,
from ``specload run --record-token-ids``), fits the step-cost curve to the baseline's
levels and replays continuous batching at each concurrency: predicted acceptance, median
TPOT with an interval, speedup and verdict, the best k per concurrency as vLLM's
``num_speculative_tokens_per_batch_size``. ``--method draft --draft-cost-ratio R`` gives the
break-even mean acceptance length of a draft model or head instead; ``--plan`` says which
baseline levels to add. See docs/predict.md.
"""

from __future__ import annotations

import argparse
import math
import sys
from pathlib import Path
from typing import TYPE_CHECKING

from specload.compare.options import add_verdict_options, check_verdict_options
from specload.errors import UsageError

if TYPE_CHECKING:
    from specload.predict.engine_path import EnginePath
    from specload.predict.forecast import Options
    from specload.predict.moe import MoeModel

METHODS = ("ngram", "draft")
# --engine-path: auto, then the presets of specload.predict.engine_path.PRESETS (not
# imported here: `specload --help` stays light).
ENGINE_PATHS = ("auto", "cpu-0.32", "gpu-0.32-v2", "gpu-0.32-v1")
MAX_SERVER_LOG_BYTES = 64 << 20  # a startup log is kilobytes; a day of access logs is not
MAX_SPECULATIVE_TOKENS = 32
MAX_LOOKUP = 64


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("baseline", metavar="BASELINE_DIR", help="the baseline's results directory")
    parser.add_argument(
        "--method",
        choices=METHODS,
        default="ngram",
        help="ngram: replay vLLM's n-gram proposer (default); draft: break-even acceptance of "
        "a draft model or head (EAGLE-3, MTP) costing --draft-cost-ratio of a target step",
    )
    parser.add_argument(
        "--num-speculative-tokens",
        type=int,
        default=None,
        metavar="K",
        help="draft tokens per step (vLLM's num_speculative_tokens)",
    )
    parser.add_argument(
        "--prompt-lookup-min",
        type=int,
        default=None,
        metavar="A",
        help="shortest n-gram to match (vLLM's default: prompt_lookup_max, or 5)",
    )
    parser.add_argument(
        "--prompt-lookup-max",
        type=int,
        default=None,
        metavar="B",
        help="longest n-gram to match (vLLM's default: prompt_lookup_min, or 5)",
    )
    parser.add_argument(
        "--max-model-len",
        type=int,
        default=None,
        metavar="N",
        help="the server's max_model_len (drafts stop short of it; default: no limit)",
    )
    parser.add_argument(
        "--concurrency",
        default=None,
        metavar="LIST",
        help="concurrencies to forecast (default: the baseline's levels)",
    )
    parser.add_argument(
        "--draft-cost-ratio",
        type=float,
        default=None,
        metavar="R",
        help="--method draft: one draft forward pass relative to a baseline step",
    )
    parser.add_argument(
        "--step-overhead-ms",
        type=float,
        default=None,
        metavar="MS",
        help="the variant's own cost per step that the baseline cannot show, added to every "
        "speculative step in place of every term the engine path implies (proposer, "
        "engine-worker call, rejection sampler, …; `--measured` tells it from a variant run)",
    )
    parser.add_argument(
        "--host-step-ms",
        type=float,
        default=None,
        metavar="MS",
        help="the host's per-step work the variant pays where the baseline scheduled async and "
        "the variant does not (default: the baseline's profile, else a prior 0.6-1.5 ms)",
    )
    parser.add_argument(
        "--moe",
        metavar="EXPERTS:TOP_K[:SHARED]",
        default=None,
        help="the model is a mixture of experts of this shape (e.g. 384:8:1): verification that "
        "shares a sequence is charged the experts it wakes (default: a dense model, no "
        "correction)",
    )
    parser.add_argument(
        "--moe-step",
        metavar="FILE",
        default=None,
        help="with --moe: a bench/gpu/moe_step.py result (its shape and a row's cost beside "
        "its experts, measured on the deployment's GPU) in place of --moe's shape",
    )
    parser.add_argument(
        "--engine-path",
        choices=ENGINE_PATHS,
        default="auto",
        help="the engine path the variant runs on: vLLM version, model runner, proposer (the "
        "n-gram rule replayed), async scheduling, CUDA graphs. auto (default): what the "
        "baseline recorded about its server (and --server-log); where it tells no device, "
        "none: the curve alone, with a warning",
    )
    parser.add_argument(
        "--server-log",
        metavar="FILE",
        default=None,
        help="a vLLM server's startup log (the baseline's, or the variant's from an earlier "
        "run): version, device, runner, async scheduling, CUDA-graph mode and capture sizes",
    )
    parser.add_argument(
        "--measured",
        metavar="VARIANT_DIR",
        default=None,
        help="the variant's own results (same levels, after the reload): predicted beside "
        "measured, and the step overhead that closes the gap",
    )
    parser.add_argument("--no-plots", action="store_true", help="with --out: no prediction.png")
    parser.add_argument("--json", action="store_true", help="print JSON instead of Markdown")
    parser.add_argument(
        "--out",
        metavar="DIR",
        default=None,
        help="also write prediction.md, prediction.json and prediction.png "
        "(plan.md/plan.json with --plan)",
    )
    parser.add_argument(
        "--plan",
        action="store_true",
        help="only say which baseline levels would cover the step sizes the variant needs",
    )
    parser.add_argument(
        "--curve",
        choices=("interp", "linear"),
        default="interp",
        help="interp: the fitted line plus its residuals at the measured levels (default); "
        "linear: the line alone",
    )
    add_verdict_options(parser, bootstrap=1000, min_n=False, incomplete=False)
    parser.add_argument(
        "--max-num-seqs",
        type=int,
        default=256,
        metavar="N",
        help="the server's max_num_seqs: the last batch-size band of the k schedule ends there",
    )
    parser.add_argument("--seed", type=int, default=0, help="bootstrap seed (default 0)")


def _int_in(value: int | None, flag: str, lo: int, hi: int) -> None:
    if value is not None and not lo <= value <= hi:
        raise UsageError(f"{flag} {value}: must be an integer in [{lo}, {hi}]")


def lookup_window(lo: int | None, hi: int | None) -> tuple[int, int]:
    """vLLM's defaults: both unset → 5..5; one unset → the other's value."""
    if lo is None and hi is None:
        return 5, 5
    if lo is None:
        lo = hi
    if hi is None:
        hi = lo
    assert lo is not None and hi is not None
    return lo, hi


def engine_path_of(args: argparse.Namespace) -> tuple[EnginePath | None, list[str]]:
    """The engine path (``--engine-path``, ``--server-log`` and what the baseline recorded)
    and the notes to print; None for ``--method draft`` and for a simulator's baseline."""
    from specload.predict import engine_path as ep  # noqa: PLC0415
    from specload.vllm_log import from_server_log  # noqa: PLC0415

    if args.method != "ngram":
        return None, []
    log_text = None
    if args.server_log is not None:
        log_file = Path(args.server_log)
        try:
            if log_file.stat().st_size > MAX_SERVER_LOG_BYTES:
                raise UsageError(
                    f"--server-log {args.server_log}: over {MAX_SERVER_LOG_BYTES >> 20} MiB "
                    "(give the server's startup log)"
                )
            log_text = log_file.read_text(errors="replace")
        except OSError as exc:
            raise UsageError(f"--server-log {args.server_log}: {exc.strerror or exc}") from None
        if not from_server_log(log_text):
            raise UsageError(
                f"--server-log {args.server_log}: no line of a vLLM server's startup log in it"
            )
    try:
        return ep.choose(
            args.baseline, method=args.method, engine_path=args.engine_path, server_log=log_text
        )
    except ValueError as exc:
        raise UsageError(f"--engine-path: {exc}") from None


def options_of(args: argparse.Namespace, notes: list[str] | None = None) -> Options:
    from specload.predict.forecast import Options  # noqa: PLC0415
    from specload.sweep.plan import parse_int_list  # noqa: PLC0415

    method = args.method
    k = args.num_speculative_tokens
    if k is None:
        if not args.plan:
            raise UsageError("--num-speculative-tokens: required (e.g. 3)")
        k = 3
    _int_in(k, "--num-speculative-tokens", 1, MAX_SPECULATIVE_TOKENS)
    _int_in(args.prompt_lookup_min, "--prompt-lookup-min", 1, MAX_LOOKUP)
    _int_in(args.prompt_lookup_max, "--prompt-lookup-max", 1, MAX_LOOKUP)
    lo, hi = lookup_window(args.prompt_lookup_min, args.prompt_lookup_max)
    if lo > hi:
        raise UsageError(f"--prompt-lookup-min {lo}: must be at most --prompt-lookup-max ({hi})")
    _int_in(args.max_model_len, "--max-model-len", 2, 1 << 24)
    _int_in(args.max_num_seqs, "--max-num-seqs", 1, 65536)
    ratio = args.draft_cost_ratio
    if method == "draft":
        if ratio is None and not args.plan:
            raise UsageError(
                "--method draft: give --draft-cost-ratio R (a draft step / a target step, e.g. 0.1)"
            )
        if ratio is not None and not (math.isfinite(ratio) and 0 <= ratio <= 10):
            raise UsageError(f"--draft-cost-ratio {ratio}: must be a number in [0, 10]")
    elif ratio is not None:
        raise UsageError("--draft-cost-ratio: only with --method draft")
    check_verdict_options(args)
    overhead = args.step_overhead_ms
    if overhead is not None and not (math.isfinite(overhead) and 0 <= overhead <= 10_000):
        raise UsageError(f"--step-overhead-ms {overhead}: must be a number in [0, 10000]")
    host = args.host_step_ms
    if host is not None and not (math.isfinite(host) and 0 <= host <= 10_000):
        raise UsageError(f"--host-step-ms {host}: must be a number in [0, 10000]")
    concurrencies = (
        parse_int_list(args.concurrency, name="--concurrency") if args.concurrency else None
    )
    path, path_notes = engine_path_of(args)
    if notes is not None:
        notes.extend(path_notes)
    moe = moe_of(args)
    return Options(
        method=method,
        num_speculative_tokens=k,
        prompt_lookup_min=lo,
        prompt_lookup_max=hi,
        max_model_len=args.max_model_len,
        concurrencies=sorted(concurrencies) if concurrencies else None,
        curve=args.curve,
        n_boot=args.bootstrap,
        confidence=args.confidence,
        min_difference=args.min_difference / 100.0,
        seed=args.seed,
        max_num_seqs=args.max_num_seqs,
        draft_cost_ratio=ratio,
        step_overhead_ms=overhead,
        host_step_ms=host,
        engine_path=path,
        moe=moe,
    )


def moe_of(args: argparse.Namespace) -> MoeModel | None:
    """``--moe E:K[:S]`` and ``--moe-step FILE``: the MoE correction's model (None: dense)."""
    from specload.predict.moe import MoeModel, MoeShape  # noqa: PLC0415

    if args.moe_step is not None:
        return MoeModel.from_json(args.moe_step)
    if args.moe is None:
        return None
    parts = args.moe.split(":")
    try:
        if len(parts) not in (2, 3):
            raise ValueError
        nums = [int(p) for p in parts]
    except ValueError:
        raise UsageError(
            f"--moe {args.moe}: give EXPERTS:TOP_K or EXPERTS:TOP_K:SHARED (e.g. 384:8:1)"
        ) from None
    if not 1 <= nums[0] <= 65536:
        raise UsageError(f"--moe {args.moe}: experts must be 1..65536")
    try:
        shape = MoeShape(*nums)
    except UsageError as exc:
        raise UsageError(f"--moe {args.moe}: {exc}") from None
    return MoeModel.default(shape)


def run(args: argparse.Namespace) -> int:
    # numpy loads only when the command runs, not for `specload predict --help`.
    from specload.predict import pipeline, report  # noqa: PLC0415
    from specload.results.writer import (  # noqa: PLC0415
        atomic_write_bytes,
        atomic_write_text,
        prepare_out_dir,
    )

    if not Path(args.baseline).is_dir():
        raise UsageError(f"{args.baseline}: no such results directory")
    notes: list[str] = []
    opts = options_of(args, notes)
    for note in notes:
        print(f"specload predict: warning: {note}", file=sys.stderr)
    baseline, plan = pipeline.load(args.baseline, opts)
    out = prepare_out_dir(args.out) if args.out else None
    if args.plan:
        data = {
            "format": "specload-predict-plan/1",
            "baseline": str(baseline.path),
            "problems": baseline.problems,
            **plan.to_dict(),
        }
        text = (
            "\n".join(report.plan_markdown(plan) + [f"- problem: {p}" for p in baseline.problems])
            + "\n"
        )
        if out is not None:
            atomic_write_bytes(out / "plan.json", report.dumps(data))
            atomic_write_text(out / "plan.md", text)
        if args.json:
            sys.stdout.write(report.dumps(data).decode())
        else:
            sys.stdout.write(text)
        return 0
    # The engine path's notes (said above) travel with the forecast's outputs too.
    prediction = pipeline.predict(baseline, plan, opts, notes=notes, measured_dir=args.measured)
    for warning in prediction.warnings:
        print(f"specload predict: warning: {' '.join(warning.split())}", file=sys.stderr)
    if out is not None:
        pipeline.write(out, prediction, plot=not args.no_plots)
    if args.json:
        sys.stdout.write(report.dumps(prediction.data).decode())
    else:
        sys.stdout.write(prediction.text)
        if out is not None:
            print(f"\nprediction written to {out / pipeline.PREDICTION_MD}")
    return 0
