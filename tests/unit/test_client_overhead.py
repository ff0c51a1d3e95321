"""Is the client the bottleneck? The server's per-request timing on records, client minus
server per level, the client's own lag and busy share, ``client_saturated``, compare's rule,
the client metrics and the web UI's client tab — each against known truth (issue 27, item 5).

The real-process checks: tests/integration/test_client_overhead_sim.py (the simulator with
``--enable-per-request-metrics``, a known network delay, a blocked client loop) and
tests/vllm/test_client_overhead_vllm.py (real vLLM 0.32).
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

import gevent
import orjson
import pytest
from gevent import monkey
from prometheus_client import CollectorRegistry

from specload.compare.overhead import OVERHEAD_SHARE, overhead_warning
from specload.load.lag import REPORT_KEY, ClientLoadBook, LagMeter
from specload.load.meter import PyStreamMeter, StreamMeter, meter_message
from specload.load.metrics import ClientMetrics
from specload.load.webui import CLIENT_HEADERS, NO_VALUE, client_rows
from specload.records.clientload import (
    BUSY_RATIO_LIMIT,
    CLIENT_SATURATED,
    LAG_P99_LIMIT_S,
    ClientLoad,
    chunk_gap_s,
    figures,
    level_result,
    saturated,
)
from specload.records.request import RequestRecord
from specload.records.servertiming import itl_minus_server_s, server_timing, ttft_minus_server_s
from specload.records.stats import Aggregator, Stats
from specload.results.aggregate import LevelAggregate, assess_level
from specload.results.model import Level
from tests.unit.test_load_meter import chunk

pytestmark = pytest.mark.unit

_real_sleep = monkey.get_original("time", "sleep")

# vLLM 0.32's final usage chunk with --enable-per-request-metrics (exclude_none), as a real
# server sent it (the tiny answering model, CPU build).
VLLM_TIMING = {
    "time_to_first_token_ms": 28.063388999726158,
    "generation_time_ms": 140.9035499964375,
    "queue_time_ms": 0.040831000660546124,
    "mean_itl_ms": 9.393569999762502,
    "tokens_per_second": 94.69308075920861,
}


def rec(**kw: Any) -> RequestRecord:
    return RequestRecord("math", "c4", "v", "m", 0.0, 1.0, **kw)


# -- the server's timing on a record ----------------------------------------------------


def test_server_timing_reads_vllms_fields_in_seconds_and_never_guesses() -> None:
    t = server_timing(VLLM_TIMING)
    assert t == pytest.approx(
        {
            "server_ttft_s": 0.028063388999726158,
            "server_generation_s": 0.1409035499964375,
            "server_queue_s": 0.000040831000660546124,
            "server_itl_s": 0.009393569999762502,
        }
    )
    # A field left out (the stream drops nulls), null, not a number, negative: None.
    partial = server_timing(
        {"time_to_first_token_ms": 5.0, "queue_time_ms": None, "mean_itl_ms": "2", "x": 1}
    )
    assert partial == {
        "server_ttft_s": 0.005,
        "server_generation_s": None,
        "server_queue_s": None,
        "server_itl_s": None,
    }
    assert server_timing({"generation_time_ms": -1.0, "mean_itl_ms": True}) is None
    assert server_timing({"speculative_decoding": {"num_drafts": 1}}) is None  # no timing
    assert server_timing(None) is None and server_timing([1]) is None


def _stream(m: StreamMeter, metrics: dict[str, Any] | None) -> None:
    m.feed(chunk(role=True, cum=0), 1.0)
    for i in range(4):
        m.feed(chunk("r", cum=i + 1, finish="stop" if i == 3 else None), 1.25 + 0.01 * i)
    final: dict[str, Any] = {"choices": [], "usage": {"prompt_tokens": 7, "completion_tokens": 4}}
    if metrics is not None:
        final["metrics"] = metrics
    m.feed(orjson.dumps(final), 1.3)
    m.feed(b"[DONE]", 1.3)


@pytest.mark.parametrize("meter", [StreamMeter, PyStreamMeter])
def test_a_streams_final_metrics_give_the_record_the_servers_timing(meter: type) -> None:
    r = rec()
    m = meter(1.0)
    _stream(m, {**VLLM_TIMING, "speculative_decoding": None})
    m.finish(r, 1.3)
    assert r.server_ttft_s == pytest.approx(0.028063388999726158)
    assert r.server_itl_s == pytest.approx(0.009393569999762502)
    assert r.spec_decode is None  # metrics without speculative_decoding: none
    # Without metrics: every server field None (nothing guessed from the client's times).
    bare = rec()
    m = meter(1.0)
    _stream(m, None)
    m.finish(bare, 1.3)
    assert (bare.server_ttft_s, bare.server_queue_s, bare.server_generation_s) == (None,) * 3
    assert bare.server_itl_s is None and bare.ttft_s == pytest.approx(0.25)


def test_a_whole_responses_metrics_give_the_record_the_servers_timing() -> None:
    m = StreamMeter(0.0)
    message = {
        "choices": [{"message": {"content": "a b c"}, "finish_reason": "stop"}],
        "usage": {"prompt_tokens": 3, "completion_tokens": 3},
        "metrics": {**VLLM_TIMING, "queue_time_ms": None, "speculative_decoding": None},
    }
    meter_message(message, m, 0.5)
    r = rec()
    m.finish(r, 0.5)
    assert r.server_ttft_s == pytest.approx(0.028063388999726158)
    assert r.server_queue_s is None and r.spec_decode is None


def test_client_minus_server_by_its_one_definition() -> None:
    r = rec(
        ok=True,
        ttft_s=0.060,
        tpot_s=0.0051,
        server_ttft_s=0.050,
        server_queue_s=0.004,
        server_itl_s=0.005,
    )
    assert ttft_minus_server_s(r) == pytest.approx(0.006)  # 60 - (4 + 50) ms
    assert itl_minus_server_s(r) == pytest.approx(0.0001)
    # A part missing, or a failed request: no figure.
    assert ttft_minus_server_s(rec(ok=True, ttft_s=0.06, server_ttft_s=0.05)) is None
    assert itl_minus_server_s(rec(ok=False, tpot_s=0.006, server_itl_s=0.005)) is None


def test_a_levels_client_minus_server_median_and_spread() -> None:
    stats = Stats()
    # 11 requests: the client saw 1..11 ms more than the server's queue + TTFT, and
    # 0..10 us more per token; one request without server timing counts in neither.
    for i in range(11):
        stats.add(
            rec(
                ok=True,
                ttft_s=0.100 + (i + 1) / 1000,
                tpot_s=0.005 + i / 1e6,
                server_ttft_s=0.090,
                server_queue_s=0.010,
                server_itl_s=0.005,
            )
        )
    stats.add(rec(ok=True, ttft_s=0.5, tpot_s=0.5))
    out = stats.result(10.0)
    assert out["server_timing_requests"] == 11
    assert out["median_ttft_minus_server_ms"] == pytest.approx(6.0)
    assert out["p10_ttft_minus_server_ms"] == pytest.approx(2.0)  # rank floor(0.1 x 10) = 1
    assert out["p90_ttft_minus_server_ms"] == pytest.approx(10.0)
    assert out["median_itl_minus_server_ms"] == pytest.approx(0.005)
    # Merging two halves gives the same figures (the master merging its workers).
    half, other = Stats(), Stats()
    for i, r in enumerate(_records_of(stats)):
        (half if i % 2 else other).add(r)
    half.merge(other)
    assert half.minus_server_result() == pytest.approx(stats.minus_server_result())
    # The typed reader takes them from summary.json.
    level = Level.from_dict({"name": "c4", "concurrency": 4, **out})
    assert level.figures.minus_server("median", "ttft") == pytest.approx(6.0)
    assert level.figures.server_timing_requests == 11
    assert Stats().result(1.0)["median_ttft_minus_server_ms"] is None


def _records_of(stats: Stats) -> Iterator[RequestRecord]:
    for i in range(11):
        yield rec(
            ok=True,
            ttft_s=0.100 + (i + 1) / 1000,
            tpot_s=0.005 + i / 1e6,
            server_ttft_s=0.090,
            server_queue_s=0.010,
            server_itl_s=0.005,
        )
    yield rec(ok=True, ttft_s=0.5, tpot_s=0.5)


# -- the client's own lag and busy share ---------------------------------------------------


class _FakeTime:
    """A clock and a CPU clock that a fake sleep advances by what it is told."""

    def __init__(self, wakes: list[tuple[float, float]]) -> None:
        self.now = 100.0
        self.cpu = 5.0
        self.wakes = iter(wakes)  # per sleep: (how late it wakes, CPU used meanwhile)

    def sleep(self, seconds: float) -> None:
        try:
            late, cpu = next(self.wakes)
        except StopIteration:
            raise gevent.GreenletExit from None
        self.now += seconds + late
        self.cpu += cpu


def test_lag_meter_adds_each_wake_ups_lateness_and_cpu_to_the_step_in_force() -> None:
    fake = _FakeTime([(0.0005, 0.002), (0.030, 0.031), (0.001, 0.0), (0.0, 0.011)])
    steps = iter(["c4-warmup", "c4", "c4", "c4"])
    meter = LagMeter(
        lambda: next(steps),
        interval_s=0.01,
        clock=lambda: fake.now,
        cpu=lambda: fake.cpu,
        sleep=fake.sleep,
        keep_unsent=True,
    )
    with pytest.raises(gevent.GreenletExit):
        meter.run()
    c4 = meter.steps["c4"]
    assert c4.lag.count == 3 and c4.lag.max == pytest.approx(0.030)
    assert c4.cpu_s == pytest.approx(0.042) and c4.wall_s == pytest.approx(0.061)
    assert meter.steps["c4-warmup"].lag.max == pytest.approx(0.0005)
    # A worker hands what it measured to its next report once.
    sent = meter.take()
    assert set(sent) == {"c4-warmup", "c4"} and meter.take() == {}
    assert ClientLoad.from_dict(sent["c4"]).busy_ratio == pytest.approx(0.042 / 0.061)


def test_lag_meter_sees_a_blocked_loop_and_a_cpu_burn_of_known_length() -> None:
    """In a real gevent loop: the loop blocked for 150 ms (a call that never yields), then
    200 ms of CPU burnt: the lag meter's worst wake-up is the block, its CPU the burn."""
    meter = LagMeter(lambda: "s", interval_s=0.01)
    meter.start()
    gevent.sleep(0.05)
    cpu0, wall0 = time.process_time(), time.perf_counter()
    _real_sleep(0.15)  # blocks the whole loop: no greenlet runs meanwhile
    gevent.sleep(0.03)
    burn_until = time.process_time() + 0.2
    while time.process_time() < burn_until:
        pass
    gevent.sleep(0.03)
    cpu1, wall1 = time.process_time(), time.perf_counter()
    gevent.sleep(0.02)
    meter.stop()
    load = meter.steps["s"]
    # The block's length, minus at most one interval (it may fall inside a sleep), plus a
    # little scheduling. The burn also blocks the loop for 200 ms of CPU (or more wall).
    assert 0.15 - 0.011 <= load.lag.max <= 0.2 + 0.2, load.lag.max
    late = sorted(v for v, _ in load.lag.buckets() if v > 0.1)
    assert len(late) >= 2, load.lag.buckets()  # the block and the burn
    # Busy share: the ticks' CPU is the process's, measured over the same span or longer.
    assert load.cpu_s >= 0.95 * (cpu1 - cpu0) - 0.01
    assert load.wall_s >= (wall1 - wall0) - 0.011
    assert load.busy_ratio is not None and 0.0 < load.busy_ratio <= 1.05
    assert not meter.running


