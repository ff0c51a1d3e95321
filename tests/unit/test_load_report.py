"""specload's rows in Locust's reports: the CSV and Locust's own stats (one event per request).

The web UI's tab: tests/unit/test_load_webui.py."""

from __future__ import annotations

import csv
from pathlib import Path
from typing import Any

import pytest

from specload.histogram import Histogram
from specload.load.report import (
    CSV_COLUMNS,
    csv_text,
    fire_locust_events,
    stats_rows,
    truncation_report,
    write_csv,
)
from specload.records.request import RequestRecord
from specload.records.stats import Aggregator
from specload.results.aggregate import truncation_warnings

pytestmark = pytest.mark.unit


def record(i: int, *, category: str = "math", error: str | None = None) -> RequestRecord:
    itl = Histogram()
    itl.add(0.005, 9)
    ok = error is None
    return RequestRecord(
        category=category,
        step="c1",
        variant="v",
        model="m",
        start_s=100.0 + i,
        end_s=101.0 + i,
        ok=ok,
        error_kind=error,
        ttft_s=0.05,
        ttfct_s=0.2,
        e2e_s=1.0,
        tpot_s=0.005,
        tokens_reasoning=8,
        tokens_content=2,
        tokens_output=10,
        chunks=10,
        finish_reason="stop",
        itl_token_hist=itl if ok else None,
        itl_chunk_hist=itl.copy() if ok else None,
    )


def aggregator() -> Aggregator:
    agg = Aggregator()
    for i in range(4):
        agg.add(record(i, category=("math", "coding<b>")[i % 2]))
    agg.add(record(9, error="http_503"))
    return agg


def test_rows_per_category_then_all() -> None:
    rows = stats_rows(aggregator())
    # categories sorted, then the step's ``all``
    assert [(r["step"], r["category"]) for r in rows] == [
        ("c1", "coding<b>"),
        ("c1", "math"),
        ("c1", "all"),
    ]
    assert rows[-1]["completed"] == 4 and rows[-1]["failed"] == 1
    assert rows[-1]["output_tokens"] == 40
    assert rows[-1]["median_ttft_ms"] == "50.000"
    assert all(set(r) == set(CSV_COLUMNS) for r in rows)


def test_write_csv_is_the_rows(tmp_path: Path) -> None:
    agg = aggregator()
    path = tmp_path / "out_specload.csv"
    write_csv(path, agg)
    with path.open(newline="") as f:
        reader = csv.DictReader(f)
        assert tuple(reader.fieldnames or ()) == CSV_COLUMNS
        got = list(reader)
    assert got == [{k: str(v) for k, v in r.items()} for r in stats_rows(agg)]
    assert not (tmp_path / "out_specload.csv.tmp").exists()


def test_csv_text_is_the_file(tmp_path: Path) -> None:
    agg = aggregator()
    path = tmp_path / "x_specload.csv"
    write_csv(path, agg)
    assert path.read_bytes() == csv_text(agg).encode()
    assert csv_text(agg).splitlines()[0] == ",".join(CSV_COLUMNS)


class Events:
    def __init__(self) -> None:
        self.fired: list[dict[str, Any]] = []

        class Request:
            fire = staticmethod(lambda **kw: self.fired.append(kw))

        self.request = Request()


class Env:
    def __init__(self) -> None:
        self.events = Events()


def test_one_locust_event_per_request_and_none_for_unfinished() -> None:
    env = Env()
    fire_locust_events(env, record(0))
    # One row per request in Locust's stats: its end-to-end time; no TTFT/TPOT rows.
    (chat,) = env.events.fired
    assert (chat["request_type"], chat["name"]) == ("CHAT", "math")
    assert chat["response_time"] == 1000.0 and chat["exception"] is None
    # Locust's "size" is bytes, which specload does not count: 0, not the 10 tokens.
    assert chat["response_length"] == 0
    # The request's own figures go along for other listeners.
    assert chat["context"] == {"step": "c1", "ttft_s": 0.05, "tpot_s": 0.005, "tokens_output": 10}
    env.events.fired.clear()
    fire_locust_events(env, record(1, error="http_503"))
    (only,) = env.events.fired
    assert only["request_type"] == "CHAT" and str(only["exception"]) == "http_503:"
    env.events.fired.clear()
    fire_locust_events(env, record(2, error="unfinished"))
    assert env.events.fired == []


def truncated(i: int, *, step: str = "c1", category: str = "math") -> RequestRecord:
    """A completed request cut at max_tokens 8 before any answer token."""
    r = record(i, category=category)
    r.step, r.tokens_reasoning, r.tokens_content = step, 8, 0
    r.finish_reason, r.max_tokens, r.reasoning_truncated = "length", 8, True
    return r


def test_truncation_report_is_the_sweeps_warning() -> None:
    """Plain Locust's end-of-run warning: the same sentences as specload run's level
    warning (one function), only when more than a fifth of the completed requests were
    cut inside reasoning; a step named when there are several."""
    agg = Aggregator()
    for i in range(4):
        agg.add(record(i))
    assert truncation_report(agg) == []
    agg.add(truncated(4))  # 1 of 5: a fifth, not more
    assert truncation_report(agg) == []
    agg.add(truncated(5, category="coding"))  # 2 of 6
    (line,) = truncation_report(agg)
    stats = agg.total(step="c1")
    assert [line] == truncation_warnings(stats, stats.result(stats.span_s))
    assert line.startswith("2 of 6 completed requests") and "(coding, math)" in line
    # Two steps: each judged on its own, named.
    for i in range(3):
        agg.add(truncated(10 + i, step="c4"))
    lines = truncation_report(agg)
    assert [ln.split(":")[0] for ln in lines] == ["step c1", "step c4"]
    assert lines[1].startswith("step c4: 3 of 3 completed requests")
