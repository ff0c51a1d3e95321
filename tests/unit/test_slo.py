"""Objectives: parsed with one-line errors, each request judged, levels' goodput exact."""

from __future__ import annotations

import pytest

from specload.errors import UsageError
from specload.histogram import Histogram
from specload.records.request import RequestRecord
from specload.records.stats import Stats
from specload.slo import judge, parse_slo


def rec(**kw: object) -> RequestRecord:
    base = dict(category="coding", step="c1", variant="v", model="m", start_s=0.0, end_s=1.0)
    base.update(ok=True, tokens_reasoning=40, tokens_content=10, tokens_output=50)
    base.update(kw)
    return RequestRecord(**base)  # type: ignore[arg-type]


def test_objectives_parse_in_measure_order_with_units() -> None:
    slo = parse_slo("e2el=1s, TPOT=20ms,ttfct=1.5,itl_p99=50ms")
    assert slo.as_dict() == {"ttfct": 1.5, "tpot": 0.02, "e2el": 1.0, "itl_p99": 0.05}
    assert list(slo.as_dict()) == ["ttfct", "tpot", "e2el", "itl_p99"]
    assert not parse_slo("") and not parse_slo("off") and not parse_slo(None)


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("tpot", "not MEASURE=DURATION"),
        ("tpot=", "not MEASURE=DURATION"),
        ("latency=1s", "'latency' is not one of"),
        ("tpot=1s,tpot=2s", "tpot is given twice"),
        ("tpot=0", "greater than zero"),
        ("tpot=fast", "not a duration"),
        ("tpot=-1s", "not a duration"),
    ],
)
def test_bad_objectives_are_one_line_errors(text: str, message: str) -> None:
    with pytest.raises(UsageError, match=message) as info:
        parse_slo(text)
    assert "\n" not in str(info.value) and str(info.value).startswith("--slo")


def test_each_request_is_judged_against_every_objective() -> None:
    slo = parse_slo("ttft=0.5s,ttfct=1s,tpot=20ms,itl_p99=30ms")
    hist = Histogram()
    hist.extend([0.01] * 98 + [0.05, 0.05])  # p99 50 ms
    cases = [
        (rec(ttft_s=0.1, ttfct_s=0.5, tpot_s=0.01), True, []),
        (rec(ttft_s=0.6, ttfct_s=0.9, tpot_s=0.03), False, ["ttft", "tpot"]),
        # reasoning cut at max_tokens: no first content token, the ttfct objective is missed
        (rec(ttft_s=0.1, ttfct_s=None, tpot_s=0.01, tokens_content=0), False, ["ttfct"]),
        # a measure the request does not have (one token: no TPOT) counts as met
        (rec(ttft_s=0.1, ttfct_s=0.2, tpot_s=None, tokens_output=1), True, []),
        (rec(ttft_s=0.1, ttfct_s=0.2, tpot_s=0.01, itl_token_hist=hist), False, ["itl_p99"]),
        (rec(ok=False, error_kind="timeout"), False, []),
    ]
    for record, met, failed in cases:
        judge(record, slo)
        assert (record.slo_met, record.slo_failed) == (met, failed), record
    untouched = rec(ttft_s=9.0)
    judge(untouched, parse_slo(""))
    assert untouched.slo_met is None and untouched.slo_failed is None


def test_goodput_and_attainment_of_a_set_of_requests() -> None:
    slo = parse_slo("e2el=1s")
    stats = Stats()
    for i in range(10):
        r = rec(e2e_s=2.0 if i % 5 == 4 else 0.5, tokens_output=100 + i)
        judge(r, slo)
        stats.add(r)
    failed = rec(ok=False, error_kind="reset", tokens_output=0)
    judge(failed, slo)
    stats.add(failed)
    out = stats.result(4.0, objectives=slo.as_dict())
    met_tokens = sum(100 + i for i in range(10) if i % 5 != 4)
    assert out["slo_attainment_ratio"] == 8 / 10  # of the completed requests
    assert out["request_goodput"] == 8 / 4.0
    assert out["output_goodput"] == met_tokens / 4.0
    assert out["slo"] == {"objectives_s": {"e2el": 1.0}, "failing_ratio": {"e2el": 0.2}}
    # merged stats give the same
    a, b = Stats(), Stats()
    a.merge(stats)
    b.merge(a)
    assert b.result(4.0, objectives=slo.as_dict())["slo_attainment_ratio"] == 0.8
    assert "slo" not in stats.result(4.0)
