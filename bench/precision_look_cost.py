"""The CPU of one level's ``--precision`` looks, offline: the rule as it is against the
moving-block bootstrap it replaced (ff386e2).

Feeds :class:`specload.results.stopping.PrecisionRule` (concurrency 256) the window of one
level the way the sweep's driver does — ``--rate`` requests a second, checked every 50-ms
tick, a look whenever :meth:`PrecisionRule.due` — and times the looks (``time.thread_time``).
Per-request TPOT is ``5 ms x U(1 - J, 1 + J)`` (the simulator's ``--fixed-itl-jitter J``).

Part 1, the worst case: a target out of reach, so every look runs (every 4% of the requests)
and the level spends its budget of ``--requests``. Two intervals per look:

- ``rank (as it is)``: :func:`specload.results.stopping.median_rank_interval`, one sort and
  a cumulative sum;
- ``bootstrap, 400 resamples``: the percentile moving-block bootstrap of the median the
  rule drew before ff386e2 (``PRECISION_BOOT`` 400), set in its place for the comparison.

Part 2, reachable targets: where the rule as it is stops, its looks, and their cost.

    .venv/bin/python bench/precision_look_cost.py [--requests 5000] [--rate 125]
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Callable, Sequence

import numpy as np

from specload.compare.stats import bootstrap_statistic
from specload.results import stopping
from specload.results.bootstrap import block_length
from specload.results.model import median
from specload.results.stopping import PrecisionRule

CONCURRENCY = 256
TICK_S = 0.05
BOOT = 400  # the former rule's resamples per look

Interval = Callable[[Sequence[float], int], tuple[float, float, float]]


def bootstrap_interval(values: Sequence[float], concurrency: int) -> tuple[float, float, float]:
    """The former look's interval: percentile moving-block bootstrap, 400 resamples."""
    n = len(values)
    est = median(values) or 0.0
    block = block_length(n, concurrency)
    if n < stopping.MIN_BLOCKS * block:
        return est, -np.inf, np.inf
    reps = bootstrap_statistic(values, n_boot=BOOT, rng=np.random.default_rng(n), block=block)
    low, high = (float(x) for x in np.quantile(reps, [0.025, 0.975]))
    return est, min(est, low), max(est, high)


def level(jitter: float, n: int, seed: int) -> list[float]:
    return list(0.005 * np.random.default_rng(seed).uniform(1 - jitter, 1 + jitter, n))


def run(
    rule: PrecisionRule, values: list[float], rate: float, *, out_of_reach: bool
) -> tuple[int | None, int, float, float]:
    """(stopped at, looks, their CPU s, the longest look s): the driver's ticks over the
    window; ``out_of_reach``: the target below 0 at every look (none stops)."""
    per_tick = rate * TICK_S
    cpu = longest = 0.0
    looks = added = 0
    arrived = 0.0
    while added < len(values):
        arrived += per_tick
        while added < min(len(values), int(arrived)):
            rule.add(added * 0.008, values[added])
            added += 1
        if rule.due():
            target = rule.target
            if out_of_reach:
                rule.target = -1.0
                rule.next_at = 0  # every 4%: the most looks a level can take
            t0 = time.thread_time()
            precise = rule.look()
            spent = time.thread_time() - t0
            rule.target = target
            cpu += spent
            longest = max(longest, spent)
            looks += 1
            if precise:
                return added, looks, cpu, longest
    return None, looks, cpu, longest


def main() -> None:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--requests", type=int, default=5000)
    ap.add_argument("--rate", type=float, default=125.0, help="requests/s (256 streams here)")
    ap.add_argument("--repeat", type=int, default=3, help="the least CPU of this many")
    args = ap.parse_args()
    n = args.requests
    values = level(0.3, n, 1)
    as_is: Interval = stopping.median_rank_interval

    print(f"## Out of reach: {n} requests at {args.rate:g}/s, concurrency {CONCURRENCY}\n")
    print("| interval per look | looks | looks' CPU s | µs per request | longest look ms |")
    print("|---|---|---|---|---|")
    for name, interval in (("rank (as it is)", as_is), (f"bootstrap, {BOOT}", bootstrap_interval)):
        stopping.median_rank_interval = interval  # type: ignore[assignment]
        try:
            best = min(
                (
                    run(PrecisionRule(0.02, CONCURRENCY), values, args.rate, out_of_reach=True)
                    for _ in range(args.repeat)
                ),
                key=lambda r: r[2],
            )
        finally:
            stopping.median_rank_interval = as_is
        _, looks, cpu, longest = best
        print(f"| {name} | {looks} | {cpu:.3f} | {cpu / n * 1e6:.1f} | {longest * 1000:.2f} |")

    print("\n## Reachable targets: where the rule stops\n")
    print("| jitter | target | seed | stopped at | looks | µs per request |")
    print("|---|---|---|---|---|---|")
    for jitter, target in ((0.3, 0.02), (0.6, 0.02), (0.6, 0.01), (0.3, 0.001)):
        for seed in (1, 2, 3):
            rule = PrecisionRule(target, CONCURRENCY)
            stop, looks, cpu, _ = run(rule, level(jitter, n, seed), args.rate, out_of_reach=False)
            per = cpu / (stop or n) * 1e6
            print(
                f"| {jitter} | {target:.1%} | {seed} | {stop or 'budget'} | {looks} | {per:.1f} |",
                flush=True,
            )


if __name__ == "__main__":
    main()