def test_levels_merge_their_processes_busiest_and_flag_saturation_by_one_rule() -> None:
    quiet, busy = ClientLoad(), ClientLoad()
    for _ in range(100):
        quiet.add(0.001, 0.002, 0.01)
        busy.add(0.002, 0.0095, 0.01)
    out = figures([quiet, busy, ClientLoad()])  # a process without ticks: not counted
    assert out is not None and out.processes == 2 and out.samples == 200
    assert out.busy_ratio == pytest.approx(0.95)  # the busiest process's share
    assert out.lag_p99_s == pytest.approx(0.002, rel=0.01)
    assert saturated(out)  # 0.95 > BUSY_RATIO_LIMIT
    assert figures([]) is None and level_result(None)["client_lag_p99_s"] is None
    assert not saturated(None)

    def at(lag: float, busy: float = 0.5) -> Any:
        return figures([_load(lag, busy)])

    # 1. the lag p99 beyond its limit; at the limit: fine.
    assert saturated(at(LAG_P99_LIMIT_S * 1.02)) and not saturated(at(LAG_P99_LIMIT_S * 0.98))
    # 2. chunks read together while the loop runs later than the server's chunk gap.
    lag = LAG_P99_LIMIT_S / 2
    assert saturated(at(lag), chunk_gap_s=lag / 2, coalesced_share=0.3)
    assert not saturated(at(lag), chunk_gap_s=lag * 2, coalesced_share=0.3)  # gap longer
    assert not saturated(at(lag), chunk_gap_s=lag / 2, coalesced_share=0.04)  # few merged
    assert not saturated(at(lag), chunk_gap_s=None, coalesced_share=0.3)
    assert chunk_gap_s(0.005, 2.0) == 0.01 and chunk_gap_s(None, 1.0) is None
    # 3. the busiest process beyond its share of a core.
    assert saturated(at(0.001, BUSY_RATIO_LIMIT + 0.02))
    assert not saturated(at(0.001, BUSY_RATIO_LIMIT - 0.02))


