"""``specload results repair DIR``: a killed run's summary rebuilt from its records
(:mod:`specload.results.repair`)."""

from __future__ import annotations

import argparse
from pathlib import Path

from specload.results.repair import BACKUP_FILE, repair


def add_arguments(parser: argparse.ArgumentParser) -> None:
    sub = parser.add_subparsers(dest="results_command", metavar="ACTION")
    sub.required = True
    rep = sub.add_parser(
        "repair",
        help="rebuild a killed run's summary.json from requests.jsonl",
        description="rebuild summary.json (and summary.md) of a run killed before it "
        "finalized them, from requests.jsonl: status 'repaired', the level it died in "
        "incomplete; the old summary is kept as " + BACKUP_FILE,
    )
    rep.add_argument("dir", metavar="DIR", help="results directory of the killed run")
    rep.add_argument(
        "--force",
        action="store_true",
        help="rebuild a finalized summary too (status complete, interrupted, failed…)",
    )


def run(args: argparse.Namespace) -> int:
    summary = repair(args.dir, force=args.force)
    for level in summary["levels"]:
        print(
            f"  {level['name']}: {level.get('completed')} ok, {level.get('failed')} failed, "
            f"{level.get('duration', 0.0):.1f}s window"
            + ("" if level.get("complete") else " (incomplete: the run died in it)")
        )
    print(
        f"repaired {Path(args.dir) / 'summary.json'} from {summary['repair']['records']} "
        f"records (was {summary['repair']['from_status']}); summary.md rewritten"
    )
    return 0
