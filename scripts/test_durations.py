#!/usr/bin/env python3
"""Where the test suite's time goes, from pytest's junit XML (``--junitxml``).

Per directory (tests/unit, tests/integration, tests/vllm): tests, passed/failed/skipped,
the summed test time (setup + call + teardown, junit's ``time``), and the slowest
modules and tests. Several XML files (one per pytest invocation, e.g. the parallel run
and the serial vLLM run) are read together.

Under ``pytest -n N`` the summed test time is not the wall time (N tests run at once):
each file's own wall time (the ``testsuite`` element's ``time``) is printed beside it.

    python scripts/test_durations.py run.xml [more.xml ...] [--top 25] [--markdown]
"""

from __future__ import annotations

import argparse
import sys
import xml.etree.ElementTree as ET
from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class Case:
    """One test as junit recorded it."""

    module: str  # tests/unit/test_x.py
    name: str  # test_y[param]
    seconds: float
    outcome: str  # passed, failed, error, skipped

    @property
    def directory(self) -> str:
        return "/".join(self.module.split("/")[:2])

    @property
    def node_id(self) -> str:
        return f"{self.module}::{self.name}"


def _module_path(classname: str) -> str:
    """``tests.unit.test_x`` or ``tests.unit.test_x.TestClass`` to ``tests/unit/test_x.py``."""
    parts = classname.split(".")
    for end in range(len(parts), 0, -1):
        if parts[end - 1].startswith("test_"):
            return "/".join(parts[:end]) + ".py"
    return "/".join(parts) + ".py"


def _outcome(case: ET.Element) -> str:
    for tag in ("failure", "error", "skipped"):
        if case.find(tag) is not None:
            return {"failure": "failed"}.get(tag, tag)
    return "passed"


def read_cases(path: Path) -> tuple[list[Case], float]:
    """The file's test cases and its wall time in seconds (0 when absent)."""
    root = ET.parse(path).getroot()
    suites = [root] if root.tag == "testsuite" else list(root.iter("testsuite"))
    wall = sum(float(s.get("time") or 0.0) for s in suites)
    cases = [
        Case(
            module=_module_path(case.get("classname") or ""),
            name=case.get("name") or "",
            seconds=float(case.get("time") or 0.0),
            outcome=_outcome(case),
        )
        for suite in suites
        for case in suite.iter("testcase")
    ]
    return cases, wall


def _table(header: list[str], rows: list[list[str]], markdown: bool) -> str:
    if markdown:
        lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
        lines += ["| " + " | ".join(row) + " |" for row in rows]
        return "\n".join(lines)
    widths = [max(len(r[i]) for r in [header, *rows]) for i in range(len(header))]
    fmt = "  ".join(f"{{:{'<' if i == 0 else '>'}{w}}}" for i, w in enumerate(widths))
    return "\n".join(fmt.format(*row) for row in [header, *rows])


def report(files: list[Path], top: int, markdown: bool) -> str:
    cases: list[Case] = []
    out: list[str] = []
    walls = []
    for path in files:
        got, wall = read_cases(path)
        cases += got
        walls.append([str(path), str(len(got)), f"{wall:.1f}"])
    out += [_table(["junit file", "tests", "wall s"], walls, markdown), ""]

    by_dir: dict[str, list[Case]] = defaultdict(list)
    for case in cases:
        by_dir[case.directory].append(case)
    rows = []
    for directory in sorted(by_dir):
        group = by_dir[directory]
        count = {o: sum(c.outcome == o for c in group) for o in ("passed", "failed", "skipped")}
        count["failed"] += sum(c.outcome == "error" for c in group)
        rows.append(
            [
                directory,
                str(len(group)),
                str(count["passed"]),
                str(count["failed"]),
                str(count["skipped"]),
                f"{sum(c.seconds for c in group):.1f}",
            ]
        )
    total = sum(c.seconds for c in cases)
    rows.append(["total", str(len(cases)), "", "", "", f"{total:.1f}"])
    header = ["directory", "tests", "passed", "failed", "skipped", "test s"]
    out += [_table(header, rows, markdown), ""]

    by_module: dict[str, float] = defaultdict(float)
    for case in cases:
        by_module[case.module] += case.seconds
    slow_modules = sorted(by_module.items(), key=lambda kv: -kv[1])[:top]
    module_rows = [[m, f"{s:.1f}"] for m, s in slow_modules]
    out += [_table(["slowest modules", "test s"], module_rows, markdown), ""]

    slow = sorted(cases, key=lambda c: -c.seconds)[:top]
    test_rows = [[c.node_id, f"{c.seconds:.1f}"] for c in slow]
    out += [_table(["slowest tests", "test s"], test_rows, markdown)]
    return "\n".join(out)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("files", nargs="+", type=Path, help="junit XML files")
    parser.add_argument("--top", type=int, default=25, help="slowest modules and tests shown")
    parser.add_argument("--markdown", action="store_true", help="Markdown tables")
    args = parser.parse_args(argv)
    print(report(args.files, args.top, args.markdown))
    return 0


if __name__ == "__main__":
    sys.exit(main())
