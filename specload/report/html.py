"""The report as one self-contained HTML file: tables, inline SVG charts, no script.

:func:`report_html` renders one run, or several compared by
:func:`specload.compare.model.compare_runs` (the first is the reference). The page has,
in order: the runs, the warnings (the comparison's, each level's, the predictions'), the
verdicts per variant and level (median TPOT and output tok/s, from the comparison's
cells, with the crossover and the speculation efficiency), the charts (the plots' data:
:func:`specload.results.plots.run_charts`, or
:func:`specload.compare.plots.comparison_charts` with each variant's bootstrap
interval), every level's figures per category from the typed result
(:mod:`specload.results.model`: TTFT, TTFCT, TPOT, ITL, tok/s, the truncated share) and
the comparison's rows, the speculative decoding per channel,
predictions beside the measured runs (:mod:`.prediction`, drawn by :mod:`.prediction_html`),
and the service-level objectives (attainment, goodput, ``--search slo``). Runs made with
``--precision`` or ``--against`` add a *stopped* column to the level tables (the verdicts,
a single run's summary, the levels' figures): how each level's window ended, in the model's
words (:attr:`specload.results.model.Level.stopped`). The tags, tables
and number formats are :mod:`.markup`'s.

Every string from the results is escaped (:func:`html.escape`); the file references
nothing outside itself (no script, stylesheet, font or image to fetch), so it opens
offline and can be attached to a ticket.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from datetime import UTC, datetime
from typing import Any

from specload import __version__
from specload.compare.efficiency import HIGH_ACCEPTANCE_NO_SPEEDUP, SOURCE_CLIENT
from specload.compare.model import (
    ALL,
    ALL_MEASURES,
    FASTER,
    SAME,
    SLOWER,
    TOO_FEW,
    TRUNCATED,
    Cell,
    Comparison,
    LevelComparison,
    Run,
    completeness_problems,
    level_warning_lines,
)
from specload.compare.report import WIDENED_MARK, crossover_line, difference_text
from specload.report.markup import (
    Markup,
    _yes_no,
    chart_figure,
    join,
    measure_value,
    ms,
    pct,
    rate,
    ratio,
    table,
    tag,
    tok_s,
)
from specload.report.prediction import Prediction
from specload.report.prediction_html import _predictions_section
from specload.results.model import (
    Figures,
    Level,
    Search,
    Server,
    Slo,
    SpecDecode,
    SpecPart,
    finite_number,
)
from specload.results.plots import TPOT_BAND_KEY, Chart, run_charts

NO_DATA = "no data"


rel_text = difference_text


_VERDICT_CLASS = {FASTER: "faster", SLOWER: "slower", SAME: "same", TOO_FEW: "few"}


def verdict_cell(verdict: str | None) -> Markup:
    text = verdict or NO_DATA
    return tag("td", text, class_="verdict " + _VERDICT_CLASS.get(text, "none"))


def level_title(level: Level) -> str:
    name = level.name or "?"
    if level.concurrency is not None:
        return f"concurrency {level.concurrency} ({name})"
    return f"rate {level.request_rate or 0:g}/s ({name})"


def truncation_text(stats: Figures) -> str:
    """``12 of 40 (30%)``: the truncated count and the model's truncated share
    (:attr:`Figures.truncated_share`); ``-`` where either is unknown."""
    share, cut = stats.truncated_share, stats.reasoning_truncated
    if not stats.completed or share is None or cut is None:
        return "-"
    return f"{cut} of {stats.completed} ({share * 100:.0f}%)"


# -- the sections --------------------------------------------------------------------------


def _runs_section(runs: Sequence[Run]) -> Markup:
    rows = []
    for i, run in enumerate(runs):
        s, options = run.result, run.result.options
        levels = ", ".join(s.level_names)
        scale = s.server_time_scale
        rows.append(
            [
                run.label + (" (reference)" if i == 0 and len(runs) > 1 else ""),
                str(run.path),
                run.status,
                s.model or "-",
                s.server_version or "-",
                s.started_at or "-",
                levels or "-",
                options.get("prompts") or "-",
                options.get("max_tokens") if options.get("max_tokens") is not None else "-",
                "-" if scale is None else f"{scale:g}",
            ]
        )
    header = [
        "variant",
        "directory",
        "status",
        "model",
        "server",
        "started",
        "levels",
        "prompts",
        "max_tokens",
        "simulator time scale",
    ]
    return join([tag("h2", "Runs", id="runs"), table(header, rows)])


def run_warnings(runs: Sequence[Run], skip: Iterable[str] = ()) -> list[str]:
    """Each level's own warnings (truncated reasoning, outages, counts that disagree…), as
    the comparison words them; ``skip``: levels whose warnings the comparison has."""
    out = []
    done = set(skip)
    for run in runs:
        for level in run.result.levels:
            if level.name in done:
                continue
            out += level_warning_lines(run.label, level.name, level)
    return out


def _warnings_section(warnings: Sequence[str]) -> Markup:
    if not warnings:
        return join([tag("h2", "Warnings", id="warnings"), tag("p", "None.")])
    unique = list(dict.fromkeys(" ".join(w.split()) for w in warnings))
    items = join(tag("li", w) for w in unique)
    return join([tag("h2", f"Warnings ({len(unique)})", id="warnings"), tag("ul", items)])


def _summary_line(verdicts: Mapping[str, list[str]], ref: str) -> str:
    parts = []
    for verdict in (FASTER, SLOWER, SAME, TOO_FEW, TRUNCATED, NO_DATA):
        where = verdicts.get(verdict)
        if where:
            what = f"{verdict} than {ref}" if verdict in (FASTER, SLOWER) else verdict
            parts.append(f"{what} at {', '.join(where)}")
    return "; ".join(parts) or NO_DATA


def _verdicts_section(comp: Comparison) -> Markup:
    ref = comp.variants[0]
    conf = f"{comp.confidence * 100:g}%"
    out: list[object] = [tag("h2", "Verdicts", id="verdicts")]
    out.append(
        tag(
            "p",
            f"Each variant against {ref} at each level, on all requests: median TPOT "
            f"(decode speed) and output tok/s. Faster/slower when the {conf} bootstrap "
            f"interval of the difference excludes zero and the difference is at least "
            f"{comp.min_difference * 100:g}%; {TOO_FEW} below {comp.min_n} samples on a side.",
        )
    )
    rules = [f"{v}: {s.text}" for v, s in zip(comp.variants, comp.stopping, strict=False) if s]
    if rules:
        out.append(
            tag(
                "p",
                "Stopping rules (the stopped columns: how each level's window ended; the "
                f"verdicts are this comparison's own): {'; '.join(rules)}.",
                class_="note",
            )
        )
    for i, variant in enumerate(comp.variants[1:], start=1):
        by_verdict: dict[str, list[str]] = {}
        rows = []
        sides = _stopped_sides(comp, (0, i))
        for level in comp.levels:
            tpot = level.cells.get((ALL, "tpot"))
            tok = level.cells.get((ALL, "output_throughput"))
            if tpot is None:
                continue
            verdict = tpot.verdicts[i] or NO_DATA
            by_verdict.setdefault(verdict, []).append(level.label)
            rel, ci = rel_text(tpot.diffs[i])
            row: list[object] = [
                level.label,
                f"{tpot.n[0]} / {tpot.n[i]}" if tpot.n else "-",
                ms(tpot.values[0]),
                ms(tpot.values[i]),
                rel,
                ci,
                verdict_cell(tpot.verdicts[i]),
            ]
            if tok is not None:
                trel, tci = rel_text(tok.diffs[i])
                row += [
                    tok_s(tok.values[0]),
                    tok_s(tok.values[i]),
                    trel,
                    tci,
                    verdict_cell(tok.verdicts[i]),
                ]
            else:
                row += ["-"] * 4 + [verdict_cell(None)]
            row.append(rate(level.acceptance[i]) if i < len(level.acceptance) else "-")
            marks = [m for k in (0, i) for m in (level.marks[k] if k < len(level.marks) else [])]
            row.append(", ".join(dict.fromkeys(marks)) or "")
            row += [_stopped(level, k) for k in sides]
            rows.append(row)
        header = [
            "level",
            f"n {ref} / {variant}",
            f"TPOT {ref} (ms)",
            f"TPOT {variant} (ms)",
            "Δ TPOT",
            f"{conf} CI",
            "TPOT verdict",
            f"tok/s {ref}",
            f"tok/s {variant}",
            "Δ tok/s",
            f"{conf} CI",
            "tok/s verdict",
            "acceptance rate",
            "marks",
            *(f"{comp.variants[k]} stopped" for k in sides),
        ]
        out += [
            tag("h3", f"{variant} vs {ref}"),
            tag(
                "p",
                f"{variant}: {_summary_line(by_verdict, ref)} (median TPOT).",
                class_="headline",
            ),
            table(header, rows, class_="data verdicts"),
        ]
    for cross in comp.crossovers:
        out.append(tag("p", crossover_line(comp, cross), class_="crossover"))
    out.append(_efficiency_table(comp))
    return join(out)


def _stopped_sides(comp: Comparison, sides: Sequence[int]) -> list[int]:
    """The runs (of ``sides``) whose levels say how they stopped, when a run of the
    comparison had ``--precision`` or ``--against`` (else none: the page as before)."""
    if not comp.has_stopping:
        return []
    return [k for k in sides if any(k < len(lc.stopped) and lc.stopped[k] for lc in comp.levels)]


def _stopped(level: LevelComparison, k: int) -> str:
    text = level.stopped[k] if k < len(level.stopped) else None
    return text or "-"


def _efficiency_table(comp: Comparison) -> Markup:
    rows = []
    ref = comp.variants[0]
    for i, variant in enumerate(comp.variants[1:], start=1):
        for level in comp.levels:
            eff = level.efficiency[i] if i < len(level.efficiency) else None
            if eff is None:
                continue
            source = "client" if eff.source == SOURCE_CLIENT else "server"
            ci = eff.measured_ci
            eci = eff.efficiency_ci
            rows.append(
                [
                    variant,
                    level.label,
                    f"{eff.ideal:.2f} ({source})",
                    ratio(eff.measured),
                    "-" if ci is None else f"{ci[0]:.2f} .. {ci[1]:.2f}",
                    ratio(eff.efficiency),
                    "-" if eci is None else f"{eci[0]:.2f} .. {eci[1]:.2f}",
                    _shares(eff.allreduce_share),
                    HIGH_ACCEPTANCE_NO_SPEEDUP if eff.no_speedup else "",
                ]
            )
    if not rows:
        return Markup("")
    conf = f"{comp.confidence * 100:g}%"
    header = [
        "variant",
        "level",
        "ideal speedup",
        "measured speedup",
        f"{conf} CI",
        "efficiency",
        f"{conf} CI",
        f"all-reduce share ({ref} → variant)",
        "note",
    ]
    return join(
        [
            tag("h3", "Speculation efficiency"),
            tag(
                "p",
                f"Measured speedup: {ref}'s median TPOT / the variant's; ideal: what the "
                "acceptance alone would give if a verification step cost a plain step; "
                "efficiency: measured / ideal.",
            ),
            table(header, rows),
        ]
    )


def _shares(shares: tuple[float | None, float | None]) -> str:
    if shares[0] is None or shares[1] is None:
        return "-"
    return f"{pct(shares[0], 0)} → {pct(shares[1], 0)}"


_CHART_TITLES = {"tpot": "Median TPOT against load", "throughput": "Output tok/s against load"}


def _charts_section(charts: Sequence[Chart]) -> Markup:
    out: list[object] = [tag("h2", "Charts", id="charts")]
    for chart in charts:
        title = next((t for k, t in _CHART_TITLES.items() if k in chart.name), chart.ylabel)
        out.append(chart_figure(chart, title))
    return join(out)


MEASURED_HEADER = [
    "level",
    "variant",
    "category",
    "n",
    "failed",
    "TTFT p50 (ms)",
    "TTFT p90",
    "TTFCT p50 (ms)",
    "TTFCT p90",
    "TPOT p50 (ms)",
    "TPOT p90",
    "ITL p50 (ms)",
    "ITL p90",
    "output tok/s",
    "truncated",
]


def measured_row(run: Run, level: Level, category: str) -> list[object]:
    """One row of a level's figures, as the model has them (:data:`MEASURED_HEADER`)."""
    st = level.category(category) or Figures()
    return [
        level.name,
        run.label,
        category,
        st.completed,
        st.failed,
        ms(st.ms("median", "ttft")),
        ms(st.ms("p90", "ttft")),
        ms(st.ms("median", "ttfct")),
        ms(st.ms("p90", "ttfct")),
        ms(st.median_tpot_ms),
        ms(st.figure(TPOT_BAND_KEY)),
        ms(st.ms("median", "itl")),
        ms(st.ms("p90", "itl")),
        tok_s(st.output_throughput),
        truncation_text(st),
    ]


