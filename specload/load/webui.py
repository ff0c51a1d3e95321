"""specload's tab in Locust's web UI, and its pages: ``/specload`` and ``/specload/csv``.

Locust 2.x (its React web UI) shows extra tabs that a plugin declares in
``web_ui.template_args``: ``extended_tabs`` (title and key), ``extended_tables``
(the tab's columns: key and title) and ``extended_csv_files`` (links in the
*Download Data* tab). The tab's rows travel in Locust's own ``/stats/requests``
JSON, under ``extended_stats`` (``[{"key": ..., "data": [row, ...]}]``), which the
page polls every 2 s while a test runs: so the tab refreshes live. Locust
camel-cases every key of both on the way in, the same way, so the snake_case keys
here match.

The rows are :data:`COLUMNS` of :func:`web_rows`: per step and category (then
``all``), from the same numbers as ``PREFIX_specload.csv``
(:func:`specload.load.report.step_numbers`), as text with units in the headers
(ms, s, tok/s), TTFT and TPOT to 0.1 ms, E2E to 0.01 s; an en dash
(:data:`NO_VALUE`) where there is no value (a non-streamed request has no TTFT).
The *Truncated in reasoning* column counts the completed requests that hit
``max_tokens`` before any answer token (no TTFCT, no content tokens measured: the
plain-Locust run's end warns when they are more than a fifth, as ``specload run``
does per level). ``/specload`` serves the same table as a page of its own,
``/specload/csv`` every column of the CSV (the median ITL, the token totals — the
reasoning share among them, a column of the tab before the truncated count took
its place — and the share of coalesced chunk gaps are there, not in the tab: its
15 columns fit Locust's page without scrolling sideways from a 1280 px wide window
up; a 16th made the table scroll at 1280 px).

A second tab, *specload client* (:data:`CLIENT_HEADERS`, :func:`client_rows`), says per
step whether the client could be the bottleneck: its event loop's lag (p50, p99 against the
``client_saturated`` limit, max) and the busy share of its busiest load process
(:mod:`specload.load.lag`), and, where the server sends its own timing (vLLM
``--enable-per-request-metrics``), the client-minus-server TTFT and ITL (median, p10..p90)
of the requests that carried it.

The aggregate over many records costs time on the process that also drives the
users, so rows are computed at most once per :data:`MIN_REFRESH_S`, and never more
often than 20 times their own cost (at most 5% of the loop), however many browsers
poll.
"""

from __future__ import annotations

import html
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from specload.load.lag import ClientLoadBook, get_book
from specload.load.report import csv_text, step_numbers
from specload.records.clientload import LAG_P99_LIMIT_S, chunk_gap_s, saturation_reasons
from specload.records.stats import Aggregator

TAB_KEY = "specload"
TAB_TITLE = "specload"
MIN_REFRESH_S = 1.0
#: Rows are recomputed at most once per this many times their own cost.
COST_FACTOR = 20.0
NO_VALUE = "\u2013"  # en dash: nothing to report (no request of that kind)


def _count(key: str) -> Callable[[Mapping[str, Any]], str]:
    return lambda n: f"{int(n[key]):,}"


def _fixed(key: str, digits: int, scale: float = 1.0) -> Callable[[Mapping[str, Any]], str]:
    def fmt(n: Mapping[str, Any]) -> str:
        v = n.get(key)
        return NO_VALUE if v is None else f"{float(v) * scale:,.{digits}f}"

    return fmt


@dataclass(frozen=True)
class Column:
    key: str
    title: str
    value: Callable[[Mapping[str, Any]], str]  # from a step's or category's numbers


#: The tab's columns, in order (``step`` and ``category`` come first, from the row's place).
COLUMNS: tuple[Column, ...] = (
    Column("completed", "OK", _count("completed")),
    Column("failed", "Failed", _count("failed")),
    Column("unfinished", "Unfinished", _count("unfinished")),
    # Completed requests that hit max_tokens before their answer: no TTFCT, no content.
    Column("truncated", "Truncated in reasoning", _count("reasoning_truncated")),
    Column("output_tok_s", "Output tok/s", _fixed("output_throughput", 1)),
    Column("ttft_p50_ms", "TTFT p50 (ms)", _fixed("median_ttft_ms", 1)),
    Column("ttft_p90_ms", "TTFT p90 (ms)", _fixed("p90_ttft_ms", 1)),
    Column("ttfct_p50_ms", "First content token p50 (ms)", _fixed("median_ttfct_ms", 1)),
    Column("tpot_p50_ms", "TPOT p50 (ms)", _fixed("median_tpot_ms", 1)),
    Column("tpot_p90_ms", "TPOT p90 (ms)", _fixed("p90_tpot_ms", 1)),
    Column("tpot_p99_ms", "TPOT p99 (ms)", _fixed("p99_tpot_ms", 1)),
    Column("e2e_p50_s", "E2E p50 (s)", _fixed("median_e2el_ms", 2, 1e-3)),
    Column("tokens_per_chunk", "Tokens per chunk", _fixed("mean_tokens_per_chunk", 2)),
)
#: (key, title) of every column the tab and ``/specload`` show.
HEADERS: tuple[tuple[str, str], ...] = (
    ("step", "Step"),
    ("category", "Category"),
    *((c.key, c.title) for c in COLUMNS),
)


