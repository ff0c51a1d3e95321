"""The stopping rules (specload.results.stopping) against known truth: error spending,
boundaries, Student's t, the verdicts an interval supports, and each rule on data whose
answer is known."""

from __future__ import annotations

import math

import numpy as np
import pytest

from specload.records.request import RequestRecord
from specload.results.stopping import (
    Boundary,
    PrecisionRule,
    SequentialRule,
    ThroughputPrecision,
    judge,
    median_rank_interval,
    metric,
    spent,
    t_from_z,
)

pytestmark = pytest.mark.unit


def test_error_spending_is_pococks_lan_demets_function() -> None:
    assert spent(0.0) == 0.0
    assert spent(1.0) == pytest.approx(0.05)
    # alpha * ln(1 + (e - 1) / 2), by hand: 0.05 * ln(1.859141) = 0.031006
    assert spent(0.5) == pytest.approx(0.031006, abs=1e-6)
    assert spent(2.0) == pytest.approx(0.05)  # past the budget: all of it, no more
    shares = [spent(t / 10) for t in range(11)]
    assert shares == sorted(shares)


def test_one_look_is_the_plain_interval() -> None:
    assert Boundary().next(100.0, 1.0) == pytest.approx(1.96, abs=0.03)


def test_two_equal_looks_give_the_published_boundaries() -> None:
    # Lan-DeMets, Pocock-type spending, two equally spaced looks, alpha 0.05 two-sided:
    # 2.157 and 2.201 (Jennison & Turnbull 2000, table 7.6; gsDesign's sfLDPocock).
    b = Boundary()
    assert b.next(50.0, 0.5) == pytest.approx(2.157, abs=0.03)
    assert b.next(100.0, 1.0) == pytest.approx(2.201, abs=0.03)


def test_the_boundaries_hold_the_error_over_many_looks() -> None:
    # Independent Brownian paths (another seed than the boundary's own), 10 looks of
    # unequal information: crossing anywhere is the 5% spent, not 10 x 5%.
    infos = [4.0, 9.0, 10.0, 20.0, 31.0, 40.0, 55.0, 70.0, 80.0, 100.0]
    b = Boundary()
    bounds = [b.next(info, info / 100.0) for info in infos]
    rng = np.random.default_rng(12345)
    paths = 200_000
    s = np.zeros(paths)
    crossed = np.zeros(paths, dtype=bool)
    last = 0.0
    for info, c in zip(infos, bounds, strict=True):
        s += math.sqrt(info - last) * rng.standard_normal(paths)
        last = info
        crossed |= np.abs(s / math.sqrt(info)) >= c
    assert crossed.mean() == pytest.approx(0.05, abs=0.003)
    # a plain 1.96 at every look: the naive rule's error, several times more
    assert min(bounds) > 2.2


@pytest.mark.parametrize(("df", "exact"), [(5, 2.5706), (10, 2.2281), (30, 2.0423), (1e9, 1.96)])
def test_student_t_from_the_normal_quantile(df: float, exact: float) -> None:
    assert t_from_z(1.959964, df) == pytest.approx(exact, abs=0.006)


@pytest.mark.parametrize(
    ("low", "high", "verdict"),
    [
        (1.06, 1.20, "slower"),
        (0.80, 0.94, "faster"),
        (0.96, 1.04, "equivalent"),
        (0.95, 1.05, "equivalent"),  # the margin's edges belong to it
        (1.02, 1.08, None),  # slower, but not by more than the margin: not yet known
        (0.90, 1.10, None),
        (1.00, 1.06, None),
    ],
)
def test_the_verdict_an_interval_supports(low: float, high: float, verdict: str | None) -> None:
    assert judge(low, high, 0.05) == verdict


def test_higher_is_better_swaps_faster_and_slower() -> None:
    assert judge(1.06, 1.2, 0.05, lower_is_better=False) == "faster"
    assert judge(0.8, 0.9, 0.05, lower_is_better=False) == "slower"