def _level_names(runs: Sequence[Run]) -> list[str]:
    return list(dict.fromkeys(n for run in runs for n in run.level_names()))


def _comparison_rows(comp: Comparison, level: LevelComparison) -> Markup:
    conf = f"{comp.confidence * 100:g}%"
    header: list[object] = [
        "category",
        "measure",
        *(f"n {v}" for v in comp.variants),
        *comp.variants,
    ]
    for v in comp.variants[1:]:
        header += [f"Δ {v}", f"{conf} CI", "verdict"]
    rows = []
    for cat in level.categories:
        for measure in ALL_MEASURES:
            cell: Cell | None = level.cells.get((cat, measure.key))
            if cell is None:
                continue
            row: list[object] = [cat, f"{measure.title} ({measure.unit})"]
            row += [str(n) for n in cell.n]
            row += [measure_value(v, measure.unit) for v in cell.values]
            for i in range(1, len(comp.variants)):
                rel, ci = rel_text(cell.diffs[i])
                row += [rel, ci, verdict_cell(cell.verdicts[i])]
            rows.append(row)
    return join([tag("h4", f"Against {comp.variants[0]}"), table(header, rows)])


def _levels_section(runs: Sequence[Run], comp: Comparison | None) -> Markup:
    out: list[object] = [
        tag("h2", "Levels", id="levels"),
        tag(
            "p",
            "From each run's summary.json: n completed requests (the sample of every "
            "percentile), medians and p90 in ms, output tok/s over the level's window, "
            "truncated: completed requests that ended inside reasoning at max_tokens "
            "(their TTFCT is missing).",
        ),
    ]
    compared = {lc.name: lc for lc in comp.levels} if comp is not None else {}
    stops = any(run.result.stopping is not None for run in runs)  # a "stopped" column
    for name in _level_names(runs):
        present = [(run, run.level(name)) for run in runs]
        levels = [(run, lv) for run, lv in present if lv is not None]
        first = levels[0][1]
        cats = [ALL, *sorted({c for _, lv in levels for c in lv.categories} - {ALL})]
        rows = [
            measured_row(run, lv, cat)
            + ([(lv.stopped or "-") if cat == ALL else ""] if stops else [])
            for cat in cats
            for run, lv in levels
        ]
        header = [*MEASURED_HEADER, "stopped"] if stops else MEASURED_HEADER
        out += [tag("h3", level_title(first), id=f"level-{name}"), table(header, rows)]
        if comp is not None and name in compared:
            out.append(_comparison_rows(comp, compared[name]))
        elif comp is not None:
            missing = ", ".join(run.label for run, lv in present if lv is None)
            out.append(tag("p", f"Not compared: no such level in {missing}.", class_="note"))
    return join(out)


