"""--search slo: bracketing by doubling, then bisection, against a known attainment curve."""

from __future__ import annotations

import pytest

from specload.errors import UsageError
from specload.records.request import RequestRecord
from specload.sweep.plan import build_plan
from specload.sweep.search import EarlyVerdict, SloSearch, parse_range


def template():
    plan = build_plan(
        concurrency="1", request_rate=None, max_concurrency=None,
        warmup="0", duration=None, requests=20,
    )  # fmt: skip
    return plan.levels[0]


def run(search: SloSearch, attainment_at) -> list[int]:
    level = search.first()
    tried = []
    while level is not None:
        assert level.concurrency is not None
        tried.append(level.concurrency)
        level = search.next_level(level, attainment_at(level.concurrency))
    return tried


@pytest.mark.parametrize("limit", [1, 2, 5, 37, 64, 100, 511])
def test_the_search_finds_the_limit_of_a_falling_attainment(limit: int) -> None:
    search = SloSearch(template(), 0.9, 1, 512)
    tried = run(search, lambda c: 0.95 if c <= limit else 0.5)
    result = search.result()
    assert result["limit"] == limit and result["set_by"] == f"c{limit + 1}"
    assert len(tried) == len(set(tried))  # no level twice
    assert len(tried) <= 2 * 10  # doublings plus bisection steps over 1..512
    assert [s["concurrency"] for s in result["steps"]] == tried


def test_the_range_ends_and_the_precision() -> None:
    everywhere = SloSearch(template(), 0.9, 1, 64)
    assert run(everywhere, lambda c: 1.0) == [1, 2, 4, 8, 16, 32, 64]
    assert everywhere.result()["limit"] == 64 and everywhere.result()["set_by"] is None
    nowhere = SloSearch(template(), 0.9, 4, 64)
    assert run(nowhere, lambda c: None) == [4]  # no completed request: not held
    assert nowhere.result()["limit"] is None and "even 4 users" in nowhere.result()["note"]
    coarse = SloSearch(template(), 0.9, 1, 512, precision=8)
    run(coarse, lambda c: 0.95 if c <= 100 else 0.5)
    assert 92 <= coarse.result()["limit"] <= 100


def test_bad_search_options() -> None:
    assert parse_range("2:300") == (2, 300)
    for text in ("300", "0:10", "10:5", "a:b"):
        with pytest.raises(UsageError, match="--search-range"):
            parse_range(text)
    with pytest.raises(UsageError, match="--attainment"):
        SloSearch(template(), 1.5, 1, 10)
    with pytest.raises(UsageError, match="--search-precision"):
        SloSearch(template(), 0.9, 1, 10, precision=0)


def rate_template():
    plan = build_plan(
        concurrency=None, request_rate="0.5", max_concurrency=64,
        warmup="0", duration=None, requests=20,
    )  # fmt: skip
    return plan.levels[0]


def run_rates(search: SloSearch, attainment_at) -> list[float]:
    level = search.first()
    tried = []
    while level is not None:
        assert level.request_rate is not None and level.concurrency is None
        tried.append(level.request_rate)
        level = search.next_level(level, attainment_at(level.request_rate))
    return tried


@pytest.mark.parametrize("limit", [0.7, 3.3, 12.0, 40.0])
def test_a_rate_search_brackets_the_limit_within_its_precision(limit: float) -> None:
    search = SloSearch(rate_template(), 0.9, 0.5, 64, variable="request_rate")
    tried = run_rates(search, lambda r: 0.95 if r <= limit else 0.5)
    result = search.result()
    assert result["variable"] == "request_rate" and result["precision"] == 0.5
    assert tried[:4] == [0.5, 1.0, 2.0, 4.0][: len(tried[:4])]
    assert result["limit"] <= limit < result["limit"] + 0.5 + 0.01  # within the precision
    assert result["limit_level"] == f"r{result['limit']:g}"
    fail = next(s for s in reversed(result["steps"]) if not s["held"])
    assert fail["request_rate"] > limit and len(tried) == len(set(tried))


def test_rate_levels_keep_three_significant_digits() -> None:
    search = SloSearch(rate_template(), 0.9, 0.5, 64, precision=0.01, variable="request_rate")
    tried = run_rates(search, lambda r: 0.95 if r <= 1 / 3 + 0.5 else 0.5)
    assert all(f"{r:.3g}" == f"{r:g}" for r in tried)
    assert 0.82 <= search.result()["limit"] <= 0.834


def test_a_cut_short_level_never_holds() -> None:
    search = SloSearch(template(), 0.9, 1, 8)
    level = search.first()
    nxt = search.next_level(level, 1.0, cut_short="saturated: TTFT rose")
    assert nxt is None and search.result()["limit"] is None
    assert search.result()["steps"][0]["cut_short"].startswith("saturated")


def test_bad_rate_ranges() -> None:
    assert parse_range("0.5:64", "request_rate") == (0.5, 64.0)
    for text in ("0:10", "-1:3", "5:2", "1:1e9", "x:2"):
        with pytest.raises(UsageError, match="--search-range"):
            parse_range(text, "request_rate")
    with pytest.raises(UsageError, match="--search-range"):
        parse_range("0.5:64")  # users are whole numbers
    with pytest.raises(UsageError, match="--search-precision"):
        SloSearch(template(), 0.9, 1, 10, precision=1.5)


def record(start_s: float, ttft_s: float, met: bool = False, ok: bool = True) -> RequestRecord:
    return RequestRecord(
        category="coding", step="c1", variant="v", model="m", start_s=start_s,
        end_s=start_s + ttft_s + 1, ok=ok, error_kind=None if ok else "http_500",
        ttft_s=ttft_s, slo_met=met,
    )  # fmt: skip


def test_a_level_that_cannot_hold_is_called_once_its_misses_exceed_the_budget() -> None:
    early = EarlyVerdict(0.9, planned=20)
    for i in range(2):  # 2 of 20 may miss at 0.9
        early.add(record(i, 0.1, met=False))
    assert early.verdict(0.1) is None
    early.add(record(3, 0.1, met=False))
    assert early.verdict(0.15).startswith("missed: 3 of its 20")
    early.add(record(4, 0.1, ok=False))  # errors are not misses
    assert early.missed == 3


def test_saturation_is_ttft_rising_through_the_window_while_short() -> None:
    rising = EarlyVerdict(0.9, planned=None)
    for i in range(15):
        rising.add(record(i, 0.1 + 0.1 * i, met=i < 5))
    assert rising.verdict(0.2) is None  # too early in the window
    assert rising.verdict(0.5).startswith("saturated: TTFT rose from 0.300 s to 1.300 s")
    flat = EarlyVerdict(0.9, planned=None)
    for i in range(15):
        flat.add(record(i, 0.5 + 0.01 * (i % 3), met=False))
    assert flat.verdict(0.9) is None  # queueing does not grow: the window decides
    held = EarlyVerdict(0.5, planned=None)
    for i in range(15):
        held.add(record(i, 0.1 + 0.1 * i, met=True))
    assert held.verdict(0.9) is None  # rising, but the objectives hold so far
    tiny = EarlyVerdict(0.9, planned=None)
    for i in range(15):
        tiny.add(record(i, 0.001 * (i + 1), met=False))
    assert tiny.verdict(0.9) is None  # 10x, but milliseconds: noise