def test_a_workers_report_reaches_its_master_and_merges_per_step() -> None:
    meters = [LagMeter(lambda: "c8", keep_unsent=True) for _ in range(2)]
    for k, meter in enumerate(meters):
        for _ in range(50):
            meter.tick("c8", 0.001 * (k + 1), 0.003 * (k + 1), 0.01)
    master = ClientLoadBook(None)
    for k, meter in enumerate(meters):
        data: dict[str, Any] = {}
        ClientLoadBook(meter).report_to_master(f"w{k}", data)
        master.worker_report(client_id=f"w{k}", data=data)
        master.worker_report(client_id=f"w{k}", data={REPORT_KEY: {"c8": {"bad": 1}}})
        master.worker_report(client_id=f"w{k}", data={"stats": []})
    meters[0].tick("c8", 0.05, 0.01, 0.01)  # a later tick, in the next report
    data = {}
    ClientLoadBook(meters[0]).report_to_master("w0", data)
    master.worker_report(client_id="w0", data=data)
    out = master.figures("c8")
    assert out is not None and out.processes == 2 and out.samples == 101
    assert out.busy_ratio == pytest.approx(0.6)  # worker 1: 0.006 / 0.01
    assert out.lag_max_s == pytest.approx(0.05)
    assert master.step_names() == ["c8"] and master.figures("c16") is None


