"""specload.promtext: the one Prometheus text parser."""

from __future__ import annotations

import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest

from specload.promtext import PromTextError, parse

pytestmark = pytest.mark.unit

PAGE = r"""# HELP vllm:spec_decode_num_drafts_total Number of spec decoding drafts.
# TYPE vllm:spec_decode_num_drafts_total counter
vllm:spec_decode_num_drafts_total{engine="0",model_name="tiny"} 120.0
vllm:spec_decode_num_drafts_created{engine="0",model_name="tiny"} 1.7e+09
# HELP vllm:spec_decode_num_accepted_tokens_per_pos_total Accepted tokens per position.
# TYPE vllm:spec_decode_num_accepted_tokens_per_pos_total counter
vllm:spec_decode_num_accepted_tokens_per_pos_total{engine="0",model_name="tiny",position="0"} 90.0
vllm:spec_decode_num_accepted_tokens_per_pos_total{engine="0",model_name="tiny",position="1"} 60.0
vllm:spec_decode_num_accepted_tokens_per_pos_total{engine="1",model_name="tiny",position="0"} 10.0
# HELP vllm:inter_token_latency_seconds Histogram of inter-token latency.
# TYPE vllm:inter_token_latency_seconds histogram
vllm:inter_token_latency_seconds_bucket{engine="0",le="0.01",model_name="tiny"} 3.0
vllm:inter_token_latency_seconds_bucket{engine="0",le="0.1",model_name="tiny"} 7.0
vllm:inter_token_latency_seconds_bucket{engine="0",le="+Inf",model_name="tiny"} 8.0
vllm:inter_token_latency_seconds_count{engine="0",model_name="tiny"} 8.0
vllm:inter_token_latency_seconds_sum{engine="0",model_name="tiny"} 0.4
vllm:inter_token_latency_seconds_created{engine="0",model_name="tiny"} 1.7e+09
vllm:inter_token_latency_seconds_bucket{engine="1",le="0.01",model_name="tiny"} 1.0
vllm:inter_token_latency_seconds_bucket{engine="1",le="0.1",model_name="tiny"} 1.0
vllm:inter_token_latency_seconds_bucket{engine="1",le="+Inf",model_name="tiny"} 2.0
vllm:inter_token_latency_seconds_count{engine="1",model_name="tiny"} 2.0
vllm:inter_token_latency_seconds_sum{engine="1",model_name="tiny"} 0.6
# TYPE vllm:num_requests_running gauge
vllm:num_requests_running{engine="0",model_name="tiny"} 3.0
# TYPE process_start_time_seconds gauge
process_start_time_seconds 1.76e+09
# a free comment
weird{path="C:\\dir\"x\"\nnext",other="}{,="} NaN 1700000000123
untyped_one -Inf
"""


def test_families_grouping_and_types() -> None:
    fams = parse(PAGE)
    drafts = fams["vllm:spec_decode_num_drafts_total"]
    assert drafts.type == "counter"
    assert drafts.help == "Number of spec decoding drafts."
    # _created belongs to the counter but is not part of its value.
    assert [s.name for s in drafts.samples] == [
        "vllm:spec_decode_num_drafts_total",
        "vllm:spec_decode_num_drafts_created",
    ]
    assert drafts.total() == 120.0
    itl = fams["vllm:inter_token_latency_seconds"]
    assert itl.type == "histogram"
    assert len(itl.samples) == 11
    assert fams["vllm:num_requests_running"].total() == 3.0
    assert set(fams) == {
        "vllm:spec_decode_num_drafts_total",
        "vllm:spec_decode_num_accepted_tokens_per_pos_total",
        "vllm:inter_token_latency_seconds",
        "vllm:num_requests_running",
        "process_start_time_seconds",
        "weird",
        "untyped_one",
    }


def test_tolerant_counter_lookup() -> None:
    fams = parse(PAGE)
    by_base = fams.get_family("vllm:spec_decode_num_drafts")
    assert by_base is fams.get_family("vllm:spec_decode_num_drafts_total")
    assert by_base is not None and by_base.base == "vllm:spec_decode_num_drafts"
    assert fams.get_family("vllm:nothing") is None


def test_counter_sum_over_labels_and_by_label() -> None:
    fam = parse(PAGE)["vllm:spec_decode_num_accepted_tokens_per_pos_total"]
    assert fam.total() == 160.0
    assert fam.total({"engine": "0"}) == 150.0
    assert fam.total({"engine": "7"}) is None  # absent, not zero
    assert fam.by_label("position") == {"0": 100.0, "1": 60.0}
    assert fam.by_label("position", {"engine": "0"}) == {"0": 90.0, "1": 60.0}
    assert fam.label_values("position") == {"0", "1"}


