"""Open-loop arrivals: gamma inter-arrival times with vLLM bench's burstiness."""

from __future__ import annotations

import itertools
import random
import statistics

import pytest

from specload.records.request import RequestRecord
from specload.results.aggregate import summarize_level
from specload.sweep.locustfile import gaps


@pytest.mark.parametrize("burstiness", [0.5, 1.0, 2.0])
def test_arrivals_have_the_gammas_mean_and_spread(burstiness: float) -> None:
    rate = 50.0
    values = list(itertools.islice(gaps(random.Random(3), rate, burstiness), 20_000))
    mean = statistics.fmean(values)
    cv = statistics.pstdev(values) / mean
    assert mean == pytest.approx(1 / rate, rel=0.03)
    assert cv == pytest.approx(burstiness**-0.5, rel=0.03)


def _sent(i: int, late_s: float) -> RequestRecord:
    start = 100.0 + i * 0.1
    return RequestRecord(
        "coding", "r10", "v", "m", start, start + 0.05, ok=True, e2e_s=0.05,
        tokens_output=4, tokens_reasoning=4, scheduled_s=start - late_s,
    )  # fmt: skip


def test_send_lateness_is_reported_and_a_client_behind_is_flagged() -> None:
    on_time = [_sent(i, 0.001 * (i % 10)) for i in range(100)]  # 0..9 ms late
    level = summarize_level(
        on_time, step="r10", window_start_s=100.0, window_end_s=110.0, duration_s=10.0
    )
    assert level["median_send_lateness_ms"] == pytest.approx(4.0)
    assert level["p99_send_lateness_ms"] == pytest.approx(9.0)
    assert level["max_send_lateness_ms"] == pytest.approx(9.0)
    assert "late_sends" not in level["flags"]
    behind = [_sent(i, 0.2 if i % 20 == 0 else 0.001) for i in range(100)]
    level = summarize_level(
        behind, step="r10", window_start_s=100.0, window_end_s=110.0, duration_s=10.0
    )
    assert "late_sends" in level["flags"]
    assert any("fell behind the arrivals" in w for w in level["warnings"])
    exact = summarize_level(
        [_sent(0, 0.0)], step="r10", window_start_s=None, window_end_s=None, duration_s=1.0
    )
    assert exact["p99_send_lateness_ms"] == 0.0  # sent when due