def test_a_metric_takes_only_what_was_measured() -> None:
    tpot = metric("tpot")
    base = {"category": "c", "step": "c1", "variant": "v", "model": "m", "start_s": 0.0}
    assert tpot.value(RequestRecord(**base, end_s=1.0, ok=True, tpot_s=0.02)) == 0.02
    assert tpot.value(RequestRecord(**base, end_s=1.0, ok=False, tpot_s=0.02)) is None
    assert tpot.value(RequestRecord(**base, end_s=1.0, ok=True, tpot_s=None)) is None
    assert tpot.value(RequestRecord(**base, end_s=1.0, ok=True, tpot_s=math.nan)) is None
    # all its tokens in one read: TPOT 0, a value compare and summary.json count too
    assert tpot.value(RequestRecord(**base, end_s=1.0, ok=True, tpot_s=0.0)) == 0.0
    assert tpot.value(RequestRecord(**base, end_s=1.0, ok=True, tpot_s=-1.0)) is None
    with pytest.raises(ValueError, match="unknown metric 'x'"):
        metric("x")


def _lognormal(n: int, seed: int, sd: float = 0.1, scale: float = 0.02) -> list[float]:
    return list(scale * np.exp(sd * np.random.default_rng(seed).standard_normal(n)))


def test_precision_stops_when_the_interval_is_narrow_enough() -> None:
    # A median's standard error is 1.2533 sd / sqrt(n): +-2% at sd 0.1 takes about
    # (1.96 * 1.2533 * 0.1 / 0.02)^2 = 151 requests (a little more with Student's t and
    # the smoothing); the true median, 0.02, is inside nearly every stopped interval.
    stops, inside = [], 0
    for seed in range(20):
        rule = PrecisionRule(0.02)
        for i, value in enumerate(_lognormal(2000, seed)):
            rule.add(float(i), value)
            if rule.due() and rule.look():
                break
        assert rule.reached_at is not None and rule.half_width is not None
        assert rule.half_width <= 0.02
        assert rule.interval is not None
        inside += rule.interval[0] <= 0.02 <= rule.interval[1]
        stops.append(rule.reached_at)
    assert 130 <= float(np.median(stops)) <= 260
    assert inside >= 17  # 95% of 20 is 19; binomial's 99% bound 17


def test_precision_never_stops_before_its_minimum() -> None:
    rule = PrecisionRule(0.5, min_requests=30)
    looked = []
    for i in range(40):
        rule.add(float(i), 0.02)
        if rule.due():
            looked.append(len(rule.values))
            if rule.look():
                break
    assert looked == [30] and rule.reached_at == 30


def test_the_rank_interval_of_independent_requests_is_the_sign_tests() -> None:
    # 1..100 taken low, high, low, high: no run of requests below the median, so the batch
    # means see less spread than independence would; the independent count's sd, sqrt(n/4)
    # = 5, is the floor. Batches of 10 (two blocks of 5): 1.5 * (100/10 - 1) = 13.5 degrees
    # of freedom, t = 2.152; ranks 50 -+ 2.152 * 5, read between the order statistics
    # (here the values are their ranks): the sign test's interval, 39.24 to 60.76.
    values = [float(v) for pair in zip(range(1, 51), range(100, 50, -1), strict=True) for v in pair]
    est, low, high = median_rank_interval(values, 1)
    assert est == 50.0
    assert low == pytest.approx(39.24, abs=0.01) and high == pytest.approx(60.76, abs=0.01)


def test_requests_that_run_together_widen_the_rank_interval() -> None:
    # the same 100 values, each sent by 4 requests in a row (as 4 streams that ran
    # together): the count below the median moves 4 at a time, its sd doubles, and so does
    # the interval's span of ranks
    rng = np.random.default_rng(5)
    distinct = rng.permutation(np.arange(1.0, 101.0))
    apart = rng.permutation(np.repeat(distinct, 4))
    together = np.repeat(distinct, 4)
    _, lo_a, hi_a = median_rank_interval(list(apart), 4)
    _, lo_t, hi_t = median_rank_interval(list(together), 4)
    assert 1.6 <= (hi_t - lo_t) / (hi_a - lo_a) <= 2.5


