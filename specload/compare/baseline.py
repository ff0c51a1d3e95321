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
when levels are mostly truncated: more than :data:`TRUNCATED_SHARE` of their
completed requests ended inside reasoning at max_tokens — such a baseline
measures reasoning cut at max_tokens, not the workload's answers.
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import orjson

from specload.compare import TRUNCATED_SHARE
from specload.errors import UsageError

FORMAT = "specload-baseline/1"


def _entry(
    level: Mapping[str, Any], category: str, stats: Mapping[str, Any]
) -> dict[str, Any] | None:
    median, p90 = stats.get("median_tpot_ms"), stats.get("p90_tpot_ms")
    if median is None or p90 is None:
        return None
    return {
        "concurrency": level.get("concurrency"),
        "request_rate": level.get("request_rate"),
        "category": category,
        "tpot_median_seconds": float(median) / 1000.0,
        "tpot_p90_seconds": float(p90) / 1000.0,
        "requests": int(stats.get("completed") or 0),
    }


def baseline_from_summary(summary: Mapping[str, Any], source: str) -> dict[str, Any]:
    entries: list[dict[str, Any]] = []
    for level in summary.get("levels", []):
        if not level.get("complete", True):
            continue
        entry = _entry(level, "all", level)
        if entry is not None:
            entries.append(entry)
        for cat, stats in sorted(level.get("categories", {}).items()):
            entry = _entry(level, cat, stats)
            if entry is not None:
                entries.append(entry)
    if not entries:
        raise UsageError(f"{source}: no complete level with TPOT to export")
    return {
        "format": FORMAT,
        "variant": summary.get("variant"),
        "model": summary.get("model"),
        "created_at": datetime.now(UTC).isoformat(timespec="seconds"),
        "source": source,
        "entries": entries,
    }


def truncated_share(stats: Mapping[str, Any]) -> float | None:
    """Completed requests that ended inside reasoning at max_tokens / completed."""
    ratio = stats.get("reasoning_truncated_ratio")
    if isinstance(ratio, int | float) and not isinstance(ratio, bool):
        return float(ratio)
    count, completed = stats.get("reasoning_truncated"), stats.get("completed")
    if isinstance(count, int) and isinstance(completed, int) and completed > 0:
        return count / completed
    return None


def truncated_levels(summary: Mapping[str, Any]) -> list[tuple[str, float]]:
    """Exported levels where most completed requests ended inside reasoning at max_tokens."""
    out: list[tuple[str, float]] = []
    for level in summary.get("levels", []):
        if not level.get("complete", True):
            continue
        share = truncated_share(level)
        if share is not None and share > TRUNCATED_SHARE:
            out.append((str(level.get("name")), share))
    return out


def export_warnings(summary: Mapping[str, Any], source: str) -> list[str]:
    """One-line warnings about what a baseline from ``summary`` is worth."""
    out: list[str] = []
    status = summary.get("status")
    if status == "running":
        out.append(
            f"{source}: the run never finalized its summary (status running: killed?); "
            f"`specload results repair {source}` rebuilds it from requests.jsonl"
        )
    truncated = truncated_levels(summary)
    if truncated:
        complete = sum(1 for lv in summary.get("levels", []) if lv.get("complete", True))
        names = ", ".join(f"{name} {share * 100:.0f}%" for name, share in truncated)
        out.append(
            f"{len(truncated)} of {complete} levels of {source} mostly truncated ({names} of "
            "completed requests ended inside reasoning at max_tokens): this baseline measures "
            "reasoning cut at max_tokens, not answers; raise --max-tokens"
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
