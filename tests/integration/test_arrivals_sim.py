"""Open-loop arrivals: ``--request-rate`` with ``--burstiness`` against the simulator's
fixed profile (answers in a few ms, so nothing queues). The coefficient of variation of
the arrivals (each record's ``scheduled_s``) is the gamma's, 1/sqrt(burstiness), within 5%;
how late each went out is measured (``p99_send_lateness_ms``) and printed with the CV of the
sends themselves, which this 2-core VM's stalls and the client's own send time move."""

from __future__ import annotations

import itertools
import json
import statistics
from pathlib import Path

import pytest

from tests.fixtures.sim import start_sim
from tests.fixtures.sweep import run_specload

pytestmark = [pytest.mark.integration, pytest.mark.slow]

SIM = [
    *("--timing", "fixed", "--fixed-ttft", "0.001", "--fixed-itl", "0.001"),
    *("--fixed-reasoning-tokens", "2", "--fixed-content-tokens", "2", "--load-time", "0"),
]


@pytest.mark.parametrize("burstiness", [0.5, 1.0, 2.0])
def test_send_gaps_have_the_gammas_spread(tmp_path: Path, burstiness: float) -> None:
    sim = start_sim(SIM, tmp_path / "sim")
    out = tmp_path / "run"
    try:
        result = run_specload(
            [
                *("run", "--host", sim.url, "--out", str(out), "--request-rate", "100"),
                *("--burstiness", str(burstiness), "--requests", "2000", "--warmup", "0"),
                *("--metrics-address", "off", "--progress", "off", "--no-plots"),
            ],
            timeout=300,
        )
    finally:
        sim.stop()
    assert result.returncode == 0, result.stderr[-2000:]
    records = [json.loads(line) for line in (out / "requests.jsonl").read_text().splitlines()]
    assert len(records) == 2000 and all(r["scheduled_s"] is not None for r in records)
    cvs = {}
    for key in ("scheduled_s", "start_s"):  # when each request was due, and when it went
        times = sorted(r[key] for r in records)
        gaps = [b - a for a, b in itertools.pairwise(times)]
        cvs[key] = statistics.pstdev(gaps) / statistics.fmean(gaps)
    level = json.loads((out / "summary.json").read_text())["levels"][0]
    print(json.dumps({"burstiness": burstiness, "cv": cvs, "want": burstiness**-0.5,
                      "p99_send_lateness_ms": level["p99_send_lateness_ms"]}))  # fmt: skip
    assert cvs["scheduled_s"] == pytest.approx(burstiness**-0.5, rel=0.05)
    lateness = sorted(r["start_s"] - r["scheduled_s"] for r in records)
    assert level["p99_send_lateness_ms"] == pytest.approx(lateness[int(0.99 * 1999)] * 1000)