def test_assess_level_flags_client_saturated_with_a_warning_and_only_then() -> None:
    level = LevelAggregate()
    numbers = level.result(10.0)
    fine = figures([_load(lag=0.002, busy=0.5)])
    assert assess_level(level, numbers, client=fine) == ([], [])
    lagging = figures([_load(lag=0.040, busy=0.3)])
    flags, warnings = assess_level(level, numbers, client=lagging)
    assert flags == [CLIENT_SATURATED]
    assert "40.0 ms late at the p99" in warnings[0] and "--workers" in warnings[0]
    flags, warnings = assess_level(level, numbers, client=figures([_load(0.002, 0.97)]))
    assert flags == [CLIENT_SATURATED] and "97% of a core" in warnings[0]
    assert Level.from_dict({"name": "c1", "flags": flags}).client_saturated
    # The level's own chunk figures: 2 ms between chunks, 30% of the gaps 0 s, and a loop
    # 5 ms late at the p99 (bench: a server 2.5 times faster than the client reads).
    merged = {**numbers, "median_tpot_ms": 2.0, "mean_tokens_per_chunk": 1.0}
    merged["coalesced_chunk_share"] = 0.3
    flags, warnings = assess_level(level, merged, client=figures([_load(0.005, 0.6)]))
    assert flags == [CLIENT_SATURATED] and "30% of its chunk gaps were 0 s" in warnings[0]
    merged["median_tpot_ms"] = 10.0  # the same client, chunks 10 ms apart: not its doing
    assert assess_level(level, merged, client=figures([_load(0.005, 0.6)])) == ([], [])


