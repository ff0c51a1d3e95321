"""Comparison plots: each variant's median TPOT and output tok/s against the load."""

from __future__ import annotations

from pathlib import Path

from specload.compare.model import Run
from specload.results.plots import write_plots


def write_comparison_plots(runs: list[Run], out_dir: Path) -> list[Path]:
    return write_plots([run.summary for run in runs], out_dir, prefix="compare_")