def test_histogram_merges_label_sets() -> None:
    fam = parse(PAGE)["vllm:inter_token_latency_seconds"]
    hist = fam.histogram()
    assert hist is not None
    assert hist.buckets == ((0.01, 4.0), (0.1, 8.0), (math.inf, 10.0))
    assert hist.count == 10.0
    assert hist.sum == pytest.approx(1.0)
    assert hist.mean == pytest.approx(0.1)
    one = fam.histogram({"engine": "0"})
    assert one is not None and one.count == 8.0 and one.buckets[-1] == (math.inf, 8.0)
    assert fam.sum_count({"engine": "1"}) == (pytest.approx(0.6), 2.0)
    assert fam.histogram({"engine": "9"}) is None


def test_escapes_nan_inf_timestamp() -> None:
    fams = parse(PAGE)
    (weird,) = fams["weird"].samples
    assert weird.labels == {"path": 'C:\\dir"x"\nnext', "other": "}{,="}
    assert math.isnan(weird.value)
    assert weird.timestamp_ms == 1700000000123
    assert fams["untyped_one"].total() == -math.inf


def _keep_spec(name: str) -> bool:
    return name.startswith("vllm:spec") or name == "weird"


def test_keep_skips_families_and_agrees_with_full_parse() -> None:
    fams = parse(PAGE, keep=_keep_spec)
    assert fams["vllm:inter_token_latency_seconds"].samples == []
    assert fams["vllm:inter_token_latency_seconds"].type == "histogram"
    assert fams["vllm:spec_decode_num_drafts_total"].total() == 120.0
    full = parse(PAGE)
    assert set(fams) == set(full)
    for name, fam in fams.items():
        assert fam.type == full[name].type
        if _keep_spec(name):
            assert repr(fam.samples) == repr(full[name].samples)  # NaN != NaN


def test_keep_still_catches_foreign_lines_in_skipped_families() -> None:
    # A line that does not belong to the skipped family is parsed, and fails.
    text = '# TYPE a gauge\na{x="1"} 1\n<html>\n# TYPE b gauge\nb 2\n'
    with pytest.raises(PromTextError, match="line 3"):
        parse(text, keep=lambda name: name == "b")
    # A bad value on a skipped family's own line is the documented blind spot...
    bad = '# TYPE a gauge\na 1\na{x="1"} zz\n# TYPE b gauge\nb 2\n'
    assert parse(bad, keep=lambda name: name == "b")["b"].total() == 2.0
    # ...that a full parse reports.
    with pytest.raises(PromTextError, match="line 3"):
        parse(bad)


@pytest.mark.parametrize(
    ("text", "needle"),
    [
        ("<html><body>Internal error</body></html>\n", "line 1"),
        ('ok_metric 1\nbroken{a="1" 2\n', "line 2"),
        ("m{a=1} 2\n", "malformed labels"),
        ("m 1 2 3\n", "expected a value"),
        ("m abc\n", "bad value"),
        ("# TYPE m frobnicator\n", "unknown metric type"),
        ('m{a="x"b="y"} 1\n', "malformed labels"),
        ("1m 3\n", "bad metric name"),
    ],
)
def test_malformed_names_the_line(text: str, needle: str) -> None:
    with pytest.raises(PromTextError, match=needle):
        parse(text)


def test_empty_and_comment_only() -> None:
    assert parse("") == {}
    assert parse("# just a comment\n\n") == {}


def test_crlf_and_indentation_tolerated() -> None:
    fams = parse('# TYPE a gauge\r\n  a{x="1"} 2\r\n')
    assert fams["a"].total() == 2.0


label_text = st.text(
    alphabet=st.characters(blacklist_categories=("Cs",), blacklist_characters="\x00"),
    max_size=12,
)


@settings(max_examples=60, deadline=None)
@given(
    values=st.lists(
        st.tuples(label_text, st.floats(min_value=0, max_value=1e12)), min_size=1, max_size=5
    ),
    observations=st.lists(st.floats(min_value=0, max_value=100), max_size=20),
)
def test_round_trip_with_prometheus_client(
    values: list[tuple[str, float]], observations: list[float]
) -> None:
    """What prometheus_client writes, we read back exactly."""
    registry = CollectorRegistry()
    counter = Counter("rt_things", "things", ["who"], registry=registry)
    gauge = Gauge("rt_level", "level", ["who"], registry=registry)
    hist = Histogram("rt_latency_seconds", "lat", buckets=(0.5, 5.0, 50.0), registry=registry)
    expected: dict[str, float] = {}
    for who, v in values:
        counter.labels(who).inc(v)
        gauge.labels(who).set(v)
        expected[who] = expected.get(who, 0.0) + v
    for o in observations:
        hist.observe(o)
    fams = parse(generate_latest(registry).decode())
    things = fams.get_family("rt_things")
    assert things is not None and things.type == "counter"
    assert things.by_label("who") == pytest.approx(expected)
    level = fams["rt_level"]
    assert {s.labels["who"] for s in level.samples} == set(expected)
    h = fams["rt_latency_seconds"].histogram()
    assert h is not None
    assert h.count == len(observations)
    assert h.sum == pytest.approx(sum(observations))
    assert h.buckets[0] == (0.5, sum(1 for o in observations if o <= 0.5))
