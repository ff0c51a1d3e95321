"""``--search slo`` on the simulator against an exhaustive sweep of the same levels: the
limit the search finds is within one step of the one the sweep's records give."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

from tests.fixtures.sim import start_sim
from tests.fixtures.sweep import run_specload

pytestmark = [pytest.mark.integration, pytest.mark.slow]

COMMON = [
    *("--requests", "12", "--max-tokens", "48", "--warmup", "0", "--temperature", "0"),
    *("--metrics-address", "off", "--progress", "off", "--no-plots"),
]
LEVELS = list(range(1, 11))


def test_the_search_finds_the_exhaustive_sweeps_limit(tmp_path: Path) -> None:
    sim = start_sim(["--load-time", "0", "--time-scale", "20"], tmp_path / "sim")
    try:
        sweep = tmp_path / "sweep"
        result = run_specload(
            ["run", "--host", sim.url, "--out", str(sweep), *COMMON,
             "--concurrency", ",".join(map(str, LEVELS))],
            timeout=300,
        )  # fmt: skip
        assert result.returncode == 0, result.stderr[-2000:]
        levels = json.loads((sweep / "summary.json").read_text())["levels"]
        median = {lv["concurrency"]: lv["median_tpot_ms"] / 1000 for lv in levels}
        # an objective between the medians at 4 and 8 users: the limit lies inside the range
        bound = math.sqrt(median[4] * median[8])
        records = [json.loads(x) for x in (sweep / "requests.jsonl").read_text().splitlines()]

        def attainment(c: int) -> float:
            done = [r for r in records if r["step"] == f"c{c}" and r["ok"]]
            return sum(1 for r in done if r["tpot_s"] <= bound) / len(done)

        held = [c for c in LEVELS if attainment(c) >= 0.5]
        exhaustive = max(c for c in held if all(attainment(d) >= 0.5 for d in LEVELS if d < c))
        search = tmp_path / "search"
        result = run_specload(
            ["run", "--host", sim.url, "--out", str(search), *COMMON, "--search", "slo",
             "--slo", f"tpot={bound * 1000:.4f}ms", "--attainment", "0.5",
             "--search-range", "1:10"],
            timeout=300,
        )  # fmt: skip
    finally:
        sim.stop()
    assert result.returncode == 0, result.stderr[-2000:]
    summary = json.loads((search / "summary.json").read_text())
    found = summary["search"]
    print(json.dumps({"bound_ms": bound * 1000, "exhaustive": exhaustive, "search": found}))
    assert found["complete"] and found["limit"] is not None
    assert abs(found["limit"] - exhaustive) <= 1
    tried = [lv["concurrency"] for lv in summary["levels"]]
    assert tried == [s["concurrency"] for s in found["steps"]]
    assert [lv["search_step"] for lv in summary["levels"]] == list(range(len(tried)))
    assert len(tried) < len(LEVELS)
