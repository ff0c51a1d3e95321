"""Proof of the stopping rules' error rates: recorded requests replayed through them, offline.

``specload run --against BASE --margin 5%`` stops a level once its verdict is known
(:mod:`specload.results.stopping`: repeated confidence intervals with error spending). This
harness replays *recorded* requests — simulator runs (``record-sim`` writes them) and real
vLLM runs (``tests/data/vllm-0.32.0/runs/``) — through the rule in time order, thousands of
times, and counts what it says:

- **equal**: baseline and variant drawn from runs of the same server (the truth: no
  difference). ``within``: both from one run (sampling noise only, what the guarantee is
  about); ``across``: from two runs (run-to-run drift too).
- **slower 10%** (the variant's values x 1.10): the power.
- **at the margin** (x 1.05 with a 5% margin): a "slower" there is wrong; the rule aims at
  2.5% (one side of its 95%).
- **naive**: the same looks, each with a plain 95% interval, stopping when it excludes 1 (no
  margin, no correction for looking many times): how often it calls an equal variant
  faster or slower.
- **fixed**: one look at ``n`` requests; the smallest ``n`` whose power on the 10%-slower
  variant matches the sequential rule's is the fixed-size design of equal power, and the
  sequential rule's mean requests are set against it.

A trial's series are block resamples of a recorded level, blocks of ``concurrency``
consecutive requests: requests that ran together stay together (at c4 the simulator gives
the requests of one batch the same TPOT), so that correlation is kept, and a few hundred
recorded requests give thousands of distinct trials. Longer-range drift *within* a run is
not replayed by the resamples; drift *between* runs is what "equal, across runs" measures.
A trial's baseline and variant have the same number of requests (``compare``'s checks hold
a variant to the baseline's ``--requests``): ``--budget``, else the smallest that gives the
sequential rule at least 90% power on the 10%-slower variant (:func:`design_budget`).

The precision rule (``--precision 2%``) is replayed the same way: each replay a fresh block
resample of one recorded level, its truth the recorded level's median (what the resamples
are drawn around). Beside it, at fixed sizes, the rule's interval (order statistics) is set
against ``compare``'s block bootstrap on the same draws: how wide each is, how often each
holds the truth.

    .venv/bin/python bench/stopping_rules.py --trials 1000 --out bench/results/stopping_rules.json
    .venv/bin/python bench/stopping_rules.py record-sim   # re-record the simulator pools
"""

from __future__ import annotations

import argparse
import gzip
import json
import math
import subprocess
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Callable, Sequence
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from specload.compare.stats import bootstrap_statistic  # noqa: E402
from specload.results.bootstrap import block_length  # noqa: E402
from specload.results.stopping import (  # noqa: E402
    MIN_REQUESTS_DEFAULT,
    PrecisionRule,
    SequentialRule,
    half_width,
    median_rank_interval,
)

SIM_DIR = ROOT / "tests" / "data" / "sim" / "stopping"
VLLM_DIR = ROOT / "tests" / "data" / "vllm-0.32.0" / "runs"
KEEP = ("step", "start_s", "end_s", "ok", "tpot_s", "ttft_s", "category", "tokens_output")
MARGIN = 0.05
PRECISION_BUDGET = 4000  # a precision replay's budget (--requests)
PRECISION_RUNS = (40, 400)  # the done-when's 40 seeded replays, and 400 for a closer figure
AGREEMENT_SIZES = (100, 300, 900)  # fixed sizes where the two intervals are set side by side


# -- pools ---------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Pool:
    """One recorded level: its metric's values in start order."""

    source: str  # e.g. "sim a", "vllm b"
    level: str
    concurrency: int
    values: np.ndarray


