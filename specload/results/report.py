"""``summary.md``: the summary as Markdown tables for people."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any


def fmt(value: Any, digits: int = 1) -> str:
    if value is None:
        return "-"
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        return f"{value:.{digits}f}"
    return str(value)


def level_label(level: Mapping[str, Any]) -> str:
    if level.get("concurrency") is not None:
        return f"{level['concurrency']}"
    return f"{fmt(level.get('request_rate'), 2)}/s"


def share(value: Any) -> str:
    """A ratio as a percentage (``-`` when unknown)."""
    if value is None or isinstance(value, bool) or not isinstance(value, int | float):
        return "-"
    return f"{value * 100:.0f}%"


def _truncated(stats: Mapping[str, Any]) -> str:
    count = stats.get("reasoning_truncated")
    ratio = stats.get("reasoning_truncated_ratio")
    if ratio is None and isinstance(count, int) and stats.get("completed"):
        ratio = count / stats["completed"]
    if count is None:
        return "-"
    return f"{count} ({share(ratio)})" if ratio is not None else str(count)


_STATUS_NOTES = {
    "running": "the run has not finished, or was killed before finalizing this summary "
    "(`specload results repair DIR` rebuilds it from requests.jsonl)",
    "repaired": "rebuilt from requests.jsonl by `specload results repair` after the run was "
    "killed; the level the run stopped in is incomplete",
    "incomplete": "finished, but a level has unfinished or lost requests or held fewer users "
    "than planned (see Warnings)",
    "interrupted": "stopped early; the level it stopped in is incomplete",
    "failed": "stopped by an error or an outage; the level it stopped in is incomplete",
}


def _pct(value: Any) -> str:
    text = share(value)
    return text if text == "-" else f"{value * 100:.1f}%"


def _verdict(value: Any) -> str:
    return "-" if value is None else ("yes" if value else "**no**")


def _spec_lines(load: str, levels: Any) -> list[str]:
    """The levels' speculative decoding from the requests' own counts, when any carried them."""
    rows = [(level, level.get("spec_decode")) for level in levels]
    if not any(sd for _, sd in rows):
        return []
    lines = [
        "",
        "## Speculative decoding (the server's per-request counts)",
        "",
        "acceptance: accepted / draft tokens over the level (per request: the mean of the "
        "requests' own); length: 1 + accepted / verify steps; ideal: the speedup the "
        "acceptance alone gives if a verify step costs a plain step; reconciled: the "
        "requests' sums against the server's counters over the level.",
        "",
        f"| {load} | requests | acceptance | per request | length | reasoning | content "
        "| ideal | reconciled |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for level, sd in rows:
        if not sd:
            continue
        parts = [sd.get(c) or {} for c in ("reasoning", "content")]
        lines.append(
            f"| {level_label(level)} | {fmt(sd.get('requests'))} "
            f"| {_pct(sd.get('acceptance_rate'))} "
            f"| {_pct(sd.get('acceptance_rate_request_mean'))} "
            f"| {fmt(sd.get('mean_acceptance_length'), 2)} "
            + "".join(f"| {_pct(p.get('acceptance_rate'))} " for p in parts)
            + f"| {fmt(sd.get('ideal_speedup'), 2)} "
            f"| {_verdict(level.get('spec_decode_reconciled'))} |"
        )
    return lines


def summary_markdown(summary: Mapping[str, Any]) -> str:
    load = "concurrency" if summary.get("mode", "closed") == "closed" else "request rate"
    levels = summary.get("levels", [])
    status = summary.get("status")
    lines = [
        f"# specload run: {summary.get('variant')}",
        "",
        f"- host: {summary.get('host')}  model: {summary.get('model')}  "
        f"server: {summary.get('server_version') or '?'}",
        f"- started {summary.get('started_at')}, ended {summary.get('ended_at') or '-'}, "
        f"status **{status}**"
        + (f" — {_STATUS_NOTES[str(status)]}" if str(status) in _STATUS_NOTES else ""),
    ]
    if summary.get("stop_reason"):
        lines.append(f"- stop reason: {summary.get('stop_reason')}")
    warnings = [
        (level_label(level), str(w)) for level in levels for w in level.get("warnings") or []
    ]
    flagged = [
        (level_label(level), ", ".join(str(f) for f in level["flags"]))
        for level in levels
        if level.get("flags") and not level.get("warnings")
    ]
    if warnings or flagged:
        lines += ["", "## Warnings", ""]
        lines += [f"- {load} {label}: {w}" for label, w in warnings]
        lines += [f"- {load} {label}: flagged {f}" for label, f in flagged]
    # tool calls: a column of their own when any level has some (means per request)
    tools = any((level.get("total_tool_tokens") or 0) > 0 for level in levels)
    lines += [
        "",
        "## Levels",
        "",
        "n: completed requests (the sample of every median); truncated: completed requests "
        "that ended inside reasoning at max_tokens (their TTFCT is missing).",
        "",
        f"| {load} | n | failed | unfinished | out tok/s | median TPOT ms | p90 TPOT ms "
        "| median TTFT ms | median TTFCT ms | reasoning tok | content tok "
        + ("| tool tok " if tools else "")
        + "| truncated | tok/chunk | acceptance | flags |",
        "|---" * (15 + tools) + "|",
    ]
    for level in levels:
        server = level.get("server") or {}
        acc = server.get("spec_decode_acceptance_rate")
        tool = f"| {fmt(level.get('mean_tool_tokens'))} " if tools else ""
        lines.append(
            f"| {level_label(level)}{'' if level.get('complete', True) else ' (partial)'} "
            f"| {fmt(level.get('completed'))} | {fmt(level.get('failed'))} "
            f"| {fmt(level.get('unfinished'))} | {fmt(level.get('output_throughput'))} "
            f"| {fmt(level.get('median_tpot_ms'), 2)} | {fmt(level.get('p90_tpot_ms'), 2)} "
            f"| {fmt(level.get('median_ttft_ms'))} | {fmt(level.get('median_ttfct_ms'))} "
            f"| {fmt(level.get('mean_reasoning_tokens'))} "
            f"| {fmt(level.get('mean_content_tokens'))} {tool}"
            f"| {_truncated(level)} | {fmt(level.get('mean_tokens_per_chunk'), 2)} "
            f"| {fmt(acc, 3) if acc is not None else '-'} "
            f"| {', '.join(str(f) for f in level.get('flags') or []) or '-'} |"
        )
    lines += ["", "## Per category (n / median TPOT ms / output tok/s / truncated)", ""]
    cats = sorted({c for level in levels for c in level.get("categories", {})})
    if cats:
        lines.append(f"| {load} | " + " | ".join(cats) + " |")
        lines.append("|---" * (len(cats) + 1) + "|")
        for level in summary.get("levels", []):
            cells = []
            for cat in cats:
                c = level.get("categories", {}).get(cat)
                if c is None:
                    cells.append("-")
                    continue
                cells.append(
                    f"{fmt(c.get('completed'))} / {fmt(c.get('median_tpot_ms'), 2)} / "
                    f"{fmt(c.get('output_throughput'))} / "
                    f"{share(c.get('reasoning_truncated_ratio'))}"
                )
            lines.append(f"| {level_label(level)} | " + " | ".join(cells) + " |")
    lines += _spec_lines(load, levels)
    outages = [(level, o) for level in summary.get("levels", []) for o in level.get("outages", [])]
    if outages:
        lines += ["", "## Outages", "", "| level | start | end | seconds |", "|---|---|---|---|"]
        for level, o in outages:
            lines.append(
                f"| {level_label(level)} | {o['start']} | {o.get('end') or '-'} "
                f"| {fmt(o.get('duration_s'))} |"
            )
    errors: dict[str, int] = {}
    for level in summary.get("levels", []):
        for kind, n in level.get("errors", {}).items():
            errors[kind] = errors.get(kind, 0) + n
    if errors:
        lines += ["", "## Errors", ""]
        lines += [f"- {kind}: {n}" for kind, n in sorted(errors.items())]
    lines.append("")
    return "\n".join(lines)
