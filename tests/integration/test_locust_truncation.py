"""Plain `locust -f locustfiles/chat.py`: the truncation guard's warning at the end of a run.

The simulator's fixed timing answers 64 reasoning tokens then 4 of content; a
``--max-tokens`` below 64 cuts every request inside its reasoning.
"""

from __future__ import annotations

import pytest

from specload.records.request import RequestRecord
from specload.records.stats import Stats
from specload.results.aggregate import truncation_warnings

pytestmark = pytest.mark.integration

FIXED = [
    "--timing",
    "fixed",
    "--fixed-ttft",
    "0.01",
    "--fixed-itl",
    "0.001",
    "--fixed-tokens-per-chunk",
    "4",
    "--fixed-reasoning-tokens",
    "64",
    "--fixed-content-tokens",
    "4",
]


def _warnings(stderr: str) -> list[str]:
    return [line for line in stderr.splitlines() if "ended inside reasoning" in line]


def test_plain_locust_warns_about_truncation_at_the_end(load_sim, run_locust) -> None:
    sim = load_sim(FIXED)
    run = run_locust(sim.url, users=2, seconds=1, args=["--max-tokens", "16"])
    assert run.returncode == 0, run.stderr[-2000:]
    ok = run.ok()
    assert ok and all(r["reasoning_truncated"] for r in ok), run.records[:2]
    # The sweep's own sentence, from the same records (one function makes both).
    stats = Stats()
    for r in run.records:
        stats.add(RequestRecord.from_dict(r))
    expected = truncation_warnings(stats, stats.result(stats.span_s))
    (line,) = _warnings(run.stderr)
    assert line.endswith("specload: " + expected[0]), (line, expected)
    assert f"{len(ok)} of {len(ok)} completed requests" in line
    assert "Traceback" not in run.stderr


def test_no_warning_when_the_budget_fits(load_sim, run_locust) -> None:
    sim = load_sim(FIXED)
    run = run_locust(sim.url, users=2, seconds=1, args=["--max-tokens", "256"])
    assert run.returncode == 0, run.stderr[-2000:]
    assert run.ok() and not any(r["reasoning_truncated"] for r in run.records)
    assert _warnings(run.stderr) == []
