"""``specload run --precision`` and ``--against`` on a server whose truth is known: the
simulator's fixed timing with jitter (``--fixed-itl-jitter``: each request's ITL is 5 ms x a
factor uniform in [0.95, 1.05], so the requests' true median TPOT is exactly 5 ms).

- ``--precision 2%``: every level ends ``precise`` before its budget, its interval within
  ±2% and around the truth; a target it cannot reach in a tiny budget ends ``budget`` with
  its half-width written;
- ``--against``: a second run of the same server is never faster or slower than the first
  (equivalent, or undecided at the budget); a server 30% slower is ``slower``, decided well
  before the budget;
- refusals, one line each, exit 2: no such baseline, a level it lacks, a different
  ``--max-tokens`` (compare's comparability check), a share out of range.

J = 0.05 rather than 0.1: the median of a uniform's sample has a standard error of J/sqrt(n),
so ±2% at 95% takes ~30 requests at J = 0.05 but ~100-160 at J = 0.1 (measured: 160 at
concurrency 1, 235 at 4), too long for a test.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import jsonschema
import pytest

from specload.results import summary_schema
from tests.fixtures.sim import SimHandle, start_sim
from tests.fixtures.sweep import run_specload

pytestmark = pytest.mark.integration

ITL_S = 0.005  # the truth: the requests' median TPOT
JITTER = 0.05
TOKENS = 20
#: The client's own share of a measured TPOT: the last chunk's lateness over the first's,
#: spread over the request's 19 gaps (measured: the median request +0.003 ms, one in five
#: above +0.15 ms on a loaded 2-core machine).
CLIENT_OVERHEAD_S = 0.0003


def sim_args(itl_s: float = ITL_S) -> list[str]:
    return [
        *("--timing", "fixed", "--fixed-ttft", "0.005", "--fixed-itl", f"{itl_s:g}"),
        *("--fixed-itl-jitter", f"{JITTER:g}", "--load-time", "0"),
        *("--fixed-reasoning-tokens", "12", "--fixed-content-tokens", str(TOKENS - 12)),
    ]


LEVELS = ["c2", "c4"]
RUN = [
    *("--variant", "fixed", "--concurrency", "2,4", "--warmup", "0"),
    *("--max-tokens", str(TOKENS), "--metrics-address", "off"),
    *("--progress", "plain", "--no-plots"),
]
BASELINE_REQUESTS = 120  # per level: today's fixed levels, and the --against runs' budget


def levels(out: Path) -> dict[str, dict[str, Any]]:
    summary = json.loads((out / "summary.json").read_text())
    jsonschema.validate(summary, summary_schema())
    assert summary["status"] == "complete"
    return {lv["name"]: lv for lv in summary["levels"]}


def run_ok(args: list[str], timeout: float = 120) -> None:
    result = run_specload(["run", *args], timeout=timeout)
    assert result.returncode == 0, result.stderr[-3000:]


def refused(args: list[str]) -> str:
    """``specload run ARGS`` fails with exit 2 and one line: that line."""
    result = run_specload(["run", *args], timeout=60)
    assert result.returncode == 2, (result.returncode, result.stderr[-3000:])
    assert "Traceback" not in result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    return lines[0]


# -- --precision ---------------------------------------------------------------------------------


def test_precision_ends_each_level_precise_around_the_truth(sweep_sim, tmp_path):
    sim = sweep_sim(sim_args())
    out = tmp_path / "precise"
    budget = 300
    run_ok(
        [
            *("--host", sim.url, "--out", str(out), *RUN),
            *("--requests", str(budget), "--precision", "2%"),
        ]
    )
    found = levels(out)
    assert list(found) == LEVELS
    for name, lv in found.items():
        assert lv["stop_reason"] == "precise", (name, lv["stop_reason"])
        half = lv["precision_half_width"]
        assert 0 < half <= 0.02, (name, half)
        assert 20 <= lv["precision_requests"] <= lv["completed"] < budget, name
        median = lv["median_tpot_ms"] / 1000
        # the truth within median +- half-width, give or take the client's own overhead
        assert median * (1 - half) - CLIENT_OVERHEAD_S <= ITL_S <= median * (1 + half), (
            name,
            median,
            half,
        )
        assert abs(median - ITL_S) <= ITL_S * 0.02 + CLIENT_OVERHEAD_S, (name, median)
        assert lv.get("verdict") is None  # no --against


def test_precision_out_of_reach_ends_at_the_budget_with_its_half_width(sweep_sim, tmp_path):
    sim = sweep_sim(sim_args())
    out = tmp_path / "budget"
    run_ok(
        [
            *("--host", sim.url, "--out", str(out), *RUN),
            *("--requests", "25", "--precision", "0.2%"),
        ]
    )
    for name, lv in levels(out).items():
        assert lv["stop_reason"] == "budget", (name, lv["stop_reason"])
        assert lv["completed"] >= 25
        assert lv["precision_half_width"] > 0.002, (name, lv["precision_half_width"])
        assert lv["precision_requests"] >= 25


# -- --against ---------------------------------------------------------------------------------


@dataclass(frozen=True)
class Baseline:
    sim: SimHandle
    out: Path


@pytest.fixture(scope="module")
def baseline(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Baseline]:
    """A run of today's fixed levels (``--requests 120`` each) on a server kept for the
    module: the variant's runs of the same server continue its stream of factors."""
    tmp = tmp_path_factory.mktemp("against")
    sim = start_sim(sim_args(), tmp / "sim")
    try:
        out = tmp / "baseline"
        run_ok(["--host", sim.url, "--out", str(out), *RUN, "--requests", str(BASELINE_REQUESTS)])
        yield Baseline(sim, out)
    finally:
        sim.stop()


