"""Results on disk: ``requests.jsonl``, ``summary.json`` (JSON Schema in
``specload/schemas/summary.schema.json``), ``summary.md`` and plots.

- :mod:`.aggregate`: per-request records → a level's numbers (per category too)
- :mod:`.writer`: the results directory, atomic and incremental writes
- :mod:`.report`: ``summary.md``
- :mod:`.plots`: PNG plots (matplotlib, Agg)
"""

from __future__ import annotations

from importlib import resources
from typing import Any

import orjson

from specload.results.aggregate import LevelAggregate, aggregate_records, summarize_level
from specload.results.writer import ResultsWriter, read_requests, read_summary

__all__ = [
    "LevelAggregate",
    "ResultsWriter",
    "aggregate_records",
    "read_requests",
    "read_summary",
    "summarize_level",
    "summary_schema",
]


def summary_schema() -> dict[str, Any]:
    """The JSON Schema of ``summary.json``."""
    text = resources.files("specload.schemas").joinpath("summary.schema.json").read_bytes()
    data: dict[str, Any] = orjson.loads(text)
    return data
