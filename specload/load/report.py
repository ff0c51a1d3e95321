"""What specload adds to Locust's reports: its request events and the CSV.

- :func:`fire_locust_events`: one Locust request event per request (``CHAT``, named
  by category, its end-to-end time), so Locust's request counts, RPS and failures
  count each request once. Its ``response_length`` is 0: specload does not count a
  response's bytes, and tokens are not bytes. TTFT, TPOT and tokens are in
  specload's own tab (:mod:`specload.load.webui`), CSV and results; listeners of
  Locust's events find them in the event's ``context``.
- :func:`write_csv` (``PREFIX_specload.csv``): per step and category (then
  ``all``), the rows of :func:`stats_rows`, whose figures are the aggregator's
  (:meth:`Aggregator.step_result`, as :func:`step_numbers` lists them; the web UI's
  tab reads the same).
- :func:`truncation_report`: at the end of a plain Locust run, the truncation guard's
  warnings per step, the same sentences as ``specload run`` gives per level
  (:func:`specload.results.aggregate.truncation_warnings`).
"""

from __future__ import annotations

import csv
import io
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

from specload.records.request import RequestRecord
from specload.records.stats import Aggregator

#: Locust's request type of specload's requests (one event per request).
REQUEST_TYPE = "CHAT"


def fire_locust_events(environment: Any, r: RequestRecord) -> None:
    """One Locust request event for the request: ``CHAT <category>``, end-to-end time.

    ``context`` holds the step and the request's own figures (``ttft_s``, ``tpot_s``,
    ``tokens_output``) for other listeners. An ``unfinished`` request (its user
    stopped by the run) did not end: not in Locust's request counts (it would be a
    failure of the target there), only in specload's.
    """
    if r.error_kind == "unfinished":
        return
    exc = None if r.ok else Exception(f"{r.error_kind}: {r.error_detail or ''}".strip())
    environment.events.request.fire(
        request_type=REQUEST_TYPE,
        name=r.category,
        response_time=(r.e2e_s or 0.0) * 1000,
        response_length=0,  # bytes: not counted (tokens are in specload's own figures)
        exception=exc,
        context={
            "step": r.step,
            "ttft_s": r.ttft_s,
            "tpot_s": r.tpot_s,
            "tokens_output": r.tokens_output,
        },
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


def step_numbers(aggregator: Aggregator) -> Iterator[tuple[str, str, dict[str, Any]]]:
    """``(step, category, numbers)`` per step and category, then per step (category
    ``all``): one definition of each figure (:meth:`Aggregator.step_result`)."""
    for step in aggregator.steps:
        numbers = aggregator.step_result(step)
        for category, cat in numbers["categories"].items():
            yield step, category, cat
        yield step, "all", numbers


def stats_rows(aggregator: Aggregator) -> list[dict[str, Any]]:
    """The CSV's rows (:func:`step_numbers`, columns :data:`CSV_COLUMNS`)."""
    return [stats_row(step, category, n) for step, category, n in step_numbers(aggregator)]


def csv_text(aggregator: Aggregator) -> str:
    """The CSV (header, then :func:`stats_rows`) as text."""
    out = io.StringIO(newline="")
    writer = csv.DictWriter(out, fieldnames=CSV_COLUMNS)
    writer.writeheader()
    writer.writerows(stats_rows(aggregator))
    return out.getvalue()


def write_csv(path: Path, aggregator: Aggregator) -> None:
    """Per step and category, then per step (category ``all``); written atomically."""
    tmp = path.with_name(path.name + ".tmp")
    with tmp.open("w", newline="") as f:
        f.write(csv_text(aggregator))
    tmp.replace(path)


def truncation_report(aggregator: Aggregator) -> list[str]:
    """The truncation guard's warnings of every step (``step NAME:`` before each when
    there are several): empty unless more than a fifth of a step's completed requests
    ended inside reasoning."""
    # Deferred: specload.results reads records through this package (``specload.load``).
    from specload.results.aggregate import truncation_warnings  # noqa: PLC0415

    steps = aggregator.steps
    lines = []
    for step in steps:
        stats = aggregator.total(step=step)
        where = f"step {step}: " if len(steps) > 1 else ""
        lines += [f"{where}{w}" for w in truncation_warnings(stats, stats.result(stats.span_s))]
    return lines
