"""Coverage of the forecast's nominal 95% median-TPOT interval, against known truth.

Many independent synthetic baselines are drawn from one ground truth
(:mod:`specload.predict.synthetic`: ``make_records`` with a fresh seed each, the known
:class:`LinearCost`, closed loop, noise 0), each forecast in process (n-gram k = 3, lookup
2..4; ``ClosedLoopReplay`` as the batch engine, which places exactly as the default engine
and is what the synthetic baselines are built with). For every baseline and concurrency the
variant's :class:`TpotModel` is kept and its :meth:`TpotModel.interval` is drawn once per
resampling method, the real code path with the module's ``block_indices`` / ``block_length``
swapped (the same generator seed for every method, so the coefficient draws are shared):

* ``one-by-one``: requests resampled singly (blocks of 1, what the forecast did before 6cffe94);
* ``moving``: the moving-block bootstrap of :mod:`specload.results.bootstrap` (current);
* ``circular``: the same block lengths, each block's start drawn from all ``n`` requests and
  wrapped around the end (every request equally likely in a resample);
* ``moving, >= M blocks``: the moving-block bootstrap with the block cut to ``n // M`` so a
  resample holds at least ``M`` blocks (below the concurrency where ``n / c < M``);
* with ``--double-blocks``, also ``moving, blocks >= 2c``: the current rule at twice the
  concurrency (an exploration: does the dependence at c8 reach past c requests?).

Truth (per concurrency), two of them:

* ``large``: the forecast from one very large baseline (``--truth-per-level`` requests per
  level) — the median TPOT the forecast converges to as the sample grows; what a confidence
  interval for the population median should contain.
* ``mean``: the mean of the forecasts over all the baselines — the estimator's own centre; the
  coverage against it isolates the interval's width from the estimator's bias at this sample
  size (the gap between the two truths).

The known cost on the large baseline's own placement (no fitted curve) is printed too: the
forecast's model bias, outside the interval's job.

Coverage is a binomial share over ``--baselines`` trials: its 95% Wilson interval is printed.

    .venv/bin/python bench/forecast_interval_coverage.py [--baselines 200] [--per-level 40]
        [--n-boot 400] [--truth-per-level 2000] [--min-blocks 10] [--double-blocks]
        [--json out.json]
"""

from __future__ import annotations

import argparse
import math
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass
from pathlib import Path
from unittest import mock

import numpy as np
import numpy.typing as npt
import orjson

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from specload.predict import forecast as fc_mod  # noqa: E402
from specload.predict.baseline import load_baseline  # noqa: E402
from specload.predict.closedloop import ClosedLoopReplay  # noqa: E402
from specload.predict.forecast import Options, TpotModel, default_plan, forecast  # noqa: E402
from specload.predict.stepcost import StepCostFit  # noqa: E402
from specload.predict.synthetic import LinearCost, make_records, write_synthetic_baseline  # noqa: E402
from specload.results.bootstrap import block_indices, block_length  # noqa: E402

IntArray = npt.NDArray[np.int64]
Indices = Callable[[int, int, int, np.random.Generator], IntArray]
Length = Callable[[int, int], int]

LEVELS = (1, 2, 4, 8)
K = 3
CONFIDENCE = 0.95
COST = LinearCost(12.0, 0.6, 0.0008)