def _source_text(spec: SpecDecode) -> str:
    parts = []
    for value, what in ((spec.source, "counts"), (spec.split, "channel split")):
        if value:
            parts.append(f"{what}: " + ", ".join(f"{k} {v}" for k, v in value.items()))
    return "; ".join(parts) or "-"


def _spec_row(run: Run, level: Level, channel: str, spec: SpecPart, source: str) -> list[object]:
    return [
        level.name,
        run.label,
        channel,
        rate(spec.acceptance_rate),
        ratio(spec.mean_acceptance_length),
        _integer(spec.accepted_tokens),
        _integer(spec.draft_tokens),
        ratio(spec.ideal_speedup if isinstance(spec, SpecDecode) else None),
        source,
    ]


def _integer(value: Any) -> str:
    v = finite_number(value)
    return "-" if v is None else f"{v:.0f}"


def _positions(server: Server) -> str:
    per = server.spec_decode_acceptance_per_position
    items = sorted(per.items(), key=lambda kv: int(kv[0]) if kv[0].isdigit() else 0)
    return ", ".join(f"{int(k) + 1}: {v:.2f}" for k, v in items)


def _spec_section(runs: Sequence[Run]) -> Markup:
    rows = []
    positions = []
    for run in runs:
        for level in run.result.levels:
            spec, server = level.figures.spec_decode, level.server
            if spec is not None and spec.requests > 0:
                source = _source_text(spec)
                rows.append(_spec_row(run, level, "all (client)", spec, source))
                for channel, part in (("reasoning", spec.reasoning), ("content", spec.content)):
                    if part is not None:
                        rows.append(_spec_row(run, level, channel, part, source))
            if server is not None and server.spec_decode_num_drafts is not None:
                rows.append(
                    [
                        level.name,
                        run.label,
                        "all (server counters)",
                        rate(server.spec_decode_acceptance_rate),
                        ratio(server.spec_decode_mean_acceptance_length),
                        _integer(server.spec_decode_num_accepted_tokens),
                        _integer(server.spec_decode_num_draft_tokens),
                        "-",
                        f"/metrics ({server.source or 'counters'})",
                    ]
                )
                per = _positions(server)
                if per:
                    positions.append([level.name, run.label, per])
    if not rows:
        return Markup("")
    header = [
        "level",
        "variant",
        "channel",
        "acceptance rate",
        "mean acceptance length",
        "accepted tokens",
        "draft tokens",
        "ideal speedup",
        "source",
    ]
    out: list[object] = [
        tag("h2", "Speculative decoding", id="speculative-decoding"),
        tag(
            "p",
            "Acceptance: accepted / draft tokens; length: 1 + accepted tokens per verify "
            "step. Per channel (reasoning, content) from the requests' own counts where the "
            "server sent them (or estimated from the stream's chunks: the source column); "
            "the server's counters cover the whole level. '-': not known.",
        ),
        table(header, rows),
    ]
    if positions:
        out += [
            tag("h3", "Acceptance per draft position (server)"),
            table(["level", "variant", "position: acceptance"], positions),
        ]
    return join(out)


