#!/usr/bin/env python3
"""Generate specload's Grafana boards (stdlib only).

    python grafana/generate.py           # write grafana/dashboards/<folder>/<uid>.json
    python grafana/generate.py --check   # exit 1 if the committed JSON differs

The committed JSON is the product (Grafana provisions it from
grafana/provisioning/); the boards are written in grafana/specload_boards/, one
module per board. A unit test fails when the two drift apart. Queries use the
recording rules of deploy/prometheus/rules where one exists, so boards and
alerts read the same numbers.

Every board has the variables ``datasource``, ``model`` and ``variant``
(multi-select, "All" = every value), links to the other boards (time range and
variables kept) and an annotation at each reload of a selected variant.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

# Run as a script, this file's folder is first on sys.path, so the package
# beside it imports as it is; whoever loads this file otherwise puts it there.
from specload_boards import BOARDS
from specload_boards.render import dashboard

HERE = Path(__file__).resolve().parent
DASHBOARDS = HERE / "dashboards"


def rendered() -> dict[Path, str]:
    """Every board's file path and JSON text."""
    out: dict[Path, str] = {}
    for board in BOARDS:
        path = DASHBOARDS / board.folder / f"{board.address.uid}.json"
        out[path] = json.dumps(dashboard(board), indent=2, ensure_ascii=False) + "\n"
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="Generate specload's Grafana boards.")
    parser.add_argument(
        "--check",
        action="store_true",
        help="exit 1 if the committed JSON differs from what this generates",
    )
    args = parser.parse_args(argv)
    files = rendered()
    stale = sorted(
        path
        for path, text in files.items()
        if not path.is_file() or path.read_text(encoding="utf-8") != text
    )
    extra = sorted(set(DASHBOARDS.glob("*/*.json")) - set(files))
    if args.check:
        for path in [*stale, *extra]:
            print(
                f"{path.relative_to(HERE.parent)}: differs from what grafana/generate.py writes "
                "(run python grafana/generate.py)",
                file=sys.stderr,
            )
        return 1 if stale or extra else 0
    for path in stale:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(files[path], encoding="utf-8")
        print(f"wrote {path.relative_to(HERE.parent)}")
    for path in extra:
        path.unlink()
        print(f"removed {path.relative_to(HERE.parent)}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
