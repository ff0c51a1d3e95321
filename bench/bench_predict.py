"""Speed of ``specload predict`` (goal: < 10 s with k = 1..8 on this machine).

Writes a synthetic five-level closed-loop baseline (``specload.predict.synthetic``: ~100
requests of 200-4,000 output tokens, prompts of 50-600, copy-controlled repetition) whose
median TPOTs come from the simulator's cost model (the reference-shaped, concave MoE curve)
through the batch engine, then times the forecast: n-gram k=3, lookup 2..4, the k schedule
over k = 1..8 and 1000 bootstrap resamples per (level, k) — in process, and as a fresh
process (imports included).

``--engine`` picks the batch engine of the in-process runs: ``default`` (what ``specload
predict`` uses: the simulator's engine, its fast path for the k schedule), ``sim`` (the
simulator's engine for every placement) or ``replay`` (``ClosedLoopReplay`` for every one).

    .venv/bin/python bench/bench_predict.py [--requests 100] [--levels 1,2,4,8,16] [--repeat 3]
        [--engine default|sim|replay]
"""

from __future__ import annotations

import argparse
import io
import subprocess
import sys
import tempfile
import time
from contextlib import redirect_stdout
from pathlib import Path

import numpy as np
import orjson

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from simulator.costmodel import CostModel  # noqa: E402
from specload.commands import predict as cli  # noqa: E402
from specload.predict import forecast as forecast_module  # noqa: E402
from specload.predict.closedloop import ClosedLoopReplay, SimEngine  # noqa: E402
from specload.predict.synthetic import make_records, write_synthetic_baseline  # noqa: E402


def sim_cost(n: np.ndarray, ctx: np.ndarray) -> np.ndarray:
    """The simulator's step time (ms) for n sequences of one token at mean context ctx."""
    model = CostModel()
    out = np.empty(len(n))
    for i, (nn, cc) in enumerate(zip(n.tolist(), ctx.tolist(), strict=True)):
        seqs = max(1, round(nn))
        out[i] = (
            1000.0 * model.step(decode_tokens=seqs, num_seqs=seqs, context_tokens=cc * seqs).total_s
        )
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--requests", type=int, default=100)
    ap.add_argument("--levels", default="1,2,4,8,16")
    ap.add_argument("--min-tokens", type=int, default=200)
    ap.add_argument("--max-tokens", type=int, default=4000)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--keep", default=None, help="write the baseline here and keep it")
    ap.add_argument("--engine", choices=("default", "sim", "replay"), default="default")
    args = ap.parse_args()
    if args.engine != "default":
        make = SimEngine if args.engine == "sim" else ClosedLoopReplay
        original = forecast_module.forecast

        def forced(baseline, opts, *, engine=None, plan):  # type: ignore[no-untyped-def]
            return original(baseline, opts, engine=make(), plan=plan)

        forecast_module.forecast = forced  # cli.run imports it when it runs
    levels = [int(x) for x in args.levels.split(",")]
    t0 = time.perf_counter()
    recs = make_records(
        args.requests,
        levels=levels,
        seed=7,
        min_tokens=args.min_tokens,
        max_tokens=args.max_tokens,
    )
    base = Path(args.keep) if args.keep else Path(tempfile.mkdtemp(prefix="bench-predict-"))
    write_synthetic_baseline(base, recs, levels=levels, cost=sim_cost)
    gen_s = time.perf_counter() - t0
    tokens = sum(len(r.output_ids) for r in recs)
    print(
        f"baseline: {len(recs)} requests, {tokens} output tokens "
        f"({min(len(r.output_ids) for r in recs)}-{max(len(r.output_ids) for r in recs)} each), "
        f"levels {args.levels}; written in {gen_s:.1f} s to {base}"
    )
    argv = [
        str(base),
        "--num-speculative-tokens",
        "3",
        "--prompt-lookup-min",
        "2",
        "--prompt-lookup-max",
        "4",
        "--json",
    ]
    p = argparse.ArgumentParser()
    cli.add_arguments(p)
    times = []
    data = None
    for _ in range(args.repeat):
        buf = io.StringIO()
        t = time.perf_counter()
        with redirect_stdout(buf):
            cli.run(p.parse_args(argv))
        times.append(time.perf_counter() - t)
        data = buf.getvalue()
    print(
        f"in process ({args.engine} engine): {' '.join(f'{x:.2f}' for x in times)} s "
        f"(best {min(times):.2f} s)"
    )
    code = (
        "import sys, argparse; from specload.commands import predict as cli; "
        "p = argparse.ArgumentParser(); "
        "cli.add_arguments(p); sys.exit(cli.run(p.parse_args(sys.argv[1:])))"
    )
    t = time.perf_counter()
    subprocess.run(
        [sys.executable, "-c", code, *argv], check=True, cwd=ROOT, stdout=subprocess.DEVNULL
    )
    print(f"fresh process (imports included): {time.perf_counter() - t:.2f} s")
    result = orjson.loads(data or b"{}")
    for lv in result["levels"]:
        print(
            f"  c{lv['concurrency']}: acceptance {lv['acceptance_rate']:.3f}, "
            f"baseline {lv['baseline_median_tpot_ms']:.2f} ms, predicted "
            f"{lv['predicted_median_tpot_ms']:.2f} ms "
            f"({lv['predicted_low_ms']:.2f}-{lv['predicted_high_ms']:.2f}), {lv['verdict']}"
        )
    sched = result["k_schedule"]
    print(f"  k schedule: {sched['num_speculative_tokens_per_batch_size'] or 'do not speculate'}")


if __name__ == "__main__":
    main()
