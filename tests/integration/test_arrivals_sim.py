"""Open-loop arrivals: ``--request-rate`` with ``--burstiness`` against the simulator's
fixed profile (answers in a few ms, so nothing queues). The coefficient of variation of
the arrivals (each record's ``scheduled_s``) is the gamma's, 1/sqrt(burstiness), within four
of its own sampling deviations; how late each went out is measured
(``p99_send_lateness_ms``) and printed with the CV of the sends themselves, which this
2-core VM's stalls and the client's own send time move."""

from __future__ import annotations

import itertools
import json
import random
import statistics
from pathlib import Path

import pytest

from tests.fixtures.sim import start_sim
from tests.fixtures.sweep import run_specload

pytestmark = [pytest.mark.integration, pytest.mark.slow]

# Send lateness p99 of a trace at its native rate (100/s). Measured here: median 1.4 ms,
# p99 5.0-5.5 ms, max 5.9-8.4 ms (the pacer's timer, the user's wake-up, the request's body);
# the bound leaves room for this VM's 50-150 ms stalls of every process, and is the level's
# late_sends flag's limit's fraction that still says "kept up".
TRACE_LATENESS_P99_MS = 20.0
SIM = [
    *("--timing", "fixed", "--fixed-ttft", "0.001", "--fixed-itl", "0.001"),
    *("--fixed-reasoning-tokens", "2", "--fixed-content-tokens", "2", "--load-time", "0"),
]


def _run(tmp_path: Path, sim_args: list[str], *args: str) -> tuple[Path, list[dict]]:
    """``specload run ARGS`` against a fresh simulator; the results folder and its records."""
    sim = start_sim(sim_args, tmp_path / "sim")
    out = tmp_path / "run"
    try:
        result = run_specload(
            [*("run", "--host", sim.url, "--out", str(out)), *args,
             *("--metrics-address", "off", "--progress", "off", "--no-plots")],
            timeout=300,
        )  # fmt: skip
    finally:
        sim.stop()
    assert result.returncode == 0, result.stderr[-2000:]
    lines = (out / "requests.jsonl").read_text().splitlines()
    return out, [json.loads(line) for line in lines]


# The sample CV of 1,999 gamma gaps varies by itself: its relative standard deviation is
# 2.7% (shape 0.5), 2.2% (1) and 1.9% (2) (20,000 numpy draws each), so a fixed +-5% failed
# 6.5%, 2.6% and 1% of runs by chance alone. Four of those deviations: a wrong shape (a
# Poisson process for 0.5 or 2 is 29% off) still fails, chance about once in 10,000.
CV_REL_SD = {0.5: 0.027, 1.0: 0.022, 2.0: 0.019}


@pytest.mark.serial  # the send times' spread: it failed once beside other tests
@pytest.mark.parametrize("burstiness", [0.5, 1.0, 2.0])
def test_send_gaps_have_the_gammas_spread(tmp_path: Path, burstiness: float) -> None:
    out, records = _run(
        tmp_path, SIM, "--request-rate", "500", "--burstiness", str(burstiness),
        "--requests", "2000", "--warmup", "0",
    )  # fmt: skip
    assert len(records) == 2000 and all(r["scheduled_s"] is not None for r in records)
    cvs = {}
    for key in ("scheduled_s", "start_s"):  # when each request was due, and when it went
        times = sorted(r[key] for r in records)
        gaps = [b - a for a, b in itertools.pairwise(times)]
        cvs[key] = statistics.pstdev(gaps) / statistics.fmean(gaps)
    level = json.loads((out / "summary.json").read_text())["levels"][0]
    print(json.dumps({"burstiness": burstiness, "cv": cvs, "want": burstiness**-0.5,
                      "p99_send_lateness_ms": level["p99_send_lateness_ms"]}))  # fmt: skip
    assert cvs["scheduled_s"] == pytest.approx(burstiness**-0.5, rel=4 * CV_REL_SD[burstiness])
    lateness = sorted(r["start_s"] - r["scheduled_s"] for r in records)
    assert level["p99_send_lateness_ms"] == pytest.approx(lateness[int(0.99 * 1999)] * 1000)


@pytest.mark.serial  # starts per half second
def test_ramp_up_starts_the_users_over_its_length(tmp_path: Path) -> None:
    out, records = _run(
        tmp_path, [*SIM, "--fixed-itl", "0.01"], "--concurrency", "8",
        "--warmup", "4s", "--ramp-up", "3s", "--duration", "1s",
    )  # fmt: skip
    warm = sorted(r["start_s"] for r in records if r["step"] == "c8-warmup")
    window = json.loads((out / "summary.json").read_text())["levels"][0]["window_start_s"]

    def in_flight(lo: float, hi: float) -> float:  # requests in flight on average (Little)
        busy = sum(max(0.0, min(r["end_s"], hi) - max(r["start_s"], lo)) for r in records)
        return busy / (hi - lo)

    # Locust dispatches floor(rate) users at a time: 8 users over 3 s join two every 0.75 s
    # (CI, requests in flight per half second: 1.97, 3.77, 3.97, 6.63, 7.92, 7.94; here the
    # first half second held 1.0-1.4). Without a ramp-up all eight start within the first
    # second: 4.3 against 7.9, and this fails. Requests in flight, not requests started: a
    # stall of the loaded machine stretches requests, it does not empty the users (a count
    # of starts read 33 against 128, the 0.25 the ramp itself gives, and failed).
    first = in_flight(warm[0], warm[0] + 0.5)
    last = in_flight(window - 0.5, window)
    print(json.dumps({"first_half_second": first, "last_half_second": last}))
    assert first < 0.45 * last and last > 6.0, (first, last)


