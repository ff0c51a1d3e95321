"""``specload baseline export DIR [--out FILE]``: the baseline the exporter and alerts read.

The format (documented in docs/results.md) is plain JSON::

    {"format": "specload-baseline/1", "variant": "baseline", "model": "m",
     "created_at": "...", "source": "results/baseline",
     "entries": [{"concurrency": 1, "request_rate": null, "category": "all",
                  "tpot_median_seconds": 0.0136, "tpot_p90_seconds": 0.0150,
                  "requests": 118}, ...]}

One entry per level and category (``all`` is every request of the level);
levels of an open-loop run carry ``request_rate`` instead of ``concurrency``.
Export warns (stderr, one line) when the run never finalized its summary, and
when levels are truncated: more than
:data:`~specload.results.model.TRUNCATED_SHARE_LIMIT` of their completed requests
ended inside reasoning at max_tokens — such a baseline measures reasoning cut at
max_tokens, not the workload's answers.
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import orjson

from specload.errors import UsageError
from specload.results.model import (
    TRUNCATED_SHARE_LIMIT,
    Figures,
    Level,
    Summary,
    as_summary,
)

FORMAT = "specload-baseline/1"


def _entry(level: Level, category: str, stats: Figures) -> dict[str, Any] | None:
    median, p90 = stats.median_tpot_ms, stats.p90_tpot_ms
    if median is None or p90 is None:
        return None
    return {
        "concurrency": level.concurrency,
        "request_rate": level.request_rate,
        "category": category,
        "tpot_median_seconds": median / 1000.0,
        "tpot_p90_seconds": p90 / 1000.0,
        "requests": stats.completed,
    }


def baseline_from_summary(summary: Summary | Mapping[str, Any], source: str) -> dict[str, Any]:
    run = as_summary(summary)
    entries: list[dict[str, Any]] = []
    for level in run.levels:
        if not level.complete:
            continue
        entry = _entry(level, "all", level.figures)
        if entry is not None:
            entries.append(entry)
        for cat, stats in sorted(level.categories.items()):
            entry = _entry(level, cat, stats)
            if entry is not None:
                entries.append(entry)
    if not entries:
        raise UsageError(f"{source}: no complete level with TPOT to export")
    return {
        "format": FORMAT,
        "variant": run.variant,
        "model": run.model,
        "created_at": datetime.now(UTC).isoformat(timespec="seconds"),
        "source": source,
        "entries": entries,
    }


def truncated_levels(summary: Summary | Mapping[str, Any]) -> list[tuple[str, float]]:
    """Exported levels flagged truncated (the model's share above its one limit)."""
    return [
        (level.name, level.figures.truncated_share)
        for level in as_summary(summary).levels
        if level.complete and level.figures.truncated and level.figures.truncated_share
    ]


def export_warnings(summary: Summary | Mapping[str, Any], source: str) -> list[str]:
    """One-line warnings about what a baseline from ``summary`` is worth."""
    run = as_summary(summary)
    out: list[str] = []
    if run.status == "running":
        out.append(
            f"{source}: the run never finalized its summary (status running: killed?); "
            f"`specload results repair {source}` rebuilds it from requests.jsonl"
        )
    truncated = truncated_levels(run)
    if truncated:
        complete = sum(1 for lv in run.levels if lv.complete)
        names = ", ".join(f"{name} {share * 100:.0f}%" for name, share in truncated)
        out.append(
            f"{len(truncated)} of {complete} levels of {source} truncated ({names} of "
            "completed requests ended inside reasoning at max_tokens, more than "
            f"{TRUNCATED_SHARE_LIMIT * 100:g}%): this baseline measures reasoning cut at "
            "max_tokens, not answers; raise --max-tokens"
        )
    return out


def load_baseline(path: str | Path) -> dict[str, Any]:
    """Read and check a baseline file (for the exporter and tests)."""
    p = Path(path)
    try:
        data = orjson.loads(p.read_bytes())
    except FileNotFoundError:
        raise UsageError(f"{path}: no such baseline file") from None
    except orjson.JSONDecodeError as exc:
        raise UsageError(f"{path}: not valid JSON ({exc})") from None
    if not isinstance(data, dict) or data.get("format") != FORMAT:
        raise UsageError(f"{path}: not a {FORMAT} file")
    if not isinstance(data.get("entries"), list):
        raise UsageError(f"{path}: 'entries' must be a list")
    for i, entry in enumerate(data["entries"]):
        for key in ("category", "tpot_median_seconds", "tpot_p90_seconds"):
            if not isinstance(entry, dict) or key not in entry:
                raise UsageError(f"{path}: entries[{i}] lacks {key!r}")
    return data
