"""``specload compare DIR_A DIR_B [...]``: each variant against the first."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from specload.errors import UsageError
from specload.results.writer import atomic_write_text, prepare_out_dir


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "dirs", nargs="+", metavar="DIR", help="results directories; the first is the reference"
    )
    parser.add_argument(
        "--out",
        metavar="DIR",
        default=None,
        help="where comparison.md and plots go (default: comparison/ next to the first DIR)",
    )
    parser.add_argument(
        "--fail-on-regression",
        metavar="PCT",
        type=float,
        default=None,
        help="exit 1 when a variant's median TPOT is worse than the first's by more than PCT "
        "percent with confidence (the interval's lower bound)",
    )
    parser.add_argument(
        "--confidence", type=float, default=0.95, help="confidence level (default 0.95)"
    )
    parser.add_argument(
        "--bootstrap", type=int, default=2000, metavar="N", help="resamples (default 2000)"
    )
    parser.add_argument(
        "--min-difference",
        type=float,
        default=5.0,
        metavar="PCT",
        help="smallest difference called faster/slower (default 5 percent: run-to-run noise)",
    )
    parser.add_argument("--no-plots", action="store_true", help="skip the PNG plots")


def run(args: argparse.Namespace) -> int:
    # numpy and matplotlib load only when the command runs, not for `specload --help`.
    from specload.compare.model import compare_runs, load_run  # noqa: PLC0415
    from specload.compare.report import comparison_markdown  # noqa: PLC0415

    if len(args.dirs) < 2:
        raise UsageError("compare: give at least two results directories")
    if not 0.5 <= args.confidence < 1:
        raise UsageError(f"--confidence: {args.confidence} must be in [0.5, 1)")
    if args.bootstrap < 100:
        raise UsageError(f"--bootstrap: {args.bootstrap} must be at least 100")
    if args.fail_on_regression is not None and args.fail_on_regression < 0:
        raise UsageError(f"--fail-on-regression: {args.fail_on_regression} must be >= 0")
    runs = [load_run(d) for d in args.dirs]
    comp = compare_runs(
        runs,
        n_boot=args.bootstrap,
        confidence=args.confidence,
        min_difference=args.min_difference / 100.0,
    )
    text = comparison_markdown(comp)
    out = prepare_out_dir(
        Path(args.out) if args.out else Path(args.dirs[0]).resolve().parent / "comparison"
    )
    atomic_write_text(out / "comparison.md", text)
    sys.stdout.write(text)
    print(f"\ncomparison written to {out / 'comparison.md'}")
    if not args.no_plots:
        from specload.compare.plots import write_comparison_plots  # noqa: PLC0415

        paths = write_comparison_plots(runs, out)
        print("plots: " + ", ".join(str(p) for p in paths))
    if args.fail_on_regression is not None:
        regressions = comp.regressions(args.fail_on_regression)
        if regressions:
            for line in regressions:
                print(f"regression: {line}", file=sys.stderr)
            return 1
    return 0
