"""Aggregates and client metrics from records."""

from __future__ import annotations

from dataclasses import replace

import pytest
from prometheus_client import CollectorRegistry

from specload.errors import UsageError
from specload.histogram import Histogram
from specload.load.metrics import ClientMetrics, parse_address
from specload.records.request import RequestRecord
from specload.records.stats import Aggregator, Stats, stream_held
from specload.results.aggregate import LevelAggregate, assess_level

pytestmark = pytest.mark.unit


def record(i: int, *, ok: bool = True, step: str = "c1", category: str = "math") -> RequestRecord:
    itl = Histogram()
    itl.add(0.005, 9)
    return RequestRecord(
        category=category,
        step=step,
        variant="ngram",
        model="m",
        start_s=100.0 + i,
        end_s=101.0 + i,
        ok=ok,
        error_kind=None if ok else "http_503",
        ttft_s=0.05 + i * 0.001,
        ttfct_s=0.2,
        e2e_s=1.0,
        tpot_s=0.005 + i * 0.0001,
        tokens_reasoning=8,
        tokens_content=2,
        tokens_output=10,
        chunks=10,
        finish_reason="stop",
        itl_token_hist=itl if ok else None,
        itl_chunk_hist=itl.copy() if ok else None,
    )


def test_record_round_trips_with_histograms() -> None:
    r = record(1)
    again = RequestRecord.from_dict(r.to_dict(include_histograms=True))
    assert again == r
    assert "itl_token_hist" not in r.to_dict()


def test_stats_merge_equals_single_pass() -> None:
    recs = [record(i, ok=i % 5 != 0, category=("math", "coding")[i % 2]) for i in range(40)]
    whole = Stats()
    for r in recs:
        whole.add(r)
    a, b = Stats(), Stats()
    for i, r in enumerate(recs):
        (a if i < 17 else b).add(r)
    a.merge(b)
    merged, single = a.result(10.0), whole.result(10.0)
    assert merged.pop("mean_itl_ms") == pytest.approx(single.pop("mean_itl_ms"))
    assert merged == single
    assert a.itl == whole.itl and a.itl_chunk == whole.itl_chunk  # bucket counts: exact
    assert whole.completed == 32 and whole.failed == 8 and whole.errors == {"http_503": 8}
    # token totals are the completed requests'; every request's are in tokens_received
    assert whole.tokens_output == 320 and whole.tokens_received == 400
    assert whole.tokens_per_chunk == 1.0


def test_per_request_percentiles_are_exact_sample_values() -> None:
    s = Stats()
    for i in range(11):
        s.add(record(i))
    tpots = sorted(0.005 + i * 0.0001 for i in range(11))
    out = s.result(1.0)
    assert out["median_tpot_ms"] == tpots[5] * 1000  # rank floor(0.5 * 10), exactly
    assert out["p90_tpot_ms"] == tpots[9] * 1000
    assert out["mean_tpot_ms"] == pytest.approx(sum(tpots) / 11 * 1000)


