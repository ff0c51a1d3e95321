"""The options of a verdict — confidence, resamples, smallest difference, fewest samples —
shared by ``specload compare``, ``report`` and ``predict`` (one spelling, one check)."""

from __future__ import annotations

import argparse
import math
from typing import Any

from specload.errors import UsageError

MIN_N_DEFAULT = 10  # specload.compare.stats.MIN_N (not imported here: numpy loads late)
MAX_BOOTSTRAP = 100_000


def add_verdict_options(
    parser: argparse.ArgumentParser,
    *,
    bootstrap: int = 2000,
    min_n: bool = True,
    incomplete: bool = True,
) -> None:
    """``--confidence --bootstrap --min-difference`` (and ``--min-n``, ``--allow-incomplete``)."""
    parser.add_argument(
        "--confidence", type=float, default=0.95, help="confidence level (default 0.95)"
    )
    parser.add_argument(
        "--bootstrap",
        type=int,
        default=bootstrap,
        metavar="N",
        help=f"resamples (default {bootstrap})",
    )
    parser.add_argument(
        "--min-difference",
        type=float,
        default=5.0,
        metavar="PCT",
        help="smallest difference called faster/slower (default 5 percent: run-to-run noise)",
    )
    if min_n:
        parser.add_argument(
            "--min-n",
            type=int,
            default=None,
            metavar="N",
            help=f"fewest samples per side for an interval and a verdict (default {MIN_N_DEFAULT})",
        )
    if incomplete:
        parser.add_argument(
            "--allow-incomplete",
            action="store_true",
            help="compare killed or unfinalized runs and incomplete levels (marked in the report)",
        )


def check_verdict_options(args: argparse.Namespace) -> int:
    """One-line errors naming the option; returns ``--min-n`` (its default when not given)."""
    if not (math.isfinite(args.confidence) and 0.5 <= args.confidence < 1):
        raise UsageError(f"--confidence: {args.confidence} must be in [0.5, 1)")
    if not 100 <= args.bootstrap <= MAX_BOOTSTRAP:
        raise UsageError(f"--bootstrap: {args.bootstrap} must be in [100, {MAX_BOOTSTRAP}]")
    if not (math.isfinite(args.min_difference) and 0 <= args.min_difference < 100):
        raise UsageError(f"--min-difference: {args.min_difference} must be in [0, 100)")
    given = getattr(args, "min_n", None)
    min_n = MIN_N_DEFAULT if given is None else int(given)
    if min_n < 2:
        raise UsageError(f"--min-n: {min_n} must be at least 2")
    return min_n


def verdict_kwargs(args: argparse.Namespace, min_n: int) -> dict[str, Any]:
    """``compare_runs``' keywords from these options (``min_n``: checked by the above)."""
    return {
        "n_boot": args.bootstrap,
        "confidence": args.confidence,
        "min_difference": args.min_difference / 100.0,
        "min_n": min_n,
        "allow_incomplete": args.allow_incomplete,
    }
