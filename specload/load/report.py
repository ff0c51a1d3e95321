"""What specload adds to Locust's reports: its stats events, the CSV and the web UI table.

- :func:`fire_locust_events`: Locust's own stats (web UI, ``--csv``) get ``CHAT``,
  ``TTFT`` and ``TPOT`` rows per category;
- :func:`write_csv` (``PREFIX_specload.csv``) and :func:`stats_html` (``/specload``):
  per step and category (then ``all``), the rows of :func:`stats_rows`, whose
  figures are the aggregator's (:meth:`Aggregator.step_result`).
"""

from __future__ import annotations

import csv
import html
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from specload.load.aggregate import Aggregator
from specload.load.records import RequestRecord


def fire_locust_events(environment: Any, r: RequestRecord) -> None:
    """Locust's own stats (web UI, --csv): the request, and TTFT/TPOT per category.

    An ``unfinished`` request (its user stopped by the run) did not end: not in Locust's
    request counts (it would be a failure of the target there), only in specload's.
    """
    if r.error_kind == "unfinished":
        return
    fire = environment.events.request.fire
    exc = None if r.ok else Exception(f"{r.error_kind}: {r.error_detail or ''}".strip())
    fire(
        request_type="CHAT",
        name=r.category,
        response_time=(r.e2e_s or 0.0) * 1000,
        response_length=r.tokens_output,
        exception=exc,
        context={"step": r.step},
    )
    if r.ok:
        if r.ttft_s is not None:
            fire(
                request_type="TTFT",
                name=r.category,
                response_time=r.ttft_s * 1000,
                response_length=0,
                exception=None,
                context={},
            )
        if r.tpot_s is not None:
            fire(
                request_type="TPOT",
                name=r.category,
                response_time=r.tpot_s * 1000,
                response_length=0,
                exception=None,
                context={},
            )


CSV_COLUMNS = (
    "step",
    "category",
    "completed",
    "failed",
    "unfinished",
    "output_tokens",
    "reasoning_tokens",
    "content_tokens",
    "output_tokens_per_s",
    "median_ttft_ms",
    "p90_ttft_ms",
    "median_ttfct_ms",
    "median_tpot_ms",
    "p90_tpot_ms",
    "p99_tpot_ms",
    "median_itl_ms",
    "median_e2e_ms",
    "tokens_per_chunk",
    "coalesced_gap_share",
    "reasoning_truncated",
)


def stats_row(step: str, category: str, n: Mapping[str, Any]) -> dict[str, Any]:
    """One CSV/HTML row from a step's or category's numbers (:meth:`Stats.result`)."""

    def ms(key: str) -> str:
        v = n.get(key)
        return "" if v is None else f"{v:.3f}"

    def num(key: str, digits: int) -> str:
        v = n.get(key)
        return "" if v is None else f"{v:.{digits}f}"

    return {
        "step": step,
        "category": category,
        "completed": n["completed"],
        "failed": n["failed"],
        "unfinished": n["unfinished"],
        "output_tokens": n["total_output_tokens"],
        "reasoning_tokens": n["total_reasoning_tokens"],
        "content_tokens": n["total_content_tokens"],
        "output_tokens_per_s": num("output_throughput", 1),
        "median_ttft_ms": ms("median_ttft_ms"),
        "p90_ttft_ms": ms("p90_ttft_ms"),
        "median_ttfct_ms": ms("median_ttfct_ms"),
        "median_tpot_ms": ms("median_tpot_ms"),
        "p90_tpot_ms": ms("p90_tpot_ms"),
        "p99_tpot_ms": ms("p99_tpot_ms"),
        "median_itl_ms": ms("median_itl_ms"),
        "median_e2e_ms": ms("median_e2el_ms"),
        "tokens_per_chunk": num("mean_tokens_per_chunk", 3),
        "coalesced_gap_share": num("coalesced_chunk_share", 3),
        "reasoning_truncated": n["reasoning_truncated"],
    }


def stats_rows(aggregator: Aggregator) -> list[dict[str, Any]]:
    """Per step and category, then per step (category ``all``): one definition of each
    figure (:meth:`Aggregator.step_result`), the CSV's and the web UI's."""
    rows = []
    for step in aggregator.steps:
        numbers = aggregator.step_result(step)
        for category, cat in numbers["categories"].items():
            rows.append(stats_row(step, category, cat))
        rows.append(stats_row(step, "all", numbers))
    return rows


def write_csv(path: Path, aggregator: Aggregator) -> None:
    """Per step and category, then per step (category ``all``); written atomically."""
    rows = stats_rows(aggregator)
    tmp = path.with_name(path.name + ".tmp")
    with tmp.open("w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=CSV_COLUMNS)
        writer.writeheader()
        writer.writerows(rows)
    tmp.replace(path)


def stats_html(aggregator: Aggregator) -> str:
    """The per-step, per-category table as an HTML page (Locust web UI: ``/specload``)."""
    rows = stats_rows(aggregator)
    head = "".join(f"<th>{html.escape(c)}</th>" for c in CSV_COLUMNS)
    body = "".join(
        "<tr>" + "".join(f"<td>{html.escape(str(r[c]))}</td>" for c in CSV_COLUMNS) + "</tr>"
        for r in rows
    )
    return (
        "<!doctype html><meta charset=utf-8><meta http-equiv=refresh content=5>"
        "<title>specload</title><style>td,th{padding:2px 8px;text-align:right}</style>"
        f"<h1>specload: TTFT, TPOT and output tok/s per category</h1>"
        f"<table><tr>{head}</tr>{body}</table>"
    )
