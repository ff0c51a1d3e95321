"""summary.json of sweeps run with ``--precision`` and ``--against`` (the driver against a fake
backend): valid against the schema, read back by the model, and shown by every reader
(summary.md, compare's Markdown and JSON, the HTML report)."""

from __future__ import annotations

import random
from pathlib import Path
from typing import Any

import jsonschema
import orjson
import pytest

from specload.compare.model import compare_runs, load_run
from specload.compare.report import comparison_json, comparison_markdown
from specload.records.request import RequestRecord
from specload.report.pages import single_run_html
from specload.results import ResultsWriter, summary_schema
from specload.results.model import Level, from_dict, read
from specload.results.report import summary_markdown
from specload.results.stopping import metric
from specload.sweep.plan import SweepPlan
from specload.sweep.stopping import StopPlan, load_against
from tests.unit.test_sweep_driver import FakeLoad, closed_plan, make_driver

pytestmark = pytest.mark.unit

REQUESTS = 200  # each level's budget (--requests)


class JitterLoad(FakeLoad):
    """The fake backend with a request time spread ±10% around ``0.5 s * scale``."""

    def __init__(self, scale: float, seed: int) -> None:
        super().__init__(e2e_s=0.5 * scale)
        self.rng = random.Random(seed)
        self.base = 0.5 * scale

    def _send(self, user: int) -> None:
        self.e2e_s = self.base * (0.9 + 0.2 * self.rng.random())
        super()._send(user)


def sweep(path: Path, scale: float, seed: int, stopping: StopPlan | None = None) -> dict[str, Any]:
    """One level (2 users, :data:`REQUESTS` requests) written to ``path`` as a results
    directory (the variant: its name); the summary as the session writes it (``stopping``:
    its rules' block), checked against the schema."""
    load = JitterLoad(scale, seed)
    records: list[RequestRecord] = []
    driver = make_driver(load, plan(), [], [], stopping=stopping)
    driver.on_record_written = records.append
    driver.metadata["variant"] = path.name
    driver.metadata["stopping"] = stopping.describe() if stopping is not None else None
    summary = driver.run()
    jsonschema.validate(orjson.loads(orjson.dumps(summary)), summary_schema())
    writer = ResultsWriter(path)
    for record in records:
        writer.append(record.to_dict(include_histograms=True))
    writer.write_summary(summary)
    writer.close()
    return summary


def plan() -> SweepPlan:
    return closed_plan("2", requests=REQUESTS)


@pytest.fixture(scope="module")
def baseline(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("stopping") / "baseline"
    summary = sweep(path, 1.0, 1)
    assert summary["stopping"] is None and summary["levels"][0]["stop_reason"] == "budget"
    return path


def against(baseline: Path, **kw: Any) -> StopPlan:
    target = load_against(str(baseline), plan(), metric("tpot"), 20)
    return StopPlan(against=target, margin=0.05, **kw)


def test_precise_level_validates_and_reads_back(tmp_path: Path) -> None:
    summary = sweep(tmp_path / "v", 1.3, 2, StopPlan(precision=0.02))
    level = summary["levels"][0]
    assert level["stop_reason"] == "precise" and level["completed"] < REQUESTS
    assert 0 < level["precision_half_width"] <= 0.02
    assert 20 <= level["precision_requests"] <= level["completed"]
    assert "verdict" not in level  # no --against
    assert summary["stopping"]["precision"] == 0.02 and summary["stopping"]["against"] is None
    model = read(tmp_path / "v")
    lv = model.levels[0]
    assert (lv.stop_reason, lv.precision_half_width, lv.precision_requests) == (
        "precise",
        level["precision_half_width"],
        level["precision_requests"],
    )
    assert lv.stopped == (
        f"precise ±{level['precision_half_width'] * 100:.1f}% after "
        f"{level['precision_requests']} requests"
    )
    assert model.stopping is not None and model.stopping.precision == 0.02
    md = summary_markdown(model)
    row = next(line for line in md.splitlines() if line.startswith("| 2 |"))  # ## Levels
    assert row.endswith(f"| {lv.stopped} |")
    assert f"- stopping: {model.stopping.text}" in md


def test_unreachable_precision_runs_its_budget(tmp_path: Path) -> None:
    summary = sweep(tmp_path / "v", 1.0, 3, StopPlan(precision=0.001))
    level = summary["levels"][0]
    assert level["stop_reason"] == "budget" and level["completed"] == REQUESTS
    assert level["precision_half_width"] > 0.001 and level["precision_requests"] == REQUESTS
    assert read(tmp_path / "v").levels[0].stopped == (
        f"budget (±{level['precision_half_width'] * 100:.1f}% after {REQUESTS} requests)"
    )


def test_interrupted_level_says_so(tmp_path: Path) -> None:
    # SIGTERM inside the level: interrupted, with the precision it had reached (if any)
    load = JitterLoad(1.0, 4)
    driver = make_driver(load, plan(), [], [], stopping=StopPlan(precision=0.001))
    driver.on_tick = lambda d: d.request_stop("SIGTERM") if load.now >= 1020 else None
    driver.metadata["stopping"] = driver.stopping.describe() if driver.stopping else None
    summary = driver.run()
    jsonschema.validate(orjson.loads(orjson.dumps(summary)), summary_schema())
    level = summary["levels"][0]
    assert summary["status"] == "interrupted" and level["stop_reason"] == "interrupted"
    assert read_level(summary).stopped == (
        f"interrupted (±{level['precision_half_width'] * 100:.1f}% after "
        f"{level['precision_requests']} requests)"
    )


def read_level(summary: dict[str, Any]) -> Level:
    return from_dict(orjson.loads(orjson.dumps(summary))).levels[0]


def test_decided_level_against_a_baseline_in_every_reader(baseline: Path, tmp_path: Path) -> None:
    # 30% slower than the baseline, margin 5%: decided slower long before the budget
    var = tmp_path / "ngram"
    summary = sweep(var, 1.3, 2, against(baseline, precision=0.02))
    level = summary["levels"][0]
    assert level["stop_reason"] == "decided" and level["verdict"] == "slower"
    assert 20 <= level["verdict_requests"] < REQUESTS
    low, high = level["verdict_interval"]
    assert 1.05 < low <= level["verdict_ratio"] <= high
    assert level["verdict_looks"] >= 1
    assert level["precision_half_width"] is not None  # --precision looked too
    assert summary["stopping"]["against"] == str(baseline)
    assert summary["stopping"]["margin"] == 0.05

    model = read(var)
    lv = model.levels[0]
    assert lv.verdict == "slower" and lv.verdict_requests == level["verdict_requests"]
    assert lv.verdict_interval == (low, high) and lv.verdict_looks == level["verdict_looks"]
    words = lv.stopped
    assert words is not None
    assert words.startswith(f"decided after {level['verdict_requests']} requests: slower (±")

    # every reader shows it
    assert f"| {words} |" in summary_markdown(model)
    runs = [load_run(baseline), load_run(var)]
    comp = compare_runs(runs, n_boot=50, allow_incomplete=True)
    assert comp.levels[0].stopped == ["budget", words]
    assert f"baseline: budget; ngram: {words}" in comparison_markdown(comp)
    data = comparison_json(comp)
    mine = data["levels"][0]["stopping"][1]
    assert mine["verdict"] == "slower" and mine["verdict_interval"] == [low, high]
    assert mine["stopped"] == words and data["stopping"][1] == summary["stopping"]
    assert words in single_run_html(runs[1])