def _objectives(slo: Slo) -> str:
    return ", ".join(f"{k} ≤ {v * 1000:g} ms" for k, v in slo.objectives_s.items())


def _slo_section(runs: Sequence[Run]) -> Markup:
    rows = []
    for run in runs:
        for level in run.result.levels:
            slo, fig = level.slo, level.figures
            if slo is None:
                continue
            rows.append(
                [
                    level.name,
                    run.label,
                    _objectives(slo) or "-",
                    pct(fig.slo_attainment_ratio),
                    ms(fig.request_goodput),
                    tok_s(fig.output_goodput),
                    ", ".join(f"{k} {pct(v)}" for k, v in slo.failing_ratio.items()) or "-",
                ]
            )
    searches = [(run, run.result.search) for run in runs if run.result.search is not None]
    if not rows and not searches:
        return Markup("")
    out: list[object] = [
        tag("h2", "Service-level objectives", id="slo"),
        tag(
            "p",
            "Attainment: the share of completed requests meeting every objective; goodput: "
            "those requests per second (and their output tokens per second) over the window; "
            "missed: the share failing each objective.",
        ),
    ]
    if rows:
        header = [
            "level",
            "variant",
            "objectives",
            "attainment",
            "goodput (req/s)",
            "goodput (tok/s)",
            "missed per objective",
        ]
        out.append(table(header, rows))
    for run, search in searches:
        out.append(_search_block(run, search))
    return join(out)


