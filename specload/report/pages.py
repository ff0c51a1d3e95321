"""The report's pages and a comparison's files, for every caller (``specload compare``,
``specload report``, the demo).

:func:`comparison_html` is the page of a comparison (``comparison.html``, or ``report.html``
of ``specload report`` with several directories), :func:`single_run_html` the page of one run
alone; :func:`write_comparison` writes what ``specload compare`` leaves in its folder:
``comparison.md``, ``comparison.html``, ``comparison.json`` (optional) and the PNG plots.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from specload.compare.model import Comparison, Run
from specload.compare.plots import comparison_charts, write_comparison_plots
from specload.compare.report import comparison_json, comparison_markdown
from specload.compare.stats import MIN_N
from specload.report.html import report_html
from specload.report.prediction import Prediction, find_predictions
from specload.results.writer import atomic_write_bytes, atomic_write_text, dump_json

COMPARISON_MD = "comparison.md"
COMPARISON_HTML = "comparison.html"
COMPARISON_JSON = "comparison.json"


def comparison_html(
    runs: Sequence[Run],
    comp: Comparison,
    *,
    confidence: float = 0.95,
    n_boot: int = 2000,
    min_n: int | None = None,
    predictions: Sequence[Path] = (),
) -> str:
    """The report of a comparison (``specload compare`` writes it as ``comparison.html``)."""
    found, warnings = find_predictions(runs, predictions)
    charts = comparison_charts(
        runs, confidence=confidence, n_boot=n_boot, min_n=MIN_N if min_n is None else min_n
    )
    return report_html(runs, comp, charts=charts, predictions=found, warnings=warnings)


def single_run_html(run: Run, predictions: Sequence[Path] = ()) -> str:
    found: list[Prediction]
    found, warnings = find_predictions([run], predictions)
    return report_html([run], None, predictions=found, warnings=warnings)


@dataclass(frozen=True)
class ComparisonFiles:
    """What :func:`write_comparison` wrote, and the Markdown it wrote."""

    markdown: Path
    html: Path
    json: Path | None
    plots: list[Path]
    text: str  # comparison.md's text


def write_comparison(
    out: Path,
    runs: Sequence[Run],
    comp: Comparison,
    *,
    confidence: float = 0.95,
    n_boot: int = 2000,
    min_n: int = MIN_N,
    json: bool = False,
    plots: bool = True,
) -> ComparisonFiles:
    """``comparison.md``, ``comparison.html``, ``comparison.json`` (with ``json``) and the
    plots (with ``plots``) of ``comp`` in the folder ``out`` (which exists)."""
    text = comparison_markdown(comp)
    atomic_write_text(out / COMPARISON_MD, text)
    page = comparison_html(runs, comp, confidence=confidence, n_boot=n_boot, min_n=min_n)
    atomic_write_text(out / COMPARISON_HTML, page)
    json_file = None
    if json:
        json_file = out / COMPARISON_JSON
        atomic_write_bytes(json_file, dump_json(comparison_json(comp)))
    pngs = (
        write_comparison_plots(list(runs), out, confidence=confidence, n_boot=n_boot, min_n=min_n)
        if plots
        else []
    )
    return ComparisonFiles(out / COMPARISON_MD, out / COMPARISON_HTML, json_file, pngs, text)
