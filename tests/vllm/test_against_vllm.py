"""``specload run --against`` on real vLLM (CPU build, tiny model): runs of the same server
against a baseline of it are never called faster or slower.

The server is warmed first with the measurement's own shape (a CPU vLLM server is ~60%
slower on its first requests), then :data:`RUNS` pairs: a baseline run, then a run
``--against`` it with the same settings and ``--margin 5%``, which must end ``equivalent`` or
``undecided`` (the truth is no difference) within its ``--requests`` budget. Each run is
judged against the baseline just before it: the rule's guarantee covers the two runs'
sampling noise, not the machine's drift between them (docs/sweep.md, *Choosing the margin*).

Why one level (c1), 128 tokens, and why a baseline may be taken again: what was measured
on the 2-core test machine (2026-12-04, plain server warmed with 12 requests of 200
tokens, 40, 32 or 24 requests per level; 42 runs in 5 server sessions and 12 of this
test, other sessions' work using 0.3-1 of the 2 cores throughout):

- The server alone keeps ~1.5 cores busy; when its API process gets no core, a request's
  chunks reach the client in one read (TPOT 0). At 64 tokens 0-39 of 40 requests per run
  and level were such, at 128 tokens (c1) 5-25 of 40, later 1-28 of 32 (giving the API
  server, or the load generator, nice -10 did not change it). TPOT 0 counts in the rule:
  a baseline level whose median is 0 is refused in one line (14 of 28 c1 runs at 64
  tokens, 1 of 6 at 128, later 7 of 12 at 128), and against a baseline whose resampled
  medians reach 0 (4-7 of 24 requests at TPOT 0 and up) no run can have a ratio
  (``undecided``, ``verdict_ratio`` null; so were 14 of 15 runs against the first usable
  baseline of three test runs). Such a baseline is taken again here (at most
  :data:`BASELINE_TRIES` times, then that pair is passed over: it is about the verdicts,
  not about a crowded machine); a run against it may still have no ratio (its own TPOT 0),
  and when none of the runs has one the test is skipped (its verdicts asserted nothing).
- Run-to-run ratios of the median TPOT (the non-zero ones, runs of one session): c1
  0.57-1.77, c4 0.33-3.0 (the 0.94-1.04 of a quiet machine did not hold). At a quieter
  moment (a baseline and 4 runs with 0-2 TPOT-0 requests of 24) the rule's ratios were
  0.947-1.019, its intervals +-4-8% ([0.905, 0.989] the nearest to a verdict): the 5%
  margin holds for a drift of up to about 9%.
- Replayed offline through the rule (every ordered pair of runs of one session): c1 was
  never faster or slower (0 of 86 pairs at 64 tokens, 0 of 25 at 128, at margins of 5, 10,
  20 and 40%: its intervals are wider than the drift, or there is no ratio); c4 at 64
  tokens 7 of 95 at 5% and still 5 of 95 at 40% (0 of 20 at 128 tokens). No margin makes
  c4 safe here, and c1's outcome is the same at every margin: the margin stays 5%, the
  level is c1 alone (c1 and c4 at 128 tokens would also take ~2.5 minutes).
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import jsonschema
import pytest

from specload.results import read_requests, summary_schema
from specload.results.model import median
from specload.results.stopping import BASELINE_SE_BOOT, log_median_se

pytestmark = [pytest.mark.vllm, pytest.mark.slow]

RUNS = 3  # pairs: a baseline, then a run against it
REQUESTS = 24  # the level's budget, in the baseline and in every run against it
BASELINE_TRIES = 3
MARGIN = "5%"
LEVEL = "c1"
SHAPE = [
    *("--concurrency", LEVEL[1:]),
    *("--temperature", "0"),
    *("--metrics-address", "off"),
    *("--progress", "off"),
    "--no-plots",
]
TOKENS = "128"
WARM = [*SHAPE, "--requests", "12", "--warmup", "0", "--max-tokens", TOKENS]
RUN = [*SHAPE, "--requests", str(REQUESTS), "--warmup", "1", "--max-tokens", TOKENS]


def level(out: Path) -> dict[str, Any]:
    summary = json.loads((out / "summary.json").read_text())
    jsonschema.validate(summary, summary_schema())
    assert summary["status"] == "complete"
    (only,) = summary["levels"]
    assert only["name"] == LEVEL
    return dict(only)


def baseline_tpots(out: Path) -> tuple[int, bool]:
    """The level's requests with TPOT 0 (every chunk came in one read), and whether the rule
    can judge against it: a median above 0 (else ``--against`` refuses it) and a finite
    standard error, the rule's own (a resample whose median is 0 makes it infinite: then
    no run against it could have a ratio, and the test would test nothing)."""
    records = sorted(
        (r for r in read_requests(out) if r["step"] == LEVEL and r["ok"]),
        key=lambda r: r["start_s"],
    )
    values = [r["tpot_s"] for r in records]
    se = log_median_se(values, int(LEVEL[1:]), n_boot=BASELINE_SE_BOOT)
    return sum(1 for v in values if v == 0), (median(values) or 0.0) > 0 and math.isfinite(se)


def zero_tpots(out: Path) -> int:
    return sum(1 for r in read_requests(out) if r["step"] == LEVEL and r["ok"] and r["tpot_s"] == 0)


def describe(lv: dict[str, Any]) -> str:
    low, high = lv["verdict_interval"] or (float("nan"), float("nan"))
    ratio = lv["verdict_ratio"] if lv["verdict_ratio"] is not None else float("nan")
    return (
        f"{lv['verdict']} after {lv['verdict_requests']} of {lv['completed']} "
        f"({lv['stop_reason']}), ratio {ratio:.3f} [{low:.3f}, {high:.3f}]"
    )


def test_against_a_baseline_of_the_same_server(vllm_plain, specload_run, tmp_path):
    def run(name: str, args: list[str]) -> Path:
        out = tmp_path / name
        cmd = ["run", "--host", vllm_plain.base_url, "--variant", name, "--out", str(out)]
        result = specload_run([*cmd, *args], timeout=180)
        assert result.returncode == 0, result.stderr[-3000:]
        return out

    run("warm", WARM)
    seen: list[str] = []
    judged = 0
    for i in range(RUNS):
        # Each run against a baseline taken just before it: the same server 13% faster than
        # a baseline four runs (about a minute) older was this VM's drift, not the rule's
        # error (CI, 2026-12-04: ratio 0.872 [0.816, 0.932]); the rule's guarantee is about
        # the two runs' sampling noise, not the machine's drift (docs/sweep.md).
        zeros: list[int] = []
        for k in range(BASELINE_TRIES):
            base = run(f"base-{i}-{k}", RUN)
            assert level(base)["completed"] == REQUESTS
            count, usable = baseline_tpots(base)
            zeros.append(count)
            if usable:
                break
        else:
            seen.append(f"pair {i}: no baseline the rule can judge against ({zeros})")
            continue
        out = run(f"again-{i}", [*RUN, "--against", str(base), "--margin", MARGIN])
        lv = level(out)
        seen.append(
            f"pair {i}: baseline TPOT-0 requests of {REQUESTS}: {zeros}; {describe(lv)}; "
            f"TPOT-0 requests {zero_tpots(out)}"
        )
        assert lv["verdict"] in ("equivalent", "undecided"), seen
        assert lv["stop_reason"] in ("decided", "budget"), seen
        assert lv["verdict_requests"] is not None, seen
        assert lv["verdict_requests"] <= REQUESTS, seen
        judged += lv["verdict_ratio"] is not None
    print("\n".join(seen))
    if not judged:
        pytest.skip(
            "the machine is too crowded to measure TPOT: no run had a ratio to judge "
            + "; ".join(seen)
        )
