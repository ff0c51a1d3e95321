"""``summary.md``: the summary as Markdown tables for people."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from specload.results.model import Figures, Level, Summary, as_summary


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


def level_label(level: Level) -> str:
    if level.concurrency is not None:
        return f"{level.concurrency}"
    return f"{fmt(level.request_rate, 2)}/s"


def share(value: Any) -> str:
    """A ratio as a percentage (``-`` when unknown)."""
    if value is None or isinstance(value, bool) or not isinstance(value, int | float):
        return "-"
    return f"{value * 100:.0f}%"


def _truncated(stats: Figures) -> str:
    count, ratio = stats.reasoning_truncated, stats.truncated_share
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


_STOPPED_NOTE = (
    " stopped: how the level's window ended — precise (its median's interval within "
    "--precision), decided (its verdict against --against known), budget (its --duration or "
    "--requests spent) or interrupted — with the requests it took."
)


def _pct(value: Any) -> str:
    text = share(value)
    return text if text == "-" else f"{value * 100:.1f}%"


def _verdict(value: Any) -> str:
    return "-" if value is None else ("yes" if value else "**no**")


def _spec_lines(load: str, levels: Sequence[Level]) -> list[str]:
    """The levels' speculative decoding from the requests' own counts, when any carried them."""
    rows = [(level, level.figures.spec_decode) for level in levels]
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
        parts = [sd.reasoning, sd.content]
        lines.append(
            f"| {level_label(level)} | {fmt(sd.requests)} "
            f"| {_pct(sd.acceptance_rate)} "
            f"| {_pct(sd.acceptance_rate_request_mean)} "
            f"| {fmt(sd.mean_acceptance_length, 2)} "
            + "".join(f"| {_pct(p.acceptance_rate if p else None)} " for p in parts)
            + f"| {fmt(sd.ideal_speedup, 2)} "
            f"| {_verdict(level.spec_decode_reconciled)} |"
        )
    return lines


def summary_markdown(summary: Summary | Mapping[str, Any]) -> str:
    run = as_summary(summary)
    load = "concurrency" if run.mode == "closed" else "request rate"
    levels = run.levels
    status = run.status
    lines = [
        f"# specload run: {run.variant}",
        "",
        f"- host: {run.host}  model: {run.model}  server: {run.server_version or '?'}",
        f"- started {run.started_at}, ended {run.ended_at or '-'}, status **{status}**"
        + (f" — {_STATUS_NOTES[str(status)]}" if str(status) in _STATUS_NOTES else ""),
    ]
    if run.stop_reason:
        lines.append(f"- stop reason: {run.stop_reason}")
    stopping = run.stopping  # --precision/--against: a "stopped" column (older runs: none)
    if stopping is not None:
        lines.append(f"- stopping: {stopping.text}")
    warnings = [(level_label(level), w) for level in levels for w in level.warnings]
    flagged = [
        (level_label(level), ", ".join(level.flags))
        for level in levels
        if level.flags and not level.warnings
    ]
    if warnings or flagged:
        lines += ["", "## Warnings", ""]
        lines += [f"- {load} {label}: {w}" for label, w in warnings]
        lines += [f"- {load} {label}: flagged {f}" for label, f in flagged]
    # tool calls: a column of their own when any level has some (means per request)
    tools = any(level.figures.total_tool_tokens > 0 for level in levels)
    lines += [
        "",
        "## Levels",
        "",
        "n: completed requests (the sample of every median); truncated: completed requests "
        "that ended inside reasoning at max_tokens (their TTFCT is missing)."
        + (_STOPPED_NOTE if stopping is not None else ""),
        "",
        f"| {load} | n | failed | unfinished | out tok/s | median TPOT ms | p90 TPOT ms "
        "| median TTFT ms | median TTFCT ms | reasoning tok | content tok "
        + ("| tool tok " if tools else "")
        + "| truncated | tok/chunk | acceptance | flags |"
        + (" stopped |" if stopping is not None else ""),
        "|---" * (15 + tools + (stopping is not None)) + "|",
    ]
    for level in levels:
        f = level.figures
        acc = level.acceptance.rate
        tool = f"| {fmt(f.mean_tool_tokens)} " if tools else ""
        lines.append(
            f"| {level_label(level)}{'' if level.complete else ' (partial)'} "
            f"| {fmt(f.completed)} | {fmt(f.failed)} "
            f"| {fmt(f.unfinished)} | {fmt(f.output_throughput)} "
            f"| {fmt(f.median_tpot_ms, 2)} | {fmt(f.p90_tpot_ms, 2)} "
            f"| {fmt(f.ms('median', 'ttft'))} | {fmt(f.ms('median', 'ttfct'))} "
            f"| {fmt(f.mean_reasoning_tokens)} "
            f"| {fmt(f.mean_content_tokens)} {tool}"
            f"| {_truncated(f)} | {fmt(f.mean_tokens_per_chunk, 2)} "
            f"| {fmt(acc, 3) if acc is not None else '-'} "
            f"| {', '.join(level.flags) or '-'} |"
            + (f" {level.stopped or '-'} |" if stopping is not None else "")
        )
    lines += ["", "## Per category (n / median TPOT ms / output tok/s / truncated)", ""]
    cats = run.categories
    if cats:
        lines.append(f"| {load} | " + " | ".join(cats) + " |")
        lines.append("|---" * (len(cats) + 1) + "|")
        for level in levels:
            cells = []
            for cat in cats:
                c = level.categories.get(cat)
                if c is None:
                    cells.append("-")
                    continue
                cells.append(
                    f"{fmt(c.completed)} / {fmt(c.median_tpot_ms, 2)} / "
                    f"{fmt(c.output_throughput)} / {share(c.truncated_share)}"
                )
            lines.append(f"| {level_label(level)} | " + " | ".join(cells) + " |")
    lines += _spec_lines(load, levels)
    outages = [(level, o) for level in levels for o in level.outages]
    if outages:
        lines += ["", "## Outages", "", "| level | start | end | seconds |", "|---|---|---|---|"]
        for level, o in outages:
            lines.append(
                f"| {level_label(level)} | {o.start} | {o.end or '-'} | {fmt(o.duration_s)} |"
            )
    errors: dict[str, int] = {}
    for level in levels:
        for kind, n in level.figures.errors.items():
            errors[kind] = errors.get(kind, 0) + n
    if errors:
        lines += ["", "## Errors", ""]
        lines += [f"- {kind}: {n}" for kind, n in sorted(errors.items())]
    lines.append("")
    return "\n".join(lines)