def _load(lag: float, busy: float) -> ClientLoad:
    load = ClientLoad()
    for _ in range(200):
        load.add(lag, busy * 0.01, 0.01)
    return load


# -- compare: when the client overheads differ enough to matter -----------------------------


def test_compare_warns_when_overheads_differ_by_a_quarter_of_the_difference() -> None:
    labels = ["base", "ngram"]

    def warn(medians: list[float | None], overheads: list[float | None]) -> list[str]:
        return overhead_warning(
            "concurrency 4",
            measure_title="TTFT",
            overhead_title="TTFT minus the server's",
            labels=labels,
            medians=medians,
            overheads=overheads,
            min_difference=0.05,
        )

    # 100 -> 120 ms reported; overheads 1 -> 5 ms: 4 ms < 25% of 20 ms: silent.
    assert warn([100.0, 120.0], [1.0, 5.0]) == []
    # overheads 1 -> 6 ms: 5 ms = 25% of 20 ms: warned, with the numbers.
    (line,) = warn([100.0, 120.0], [1.0, 6.0])
    assert "concurrency 4: client overheads differ" in line
    assert "1.00 ms (base) vs 6.00 ms (ngram)" in line and "+20.00 ms (+20.0%" in line
    # No difference reported: measured against --min-difference (5% of 100 ms = 5 ms).
    assert warn([100.0, 100.0], [1.0, 2.0]) == []
    assert len(warn([100.0, 100.5], [1.0, 2.25])) == 1  # 1.25 ms >= 25% of 5 ms
    # Without the server's timing on either side: not judged.
    assert warn([100.0, 150.0], [None, 30.0]) == [] == warn([100.0, 150.0], [1.0, None])
    assert OVERHEAD_SHARE == 0.25


# -- shown: the client metrics and the web UI's client tab ----------------------------------


def test_client_metrics_show_lag_busy_share_and_client_minus_server() -> None:
    book = ClientLoadBook(LagMeter(lambda: "c4"))
    assert book.meter is not None
    for _ in range(100):
        book.meter.tick("c4", 0.030, 0.004, 0.01)
    metrics = ClientMetrics()
    metrics.set_client_load(book.figures, book.step_names, "v")
    metrics.observe(rec(ok=True, ttft_s=0.06, tpot_s=0.005, server_ttft_s=0.05, server_queue_s=0.0))
    metrics.observe(rec(ok=True, ttft_s=0.07, tpot_s=0.005))  # no server timing
    registry = CollectorRegistry(auto_describe=False)
    registry.register(metrics)
    labels = {"variant": "v", "step": "c4"}
    assert registry.get_sample_value("specload_client_lag_p99_seconds", labels) == pytest.approx(
        0.030, rel=0.01
    )
    assert registry.get_sample_value("specload_client_busy_ratio", labels) == pytest.approx(0.4)
    # Buckets below zero too (an ITL can come out a little negative): Prometheus histograms
    # with negative buckets have no _sum nor _count; the +Inf bucket counts them.
    series = {"variant": "v", "model": "m", "category": "math", "step": "c4"}
    bucket = "specload_client_ttft_minus_server_seconds_bucket"
    assert registry.get_sample_value(bucket, {**series, "le": "+Inf"}) == 1.0
    assert registry.get_sample_value(bucket, {**series, "le": "0.01"}) == 1.0  # 10 ms
    assert registry.get_sample_value(bucket, {**series, "le": "0.005"}) == 0.0
    # No server ITL: no such series at all (not a histogram of zeros).
    itl = "specload_client_itl_minus_server_seconds_bucket"
    assert registry.get_sample_value(itl, {**series, "le": "+Inf"}) is None
    for metric in registry.collect():
        assert ":" not in metric.name and "percent" not in metric.name


