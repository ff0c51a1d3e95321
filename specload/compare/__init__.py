"""A/B comparison of result directories (``specload compare``).

Each variant against the first, per level and category: medians of TPOT,
TTFT, TTFCT and output tok/s, the relative difference with a bootstrap
confidence interval, and a verdict.
"""

from __future__ import annotations

from specload.compare.model import Comparison, Run, compare_runs, load_run
from specload.compare.report import comparison_markdown, headline

__all__ = ["Comparison", "Run", "compare_runs", "comparison_markdown", "headline", "load_run"]