def _search_block(run: Run, search: Search) -> Markup:
    variable = search.variable
    unit = "users" if variable == "concurrency" else "requests/s"
    limit = search.limit
    target = pct(search.attainment, 0)
    found = (
        f"highest {variable} holding {target} attainment: "
        + ("none in the range" if limit is None else f"{limit:g} {unit}")
        + (f" (set by {search.set_by})" if search.set_by else "")
        + ("" if search.complete else "; the search did not finish")
    )
    steps = [
        [
            step.level or "-",
            f"{step.load(variable) or 0:g}",
            pct(step.attainment),
            _yes_no(step.held),
            step.cut_short or "",
        ]
        for step in search.steps
    ]
    parts: list[object] = [tag("h3", f"SLO search: {run.label}"), tag("p", found)]
    if search.note:
        parts.append(tag("p", search.note, class_="note"))
    parts.append(table(["level", variable, "attainment", "held", "cut short"], steps))
    return join(parts)


def _method_section(comp: Comparison | None) -> Markup:
    if comp is None:
        text = (
            "Medians and percentiles are exact over the level's completed requests (the "
            "rule of summary.json); the TPOT whiskers span p50 to p90 of the level's "
            "requests. A single run has no verdict: give several results directories "
            "(the first is the reference) to compare them."
        )
    else:
        text = (
            f"Differences are relative to {comp.variants[0]}, with a "
            f"{comp.confidence * 100:g}% percentile bootstrap interval ({comp.n_boot} "
            "resamples of each run's requests in blocks at least the concurrency long; the "
            "estimate is the same statistic on the run's own sample). "
            f"TTFCT is not compared where more than {comp.truncated_share * 100:g}% of a "
            f"side's requests ended inside reasoning at max_tokens. {WIDENED_MARK}: the "
            "interval was extended to contain its estimate. The same numbers are in "
            "comparison.md (`specload compare`)."
        )
    return join([tag("h2", "Method", id="method"), tag("p", text)])