def test_aggregator_totals_by_step_and_category() -> None:
    agg = Aggregator()
    for i in range(6):
        agg.add(record(i, step=("c1", "c4")[i % 2], category=("math", "coding")[i // 3]))
    assert agg.steps == ["c1", "c4"]
    assert agg.total(step="c1").completed == 3
    assert agg.total(category="coding").completed == 3
    assert agg.total().completed == 6
    assert len(agg.total(step="c4", category="math").values["tpot"]) == 1


def test_step_result_categories_share_one_span() -> None:
    # Categories of different spans: tok/s of each over the step's span, so they sum up.
    agg = Aggregator()
    for i in range(10):
        agg.add(record(i, category="math"))  # 100..110
    for i in range(2):
        agg.add(record(i, category="coding"))  # 100..102
    out = agg.step_result("c1")
    assert out["duration"] == pytest.approx(10.0)
    cats = out["categories"]
    assert cats["math"]["output_throughput"] + cats["coding"]["output_throughput"] == (
        pytest.approx(out["output_throughput"])
    )
    assert out["output_throughput"] == pytest.approx(120 / 10.0)


def test_client_metrics_families_and_labels() -> None:
    m = ClientMetrics(users=lambda: 7)
    for i in range(3):
        m.observe(record(i))
    m.observe(record(9, ok=False))
    reg = CollectorRegistry()
    reg.register(m)
    labels = {"variant": "ngram", "model": "m", "category": "math", "step": "c1"}
    assert reg.get_sample_value("specload_client_requests_total", {**labels, "outcome": "ok"}) == 3
    assert reg.get_sample_value("specload_client_errors_total", {**labels, "kind": "http_503"}) == 1
    # the fixed classes exist at 0 before their first error (rate() sees the first one)
    for kind in ("refused", "reset", "timeout", "malformed", "no_done", "protocol"):
        assert reg.get_sample_value("specload_client_errors_total", {**labels, "kind": kind}) == 0
    assert (
        reg.get_sample_value(
            "specload_client_output_tokens_total", {**labels, "channel": "reasoning"}
        )
        == 32
    )
    assert reg.get_sample_value("specload_client_ttft_seconds_count", labels) == 3
    le = {**labels, "le": "0.006"}
    assert reg.get_sample_value("specload_client_tpot_seconds_bucket", le) == 3
    assert reg.get_sample_value("specload_client_itl_seconds_count", labels) == 27
    assert reg.get_sample_value("specload_client_users") == 7
    assert reg.get_sample_value("specload_client_reasoning_truncated_total", labels) == 0
    assert reg.get_sample_value("specload_client_streams_held_total", labels) == 0
    m.observe(replace(record(4), chunks=200, chunks_coalesced=198, ttft_s=0.32, e2e_s=0.32002))
    assert reg.get_sample_value("specload_client_streams_held_total", labels) == 1


def test_parse_metrics_address() -> None:
    assert parse_address("off") is None
    assert parse_address(":9647") == ("127.0.0.1", 9647)
    assert parse_address("127.0.0.1:0") == ("127.0.0.1", 0)
    with pytest.raises(UsageError, match="--metrics-address"):
        parse_address("host:port")


def test_client_metrics_carry_attainment_and_spec_decode_per_channel() -> None:
    m = ClientMetrics(objectives=lambda: ("tpot", "e2el"))
    for i in range(4):
        r = record(i)
        r.slo_met = i != 3
        r.slo_failed = [] if i != 3 else ["e2el"]
        r.spec_decode = {
            "source": "server",
            "drafts": 4,
            "draft_tokens": 12,
            "accepted_tokens": 6,
            "reasoning": {"drafts": 3, "draft_tokens": 9, "accepted_tokens": 5},
            "content": {"drafts": 1, "draft_tokens": 3, "accepted_tokens": 1},
        }
        if i == 0:  # split unknown: the whole counts under channel="unknown"
            del r.spec_decode["reasoning"], r.spec_decode["content"]
        m.observe(r)
    reg = CollectorRegistry()
    reg.register(m)
    labels = {"variant": "ngram", "model": "m", "category": "math", "step": "c1"}

    def value(name: str, **extra: str) -> float | None:
        return reg.get_sample_value(name, {**labels, **extra})

    assert value("specload_client_slo_met_requests_total", objective="all") == 3
    assert value("specload_client_slo_met_requests_total", objective="tpot") == 4
    assert value("specload_client_slo_attainment_ratio", objective="e2el") == 0.75
    accepted = "specload_client_spec_decode_accepted_tokens_total"
    assert value(accepted, channel="reasoning") == 15
    assert value(accepted, channel="content") == 3
    assert value(accepted, channel="unknown") == 6
    assert value("specload_client_spec_decode_drafts_total", channel="reasoning") == 9
    # without objectives, no attainment series
    plain = ClientMetrics()
    plain.observe(record(0))
    reg2 = CollectorRegistry()
    reg2.register(plain)
    assert (
        reg2.get_sample_value(
            "specload_client_slo_attainment_ratio", {**labels, "objective": "all"}
        )
        is None
    )


def test_a_stream_held_back_and_sent_at_once_is_counted_and_flags_its_level() -> None:
    flowing = record(0)  # 10 chunks, none read together, 0.95 s from first to last token
    # Measured on this VM (tests/vllm): 198 of 199 gaps 0 s, first to last token in 0.02 ms
    # after a TTFT of 0.32 s; a late client read 186 of 199 together at the flowing pace.
    held = replace(flowing, chunks=200, chunks_coalesced=198, ttft_s=0.32, e2e_s=0.32002)
    read_late = replace(flowing, chunks=200, chunks_coalesced=186, ttft_s=0.007, e2e_s=0.337)
    few = replace(held, chunks=7, chunks_coalesced=6)  # too few chunks to tell
    assert [stream_held(r) for r in (flowing, held, read_late, few)] == [
        False,
        True,
        False,
        False,
    ]
    assert not stream_held(replace(held, chunks_coalesced=179))  # 90% of 199 is 179.1
    assert not stream_held(replace(held, e2e_s=0.32 + 0.033))  # over a tenth of its TTFT
    assert stream_held(replace(held, e2e_s=0.32 + 0.031))
    failed = replace(held, ok=False, error_kind="http_503")  # not completed: not counted

    level = LevelAggregate()
    for r in [flowing] * 9 + [held, failed]:
        level.add(r)
    numbers = level.result(10.0)
    assert numbers["streams_held"] == 1 and numbers["held_stream_ratio"] == pytest.approx(0.1)
    assert assess_level(level, numbers)[0] == []  # 1 of 10: at the limit, not above it
    level.add(held)
    numbers = level.result(10.0)
    flags, warnings = assess_level(level, numbers)
    assert flags == ["streams_held"] and "2 of 11 streams arrived in one burst" in warnings[0]
    halves = [Stats(), Stats()]
    halves[0].extend([flowing, held])
    halves[1].extend([held, read_late])
    halves[0].merge(halves[1])
    assert halves[0].streams_held == 2 and halves[0].held_stream_ratio == 0.5


def test_mean_in_flight_is_the_time_in_flight_while_the_level_was_sending() -> None:
    # Window [100, 110]; 4 users whose requests each last 1 s, the first from the warm-up
    # (99.5). Truth by hand, from the window's start to the level's last start (109.5):
    # back to back, 4 in flight; with a 1 s wait before each, each user is in flight
    # 0.5 + 4 x 1 of those 9.5 s.
    def users(wait_s: float) -> list[RequestRecord]:
        out = []
        for _user in range(4):
            t = 99.5
            while t < 111.0:
                out.append(replace(record(0, step="c4"), start_s=t, end_s=t + 1.0))
                t += 1.0 + wait_s
        return out

    def level_of(records: list[RequestRecord]) -> LevelAggregate:
        level = LevelAggregate()
        for r in records:
            if 100.0 <= r.start_s <= 110.0:
                level.add(r)
            level.add_window_tokens(r, 100.0, 110.0)
        return level

    for wait_s, want in ((0.0, 4.0), (1.0, 4 * 4.5 / 9.5)):
        level = level_of(users(wait_s))
        numbers = level.result(10.0)
        assert numbers["mean_in_flight"] == pytest.approx(want)
        flags, warnings = assess_level(level, numbers, concurrency=4)
        if wait_s:
            assert flags == ["in_flight_short"]
            assert "1.9 requests in flight on average" in warnings[0]
            # not judged while requests of the window may still be running
            assert assess_level(level, numbers, concurrency=4, in_flight_settled=False)[0] == []
            assert assess_level(level, numbers)[0] == []  # open loop: no concurrency to hold
        else:
            assert flags == []
    # A --requests level: 4 users, 6 requests of 1 s back to back from 100 (the budget is
    # spent at 101, two requests run on alone): 4 in flight while it sent, not 6 / 2.
    budget = [replace(record(0, step="c4"), start_s=100.0 + (i // 4), end_s=101.0 + (i // 4))
              for i in range(6)]  # fmt: skip
    assert level_of(budget).result(2.0)["mean_in_flight"] == pytest.approx(4.0)
    assert LevelAggregate().result(10.0, windowed=False)["mean_in_flight"] is None
    assert level_of(budget[:4]).result(1.0)["mean_in_flight"] is None  # one start: no span