def web_rows(aggregator: Aggregator) -> list[dict[str, str]]:
    """The tab's rows (every value text, keys of :data:`HEADERS`)."""
    rows = []
    for step, category, numbers in step_numbers(aggregator):
        row = {"step": step, "category": category}
        row.update((c.key, c.value(numbers)) for c in COLUMNS)
        rows.append(row)
    return rows


#: The second tab: is the client the bottleneck? Per step, the client's own lag and busy
#: share (specload.load.lag, its processes merged) and, where the server sends its own
#: timing (vLLM --enable-per-request-metrics), the client-minus-server TTFT and ITL.
CLIENT_TAB_KEY = "specload_client"
CLIENT_TAB_TITLE = "specload client"
CLIENT_HEADERS: tuple[tuple[str, str], ...] = (
    ("step", "Step"),
    ("processes", "Load processes"),
    ("lag_p50_ms", "Loop lag p50 (ms)"),
    ("lag_p99_ms", f"Loop lag p99 (ms; limit {LAG_P99_LIMIT_S * 1000:g})"),
    ("lag_max_ms", "Loop lag max (ms)"),
    ("busy_ratio", "Busy share of a core"),
    ("saturated", "Client saturated"),
    ("server_timed", "Requests with server timing"),
    ("ttft_minus_server_p50_ms", "TTFT minus server p50 (ms)"),
    ("ttft_minus_server_spread_ms", "TTFT minus server p10..p90 (ms)"),
    ("itl_minus_server_p50_us", "ITL minus server p50 (\u00b5s)"),
    ("itl_minus_server_spread_us", "ITL minus server p10..p90 (\u00b5s)"),
)


def _num(value: float | None, digits: int, scale: float = 1.0) -> str:
    return NO_VALUE if value is None else f"{value * scale:,.{digits}f}"


def client_rows(aggregator: Aggregator, book: ClientLoadBook | None) -> list[dict[str, str]]:
    """The client tab's rows, one per step (every value text, keys of
    :data:`CLIENT_HEADERS`)."""
    steps = set(aggregator.steps)
    if book is not None:
        steps.update(book.step_names())
    rows = []
    for step in sorted(steps):
        load = book.figures(step) if book is not None else None
        stats = aggregator.total(step=step)
        gaps = stats.minus_server_result()
        tpot = stats.quantile("tpot", 0.5)
        saturated = saturation_reasons(
            load,
            chunk_gap_s=chunk_gap_s(tpot, stats.tokens_per_chunk),
            coalesced_share=stats.coalesced_chunk_share,
        )

        def spread(name: str, digits: int, scale: float, gaps: dict[str, Any] = gaps) -> str:
            lo, hi = gaps[f"p10_{name}_ms"], gaps[f"p90_{name}_ms"]
            if lo is None or hi is None:
                return NO_VALUE
            return f"{_num(lo, digits, scale)} .. {_num(hi, digits, scale)}"

        rows.append(
            {
                "step": step,
                "processes": NO_VALUE if load is None else str(load.processes),
                "lag_p50_ms": _num(None if load is None else load.lag_p50_s, 2, 1000.0),
                "lag_p99_ms": _num(None if load is None else load.lag_p99_s, 2, 1000.0),
                "lag_max_ms": _num(None if load is None else load.lag_max_s, 1, 1000.0),
                "busy_ratio": _num(None if load is None else load.busy_ratio, 2),
                "saturated": NO_VALUE if load is None else ("yes" if saturated else "no"),
                "server_timed": f"{int(gaps['server_timing_requests']):,}",
                "ttft_minus_server_p50_ms": _num(gaps["median_ttft_minus_server_ms"], 2),
                "ttft_minus_server_spread_ms": spread("ttft_minus_server", 2, 1.0),
                "itl_minus_server_p50_us": _num(gaps["median_itl_minus_server_ms"], 1, 1000.0),
                "itl_minus_server_spread_us": spread("itl_minus_server", 1, 1000.0),
            }
        )
    return rows


class RowCache:
    """:func:`web_rows` (or ``compute``), recomputed when older than
    ``max(MIN_REFRESH_S, 20 x its cost)``."""

    def __init__(
        self,
        aggregator: Aggregator,
        clock: Callable[[], float] = time.perf_counter,
        compute: Callable[[], list[dict[str, str]]] | None = None,
    ) -> None:
        self.aggregator = aggregator
        self.clock = clock
        self.compute = compute or (lambda: web_rows(self.aggregator))
        self._rows: list[dict[str, str]] = []
        self._at: float | None = None
        self._cost_s = 0.0

    def rows(self) -> list[dict[str, str]]:
        now = self.clock()
        if self._at is None or now - self._at >= max(MIN_REFRESH_S, COST_FACTOR * self._cost_s):
            self._rows = self.compute()
            self._at = self.clock()
            self._cost_s = self._at - now
        return self._rows


