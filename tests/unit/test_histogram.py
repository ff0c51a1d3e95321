"""The one histogram: relative error, exact merging, serialisation."""

from __future__ import annotations

import json
import math
import random

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from specload.histogram import BucketCounts, Histogram

pytestmark = pytest.mark.unit


def true_quantile(values: list[float], q: float) -> float:
    s = sorted(values)
    return s[int(q * (len(s) - 1))]


@settings(max_examples=60, deadline=None)
@given(
    st.lists(st.floats(min_value=1e-6, max_value=1e4, allow_nan=False), min_size=1, max_size=300),
    st.sampled_from([0.0, 0.1, 0.5, 0.9, 0.99, 1.0]),
)
def test_quantile_within_relative_error_of_true_sample(values: list[float], q: float) -> None:
    h = Histogram()
    h.extend(values)
    got = h.quantile(q)
    want = true_quantile(values, q)
    assert got is not None
    assert abs(got - want) <= 0.01 * want


def test_add_and_extend_agree_and_count_zero() -> None:
    values = [0.0, 0.001, 0.002, 0.5, 3.0, 3.0]
    a = Histogram()
    for v in values:
        a.add(v)
    b = Histogram()
    b.extend(values)
    assert a == b
    assert a.count == 6 and a.zero_count == 1
    assert a.quantile(0.0) == 0.0
    assert a.max == 3.0 and a.min == 0.0
    assert a.mean == pytest.approx(sum(values) / 6)


@pytest.mark.parametrize("accuracy", [0.005, 0.01, 0.1])
def test_extend_puts_every_value_where_add_does(accuracy: float) -> None:
    """extend() counts buckets by runs of sorted values; every value must land where add()
    puts it — also values on and next to bucket edges, duplicates, zeros and negatives."""
    rng = random.Random(11)
    lg = math.log((1 + accuracy) / (1 - accuracy))
    edges = [math.exp(i * lg) for i in range(-700, -100, 7)]
    values = [rng.lognormvariate(-5, 1.5) for _ in range(3000)]
    values += [rng.gauss(0.005, 0.0002) for _ in range(400)]
    values += edges + [math.nextafter(e, 0) for e in edges] + [math.nextafter(e, 1) for e in edges]
    values += [0.0, -0.25, 0.005, 0.005, 0.005]
    rng.shuffle(values)
    for chunk in (values[:1], values[:7], values):
        a = Histogram(accuracy)
        for v in chunk:
            a.add(v)
        b = Histogram(accuracy)
        b.extend(iter(chunk))
        assert b._counts == a._counts
        assert (b.zero_count, b.count, b.min, b.max) == (a.zero_count, a.count, a.min, a.max)
        assert b.sum == pytest.approx(a.sum, rel=1e-12)
    empty = Histogram()
    empty.extend([])
    assert empty.count == 0 and empty.min == math.inf


def test_weighted_add_counts_each_sample() -> None:
    h = Histogram()
    h.add(0.005, 3)
    h.add(0.010, 1)
    assert h.count == 4
    assert h.quantile(0.5) == pytest.approx(0.005, rel=0.01)
    assert h.sum == pytest.approx(0.025)


def test_merge_is_exact_and_order_free() -> None:
    rng = random.Random(7)
    values = [rng.lognormvariate(-4, 1) for _ in range(5000)]
    whole = Histogram()
    whole.extend(values)
    parts = [Histogram() for _ in range(3)]
    for i, v in enumerate(values):
        parts[i % 3].add(v)
    merged = Histogram()
    for p in reversed(parts):
        merged.merge(p)
    assert merged == whole
    assert merged.quantiles([0.5, 0.9, 0.99]) == whole.quantiles([0.5, 0.9, 0.99])
    assert merged.sum == pytest.approx(whole.sum)


def test_serialises_through_json_and_round_trips() -> None:
    h = Histogram()
    h.extend([0.0, 0.013, 0.0136, 2.5])
    again = Histogram.from_dict(json.loads(json.dumps(h.to_dict())))
    assert again == h
    assert again.quantile(0.5) == h.quantile(0.5)
    assert again.min == h.min and again.max == h.max


def test_empty_histogram_has_no_percentiles() -> None:
    h = Histogram()
    assert h.quantile(0.5) is None
    assert h.percentiles() == {"mean": None, "median": None, "p90": None, "p99": None}
    assert Histogram.from_dict(h.to_dict()) == h


def test_merge_refuses_other_accuracy() -> None:
    with pytest.raises(ValueError):
        Histogram(0.01).merge(Histogram(0.005))


def test_bucket_counts_are_cumulative_with_inf() -> None:
    b = BucketCounts([0.01, 0.1, 1.0])
    for v in (0.005, 0.01, 0.05, 2.0):
        b.add(v)
    assert b.cumulative() == [("0.01", 2), ("0.1", 3), ("1.0", 3), ("+Inf", 4)]
    assert b.count == 4 and b.sum == pytest.approx(2.065)
