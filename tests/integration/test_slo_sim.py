"""Objectives and goodput against a server of known per-request timing: the simulator's
fixed profile (TTFT 20 ms, a token every 2 ms, 50 tokens) stalling every 5th request for
1.5 s. With ``--slo e2el=1s,tpot=10ms`` exactly the stalled requests miss both objectives."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import jsonschema
import pytest

from specload.results import summary_schema
from tests.fixtures.sim import start_sim
from tests.fixtures.sweep import run_specload

pytestmark = [pytest.mark.integration]

SIM = [
    *("--timing", "fixed", "--fixed-ttft", "0.02", "--fixed-itl", "0.002"),
    *("--fixed-reasoning-tokens", "25", "--fixed-content-tokens", "25"),
    *("--fault-every", "stall=5", "--stall-seconds", "1.5", "--load-time", "0"),
]


def test_attainment_and_goodput_are_exact_and_the_stalled_requests_miss_both(
    tmp_path: Path,
) -> None:
    sim = start_sim(SIM, tmp_path / "sim")
    out = tmp_path / "run"
    try:
        result = run_specload(
            [
                *("run", "--host", sim.url, "--variant", "fixed", "--out", str(out)),
                *("--concurrency", "1", "--requests", "20", "--warmup", "0"),
                *("--slo", "e2el=1s,tpot=10ms", "--metrics-address", "off"),
                *("--progress", "off", "--no-plots"),
            ]
        )
    finally:
        sim.stop()
    assert result.returncode == 0, result.stderr[-2000:]
    summary: dict[str, Any] = json.loads((out / "summary.json").read_text())
    jsonschema.validate(summary, summary_schema())
    level = summary["levels"][0]
    records = [json.loads(line) for line in (out / "requests.jsonl").read_text().splitlines()]
    records.sort(key=lambda r: r["start_s"])
    assert len(records) == 20 and all(r["ok"] for r in records)
    stalled = [i for i, r in enumerate(records) if r["e2e_s"] > 1.0]
    assert stalled == [4, 9, 14, 19]  # the 5th, 10th, 15th and 20th requests
    for i, r in enumerate(records):
        assert r["slo_met"] is (i not in stalled)
        assert r["slo_failed"] == (["tpot", "e2el"] if i in stalled else [])
    assert level["slo_attainment_ratio"] == 16 / 20
    assert level["request_goodput"] == pytest.approx(0.8 * level["request_throughput"])
    met_tokens = sum(r["tokens_output"] for i, r in enumerate(records) if i not in stalled)
    assert level["output_goodput"] == pytest.approx(met_tokens / level["duration"])
    assert level["slo"]["objectives_s"] == {"tpot": 0.01, "e2el": 1.0}
    assert level["slo"]["failing_ratio"] == {"tpot": 0.2, "e2el": 0.2}


def test_compare_sets_attainment_and_goodput_beside_tpot(tmp_path: Path) -> None:
    outs = []
    for every in ("5", "10"):
        sim_args = [a if a != "stall=5" else f"stall={every}" for a in SIM]
        sim = start_sim(sim_args, tmp_path / f"sim-{every}")
        out = tmp_path / f"every-{every}"
        try:
            result = run_specload(
                [
                    *("run", "--host", sim.url, "--variant", f"every{every}", "--out", str(out)),
                    *("--concurrency", "1", "--requests", "20", "--warmup", "0"),
                    *("--slo", "e2el=1s", "--metrics-address", "off"),
                    *("--progress", "off", "--no-plots"),
                ]
            )
        finally:
            sim.stop()
        assert result.returncode == 0, result.stderr[-2000:]
        outs.append(out)
    cmp_dir = tmp_path / "cmp"
    result = run_specload(["compare", *map(str, outs), "--out", str(cmp_dir), "--json"])
    assert result.returncode == 0, result.stderr
    data = json.loads((cmp_dir / "comparison.json").read_text())
    rows = {r["measure"]: r for r in data["levels"][0]["rows"] if r["category"] == "all"}
    assert rows["slo_attainment"]["values"] == [0.8, 0.9]
    goodput = rows["request_goodput"]["values"]
    summaries = [json.loads((o / "summary.json").read_text())["levels"][0] for o in outs]
    assert goodput == pytest.approx([s["request_goodput"] for s in summaries])
    text = (cmp_dir / "comparison.md").read_text()
    assert "SLO attainment (ratio)" in text and "| 80.0% | 90.0% |" in text
    assert "goodput (req/s)" in text