def test_the_same_server_against_itself_is_never_faster_or_slower(baseline, tmp_path):
    out = tmp_path / "again"
    run_ok(
        [
            *("--host", baseline.sim.url, "--out", str(out), *RUN),
            *("--requests", str(BASELINE_REQUESTS), "--against", str(baseline.out)),
        ]
    )
    base = levels(baseline.out)
    for name, lv in levels(out).items():
        assert lv["verdict"] in ("equivalent", "undecided"), (name, lv["verdict"])
        assert lv["stop_reason"] == ("decided" if lv["verdict"] == "equivalent" else "budget")
        assert 20 <= lv["verdict_requests"] <= lv["completed"]
        low, high = lv["verdict_interval"]
        assert low <= lv["verdict_ratio"] <= high
        # the ratio is the medians' (the variant's at the verdict, so close to its whole level's)
        assert lv["verdict_ratio"] == pytest.approx(
            lv["median_tpot_ms"] / base[name]["median_tpot_ms"], rel=0.03
        )


def test_a_slower_server_is_slower_in_fewer_requests_than_the_budget(baseline, sweep_sim, tmp_path):
    slower = sweep_sim(sim_args(ITL_S * 1.3))
    out = tmp_path / "slower"
    run_ok(
        [
            *("--host", slower.url, "--out", str(out), *RUN),
            *("--requests", str(BASELINE_REQUESTS), "--against", str(baseline.out)),
        ]
    )
    for name, lv in levels(out).items():
        assert lv["verdict"] == "slower", (name, lv["verdict"], lv["verdict_interval"])
        assert lv["stop_reason"] == "decided"
        assert lv["verdict_requests"] <= BASELINE_REQUESTS // 2, (name, lv["verdict_requests"])
        assert lv["completed"] < BASELINE_REQUESTS
        assert lv["verdict_interval"][0] > 1.05  # above 1 + the margin
        assert lv["verdict_ratio"] == pytest.approx(1.3, rel=0.05)


# -- refusals --------------------------------------------------------------------------------


def test_against_refusals_are_one_line(baseline, tmp_path):
    common = ["--host", baseline.sim.url, *RUN, "--requests", str(BASELINE_REQUESTS)]
    missing = tmp_path / "no-such-run"
    line = refused([*common, "--out", str(tmp_path / "a"), "--against", str(missing)])
    assert str(missing) in line, line

    line = refused(
        [
            *common,
            *("--out", str(tmp_path / "b"), "--against", str(baseline.out)),
            *("--concurrency", "2,4,8"),
        ]
    )
    assert line.endswith(f"--against {baseline.out}: no level c8 (it has c2,c4)"), line

    mismatched = [a if a != str(TOKENS) else "16" for a in common]
    line = refused([*mismatched, "--out", str(tmp_path / "c"), "--against", str(baseline.out)])
    assert f"--against {baseline.out}: not comparable: max_tokens differs" in line, line

    line = refused(
        [*common, "--out", str(tmp_path / "d"), "--against", str(baseline.out), "--margin", "90%"]
    )
    assert "--margin: '90%' out of range" in line, line


@pytest.mark.parametrize(
    ("value", "needle"),
    [
        ("0", "--precision: '0' out of range (0.1% to 50%)"),
        ("abc", "--precision: 'abc' is not a share (e.g. 2% or 0.02)"),
    ],
)
def test_precision_refusals_are_one_line(value, needle, tmp_path):
    line = refused(["--out", str(tmp_path / "r"), *RUN, "--requests", "30", "--precision", value])
    assert needle in line, line
