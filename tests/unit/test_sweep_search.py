"""--search slo: bracketing by doubling, then bisection, against a known attainment curve."""

from __future__ import annotations

import pytest

from specload.errors import UsageError
from specload.sweep.plan import build_plan
from specload.sweep.search import SloSearch, parse_range


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