def read_pool(path: Path, source: str, metric: str = "tpot_s") -> list[Pool]:
    by_step: dict[str, list[tuple[float, float]]] = {}
    with gzip.open(path, "rt") as fh:
        for line in fh:
            r = json.loads(line)
            step = str(r.get("step") or "")
            value = r.get(metric)
            if not r.get("ok") or not step.startswith("c") or "-" in step or value is None:
                continue
            by_step.setdefault(step, []).append((float(r["start_s"]), float(value)))
    return [
        Pool(source, step, int(step[1:]), np.array([v for _, v in sorted(rows)]))
        for step, rows in sorted(by_step.items())
    ]


def pools() -> dict[str, dict[str, list[Pool]]]:
    """{"sim": {"c1": [run a, run b, ...]}, "vllm": {...}}: the recorded runs found."""
    out: dict[str, dict[str, list[Pool]]] = {}
    for kind, folder in (("sim", SIM_DIR), ("vllm", VLLM_DIR)):
        for path in sorted(folder.glob("*.requests.jsonl.gz")):
            server, run = path.name.split(".")[0].rsplit("_", 1)
            for pool in read_pool(path, f"{kind} {server} {run}"):
                out.setdefault(f"{kind} {server}", {}).setdefault(pool.level, []).append(pool)
    return out