@pytest.mark.parametrize("run", [1, 4])
def test_the_rank_interval_covers_the_true_median(run: int) -> None:
    # lognormal TPOTs of median 0.02 exactly, each drawn once (run 1) or for 4 requests in
    # a row (run 4): with the independent count's sd alone the correlated case covered 141
    # of 200 (70%)
    inside = 0
    for seed in range(200):
        draws = _lognormal(240 // run, seed, sd=0.2)
        values = [v for v in draws for _ in range(run)]
        _, low, high = median_rank_interval(values, run)
        inside += low <= 0.02 <= high
    assert inside >= 183  # at 95% the binomial's 99% bound (these seeds: 192 and 186)


def _replay(rule: SequentialRule, values: list[float]) -> None:
    for i, value in enumerate(values):
        rule.add(float(i), value)
        if rule.due() and rule.look() is not None:
            return
    rule.look(last=True)


def test_a_much_slower_variant_is_called_slower_early() -> None:
    rule = SequentialRule(_lognormal(200, 1), 0.05, budget=200)
    _replay(rule, [v * 1.3 for v in _lognormal(200, 2)])
    assert rule.verdict == "slower"
    assert rule.verdict_requests is not None and rule.verdict_requests <= 60
    last = rule.last
    assert last is not None and last.low > 1.05 and last.ratio == pytest.approx(1.3, rel=0.05)


def test_an_equal_variant_is_equivalent_and_a_short_budget_undecided() -> None:
    rule = SequentialRule(_lognormal(400, 1), 0.05, budget=400)
    _replay(rule, _lognormal(400, 2))
    assert rule.verdict == "equivalent"
    assert rule.verdict_requests is not None and rule.verdict_requests < 400
    short = SequentialRule(_lognormal(400, 1), 0.05, budget=25)
    _replay(short, _lognormal(25, 2))
    assert (short.verdict, short.verdict_requests) == ("undecided", 25)


def test_the_rule_refuses_a_baseline_too_small_for_an_interval() -> None:
    with pytest.raises(ValueError, match="the baseline level has 5 requests"):
        SequentialRule([0.02] * 5, 0.05, budget=50)


def test_repeated_looks_with_a_plain_interval_err_more_than_the_rule() -> None:
    # Equal variants, iid: the naive rule (1.96 at every look, "excludes 1") calls some
    # faster or slower; the rule with error spending and a zero margin stays near 5%.
    wrong = {"naive": 0, "spending": 0}
    for trial in range(60):
        base, var = _lognormal(200, 1000 + trial), _lognormal(200, 5000 + trial)
        for name, fixed_z in (("naive", 1.959964), ("spending", None)):
            rule = SequentialRule(base, 0.0, budget=200, seed=trial, fixed_z=fixed_z)
            _replay(rule, var)
            wrong[name] += rule.verdict in ("faster", "slower")
    assert wrong["naive"] > wrong["spending"]
    assert wrong["spending"] <= 8  # 5% of 60 is 3; binomial's 99.9% bound is 8


def test_a_median_of_zero_gives_no_ratio_and_no_verdict() -> None:
    with pytest.raises(ValueError, match="the baseline level's median is 0"):
        SequentialRule([0.0] * 15 + [0.02] * 10, 0.05, budget=50)
    rule = SequentialRule(_lognormal(100, 1), 0.05, budget=40)
    _replay(rule, [0.0] * 30 + [0.02] * 10)  # the variant's median is 0
    assert (rule.verdict, rule.verdict_requests) == ("undecided", 40)
    assert all(look.ratio is None and look.verdict is None for look in rule.looks)


def _stream(start: float, tokens: int = 50, e2e: float = 1.0, step: str = "c4") -> RequestRecord:
    return RequestRecord(
        category="c", step=step, variant="v", model="m", start_s=start, end_s=start + e2e,
        ok=True, ttft_s=0.1, e2e_s=e2e, tokens_output=tokens,
    )  # fmt: skip


def test_throughput_precision_judges_the_tokens_that_arrived() -> None:
    # 4 streams of 50 tokens a second each, back to back: 200 tok/s
    rule = ThroughputPrecision(0.02, min_requests=8, start_s=100.0)
    for k in range(40):
        for _user in range(4):
            rule.add_record(_stream(100.0 + k), mine=True)
    assert rule.due()
    assert rule.look(now_s=140.0)
    assert rule.estimate == pytest.approx(200.0, rel=1e-6)
    # batches of 0.75 s against a 1 s pattern (no token in a request's first 0.1 s)
    assert rule.half_width is not None and 0 < rule.half_width <= 0.02
    # bins newer than now - the longest request (1 s) wait for requests in flight
    late = ThroughputPrecision(0.02, min_requests=1, start_s=100.0)
    late.add_record(_stream(100.0), mine=True)
    assert not late.look(now_s=101.5)  # 0.5 s judged: fewer than 4 batches
    assert late.estimate is None


def test_throughput_precision_counts_a_noisy_rate_with_batch_means() -> None:
    # 2 streams whose tokens alternate 40 and 60 a second: mean 100 tok/s
    rule = ThroughputPrecision(0.5, min_requests=1, start_s=0.0)
    for k in range(80):
        rule.add_record(_stream(float(k), tokens=40 if k % 2 else 60), mine=True)
        rule.add_record(_stream(float(k), tokens=60 if k % 2 else 40), mine=True)
    rule.look(now_s=80.0)
    assert rule.estimate == pytest.approx(100.0, rel=0.01)
    assert rule.interval is not None and rule.interval[0] <= 100.0 <= rule.interval[1]


def test_a_quarter_of_zero_tpots_widens_the_interval_and_still_decides() -> None:
    # a loaded client reads some streams whole: TPOT 0 on a quarter of the requests
    rng = np.random.default_rng(4)
    base = [0.0 if rng.random() < 0.25 else v for v in _lognormal(300, 1)]
    var = [0.0 if rng.random() < 0.25 else v * 1.5 for v in _lognormal(300, 2)]
    rule = SequentialRule(base, 0.05, budget=300)
    _replay(rule, var)
    assert rule.verdict == "slower"
    assert rule.last is not None and rule.last.ratio is not None


def test_the_budgets_last_look_is_the_levels_last_word() -> None:
    # the driver looks at t = 1 (the budget's end), then closes the level: no second look
    # with nothing left to spend (an interval of 0..inf)
    rule = SequentialRule(_lognormal(100, 1), 0.05, budget=40)
    for i, value in enumerate(_lognormal(40, 2)):
        rule.add(float(i), value)
    assert rule.look(1.0) is None
    looks = len(rule.looks)
    assert rule.look(last=True) == "undecided"
    assert len(rule.looks) == looks and rule.verdict_requests == 40
    last = rule.last
    assert last is not None and last.low is not None and last.high is not None
    assert math.isfinite(last.low) and math.isfinite(last.high)


def test_no_interval_before_five_blocks_of_the_concurrency() -> None:
    # at c64 a block is 64 requests: with 20 of them every resample was the sample itself
    # and the width a false zero ("precise" after 20 requests, whatever the data)
    spread = list(0.02 * (1 + 0.6 * np.random.default_rng(8).uniform(-1, 1, 400)))
    rule = PrecisionRule(0.02, concurrency=64, min_requests=20)
    stopped_at = None
    for i, value in enumerate(spread):
        rule.add(float(i), value)
        if rule.due() and rule.look():
            stopped_at = i + 1
            break
    assert stopped_at is None  # +-60% needs thousands of requests for +-2%
    assert rule.half_width is not None and rule.half_width > 0.02
    _est, low, high = median_rank_interval(spread[:100], 64)
    assert (low, high) == (-math.inf, math.inf)
    seq = SequentialRule(spread, 0.05, budget=100, concurrency=64)
    _replay(seq, spread[:100])
    assert seq.verdict == "undecided"
