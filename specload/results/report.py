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


def summary_markdown(summary: Mapping[str, Any]) -> str:
    load = "concurrency" if summary.get("mode", "closed") == "closed" else "request rate"
    lines = [
        f"# specload run: {summary.get('variant')}",
        "",
        f"- host: {summary.get('host')}  model: {summary.get('model')}  "
        f"server: {summary.get('server_version') or '?'}",
        f"- started {summary.get('started_at')}, ended {summary.get('ended_at') or '-'}, "
        f"status **{summary.get('status')}**",
        "",
        "## Levels",
        "",
        f"| {load} | completed | failed | out tok/s | median TPOT ms | p90 TPOT ms "
        "| median TTFT ms | median TTFCT ms | reasoning tok | content tok | truncated "
        "| tok/chunk | acceptance |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for level in summary.get("levels", []):
        server = level.get("server") or {}
        acc = server.get("spec_decode_acceptance_rate")
        lines.append(
            f"| {level_label(level)}{'' if level.get('complete', True) else ' (partial)'} "
            f"| {level['completed']} | {level['failed']} | {fmt(level['output_throughput'])} "
            f"| {fmt(level['median_tpot_ms'], 2)} | {fmt(level['p90_tpot_ms'], 2)} "
            f"| {fmt(level['median_ttft_ms'])} | {fmt(level['median_ttfct_ms'])} "
            f"| {fmt(level['mean_reasoning_tokens'])} | {fmt(level['mean_content_tokens'])} "
            f"| {level['reasoning_truncated']} | {fmt(level['mean_tokens_per_chunk'], 2)} "
            f"| {fmt(acc, 3) if acc is not None else '-'} |"
        )
    lines += ["", "## Per category (median TPOT ms / output tok/s)", ""]
    cats = sorted({c for level in summary.get("levels", []) for c in level.get("categories", {})})
    if cats:
        lines.append(f"| {load} | " + " | ".join(cats) + " |")
        lines.append("|---" * (len(cats) + 1) + "|")
        for level in summary.get("levels", []):
            cells = []
            for cat in cats:
                c = level.get("categories", {}).get(cat)
                cells.append(
                    "-"
                    if c is None
                    else f"{fmt(c['median_tpot_ms'], 2)} / {fmt(c['output_throughput'])}"
                )
            lines.append(f"| {level_label(level)} | " + " | ".join(cells) + " |")
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