def tab_template_args(template_args: dict[str, Any]) -> None:
    """Declare the tab (its columns) and the CSV link in Locust's ``template_args``;
    other plugins' tabs are kept."""

    def put(name: str, entry: dict[str, Any]) -> None:
        others = [e for e in template_args.get(name) or [] if e.get("key") != TAB_KEY]
        template_args[name] = [*others, entry]

    put("extended_tabs", {"key": TAB_KEY, "title": TAB_TITLE})
    put(
        "extended_tables",
        {"key": TAB_KEY, "structure": [{"key": k, "title": t} for k, t in HEADERS]},
    )
    links = [e for e in template_args.get("extended_csv_files") or [] if e.get("key") != TAB_KEY]
    template_args["extended_csv_files"] = [
        *links,
        {"key": TAB_KEY, "href": "./specload/csv", "title": "Download specload CSV"},
    ]


def client_tab_template_args(template_args: dict[str, Any]) -> None:
    """Declare the client tab (:data:`CLIENT_HEADERS`) after the others."""
    for name, entry in (
        ("extended_tabs", {"key": CLIENT_TAB_KEY, "title": CLIENT_TAB_TITLE}),
        (
            "extended_tables",
            {
                "key": CLIENT_TAB_KEY,
                "structure": [{"key": k, "title": t} for k, t in CLIENT_HEADERS],
            },
        ),
    ):
        others = [e for e in template_args.get(name) or [] if e.get("key") != CLIENT_TAB_KEY]
        template_args[name] = [*others, entry]


def with_tab_rows(
    report: dict[str, Any], rows: list[dict[str, str]], key: str = TAB_KEY
) -> dict[str, Any]:
    """Locust's ``/stats/requests`` report with a tab's rows in ``extended_stats``."""
    others = [e for e in report.get("extended_stats") or [] if e.get("key") != key]
    report["extended_stats"] = [*others, {"key": key, "data": rows}]
    return report


def page_html(rows: list[dict[str, str]]) -> str:
    """``/specload``: the tab's table as a page of its own (reloads every 5 s)."""
    head = "".join(f"<th>{html.escape(title)}</th>" for _, title in HEADERS)
    body = "".join(
        "<tr>" + "".join(f"<td>{html.escape(r[k])}</td>" for k, _ in HEADERS) + "</tr>"
        for r in rows
    )
    return (
        "<!doctype html><html lang=en><meta charset=utf-8>"
        "<meta http-equiv=refresh content=5>"
        "<meta name=viewport content='width=device-width, initial-scale=1'>"
        "<link rel=icon href='./assets/favicon-light.png'>"
        "<title>specload: TTFT, TPOT and output tok/s</title>"
        "<style>body{font:14px system-ui,sans-serif;margin:16px}"
        "table{border-collapse:collapse;width:100%;font-variant-numeric:tabular-nums}"
        "th,td{padding:4px 6px;text-align:right;border-bottom:1px solid #ddd}"
        "th{vertical-align:bottom}th:nth-child(-n+2),td:nth-child(-n+2){text-align:left}"
        "</style>"
        "<h1>specload: TTFT, TPOT and output tok/s per step and category</h1>"
        "<p>Also the <a href='./?tab=specload'>specload tab</a> of Locust's web UI; every "
        "figure: <a href='./specload/csv'>CSV</a>.</p>"
        f"<table><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>"
    )


def install(web_ui: Any, aggregator: Aggregator) -> None:
    """Add the tab, ``/specload`` and ``/specload/csv`` to a Locust web UI."""
    from flask import Response, request  # noqa: PLC0415 (Locust's dependency)

    cache = RowCache(aggregator)
    book = get_book(web_ui.environment)
    client_cache = RowCache(aggregator, compute=lambda: client_rows(aggregator, book))
    app = web_ui.app
    tab_template_args(web_ui.template_args)
    client_tab_template_args(web_ui.template_args)

    def page() -> Response:
        return Response(page_html(cache.rows()), mimetype="text/html")

    def download() -> Response:
        stamp = time.strftime("%Y%m%d-%H%M%S")
        return Response(
            csv_text(aggregator),
            mimetype="text/csv",
            headers={"Content-Disposition": f"attachment; filename=specload_{stamp}.csv"},
        )

    def add_rows(response: Response) -> Response:
        # Locust's own view (memoized for 2 s: the same response object may come again).
        if request.endpoint != "locust.request_stats" or response.status_code != 200:
            return response
        report = response.get_json(silent=True)
        if isinstance(report, dict):
            with_tab_rows(report, cache.rows())
            with_tab_rows(report, client_cache.rows(), CLIENT_TAB_KEY)
            response.set_data(app.json.dumps(report))
        return response

    # Beside Locust's own pages (``--web-base-path``), as the relative links expect.
    options = getattr(web_ui.environment, "parsed_options", None)
    prefix = str(getattr(options, "web_base_path", "") or "").rstrip("/")
    app.add_url_rule(f"{prefix}/specload", "specload_stats", page)
    app.add_url_rule(f"{prefix}/specload/csv", "specload_csv", download)
    app.after_request(add_rows)
