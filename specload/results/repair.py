"""``specload results repair DIR``: rebuild a killed run's ``summary.json`` from ``requests.jsonl``.

A run killed with ``kill -9`` (or a lost machine) never finalizes its summary: it
says ``status: running``, and the level it died in has stale numbers (those of the
last write, at the previous level's end — or no entry at all when it died in the
first level). Every completed request is in ``requests.jsonl`` all the same. Repair
rebuilds each level's numbers from the records with the sweep's own definition
(:func:`specload.results.aggregate.summarize_level`):

- levels: the stale summary's, plus any level whose step appears in the records
  (``c16``, ``r2.5``) but not in the summary;
- a level whose window ended (``window_ended_at`` in the summary, or records of a
  later level) keeps its window and duration and is ``complete``; the level the run
  died in is ``complete: false``, its window from its first request to the last
  record of the run (the kill is not recorded: the last completion bounds it), its
  duration that span less its measured outages, and a warning says so;
- top level: ``status: repaired``, ``repair`` (the previous status, when, how many
  records), ``ended_at`` the last record's end when the run never wrote one.

The previous summary is kept as ``summary.before-repair.json`` (the first one, on a
second repair), the new one written atomically, and ``summary.md`` rewritten.
Requests in flight at the kill are not in ``requests.jsonl``: they are missing, and
the warning of the level says so. A finalized run (``complete``, ``interrupted``…) is
left alone unless ``--force``.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

from specload.errors import UsageError
from specload.records.clientload import NOT_MEASURED as CLIENT_NOT_MEASURED
from specload.slo import parse_slo

if TYPE_CHECKING:
    from specload.records.request import RequestRecord

BACKUP_FILE = "summary.before-repair.json"
REPAIRABLE = ("running", "repaired")
_LEVEL_STEP = re.compile(r"^(?:c(?P<c>[0-9]+)|r(?P<r>[0-9]*\.?[0-9]+(?:e[-+]?[0-9]+)?))$")
_REQUIRED = {
    "category": "default",
    "step": "",
    "variant": "",
    "model": "",
    "start_s": 0.0,
    "end_s": 0.0,
}


def record_of(raw: Mapping[str, Any]) -> RequestRecord:
    """A ``requests.jsonl`` line as a :class:`RequestRecord` (older lines: defaults filled)."""
    from specload.records.request import RequestRecord  # noqa: PLC0415

    data = dict(raw)
    for key, default in _REQUIRED.items():
        if data.get(key) is None:
            data[key] = default
    if "ok" not in data:
        data["ok"] = not data.get("error_kind")
    return RequestRecord.from_dict(data)


def _iso(ts: float) -> str:
    return datetime.fromtimestamp(ts, UTC).isoformat(timespec="milliseconds")


def _level_load(name: str, options: Mapping[str, Any]) -> dict[str, Any] | None:
    """``c16`` → concurrency 16; ``r2.5`` → request rate 2.5 (None: not a level's step)."""
    match = _LEVEL_STEP.match(name)
    if match is None:
        return None
    if match.group("c") is not None:
        return {"concurrency": int(match.group("c")), "request_rate": None, "max_concurrency": None}
    cap = options.get("max_concurrency")
    return {
        "concurrency": None,
        "request_rate": float(match.group("r")),
        "max_concurrency": int(cap) if isinstance(cap, int) else 256,
    }


def _planned(options: Mapping[str, Any]) -> tuple[float, float | None, int | None]:
    """(warm-up s, window s, window requests) from the run's options."""
    from specload.durations import parse_duration  # noqa: PLC0415

    def seconds(value: Any, default: str | None) -> float | None:
        text = value if value not in (None, "") else default
        if text is None:
            return None
        try:
            return parse_duration(text)
        except UsageError:
            return None

    requests = options.get("requests")
    duration = None if requests is not None else seconds(options.get("duration"), "60s")
    return seconds(options.get("warmup"), "10s") or 0.0, duration, requests


def _level_names(stale: Sequence[Mapping[str, Any]], records: Sequence[RequestRecord]) -> list[str]:
    names = [str(level.get("name")) for level in stale]
    first_start: dict[str, float] = {}
    for r in records:
        base = r.step.removesuffix("-warmup").removesuffix("-outage")
        if base not in names and _LEVEL_STEP.match(base):
            first_start[base] = min(first_start.get(base, r.start_s), r.start_s)
    return names + sorted(first_start, key=lambda n: first_start[n])


def _add(warnings: list[str], sentence: str) -> None:
    if sentence not in warnings:
        warnings.append(sentence)


def _measured_outage_s(level: Mapping[str, Any]) -> float:
    total = 0.0
    for outage in level.get("outages") or []:
        if outage.get("phase", "measure") == "measure":
            total += float(outage.get("duration_s") or 0.0)
    return total


def rebuild_summary(
    stale: Mapping[str, Any], raws: Sequence[Mapping[str, Any]], *, now: float | None = None
) -> dict[str, Any]:
    """The repaired summary: the stale one's metadata, every level rebuilt from ``raws``."""
    from specload.results.aggregate import summarize_level  # noqa: PLC0415
    from specload.results.model import iso_seconds, level_window  # noqa: PLC0415

    records = [record_of(raw) for raw in raws]
    options = stale.get("options") or {}
    warmup_s, planned_s, planned_requests = _planned(options)
    try:  # the run's --slo: records were judged against it (slo_met)
        objectives = parse_slo(options.get("slo")).as_dict()
    except UsageError:
        objectives = {}
    stale_levels = {str(lv.get("name")): lv for lv in stale.get("levels") or []}
    names = _level_names(list(stale.get("levels") or []), records)
    last_activity = max((r.end_s for r in records), default=None)
    by_level: dict[str, list[RequestRecord]] = {}
    for r in records:
        base = r.step.removesuffix("-warmup").removesuffix("-outage")
        by_level.setdefault(base, []).append(r)

    # the run died (rather than a finalized summary rebuilt with --force)
    killed = stale.get("status") == "running" or (
        stale.get("status") == "repaired"
        and (stale.get("repair") or {}).get("from_status") == "running"
    )
    levels: list[dict[str, Any]] = []
    for index, name in enumerate(names):
        old = dict(stale_levels.get(name) or {})
        load = _level_load(name, options) or {}
        mine = [r for r in records if r.step == name]
        later = [r.start_s for n in names[index + 1 :] for r in by_level.get(n, [])]
        start, end = level_window(old)
        if start is None and mine:
            start = min(r.start_s for r in mine)
        # complete: its window ended (an end written for a complete level, or a later
        # level began); an end written for an incomplete level is where it was cut
        finished = bool(later) or (end is not None and old.get("complete", True) is not False)
        # a finished level's flags and warnings are final; the dead level's are stale
        warnings = [str(w) for w in old.get("warnings") or []] if finished else []
        flags = {str(f) for f in old.get("flags") or []} if finished else set()
        if start is None:
            # died in the warm-up: no measured window
            end = None
            duration = 0.0
            finished = False
        elif end is not None and isinstance(old.get("duration"), int | float):
            duration = float(old["duration"])  # final: written after the window ended
        else:
            if end is None:
                end = min(later) if later else (last_activity or start)
            duration = max(0.0, end - start - _measured_outage_s(old))
        planned_window = old.get("planned_duration_s", planned_s)
        numbers = summarize_level(
            records,
            step=name,
            window_start_s=start,
            window_end_s=end,
            duration_s=duration,
            concurrency=old.get("concurrency", load.get("concurrency")),
            planned_duration_s=planned_window if isinstance(planned_window, int | float) else None,
            objectives=objectives,
        )
        if not finished:
            planned = old.get("planned_duration_s", planned_s)
            _add(
                warnings,
                f"the run was {'killed' if killed else 'stopped'} inside this level"
                + (
                    f"'s window: measured {duration:.1f}s"
                    + (f" of {float(planned):g}s planned" if planned else "")
                    if start is not None
                    else "'s warm-up: no measured window"
                )
                + "; requests in flight then are missing (rebuilt by results repair)",
            )
        elif killed and end is not None and last_activity is not None and not later:
            longest = max((r.e2e_s or 0.0 for r in mine), default=0.0)
            if last_activity - end < longest:
                _add(
                    warnings,
                    f"the run was killed {last_activity - end:.1f}s after this window ended, "
                    f"within its longest request ({longest:.1f}s): requests still in flight "
                    "then are missing",
                )
        first = min((r.start_s for r in by_level.get(name, [])), default=start)
        level: dict[str, Any] = {
            "name": name,
            "concurrency": old.get("concurrency", load.get("concurrency")),
            "request_rate": old.get("request_rate", load.get("request_rate")),
            "max_concurrency": old.get("max_concurrency", load.get("max_concurrency")),
            "complete": finished,
            "warmup_s": old.get("warmup_s", warmup_s),
            "planned_duration_s": old.get("planned_duration_s", planned_s),
            "planned_requests": old.get("planned_requests", planned_requests),
            "started_at": old.get("started_at") or (_iso(first) if first is not None else None),
            "ended_at": old.get("ended_at") or (_iso(end) if end is not None else None),
            "window_started_at": old.get("window_started_at")
            or (_iso(start) if start is not None else None),
            "window_ended_at": old.get("window_ended_at")
            or (_iso(end) if end is not None else None),
        }
        kept = {k: v for k, v in old.items() if k not in level and k not in numbers}
        level.update(kept)
        level.update(numbers)
        # the records' own flags (unfinished, reasoning_truncated, long_requests), as the
        # sweep assesses them: one assessment, specload.results.aggregate.assess_level
        flags.update(str(f) for f in numbers.get("flags") or [])
        level["warnings"] = warnings + [
            str(w) for w in numbers.get("warnings") or [] if str(w) not in warnings
        ]
        level["flags"] = sorted(flags)
        level.setdefault("outages", [])
        level["lost"] = int(old.get("lost") or 0)  # not in requests.jsonl: the stale count
        if not finished:
            level["users_held"] = None  # sampled by the dead process: unknown
            level["users_min"] = None
            level.update(CLIENT_NOT_MEASURED)  # the client's lag and CPU: the same
        if start is not None and end is not None:
            level["output_throughput_basis"] = "token_arrivals"
            # the window's exact bounds, so a reader recounts the same tokens (ISO: ms)
            level["window_start_s"] = start
            level["window_end_s"] = end
        else:
            level.pop("output_throughput_basis", None)
        if not finished:
            level["server"] = {"error": "not scraped: the run was killed inside this level"}
        else:
            level.setdefault("server", {})
        levels.append(level)

    out = dict(stale)
    started = iso_seconds(stale.get("started_at"))
    ended = iso_seconds(stale.get("ended_at")) or last_activity
    out.update(
        {
            "status": "repaired",
            "stop_reason": stale.get("stop_reason")
            or ("killed: the summary was rebuilt from requests.jsonl" if killed else None),
            "ended_at": _iso(ended) if ended is not None else None,
            "wall_time_s": (ended - started)
            if ended is not None and started is not None
            else stale.get("wall_time_s"),
            "outage_s": sum(
                float(o.get("duration_s") or 0.0) for lv in levels for o in lv["outages"]
            ),
            "overhead_s": None,  # unknown: the run's own clock died with it
            "levels": levels,
            "repair": {
                "from_status": (stale.get("repair") or {}).get("from_status")
                if stale.get("status") == "repaired"
                else stale.get("status"),
                "repaired_at": _iso(now if now is not None else datetime.now(UTC).timestamp()),
                "records": len(records),
                "last_record_at": _iso(last_activity) if last_activity is not None else None,
            },
        }
    )
    return out


def repair(path: str | Path, *, force: bool = False) -> dict[str, Any]:
    """Rebuild ``path``'s ``summary.json`` (and ``summary.md``); return the new summary."""
    from specload.results.report import summary_markdown  # noqa: PLC0415
    from specload.results.writer import (  # noqa: PLC0415
        SUMMARY_FILE,
        SUMMARY_MD_FILE,
        atomic_write_bytes,
        atomic_write_text,
        dump_json,
        read_requests,
        read_summary,
    )

    directory = Path(path)
    if not directory.is_dir():
        raise UsageError(f"{path}: no such results directory")
    stale = read_summary(directory)
    status = str(stale.get("status"))
    if status not in REPAIRABLE and not force:
        raise UsageError(
            f"{path}: status {status}: the summary was finalized, nothing to repair "
            "(--force rebuilds it from requests.jsonl anyway)"
        )
    raws = read_requests(directory)
    if not raws:
        raise UsageError(f"{path}: requests.jsonl has no record to rebuild the summary from")
    summary = rebuild_summary(stale, raws)
    backup = directory / BACKUP_FILE
    if not backup.exists():
        atomic_write_bytes(backup, (directory / SUMMARY_FILE).read_bytes())
    atomic_write_bytes(directory / SUMMARY_FILE, dump_json(summary))
    atomic_write_text(directory / SUMMARY_MD_FILE, summary_markdown(summary))
    return summary