def circular_block_indices(n: int, block: int, n_boot: int, rng: np.random.Generator) -> IntArray:
    """Circular-block resamples: ``ceil(n / block)`` runs of ``block`` consecutive indices,
    each start drawn from ``0..n - 1`` and wrapped modulo ``n``, cut to ``n``."""
    if n_boot == 0 or n == 0:
        return np.zeros((n_boot, n), dtype=np.int64)
    block = max(1, min(block, n))
    n_blocks = -(-n // block)
    starts = rng.integers(0, n, size=(n_boot, n_blocks))
    idx = (starts[:, :, None] + np.arange(block)) % n
    out: IntArray = idx.reshape(n_boot, n_blocks * block)[:, :n].astype(np.int64)
    return out


def min_blocks_length(min_blocks: int) -> Length:
    def length(n: int, concurrency: int = 1) -> int:
        return max(1, min(block_length(n, concurrency), n // min_blocks))

    return length


def one_by_one_length(n: int, concurrency: int = 1) -> int:
    return 1


@dataclass(frozen=True)
class Method:
    name: str
    length: Length
    indices: Indices


def double_length(n: int, concurrency: int = 1) -> int:
    return block_length(n, 2 * concurrency)


def methods(min_blocks: int, *, double: bool = False) -> list[Method]:
    extra = [Method("moving, blocks >= 2c", double_length, block_indices)] if double else []
    return [
        Method("one-by-one", one_by_one_length, block_indices),
        Method("moving (current)", block_length, block_indices),
        Method("circular", block_length, circular_block_indices),
        Method(f"moving, >= {min_blocks} blocks", min_blocks_length(min_blocks), block_indices),
        *extra,
    ]


@contextmanager
def using(method: Method) -> Iterator[None]:
    """The forecast module's interval drawing ``method``'s blocks."""
    with ExitStack() as stack:
        stack.enter_context(mock.patch.object(fc_mod, "block_indices", method.indices))
        stack.enter_context(mock.patch.object(fc_mod, "block_length", method.length))
        yield


@dataclass
class LevelRun:
    concurrency: int
    estimate: float
    model: TpotModel
    fit: StepCostFit


def run_forecast(per_level: int, seed: int, n_boot: int) -> list[LevelRun]:
    """One synthetic baseline (``per_level`` requests per level) and its forecast at k = 3."""
    levels = list(LEVELS)
    recs = make_records(
        per_level * len(levels), levels=levels, seed=seed, min_tokens=100, max_tokens=600
    )
    opts = Options(
        num_speculative_tokens=K,
        prompt_lookup_min=2,
        prompt_lookup_max=4,
        n_boot=n_boot,
        schedule_ks=(K,),
        seed=seed,
    )
    with tempfile.TemporaryDirectory(prefix="fic-") as tmp:
        write_synthetic_baseline(tmp, recs, levels=levels, cost=COST)
        base = load_baseline(
            Path(tmp), need_tokens=True, hint=lambda m: default_plan(m, opts).summary()
        )
        fc = forecast(base, opts, engine=ClosedLoopReplay(), plan=default_plan(levels, opts))
    out: list[LevelRun] = []
    for lf in fc.levels:
        r = lf.results[K]
        assert r.model is not None
        out.append(LevelRun(lf.concurrency, r.predicted_ms, r.model, fc.fit))
    return out


def known_median(model: TpotModel, coef: npt.NDArray[np.float64]) -> float:
    """The lower median of the requests' TPOT under the known cost on the model's placement."""
    tpot = np.sort(model.features @ coef / model.tokens)
    return float(tpot[(model.requests - 1) // 2])


def wilson(hits: int, n: int, z: float = 1.96) -> tuple[float, float]:
    if n == 0:
        return math.nan, math.nan
    p = hits / n
    centre = (p + z * z / (2 * n)) / (1 + z * z / n)
    half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / (1 + z * z / n)
    return centre - half, centre + half


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--baselines", type=int, default=200)
    ap.add_argument("--per-level", type=int, default=40)
    ap.add_argument("--n-boot", type=int, default=400)
    ap.add_argument("--truth-per-level", type=int, default=2000)
    ap.add_argument("--min-blocks", type=int, default=10)
    ap.add_argument("--seed", type=int, default=1000)
    ap.add_argument(
        "--double-blocks", action="store_true", help="also: moving blocks of at least 2c"
    )
    ap.add_argument("--json", default=None, help="write every trial's figures here")
    args = ap.parse_args()
    ms = methods(args.min_blocks, double=args.double_blocks)
    t0 = time.perf_counter()

    big = run_forecast(args.truth_per_level, seed=1, n_boot=1)
    truth_large = {lv.concurrency: lv.estimate for lv in big}
    true_coef = np.array([COST.fixed_ms, COST.per_token_ms, COST.per_context_ms])
    known = {lv.concurrency: known_median(lv.model, true_coef) for lv in big}
    print(
        f"truth: {args.truth_per_level} requests per level, "
        f"forecast in {time.perf_counter() - t0:.0f} s",
        flush=True,
    )

    # est[c][i], low/high[method][c][i]
    est: dict[int, list[float]] = {c: [] for c in LEVELS}
    # the known cost's median on each baseline's own variant placement (no fitted curve)
    known_small: dict[int, list[float]] = {c: [] for c in LEVELS}
    low: dict[str, dict[int, list[float]]] = {m.name: {c: [] for c in LEVELS} for m in ms}
    high: dict[str, dict[int, list[float]]] = {m.name: {c: [] for c in LEVELS} for m in ms}
    blocks: dict[str, dict[int, int]] = {m.name: {} for m in ms}
    t1 = time.perf_counter()
    for i in range(args.baselines):
        seed = args.seed + i
        for lv in run_forecast(args.per_level, seed=seed, n_boot=1):
            c = lv.concurrency
            est[c].append(lv.estimate)
            known_small[c].append(known_median(lv.model, true_coef))
            for m in ms:
                blocks[m.name][c] = m.length(lv.model.requests, c)
                with using(m):
                    _, lo, hi, _ = lv.model.interval(
                        lv.fit,
                        n_boot=args.n_boot,
                        confidence=CONFIDENCE,
                        rng=np.random.default_rng([seed, c]),
                        concurrency=c,
                    )
                low[m.name][c].append(lo)
                high[m.name][c].append(hi)
        if (i + 1) % 20 == 0:
            print(f"  {i + 1} baselines, {time.perf_counter() - t1:.0f} s", flush=True)

    n = args.baselines
    truth_mean = {c: float(np.mean(est[c])) for c in LEVELS}
    print(
        f"\n{n} baselines x {args.per_level} requests per level, n_boot {args.n_boot}, k = {K}, "
        f"noise 0; {time.perf_counter() - t0:.0f} s in all\n"
    )
    print(
        "| c | truth: large baseline | known cost (large) | mean of forecasts "
        "| known cost, mean over the baselines | SD of forecasts |"
    )
    print("|---|---|---|---|---|---|")
    for c in LEVELS:
        sd_c = float(np.std(est[c], ddof=1))
        print(
            f"| c{c} | {truth_large[c]:.3f} | {known[c]:.3f} | {truth_mean[c]:.3f} "
            f"(± {sd_c / math.sqrt(n):.3f}) | {np.mean(known_small[c]):.3f} | {sd_c:.3f} |"
        )
    lo_w, hi_w = wilson(round(CONFIDENCE * n), n)
    print(
        f"\nWilson 95% interval of a coverage of exactly {CONFIDENCE:.0%} over {n} trials: "
        f"{lo_w:.1%}-{hi_w:.1%}\n"
    )
    print(
        "| method | c | block | coverage (large) | 95% CI | misses low / high | vs current "
        "| coverage (mean) | mean width ms | width / (3.92 SD) |"
    )
    print("|---|---|---|---|---|---|---|---|---|---|")
    current = ms[1].name
    for m in ms:
        for c in LEVELS:
            lo_a, hi_a = np.array(low[m.name][c]), np.array(high[m.name][c])
            hit = (lo_a <= truth_large[c]) & (truth_large[c] <= hi_a)
            hit_cur = (np.array(low[current][c]) <= truth_large[c]) & (
                truth_large[c] <= np.array(high[current][c])
            )
            cover_m = int(np.sum((lo_a <= truth_mean[c]) & (truth_mean[c] <= hi_a)))
            w_lo, w_hi = wilson(int(hit.sum()), n)
            width = float(np.mean(hi_a - lo_a))
            sd = float(np.std(est[c], ddof=1))
            print(
                f"| {m.name} | c{c} | {blocks[m.name][c]} | {hit.sum() / n:.1%} | "
                f"{w_lo:.0%}-{w_hi:.0%} | {int(np.sum(hi_a < truth_large[c]))} / "
                f"{int(np.sum(lo_a > truth_large[c]))} | "
                f"+{int(np.sum(hit & ~hit_cur))} / -{int(np.sum(~hit & hit_cur))} | "
                f"{cover_m / n:.1%} | {width:.3f} | {width / (2 * 1.96 * sd):.2f} |"
            )
    if args.json:
        Path(args.json).write_bytes(
            orjson.dumps(
                {
                    "args": vars(args),
                    "truth_large": truth_large,
                    "known_cost_large": known,
                    "estimates": est,
                    "known_cost": known_small,
                    "low": low,
                    "high": high,
                },
                option=orjson.OPT_NON_STR_KEYS,
            )
        )


if __name__ == "__main__":
    main()
