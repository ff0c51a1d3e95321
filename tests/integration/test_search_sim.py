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


def _attainment(out: Path, step: str, bound_s: float, measure: str = "tpot_s") -> float:
    """The share of a level's completed requests within ``bound_s``, from requests.jsonl."""
    records = [json.loads(x) for x in (out / "requests.jsonl").read_text().splitlines()]
    done = [r for r in records if r["step"] == step and r["ok"]]
    return sum(1 for r in done if r[measure] is not None and r[measure] <= bound_s) / len(done)


def test_baseline_and_ngram_searches_compare_as_the_ratio_of_their_limits(tmp_path: Path) -> None:
    sims = {
        name: start_sim(
            ["--load-time", "0", "--time-scale", "20", "--variant", name], tmp_path / name
        )
        for name in ("baseline", "ngram")
    }
    try:
        probe = tmp_path / "probe"
        result = run_specload(
            ["run", "--host", sims["baseline"].url, "--out", str(probe), *COMMON,
             "--concurrency", "1,8"],
            timeout=300,
        )  # fmt: skip
        assert result.returncode == 0, result.stderr[-2000:]
        levels = json.loads((probe / "summary.json").read_text())["levels"]
        median = {lv["concurrency"]: lv["median_tpot_ms"] / 1000 for lv in levels}
        bound = math.sqrt(median[1] * median[8])  # the baseline's limit lies inside 1:16
        outs = {}
        for name, sim in sims.items():
            outs[name] = tmp_path / f"search-{name}"
            result = run_specload(
                ["run", "--host", sim.url, "--out", str(outs[name]), *COMMON,
                 "--variant", name, "--search", "slo", "--slo", f"tpot={bound * 1000:.4f}ms",
                 "--attainment", "0.5", "--search-range", "1:16"],
                timeout=300,
            )  # fmt: skip
            assert result.returncode == 0, result.stderr[-2000:]
    finally:
        for sim in sims.values():
            sim.stop()
    limits = {}
    for name, out in outs.items():
        found = json.loads((out / "summary.json").read_text())["search"]
        assert found["complete"], found
        limits[name] = found["limit"]
        # known truth from the records: the limit's level held, the level that set it did not
        if found["limit"] is not None:
            assert _attainment(out, found["limit_level"], bound) >= 0.5
        if found["set_by"] is not None:
            assert _attainment(out, found["set_by"], bound) < 0.5
    compare = tmp_path / "cmp"
    result = run_specload(
        [
            "compare",
            str(outs["baseline"]),
            str(outs["ngram"]),
            "--out",
            str(compare),
            "--json",
            "--no-plots",
        ]
    )
    assert result.returncode == 0, result.stderr[-2000:]
    data = json.loads((compare / "comparison.json").read_text())["search"]
    print(json.dumps({"bound_ms": bound * 1000, "limits": limits, "search": data}))
    assert [lim["limit"] for lim in data["limits"]] == [limits["baseline"], limits["ngram"]]
    assert limits["baseline"] is not None and limits["ngram"] is not None
    assert data["ratios"][0] == pytest.approx(limits["ngram"] / limits["baseline"])
    low, high = data["brackets"][0]
    assert low is None or low <= data["ratios"][0]
    assert high is None or data["ratios"][0] <= high
    assert limits["ngram"] < limits["baseline"]  # the simulator's n-gram decodes slower here
    text = (compare / "comparison.md").read_text()
    assert "## Highest load under the objectives" in text
    assert f"sustains {data['ratios'][0]:.2f}x the load of baseline" in result.stdout


def test_a_rate_search_cuts_saturated_levels_short(tmp_path: Path) -> None:
    # two sequences at a time: beyond ~20 requests/s the queue grows through every window
    sim = start_sim(
        ["--load-time", "0", "--time-scale", "20", "--max-num-seqs", "2"], tmp_path / "sim"
    )
    out = tmp_path / "rate"
    try:
        result = run_specload(
            ["run", "--host", sim.url, "--out", str(out),
             *("--requests", "60", "--max-tokens", "100", "--warmup", "0", "--temperature", "0"),
             *("--metrics-address", "off", "--progress", "off", "--no-plots"),
             "--search", "slo", "--search-variable", "request_rate", "--slo", "ttft=250ms",
             "--attainment", "0.9", "--search-range", "8:128", "--max-concurrency", "256"],
            timeout=300,
        )  # fmt: skip
    finally:
        sim.stop()
    assert result.returncode == 0, result.stderr[-2000:]
    summary = json.loads((out / "summary.json").read_text())
    found = summary["search"]
    print(json.dumps(found))
    assert found["variable"] == "request_rate" and found["complete"]
    assert found["limit"] is not None and found["set_by"] is not None
    levels = {lv["name"]: lv for lv in summary["levels"]}
    assert all(lv["concurrency"] is None and lv["request_rate"] for lv in levels.values())
    assert _attainment(out, found["limit_level"], 0.25, "ttft_s") >= 0.9
    cut = [lv for lv in levels.values() if lv["search_cut_short"]]
    assert cut, "no level was cut short"
    for lv in cut:
        assert "cut_short" in lv["flags"]
        assert lv["search_cut_short"].startswith(("missed", "saturated"))
        step = next(s for s in found["steps"] if s["level"] == lv["name"])
        assert not step["held"]
        # the verdict was right: the level's requests (the late ones included) fell short
        assert _attainment(out, lv["name"], 0.25, "ttft_s") < 0.9
