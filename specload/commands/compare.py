"""``specload compare DIR_A DIR_B [...]``: each variant against the first.

Refuses killed or unfinalized runs and incomplete levels (``--allow-incomplete``),
warns about every setup difference between the runs (``--strict``: an error), and
writes ``comparison.md`` and ``comparison.html`` (the page of ``specload report``; plus
``comparison.json`` with ``--json``), warnings first;
speculative variants get efficiency rows and a crossover (``--profile DIR=FILE``: the
all-reduce share beside them).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from specload.compare.options import (
    add_verdict_options,
    check_verdict_options,
    verdict_kwargs,
)
from specload.errors import UsageError
from specload.results.writer import prepare_out_dir


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "dirs", nargs="+", metavar="DIR", help="results directories; the first is the reference"
    )
    parser.add_argument(
        "--out",
        metavar="DIR",
        default=None,
        help="where comparison.md, comparison.html and plots go (default: comparison/ next to "
        "the first DIR)",
    )
    parser.add_argument(
        "--fail-on-regression",
        metavar="PCT",
        type=float,
        default=None,
        help="exit 1 when a variant's median TPOT is worse than the first's by more than PCT "
        "percent with confidence (the interval's lower bound)",
    )
    add_verdict_options(parser)
    parser.add_argument(
        "--strict",
        action="store_true",
        help="runs that differ (prompts, seed, max_tokens, temperature, model, levels, "
        "windows, time scale, prefix cache) are an error, not a warning",
    )
    parser.add_argument(
        "--profile",
        action="append",
        metavar="DIR=FILE",
        default=None,
        help="a `specload profile … --json` report of the run in DIR (repeatable; default: "
        "DIR/profile.json when it exists): the all-reduce share beside the efficiency rows",
    )
    parser.add_argument(
        "--json", action="store_true", help="also write comparison.json (machine-readable)"
    )
    parser.add_argument("--no-plots", action="store_true", help="skip the PNG plots")


def run(args: argparse.Namespace) -> int:
    # numpy and matplotlib load only when the command runs, not for `specload compare --help`.
    from specload.compare.model import compare_runs, load_run  # noqa: PLC0415
    from specload.compare.profiles import parse_profile_options, read_profile  # noqa: PLC0415
    from specload.report.pages import write_comparison  # noqa: PLC0415

    if len(args.dirs) < 2:
        raise UsageError("compare: give at least two results directories")
    if args.fail_on_regression is not None and args.fail_on_regression < 0:
        raise UsageError(f"--fail-on-regression: {args.fail_on_regression} must be >= 0")
    min_n = check_verdict_options(args)
    chosen = parse_profile_options(args.profile, args.dirs)
    runs = [load_run(d) for d in args.dirs]
    for index, path in chosen.items():
        runs[index].profile = read_profile(path)
    comp = compare_runs(runs, **verdict_kwargs(args, min_n), strict=args.strict)
    for warning in comp.warnings:
        print(f"specload compare: warning: {' '.join(warning.split())}", file=sys.stderr)
    out = prepare_out_dir(
        Path(args.out) if args.out else Path(args.dirs[0]).resolve().parent / "comparison"
    )
    files = write_comparison(
        out,
        runs,
        comp,
        confidence=args.confidence,
        n_boot=args.bootstrap,
        min_n=min_n,
        json=args.json,
        plots=not args.no_plots,
    )
    sys.stdout.write(files.text)
    print(f"\ncomparison written to {files.markdown}")
    print(f"comparison (HTML) written to {files.html}")
    if files.json is not None:
        print(f"comparison (JSON) written to {files.json}")
    if not args.no_plots:
        print("plots: " + ", ".join(str(p) for p in files.plots))
    if args.fail_on_regression is not None:
        regressions = comp.regressions(args.fail_on_regression)
        if regressions:
            for line in regressions:
                print(f"regression: {line}", file=sys.stderr)
            return 1
    return 0
