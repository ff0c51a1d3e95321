"""The CPU of one level's ``--precision`` looks, offline: the rule as it is against cheaper ways.

Feeds :class:`specload.results.stopping.PrecisionRule` (concurrency 256) the window of one
level the way the sweep's driver does — ``--rate`` requests a second, checked every 50-ms
tick, a look whenever :meth:`PrecisionRule.due` — and times the looks (``time.thread_time``).
Per-request TPOT is ``5 ms x U(1 - J, 1 + J)`` (the simulator's ``--fixed-itl-jitter J``).

Part 1, the worst case (a target out of reach: every look runs, the level its budget), for
``--requests`` requests: the rule as it is, then variants that cut the work per look or the
looks:

- ``200 resamples``: ``PRECISION_BOOT`` 400 -> 200;
- ``every 10%``: ``LOOK_SHARE`` 4% -> 10%;
- ``window gather``: the same draws and the same interval, the resamples copied as rows of a
  sliding window over the data (no ``(n_boot, n)`` index matrix);
- ``window gather, float32``: the same, the resamples in float32 (a median differs from
  float64's by under 1e-7 of it);
- ``predictive``: after a look, the next when ``n`` reaches ``0.8 (unit / target)^2`` — the
  rule's own predicted width ``unit / sqrt(n)`` (the median of its looks' half-width x
  sqrt(n)) meets the target there — at least 4% and at most 50% more requests.

Part 2, real targets (reachable, and two out of reach): where the rule as it is and the
predictive schedule stop, and what their looks cost. Its rules take ``min_requests`` two
blocks (512): with fewer requests than two blocks of the concurrency every moving-block
resample is the sample itself, the interval has width 0 and the rule as it is stops at its
first look (20 requests) whatever the data — a fault of the rule, not of the schedules.

    .venv/bin/python bench/precision_look_cost.py [--requests 5000] [--rate 125]
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections.abc import Callable, Iterator
from typing import Any

import numpy as np

from specload.results import stopping
from specload.results.bootstrap import _CHUNK_CELLS, FloatArray, row_median
from specload.results.stopping import PrecisionRule

CONCURRENCY = 256
TICK_S = 0.05


def window_chunks(
    data: FloatArray, block: int, n_boot: int, rng: np.random.Generator
) -> Iterator[tuple[int, int, FloatArray]]:
    """:func:`specload.results.bootstrap.block_index_chunks`'s draws, chunk for chunk, with
    each resample's blocks copied as rows of a sliding window over ``data``."""
    n = len(data)
    block = max(1, min(block, n))
    n_blocks = -(-n // block)
    windows = np.lib.stride_tricks.sliding_window_view(data, block)
    step = max(1, _CHUNK_CELLS // max(n_blocks * block, 1))
    for lo in range(0, n_boot, step):
        hi = min(n_boot, lo + step)
        starts = rng.integers(0, n - block + 1, size=(hi - lo, n_blocks))
        yield lo, hi, windows[starts].reshape(hi - lo, n_blocks * block)[:, :n]


def replicates_window(dtype: Any) -> Callable[[FloatArray, int, int, int], FloatArray]:
    def replicates(data: FloatArray, block: int, n_boot: int, seed: int) -> FloatArray:
        rng = np.random.default_rng(seed)
        out = np.empty(n_boot, dtype=np.float64)
        for lo, hi, sample in window_chunks(data.astype(dtype), block, n_boot, rng):
            out[lo:hi] = row_median(sample)
        return out

    return replicates


class PredictiveRule(PrecisionRule):
    """Looks when the rule's own predicted width could meet the target (4% to 50% apart)."""

    def due(self) -> bool:
        if not super().due():
            return False
        n, last = len(self.values), self.looked_at
        if not self.units or last == 0:
            return True
        at = 0.8 * (statistics.median(self.units) / self.target) ** 2 if self.target > 0 else 0
        return n >= min(1.5 * last, max(at, 1.04 * last))


def level(jitter: float, n: int, seed: int) -> list[float]:
    return list(0.005 * np.random.default_rng(seed).uniform(1 - jitter, 1 + jitter, n))


def run(
    rule: PrecisionRule, values: list[float], rate: float, *, out_of_reach: bool
) -> tuple[int | None, int, float, float]:
    """(stopped at, looks, their CPU s, the longest look s): the driver's ticks over the
    window; ``out_of_reach``: the target below 0 at every look (none stops)."""
    per_tick = rate * TICK_S
    cpu = longest = 0.0
    looks = 0
    added = 0
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

    as_is = stopping._replicates
    share, boot = stopping.LOOK_SHARE, stopping.PRECISION_BOOT
    variants: list[tuple[str, Callable[[], PrecisionRule], Callable[[], None]]] = [
        ("as it is", lambda: PrecisionRule(0.02, CONCURRENCY), lambda: None),
        ("200 resamples", lambda: PrecisionRule(0.02, CONCURRENCY, n_boot=200), lambda: None),
        (
            "every 10%",
            lambda: PrecisionRule(0.02, CONCURRENCY),
            lambda: setattr(stopping, "LOOK_SHARE", 0.10),
        ),
        (
            "window gather (same interval)",
            lambda: PrecisionRule(0.02, CONCURRENCY),
            lambda: setattr(stopping, "_replicates", replicates_window(np.float64)),
        ),
        (
            "window gather, float32",
            lambda: PrecisionRule(0.02, CONCURRENCY),
            lambda: setattr(stopping, "_replicates", replicates_window(np.float32)),
        ),
        (
            "window gather, float32, every 10%",
            lambda: PrecisionRule(0.02, CONCURRENCY),
            lambda: (
                setattr(stopping, "_replicates", replicates_window(np.float32)),
                setattr(stopping, "LOOK_SHARE", 0.10),
            ),
        ),
    ]

    def restore() -> None:
        stopping._replicates = as_is
        stopping.LOOK_SHARE, stopping.PRECISION_BOOT = share, boot

    print(f"## Out of reach: {n} requests at {args.rate:g}/s, concurrency {CONCURRENCY}\n")
    print("| schedule / look | looks | looks' CPU s | µs per request | longest look ms |")
    print("|---|---|---|---|---|")
    for name, make, setup in variants:
        setup()
        try:
            best = min(
                (run(make(), values, args.rate, out_of_reach=True) for _ in range(args.repeat)),
                key=lambda r: r[2],
            )
        finally:
            restore()
        _, looks, cpu, longest = best
        print(f"| {name} | {looks} | {cpu:.2f} | {cpu / n * 1e6:.0f} | {longest * 1000:.0f} |")
    # the same interval: window gather against the rule's own
    data = np.asarray(values)
    a = stopping.median_interval(values, CONCURRENCY, n_boot=400, seed=7)
    stopping._replicates = replicates_window(np.float64)
    b = stopping.median_interval(values, CONCURRENCY, n_boot=400, seed=7)
    stopping._replicates = replicates_window(np.float32)
    c = stopping.median_interval(values, CONCURRENCY, n_boot=400, seed=7)
    restore()
    print(
        f"\nwindow gather's interval at n={len(data)}: "
        f"{'identical' if a == b else f'DIFFERENT {a} {b}'}; float32's ends differ by "
        f"{max(abs(x - y) / x for x, y in zip(a, c, strict=True)):.1e} of them\n"
    )

    print("## Reachable targets: where each schedule stops\n")
    print(
        "| jitter | target | seed | as it is: stopped at, looks, µs/request "
        "| predictive: stopped at, looks, µs/request |"
    )
    print("|---|---|---|---|---|")
    for jitter, target in ((0.3, 0.02), (0.45, 0.02), (0.6, 0.02), (0.6, 0.01), (0.3, 0.001)):
        for seed in (1, 2, 3):
            vals = level(jitter, n, seed)
            cells = []
            for cls in (PrecisionRule, PredictiveRule):
                rule = cls(target, CONCURRENCY, min_requests=2 * CONCURRENCY)
                stop, looks, cpu, _ = run(rule, vals, args.rate, out_of_reach=False)
                cells.append(f"{stop or 'budget'}, {looks}, {cpu / (stop or n) * 1e6:.0f}")
            print(f"| {jitter} | {target:.1%} | {seed} | {cells[0]} | {cells[1]} |", flush=True)


if __name__ == "__main__":
    main()
