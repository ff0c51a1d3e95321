"""``specload baseline export``: a results directory's baseline for the exporter and the TPOT alert
(the format: :mod:`specload.compare.baseline`)."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from specload.compare.baseline import baseline_from_summary, export_warnings
from specload.errors import UsageError
from specload.results.model import read
from specload.results.writer import atomic_write_bytes, dump_json


def add_arguments(parser: argparse.ArgumentParser) -> None:
    sub = parser.add_subparsers(dest="baseline_command", metavar="ACTION")
    sub.required = True
    export = sub.add_parser(
        "export",
        help="write the baseline of a results directory",
        description="write the baseline (median and p90 TPOT per level and "
        "category) of a results directory",
    )
    export.add_argument("dir", metavar="DIR", help="results directory of the baseline run")
    export.add_argument(
        "--out",
        metavar="FILE",
        default=None,
        help="output file (default: DIR/baseline.json; '-' for stdout)",
    )


def run(args: argparse.Namespace) -> int:
    summary = read(args.dir)
    baseline = baseline_from_summary(summary, str(args.dir))
    for warning in export_warnings(summary, str(args.dir)):
        print(f"specload baseline export: warning: {warning}", file=sys.stderr)
    payload = dump_json(baseline)
    if args.out == "-":
        print(payload.decode(), end="")
        return 0
    out = Path(args.out) if args.out else Path(args.dir) / "baseline.json"
    if not out.parent.is_dir():
        raise UsageError(f"--out {str(out)!r}: directory {str(out.parent)!r} does not exist")
    try:
        atomic_write_bytes(out, payload)
    except OSError as exc:
        raise UsageError(f"--out {str(out)!r}: cannot write ({exc.strerror})") from None
    print(
        f"baseline of {baseline['variant']} ({len(baseline['entries'])} entries) written to {out}"
    )
    return 0
