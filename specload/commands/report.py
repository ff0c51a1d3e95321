"""``specload report RESULT_DIR... [--out FILE.html]``: one HTML file a person can open.

One directory: a report of that run alone, written to ``RESULT_DIR/report.html``.
Several: the first is the reference and the others are compared with it as ``specload
compare`` does (the same checks, the same bootstrap, the same verdicts), written to
``report.html`` in the folder ``specload compare`` writes to (``comparison/`` beside
the first directory). The page is self-contained (inline styles and SVG charts, no
script, nothing fetched): it opens offline and can be attached to a ticket.
``prediction.json`` files found in the directories (``specload predict --out DIR``) or
given with ``--prediction`` are set beside the measured runs.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from pathlib import Path

from specload.compare.options import (
    add_verdict_options,
    check_verdict_options,
    verdict_kwargs,
)
from specload.errors import UsageError
from specload.results.writer import SUMMARY_FILE, atomic_write_text, prepare_out_dir

REPORT_FILE = "report.html"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "dirs",
        nargs="+",
        metavar="RESULT_DIR",
        help="results directories of `specload run`; with several, the first is the reference",
    )
    parser.add_argument(
        "--out",
        metavar="FILE.html",
        default=None,
        help=f"where the report goes (default: RESULT_DIR/{REPORT_FILE} for one directory; "
        f"comparison/{REPORT_FILE} next to the first for several, where `specload compare` "
        "writes)",
    )
    parser.add_argument(
        "--prediction",
        action="append",
        metavar="FILE",
        default=None,
        help="a `specload predict` prediction.json to set beside the measured runs "
        "(repeatable; DIR/prediction.json of each directory is read anyway)",
    )
    add_verdict_options(parser)


def check_result_dir(path: str) -> Path:
    """``path`` is a results directory (one-line error naming it otherwise)."""
    p = Path(path)
    if not p.exists():
        raise UsageError(f"{path}: no such results directory")
    if not p.is_dir():
        raise UsageError(f"{path}: not a directory (give a results directory of `specload run`)")
    if not (p / SUMMARY_FILE).is_file():
        raise UsageError(f"{path}: no {SUMMARY_FILE} (is it a results directory?)")
    return p


def default_out(dirs: Sequence[str]) -> Path:
    """RESULT_DIR/report.html for one; ``comparison/report.html`` beside the first for several."""
    if len(dirs) == 1:
        return Path(dirs[0]) / REPORT_FILE
    return Path(dirs[0]).resolve().parent / "comparison" / REPORT_FILE


def _out_file(value: str | None, dirs: Sequence[str]) -> Path:
    out = Path(value) if value else default_out(dirs)
    if value is not None and (out.is_dir() or value.endswith(("/", "\\"))):
        raise UsageError(f"--out {value!r}: give a file name (e.g. {Path(value) / REPORT_FILE})")
    prepare_out_dir(out.parent if str(out.parent) else ".", name="--out")
    return out


def run(args: argparse.Namespace) -> int:
    # numpy and matplotlib load only when the command runs, not for `specload report --help`.
    from specload.compare.model import compare_runs, load_run  # noqa: PLC0415
    from specload.report.pages import comparison_html, single_run_html  # noqa: PLC0415

    min_n = check_verdict_options(args)
    dirs = [str(check_result_dir(d)) for d in args.dirs]
    predictions = [Path(p) for p in args.prediction or []]
    out = _out_file(args.out, dirs)
    runs = [load_run(d) for d in dirs]
    if len(runs) == 1:
        text = single_run_html(runs[0], predictions)
    else:
        comp = compare_runs(runs, **verdict_kwargs(args, min_n))
        for warning in comp.warnings:
            print(f"specload report: warning: {' '.join(warning.split())}", file=sys.stderr)
        text = comparison_html(
            runs,
            comp,
            confidence=args.confidence,
            n_boot=args.bootstrap,
            min_n=min_n,
            predictions=predictions,
        )
    atomic_write_text(out, text)
    print(f"report written to {out}")
    return 0
