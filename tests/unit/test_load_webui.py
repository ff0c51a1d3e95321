"""specload's tab in Locust's web UI: its columns, rows, refresh and page (in-process).

A real Locust web UI in a browser: tests/integration/test_locust_webui.py.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from typing import Any

import pytest

from specload.histogram import Histogram
from specload.load.webui import (
    COLUMNS,
    HEADERS,
    MIN_REFRESH_S,
    NO_VALUE,
    TAB_KEY,
    RowCache,
    page_html,
    tab_template_args,
    web_rows,
    with_tab_rows,
)
from specload.records.request import RequestRecord
from specload.records.stats import Aggregator

pytestmark = pytest.mark.unit


def record(
    i: int,
    *,
    category: str = "math",
    tpot_s: float = 0.016,
    stream: bool = True,
    error: str | None = None,
    reasoning: int = 8,
    content: int = 2,
    truncated: bool = False,
) -> RequestRecord:
    ok = error is None
    itl = Histogram()
    itl.add(tpot_s, reasoning + content - 1)
    return RequestRecord(
        category=category,
        step="c4",
        variant="v",
        model="m",
        start_s=100.0 + i,
        end_s=101.0 + i,
        ok=ok,
        error_kind=error,
        stream=stream,
        ttft_s=0.05 if stream else None,
        ttfct_s=0.2 if stream else None,
        e2e_s=1.0,
        tpot_s=tpot_s if stream else None,
        tokens_reasoning=reasoning if ok else 0,
        tokens_content=content if ok else 0,
        tokens_output=reasoning + content if ok else 0,
        chunks=reasoning + content if ok and stream else 0,
        itl_token_hist=itl if ok and stream else None,
        max_tokens=reasoning + content if truncated else None,
        reasoning_truncated=truncated,
    )


def rows_by_category(agg: Aggregator) -> dict[str, dict[str, str]]:
    return {r["category"]: r for r in web_rows(agg)}


def test_headers_are_words_with_units() -> None:
    keys = [k for k, _ in HEADERS]
    assert keys[:2] == ["step", "category"] and len(set(keys)) == len(keys)
    assert len(HEADERS) == 15  # what fits Locust's page (integration test: measured)
    for key, title in HEADERS:
        assert "_" not in title, title  # no snake_case
        if key.endswith("_ms"):
            assert title.endswith("(ms)"), title
        elif key.endswith("_tok_s"):
            assert "tok/s" in title, title
        elif key.endswith("_s"):
            assert title.endswith("(s)"), title


def test_rows_formatted_from_known_records() -> None:
    agg = Aggregator()
    for i, tpot in enumerate((0.0160, 0.0163, 0.0171)):
        agg.add(record(i, tpot_s=tpot))
    agg.add(record(3, error="http_503"))
    agg.add(record(4, error="unfinished"))
    agg.add(record(5, category="coding", reasoning=15000, content=5000))
    agg.add(record(6, category="plain", stream=False))
    rows = web_rows(agg)
    assert [(r["step"], r["category"]) for r in rows] == [
        ("c4", "coding"),
        ("c4", "math"),
        ("c4", "plain"),
        ("c4", "all"),
    ]
    assert all(set(r) == {k for k, _ in HEADERS} for r in rows)
    math = rows_by_category(agg)["math"]
    assert (math["completed"], math["failed"], math["unfinished"]) == ("3", "1", "1")
    # TPOT to 0.1 ms: the middle of 16.0, 16.3 and 17.1 ms.
    assert math["tpot_p50_ms"] == "16.3"
    assert (math["ttft_p50_ms"], math["ttfct_p50_ms"]) == ("50.0", "200.0")
    assert math["e2e_p50_s"] == "1.00"
    # 30 output tokens of completed requests over the step's span, 100 s .. 107 s.
    assert math["output_tok_s"] == f"{30 / 7:.1f}"
    assert (math["truncated"], math["tokens_per_chunk"]) == ("0", "1.00")
    coding = rows_by_category(agg)["coding"]
    # 20,000 tokens over the step's span: thousands separated.
    assert coding["output_tok_s"] == "2,857.1"
    # A non-streamed request has no first token nor time per token: no value, not 0.
    plain = rows_by_category(agg)["plain"]
    for key in ("ttft_p50_ms", "ttft_p90_ms", "tpot_p50_ms", "tokens_per_chunk"):
        assert plain[key] == NO_VALUE, key
    assert plain["e2e_p50_s"] == "1.00"
    everything = rows_by_category(agg)["all"]
    assert (everything["completed"], everything["output_tok_s"]) == ("5", "2,862.9")
    number = re.compile(r"^[0-9,]+(\.[0-9]+)?$")
    for row in rows:
        for column in COLUMNS:
            assert row[column.key] == NO_VALUE or number.match(row[column.key]), row


def test_template_args_declare_the_tab_once_and_keep_others() -> None:
    args: dict[str, Any] = {
        "extended_tabs": [{"key": "other", "title": "Other"}],
        "extended_csv_files": [{"href": "./other.csv", "title": "Other CSV"}],
    }
    tab_template_args(args)
    tab_template_args(args)  # a second install replaces, not duplicates
    assert args["extended_tabs"] == [
        {"key": "other", "title": "Other"},
        {"key": TAB_KEY, "title": "specload"},
    ]
    (table,) = args["extended_tables"]
    assert table["key"] == TAB_KEY
    assert [(c["key"], c["title"]) for c in table["structure"]] == list(HEADERS)
    assert [link["href"] for link in args["extended_csv_files"]] == [
        "./other.csv",
        "./specload/csv",
    ]


def test_rows_ride_in_locusts_report() -> None:
    report = {"stats": [], "extended_stats": [{"key": "other", "data": [1]}]}
    rows = [{"step": "run"}]
    with_tab_rows(report, [{"step": "old"}])
    out = with_tab_rows(report, rows)
    assert out["stats"] == []
    assert out["extended_stats"] == [
        {"key": "other", "data": [1]},
        {"key": TAB_KEY, "data": rows},
    ]


def test_row_cache_refreshes_at_most_once_a_second_and_by_cost() -> None:
    agg = Aggregator()
    agg.add(record(0))
    times: Iterator[float] = iter(
        [
            0.0, 0.0,  # computed (1 request)
            0.5,  # cached
            1.0, 1.2,  # computed (2 requests), costing 0.2 s: next after 20 x 0.2 = 4 s
            3.0,  # cached
            5.3, 5.3,  # computed (3 requests)
        ]
    )  # fmt: skip
    cache = RowCache(agg, clock=lambda: next(times))

    def completed() -> str:
        return cache.rows()[-1]["completed"]

    assert completed() == "1"
    agg.add(record(1))
    assert completed() == "1"
    assert completed() == "2"
    agg.add(record(2))
    assert completed() == "2"
    assert completed() == "3"
    assert MIN_REFRESH_S == 1.0


def test_page_is_the_tab_escaped() -> None:
    agg = Aggregator()
    agg.add(record(0, category="coding<b>"))
    page = page_html(web_rows(agg))
    assert page.count("<th>") == len(HEADERS)
    assert "coding&lt;b&gt;" in page and "coding<b>" not in page
    assert "TPOT p50 (ms)" in page and "<td>16.0</td>" in page
    assert "href='./?tab=specload'" in page and "href='./specload/csv'" in page


def test_truncated_column_counts_requests_cut_inside_reasoning() -> None:
    """Completed requests that hit max_tokens before any answer token, per category and in
    all; failed ones are not counted, and a category without any shows 0, not a dash."""
    agg = Aggregator()
    for i in range(3):
        agg.add(record(i, reasoning=64, content=0, truncated=True))
    agg.add(record(3))
    agg.add(record(4, error="http_503"))
    agg.add(record(5, category="coding", reasoning=30, content=0, truncated=True))
    agg.add(record(6, category="plain"))
    rows = rows_by_category(agg)
    assert [(c, rows[c]["truncated"]) for c in ("coding", "math", "plain", "all")] == [
        ("coding", "1"),
        ("math", "3"),
        ("plain", "0"),
        ("all", "4"),
    ]
    assert ("truncated", "Truncated in reasoning") in HEADERS
    page = page_html(web_rows(agg))
    assert "<th>Truncated in reasoning</th>" in page