def test_the_client_tab_shows_each_steps_lag_busy_share_and_client_minus_server() -> None:
    agg = Aggregator()
    for i in range(3):
        agg.add(
            rec(
                ok=True,
                ttft_s=0.051 + i / 1000,
                tpot_s=0.005,
                server_ttft_s=0.05,
                server_queue_s=0.0,
                server_itl_s=0.005,
            )
        )
    book = ClientLoadBook(LagMeter(lambda: "c4"))
    assert book.meter is not None
    for _ in range(100):
        book.meter.tick("c4", 0.002, 0.005, 0.01)
    book.meter.tick("c8", 0.002, 0.005, 0.01)  # a step without records yet
    rows = {r["step"]: r for r in client_rows(agg, book)}
    assert set(rows) == {"c4", "c8"}
    c4 = rows["c4"]
    assert set(c4) == {k for k, _ in CLIENT_HEADERS}
    assert (c4["processes"], c4["busy_ratio"], c4["saturated"]) == ("1", "0.50", "no")
    assert c4["lag_p99_ms"] == "2.00" and c4["server_timed"] == "3"
    assert c4["ttft_minus_server_p50_ms"] == "2.00"
    assert c4["ttft_minus_server_spread_ms"] == "1.00 .. 2.00"  # ranks 0 and floor(0.9 x 2)
    assert c4["itl_minus_server_p50_us"] == "0.0"
    assert rows["c8"]["ttft_minus_server_p50_ms"] == NO_VALUE
    assert client_rows(agg, None)[0]["lag_p99_ms"] == NO_VALUE


# -- the simulator sends what vLLM sends -----------------------------------------------------


def test_the_simulators_timing_is_vllms_formula_on_the_sequences_own_times() -> None:
    from types import SimpleNamespace  # noqa: PLC0415

    from simulator.api import TIMING_KEYS, request_timing  # noqa: PLC0415

    seq: Any = SimpleNamespace(
        arrival=10.0, scheduled=10.004, first_token=10.054, last_token=10.254, generated=41
    )
    out = request_timing(seq)
    assert list(out) == list(TIMING_KEYS) == list(VLLM_TIMING)  # vLLM's names, its order
    assert out["queue_time_ms"] == pytest.approx(4.0)
    assert out["time_to_first_token_ms"] == pytest.approx(50.0)  # from scheduling
    assert out["generation_time_ms"] == pytest.approx(200.0)
    assert out["mean_itl_ms"] == pytest.approx(5.0)  # 200 ms over 40 gaps
    assert out["tokens_per_second"] == pytest.approx(41 / 0.25)
    # What the client makes of it is the same as of vLLM's.
    assert server_timing(out) == pytest.approx(
        {
            "server_ttft_s": 0.05,
            "server_generation_s": 0.2,
            "server_queue_s": 0.004,
            "server_itl_s": 0.005,
        }
    )
    # Not scheduled yet (a request aborted in the queue): nothing it cannot know.
    waiting: Any = SimpleNamespace(
        arrival=1.0, scheduled=-1.0, first_token=-1.0, last_token=-1.0, generated=0
    )
    assert set(request_timing(waiting).values()) == {None}