def resample(pool: Pool, n: int, rng: np.random.Generator) -> np.ndarray:
    """``n`` values in time order: blocks of ``concurrency`` consecutive recorded requests
    (the requests that ran together), end to end."""
    data = pool.values
    block = max(1, pool.concurrency)
    starts = rng.integers(0, len(data) - block + 1, size=-(-n // block))
    idx = (starts[:, None] + np.arange(block)).reshape(-1)[:n]
    out: np.ndarray = data[idx]
    return out


# -- one trial ---------------------------------------------------------------------------------


def sequential(
    baseline: np.ndarray,
    variant: np.ndarray,
    concurrency: int,
    *,
    margin: float,
    seed: int,
    naive: bool = False,
) -> tuple[str, int]:
    """The rule's verdict and the requests it took, replaying ``variant`` in order
    (``refused``: the baseline's median is 0, which ``--against`` refuses)."""
    try:
        rule = SequentialRule(
            list(baseline),
            margin,
            budget=len(variant),
            concurrency=concurrency,
            seed=seed,
            fixed_z=1.959963984540054 if naive else None,
        )
    except ValueError:
        return "refused", 0
    for i, value in enumerate(variant):
        rule.add(float(i), float(value))
        if rule.due() and rule.look() is not None:
            break
    if not rule.decided:
        rule.look(last=True)
    assert rule.verdict is not None and rule.verdict_requests is not None
    return rule.verdict, rule.verdict_requests


def fixed(
    baseline: np.ndarray, variant: np.ndarray, concurrency: int, *, margin: float, seed: int
) -> str:
    """One look at all of ``variant``: the fixed-size design's verdict."""
    try:
        rule = SequentialRule(list(baseline), margin, budget=len(variant), concurrency=concurrency)
    except ValueError:  # a baseline of median 0
        return "refused"
    rule.seed = seed
    for i, value in enumerate(variant):
        rule.add(float(i), float(value))
    rule.look(last=True)
    assert rule.verdict is not None
    return rule.verdict


# -- scenarios ---------------------------------------------------------------------------------

Draw = Callable[[np.random.Generator], tuple[np.ndarray, np.ndarray]]


def draw(base: Pool, var: Pool, budget: int, factor: float = 1.0) -> Draw:
    def one(rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
        return resample(base, budget, rng), resample(var, budget, rng) * factor

    return one


def run_scenario(
    name: str, draw_one: Draw, concurrency: int, trials: int, seed: int, **kw: Any
) -> dict[str, Any]:
    rng = np.random.default_rng(seed)
    verdicts: Counter[str] = Counter()
    used: list[int] = []
    t0 = time.perf_counter()
    for _ in range(trials):
        b, v = draw_one(rng)
        verdict, n = sequential(b, v, concurrency, seed=int(rng.integers(2**31)), **kw)
        verdicts[verdict] += 1
        used.append(n)
    return {
        "scenario": name,
        "trials": trials,
        "shares": {
            k: verdicts[k] / trials
            for k in ("faster", "slower", "equivalent", "undecided", "refused")
        },
        "mean_requests": float(np.mean(used)),
        "seconds": time.perf_counter() - t0,
    }


def fixed_power(
    draw_n: Callable[[int], Draw], concurrency: int, sizes: Sequence[int], trials: int, seed: int
) -> list[dict[str, Any]]:
    out = []
    for n in sizes:
        rng = np.random.default_rng(seed + n)
        one = draw_n(n)
        hits = 0
        for _ in range(trials):
            b, v = one(rng)
            hits += (
                fixed(b, v, concurrency, margin=MARGIN, seed=int(rng.integers(2**31))) == "slower"
            )
        out.append({"n": n, "power": hits / trials})
    return out


def design_budget(pool: Pool, trials: int) -> int:
    """The smallest budget (a multiple of the recorded level's length) at which the rule
    calls the 10%-slower variant slower in at least 90% of a quarter of ``trials``."""
    base = len(pool.values)
    for mult in (0.5, 1.0, 1.5, 2.0, 3.0, 4.0):
        n = max(MIN_REQUESTS_DEFAULT * 2, round(base * mult))
        found = run_scenario(
            "design",
            draw(pool, pool, n, 1.10),
            pool.concurrency,
            max(100, trials // 4),
            5,
            margin=MARGIN,
        )
        if found["shares"]["slower"] >= 0.9:
            return n
    return n


def level_report(
    kind: str, level: str, runs: list[Pool], trials: int, budget: int | None
) -> dict[str, Any]:
    a, b = runs[0], runs[1] if len(runs) > 1 else runs[0]
    c = a.concurrency
    n = budget or design_budget(a, trials)
    out: dict[str, Any] = {"kind": kind, "level": level, "concurrency": c, "budget": n}
    out["recorded"] = {
        p.source: {"requests": len(p.values), "median_tpot_ms": float(np.median(p.values) * 1000)}
        for p in runs
    }
    scen = []
    seed = 1
    for name, base, var, factor, kw, share in (
        ("equal, within one run", a, a, 1.0, {"margin": MARGIN}, 1.0),
        ("equal, across runs", a, b, 1.0, {"margin": MARGIN}, 1.0),
        ("slower 10%", a, a, 1.10, {"margin": MARGIN}, 0.4),
        ("at the margin (x1.05)", a, a, 1.05, {"margin": MARGIN}, 0.4),
        ("naive, equal within one run", a, a, 1.0, {"margin": 0.0, "naive": True}, 1.0),
        ("naive, equal across runs", a, b, 1.0, {"margin": 0.0, "naive": True}, 1.0),
    ):
        seed += 1
        count = max(100, round(trials * share))
        scen.append(run_scenario(name, draw(base, var, n, factor), c, count, seed, **kw))
    out["scenarios"] = scen
    power = scen[2]["shares"]["slower"]
    fractions = (0.0, 0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.75, 1.0, 1.5, 2.0)
    sizes = sorted({max(MIN_REQUESTS_DEFAULT, round(n * f)) for f in fractions})
    grid = fixed_power(lambda k: draw(a, a, k, 1.10), c, sizes, max(200, trials // 4), 99)
    out["fixed_power"] = grid
    equal = next((g["n"] for g in grid if g["power"] >= power), None)
    out["fixed_n_equal_power"] = equal
    out["mean_requests_share_of_fixed"] = scen[2]["mean_requests"] / equal if equal else None
    return out


# -- precision --------------------------------------------------------------------------------


def precision_report(pool: Pool, truth: float, runs: int, target: float) -> dict[str, Any]:
    """``runs`` seeded replays of the pool through the precision rule: how often it ends
    precise, how precise, and whether the truth is in (over the first :data:`PRECISION_RUNS`
    replays, and over all)."""
    rng = np.random.default_rng(7)
    outcomes: list[tuple[str, float, bool, int]] = []  # (ended, half-width, inside, requests)
    for _ in range(runs):
        series = resample(pool, PRECISION_BUDGET, rng)
        rule = PrecisionRule(target, pool.concurrency)
        reason = "budget"
        for i, value in enumerate(series):
            rule.add(float(i), float(value))
            if rule.due() and rule.look():
                reason = "precise"
                break
        if reason == "budget":
            rule.look()
        assert rule.interval is not None
        low, high = rule.interval
        width = rule.half_width if rule.half_width is not None else math.inf
        outcomes.append((reason, width, bool(low <= truth <= high), len(rule.values)))
    report: dict[str, Any] = {
        "pool": pool.source,
        "level": pool.level,
        "target": target,
        "truth": truth,
        "budget": PRECISION_BUDGET,
    }
    for k in sorted({min(r, runs) for r in (*PRECISION_RUNS, runs)}):
        part = outcomes[:k]
        report[f"runs_{k}"] = {
            "runs": k,
            "ended": dict(Counter(o[0] for o in part)),
            "max_half_width": max(o[1] for o in part),
            "max_precise_half_width": max((o[1] for o in part if o[0] == "precise"), default=None),
            "truth_inside": sum(o[2] for o in part) / k,
            "mean_requests": float(np.mean([o[3] for o in part])),
        }
    return report


def interval_agreement(pool: Pool, truth: float, trials: int = 300) -> list[dict[str, Any]]:
    """At fixed sizes, on the same block resamples of the pool: the rank interval the
    precision rule draws against ``compare``'s percentile block bootstrap (2,000 resamples)
    -- the median half-width of each and how often each holds the truth."""
    out = []
    for n in AGREEMENT_SIZES:
        rng = np.random.default_rng(n)
        block = block_length(n, pool.concurrency)
        rank_w, boot_w, rank_in, boot_in = [], [], 0, 0
        for _ in range(trials):
            values = resample(pool, n, rng)
            est, low, high = median_rank_interval(list(values), pool.concurrency)
            rank_w.append(half_width(est, low, high))
            rank_in += low <= truth <= high
            reps = bootstrap_statistic(values, n_boot=2000, rng=rng, block=block)
            b_low, b_high = (float(x) for x in np.quantile(reps, [0.025, 0.975]))
            boot_w.append(half_width(est, min(est, b_low), max(est, b_high)))
            boot_in += b_low <= truth <= b_high
        out.append(
            {
                "n": n,
                "trials": trials,
                "rank_half_width": float(np.median(rank_w)),
                "bootstrap_half_width": float(np.median(boot_w)),
                "rank_truth_inside": rank_in / trials,
                "bootstrap_truth_inside": boot_in / trials,
            }
        )
    return out


# -- recording the simulator's pools ---------------------------------------------------------


# The fixed-timing pool: every request's ITL is FIXED_ITL_S times a factor uniform in
# [1 - J, 1 + J] (``sim --fixed-itl-jitter``): the true median TPOT is FIXED_ITL_S.
FIXED_ITL_S = 0.02
FIXED_JITTER = 0.2
FIXED = [
    *("--timing", "fixed", "--fixed-itl", str(FIXED_ITL_S), "--fixed-ttft", "0.05"),
    *("--fixed-itl-jitter", str(FIXED_JITTER)),
    *("--fixed-reasoning-tokens", "40", "--fixed-content-tokens", "10"),
]


def record_sim(args: argparse.Namespace) -> None:
    from tests.fixtures.sim import start_sim  # noqa: PLC0415 - only to record

    SIM_DIR.mkdir(parents=True, exist_ok=True)
    runs = [
        ("baseline_a", ["--time-scale", str(args.time_scale), "--seed", "1"], "1,4", args.requests),
        ("baseline_b", ["--time-scale", str(args.time_scale), "--seed", "2"], "1,4", args.requests),
        ("fixed_a", [*FIXED, "--seed", "3"], "1,4", args.requests),
    ]
    for name, sim_args, levels, requests in runs:
        if args.only and name not in args.only.split(","):
            continue
        with tempfile.TemporaryDirectory() as tmp:
            sim = start_sim(sim_args, Path(tmp))
            try:
                out = Path(tmp) / "out"
                cmd = [
                    sys.executable, "-m", "specload", "run", "--host", sim.url,
                    "--concurrency", levels, "--requests", str(requests),
                    "--warmup", "2s", "--max-tokens", "160", "--prompt-seed", "1",
                    "--metrics-address", "off", "--progress", "off", "--no-plots",
                    "--out", str(out),
                ]  # fmt: skip
                subprocess.run(cmd, check=True, timeout=3600)
                keep = SIM_DIR / f"{name}.requests.jsonl.gz"
                with open(out / "requests.jsonl") as src, gzip.open(keep, "wt") as dst:
                    for line in src:
                        r = json.loads(line)
                        dst.write(json.dumps({k: r.get(k) for k in KEEP}) + "\n")
                print(f"recorded {keep}")
            finally:
                sim.stop()


def _pct(x: float | None) -> str:
    return "-" if x is None else f"{x * 100:.1f}%"


def render(report: dict[str, Any]) -> str:
    """The tables of ``bench/results/stopping_rules.md`` from the harness's JSON."""
    precision = report.get("precision", [])
    budget = precision[0]["budget"] if precision else PRECISION_BUDGET
    out = [
        f"### Precision (`--precision 2%`, budget {budget} requests)",
        "",
        "Each replay's truth is the recorded level's median, the centre its resamples are "
        "drawn around.",
        "",
        "| pool | level | replays | ended | largest half-width when precise "
        "| truth inside | mean requests |",
        "|---|---|---|---|---|---|---|",
    ]
    for p in precision:
        for key in sorted((k for k in p if k.startswith("runs_")), key=lambda k: int(k[5:])):
            r = p[key]
            ended = ", ".join(f"{k} {v}" for k, v in sorted(r["ended"].items()))
            out.append(
                f"| {p['pool']} | {p['level']} | {r['runs']} | {ended} | "
                f"{_pct(r['max_precise_half_width'])} | {_pct(r['truth_inside'])} | "
                f"{r['mean_requests']:.0f} |"
            )
    agreement = report.get("agreement", [])
    if agreement:
        out += [
            "",
            "### The precision rule's interval beside `compare`'s bootstrap (fixed sizes)",
            "",
            "| pool | level | requests | trials | half-width: rank, bootstrap "
            "| truth inside: rank, bootstrap |",
            "|---|---|---|---|---|---|",
        ]
        for a in agreement:
            for row in a["sizes"]:
                out.append(
                    f"| {a['pool']} | {a['level']} | {row['n']} | {row['trials']} | "
                    f"{_pct(row['rank_half_width'])}, {_pct(row['bootstrap_half_width'])} | "
                    f"{_pct(row['rank_truth_inside'])}, {_pct(row['bootstrap_truth_inside'])} |"
                )
    out += [
        "",
        f"### Verdicts (`--against`, margin {report['margin'] * 100:g}%)",
        "",
        "| data | level | budget | scenario | trials | faster | slower | equivalent "
        "| undecided | mean requests |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for lv in report["levels"]:
        for sc in lv["scenarios"]:
            sh = sc["shares"]
            out.append(
                f"| {lv['kind']} | {lv['level']} | {lv['budget']} | {sc['scenario']} | "
                f"{sc['trials']} | {_pct(sh['faster'])} | {_pct(sh['slower'])} | "
                f"{_pct(sh['equivalent'])} | {_pct(sh['undecided'])} | "
                f"{sc['mean_requests']:.1f} |"
            )
    out += [
        "",
        "### Requests against a fixed-size design (10%-slower variant)",
        "",
        "| data | level | sequential: power, mean requests | fixed n of equal power "
        "| share | fixed n for 90% power | share |",
        "|---|---|---|---|---|---|---|",
    ]
    for lv in report["levels"]:
        slower = lv["scenarios"][2]
        n90 = next((g["n"] for g in lv["fixed_power"] if g["power"] >= 0.9), None)
        share90 = slower["mean_requests"] / n90 if n90 else None
        out.append(
            f"| {lv['kind']} | {lv['level']} | {_pct(slower['shares']['slower'])}, "
            f"{slower['mean_requests']:.1f} | {lv['fixed_n_equal_power'] or '-'} | "
            f"{_pct(lv['mean_requests_share_of_fixed'])} | {n90 or '-'} | {_pct(share90)} |"
        )
    return "\n".join(out) + "\n"


def _level_report(job: tuple[str, str, list[Pool], int, int | None]) -> dict[str, Any]:
    return level_report(*job)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "command", nargs="?", default="harness", choices=("harness", "record-sim", "render")
    )
    parser.add_argument("--trials", type=int, default=1000)
    parser.add_argument("--budget", type=int, default=None)
    parser.add_argument("--precision-runs", type=int, default=max(PRECISION_RUNS))
    parser.add_argument(
        "--precision-only", action="store_true", help="the precision replays alone (minutes)"
    )
    parser.add_argument("--jobs", type=int, default=2, help="levels replayed at once")
    parser.add_argument("--out", default=None)
    parser.add_argument("--requests", type=int, default=300, help="record-sim: per level")
    parser.add_argument("--time-scale", type=float, default=10.0, help="record-sim")
    parser.add_argument(
        "--only",
        default="",
        help="record-sim: these runs only (baseline_a,fixed_a); the harness: these kinds only "
        "(sim baseline,vllm plain)",
    )
    args = parser.parse_args()
    if args.command == "record-sim":
        record_sim(args)
        return
    if args.command == "render":  # the tables of --out's JSON, as Markdown
        print(render(json.loads(Path(args.out).read_text())), end="")
        return
    report: dict[str, Any] = {"trials": args.trials, "margin": MARGIN, "levels": []}
    found = pools()
    report["precision"], report["agreement"] = [], []
    for levels in found.values():
        for runs in levels.values():
            pool = runs[0]
            truth = float(np.sort(pool.values)[(len(pool.values) - 1) // 2])  # the lower median
            rep = precision_report(pool, truth, args.precision_runs, 0.02)
            report["precision"].append(rep)
            print(json.dumps(rep), flush=True)
            sizes = interval_agreement(pool, truth)
            report["agreement"].append({"pool": pool.source, "level": pool.level, "sizes": sizes})
            print(json.dumps(report["agreement"][-1]), flush=True)
    if args.precision_only:
        if args.out:  # the verdicts' tables of an earlier run kept as they were
            out = Path(args.out)
            kept = json.loads(out.read_text()) if out.exists() else report
            kept["precision"], kept["agreement"] = report["precision"], report["agreement"]
            out.write_text(json.dumps(kept, indent=1) + "\n")
        return
    jobs = [
        (kind, level, runs, args.trials, args.budget)
        for kind, levels in found.items()
        if not args.only or kind in args.only.split(",")
        for level, runs in levels.items()
    ]
    with ProcessPoolExecutor(max_workers=args.jobs) as workers:
        for rep in workers.map(_level_report, jobs):
            report["levels"].append(rep)
            print(json.dumps(rep), flush=True)
            if args.out:  # each level kept as it comes
                Path(args.out).write_text(json.dumps(report, indent=1) + "\n")
    if args.out:
        Path(args.out).write_text(json.dumps(report, indent=1) + "\n")


if __name__ == "__main__":
    main()