def _single_run_verdict(run: Run) -> Markup:
    rows = []
    stopping = run.result.stopping  # --precision/--against: how each level ended
    for level in run.result.levels:
        fig = level.figures
        row: list[object] = [
            level_title(level),
            fig.completed,
            fig.failed,
            ms(fig.median_tpot_ms),
            tok_s(fig.output_throughput),
            rate(level.acceptance.rate),
            ", ".join(level.flags),
        ]
        if stopping is not None:
            row.append(level.stopped or "-")
        rows.append(row)
    header = ["level", "n", "failed", "median TPOT (ms)", "output tok/s", "acceptance", "flags"]
    if stopping is not None:
        header.append("stopped")
    parts: list[object] = [
        tag("h2", "Summary", id="verdicts"),
        tag(
            "p",
            f"One run of {run.label}: no verdict without a reference (run `specload "
            "report` with the baseline's directory first).",
        ),
    ]
    if stopping is not None:
        parts.append(tag("p", f"Stopping: {stopping.text}.", class_="note"))
    parts.append(table(header, rows))
    return join(parts)


STYLE = """
body{font-family:system-ui,-apple-system,"Segoe UI",Roboto,"Helvetica Neue",Arial,sans-serif;
margin:1.5rem auto;max-width:1400px;padding:0 1rem;color:#1a1a1a;line-height:1.4}
h1{font-size:1.5rem}h2{font-size:1.25rem;margin-top:2rem;border-bottom:1px solid #ccc}
h3{font-size:1.05rem;margin-top:1.4rem}h4{font-size:.95rem}
table.data{border-collapse:collapse;font-size:.82rem;margin:.5rem 0;
font-variant-numeric:tabular-nums}
table.data th,table.data td{border:1px solid #d0d0d0;padding:.2rem .45rem;text-align:right}
table.data td{white-space:nowrap}
table.data th{background:#f2f2f2;text-align:center}
table.data td:first-child,table.data td:nth-child(2),table.data td:nth-child(3){text-align:left}
td.verdict{font-weight:600;text-align:left}
td.faster{color:#0a6b2a;background:#e7f6ea}td.slower{color:#a11;background:#fdeaea}
td.same{color:#555}td.few,td.none{color:#777;font-style:italic}
p.headline{font-weight:600}
ul li{margin:.15rem 0}
.note{color:#555;font-size:.85rem}
.scroll{overflow-x:auto;max-width:100%}
.panels{display:flex;flex-wrap:wrap;gap:.5rem}
figure.panel{margin:0;border:1px solid #e0e0e0;padding:.3rem}
figure.panel figcaption{text-align:center;font-size:.85rem;color:#333}
svg.chart text{fill:#333}svg.chart text.n,svg.chart text.nlabel{font-size:10px}
.legend{display:flex;flex-wrap:wrap;gap:1rem;font-size:.85rem;margin:.3rem 0}
.swatch{display:inline-block;width:.9rem;height:.9rem;margin-right:.3rem;vertical-align:-2px}
nav a{margin-right:.8rem}
@media print{nav{display:none}h2{break-after:avoid}}
"""