@pytest.mark.serial  # p99 send lateness <= 20 ms
def test_a_trace_is_replayed_at_its_times_with_its_shared_prefixes(tmp_path: Path) -> None:
    # 1,000 requests over 10 s (Mooncake form): two blocks each, the first shared by
    # groups of ten (the second is each request's own), four output tokens.
    rng = random.Random(5)
    times = sorted(rng.uniform(0, 10_000) for _ in range(1000))
    trace = tmp_path / "trace.jsonl"
    trace.write_text(
        "".join(
            json.dumps({"timestamp": round(t, 3), "input_length": 600, "output_length": 4,
                        "hash_ids": [i // 10, 100_000 + i]}) + "\n"
            for i, t in enumerate(times)
        )
    )  # fmt: skip
    out, records = _run(tmp_path, SIM, "--trace", str(trace))
    summary = json.loads((out / "summary.json").read_text())
    (level,) = summary["levels"]
    assert level["name"] == "trace" and level["completed"] == 1000 and len(records) == 1000
    due = sorted(r["scheduled_s"] for r in records)
    offsets = [d - due[0] for d in due]
    want = [(t - times[0]) / 1000 for t in times]
    assert max(abs(a - b) for a, b in zip(offsets, want, strict=True)) < 1e-3
    assert {r["max_tokens"] for r in records} == {4}
    print(json.dumps({"p99_send_lateness_ms": level["p99_send_lateness_ms"],
                      "max_send_lateness_ms": level["max_send_lateness_ms"],
                      "prefix_cache_hit_ratio": level["prefix_cache_hit_ratio"]}))  # fmt: skip
    # the shared first blocks hit the server's prefix cache (reset at the level's start)
    assert level["prefix_cache_hit_ratio"] > 0.3
    assert level["p99_send_lateness_ms"] <= TRACE_LATENESS_P99_MS


@pytest.mark.serial  # p99 send lateness <= 20 ms
def test_a_trace_is_shared_among_worker_processes(tmp_path: Path) -> None:
    # Two Locust worker processes: each sends every other entry, at the entry's own time.
    rng = random.Random(7)
    times = sorted(rng.uniform(0, 6_000) for _ in range(300))
    trace = tmp_path / "trace.jsonl"
    trace.write_text(
        "".join(
            json.dumps({"timestamp": round(t, 3), "prompt": f"entry {i}", "max_tokens": 3}) + "\n"
            for i, t in enumerate(times)
        )
    )  # fmt: skip
    out, records = _run(tmp_path, SIM, "--trace", str(trace), "--workers", "2")
    (level,) = json.loads((out / "summary.json").read_text())["levels"]
    assert level["completed"] == 300 and len(records) == 300
    by_worker: dict[str, int] = {}
    for r in records:
        by_worker[r["worker"]] = by_worker.get(r["worker"], 0) + 1
    assert sorted(by_worker.values()) == [150, 150], by_worker  # every entry sent once
    due = sorted(r["scheduled_s"] for r in records)
    offsets = [d - due[0] for d in due]
    want = [(t - times[0]) / 1000 for t in times]
    # the workers' clocks are the same host's: every entry due at its trace time
    assert max(abs(a - b) for a, b in zip(offsets, want, strict=True)) < 5e-3
    assert {r["max_tokens"] for r in records} == {3}
    print(json.dumps({"p99_send_lateness_ms": level["p99_send_lateness_ms"], "workers": by_worker}))
    assert level["p99_send_lateness_ms"] <= TRACE_LATENESS_P99_MS


def test_open_loop_levels_keep_their_rate_across_worker_processes(tmp_path: Path) -> None:
    # Each of two workers sends half of each level's rate — the second level's too (its
    # workers are running by then, no longer idle).
    _, records = _run(
        tmp_path, SIM, "--request-rate", "50,100", "--requests", "200", "--workers", "2",
        "--warmup", "0",
    )  # fmt: skip
    rates = {}
    for step in ("r50", "r100"):
        due = sorted(r["scheduled_s"] for r in records if r["step"] == step)
        rates[step] = (len(due) - 1) / (due[-1] - due[0])
        assert len({r["worker"] for r in records if r["step"] == step}) == 2
    print(json.dumps(rates))
    # 200 Poisson arrivals: the rate's estimate has a 7% standard error
    assert rates["r50"] == pytest.approx(50, rel=0.25)
    assert rates["r100"] == pytest.approx(100, rel=0.25)