def _nav(sections: Sequence[tuple[str, str]]) -> Markup:
    return tag("nav", join(tag("a", title, href=f"#{anchor}") for anchor, title in sections))


def report_html(
    runs: Sequence[Run],
    comp: Comparison | None = None,
    *,
    charts: Sequence[Chart] | None = None,
    predictions: Sequence[Prediction] = (),
    warnings: Sequence[str] = (),
    generated: datetime | None = None,
) -> str:
    """The whole page. ``comp``: the comparison of ``runs`` (None: one run alone);
    ``charts``: the charts to draw (default: the runs' own, :func:`run_charts`)."""
    if comp is None and len(runs) != 1:
        raise ValueError("report_html: several runs need their comparison")
    if charts is None:
        charts = run_charts([run.result for run in runs])
    all_warnings = list(comp.warnings if comp is not None else single_run_warnings(runs[0]))
    all_warnings += run_warnings(runs, [lc.name for lc in comp.levels] if comp else ())
    all_warnings += [f"prediction {p.path}: {w}" for p in predictions for w in p.warnings()]
    all_warnings += warnings
    names = [run.label for run in runs]
    title = (
        f"specload report: {' vs '.join(names)}"
        if comp is not None
        else f"specload report: {names[0]}"
    )
    when = (generated or datetime.now(UTC)).isoformat(timespec="seconds")
    sections = [
        _runs_section(runs),
        _warnings_section(all_warnings),
        _verdicts_section(comp) if comp is not None else _single_run_verdict(runs[0]),
        _charts_section(charts),
        _levels_section(runs, comp),
        _spec_section(runs),
        _predictions_section(predictions),
        _slo_section(runs),
        _method_section(comp),
    ]
    body = join(sections)
    nav = [
        (anchor, text)
        for anchor, text in (
            ("runs", "Runs"),
            ("warnings", "Warnings"),
            ("verdicts", "Verdicts" if comp is not None else "Summary"),
            ("charts", "Charts"),
            ("levels", "Levels"),
            ("speculative-decoding", "Speculative decoding"),
            ("predictions", "Predictions"),
            ("slo", "SLOs"),
            ("method", "Method"),
        )
        if f'id="{anchor}"' in body
    ]
    head = join(
        [
            Markup('<meta charset="utf-8">'),
            Markup('<meta name="viewport" content="width=device-width, initial-scale=1">'),
            # Nothing is fetched: no script, no image, no font; styles inline.
            Markup(
                '<meta http-equiv="Content-Security-Policy" content="default-src \'none\'; '
                "style-src 'unsafe-inline'\">"
            ),
            tag("title", title),
            Markup(f"<style>{STYLE}</style>"),
        ]
    )
    page = join(
        [
            tag("h1", title),
            tag("p", f"generated {when} by specload {__version__}", class_="note"),
            _nav(nav),
            body,
        ]
    )
    return f'<!doctype html>\n<html lang="en">\n<head>{head}</head>\n<body>{page}</body>\n</html>\n'


def single_run_warnings(run: Run) -> list[str]:
    """What makes one run not a finished measurement (killed, incomplete levels, repaired)."""
    out = completeness_problems([run], run.level_names())
    if run.status == "repaired":
        out.append(f"{run.label}: summary rebuilt from requests.jsonl (`specload results repair`)")
    elif run.status not in ("complete", "running"):
        reason = run.result.stop_reason
        out.append(f"{run.label}: status {run.status}" + (f" ({reason})" if reason else ""))
    return out
