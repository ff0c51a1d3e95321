"""``--against`` in the driver on a simulated clock: the verdicts it reaches and when
(summary.json and its readers for both rules: ``test_sweep_stopping_summary.py``)."""

from __future__ import annotations

import random
from pathlib import Path
from typing import Any

import pytest

from specload.cli import build_parser
from specload.errors import UsageError
from specload.results.stopping import metric
from specload.sweep.settings import settings_from_args
from specload.sweep.stopping import Against, StopPlan
from tests.unit.test_sweep_driver import closed_plan, make_driver
from tests.unit.test_sweep_stopping_summary import JitterLoad

pytestmark = pytest.mark.unit


def run(load: JitterLoad, requests: int, stopping: StopPlan | None) -> dict[str, Any]:
    driver = make_driver(load, closed_plan("2", requests=requests), [], [], stopping=stopping)
    summary: dict[str, Any] = driver.run()
    return summary


def _against(samples: list[float], margin: float = 0.05) -> StopPlan:
    # the driver reads the samples only (the baseline run: compare's checks, made before)
    target = Against(Path("base"), run=None, samples={"c2": samples})  # type: ignore[arg-type]
    return StopPlan(metric("tpot"), margin=margin, against=target)


def _baseline(n: int = 300) -> list[float]:
    """TPOTs as JitterLoad makes them at scale 1: (e2e - ttft) / 49, e2e within 0.5 s ± 10%."""
    rng = random.Random(99)
    return [(0.5 * (0.9 + 0.2 * rng.random()) - 0.05) / 49 for _ in range(n)]


def test_without_a_rule_every_level_runs_its_budget() -> None:
    level = run(JitterLoad(1.0, 1), 40, None)["levels"][0]
    assert level["stop_reason"] == "budget" and level["completed"] == 40
    assert "verdict" not in level and "precision_half_width" not in level


def test_a_slower_variant_is_decided_slower_early() -> None:
    level = run(JitterLoad(1.3, 1), 300, _against(_baseline()))["levels"][0]
    assert (level["stop_reason"], level["verdict"]) == ("decided", "slower")
    assert level["verdict_requests"] < 100
    low, high = level["verdict_interval"]
    assert 1.05 < low <= level["verdict_ratio"] <= high
    # the median TPOT: (0.5 s x 1.3 - 0.05 s) / 49 against (0.5 s - 0.05 s) / 49
    assert level["verdict_ratio"] == pytest.approx((0.65 - 0.05) / (0.5 - 0.05), rel=0.05)


def test_an_equal_variant_is_never_called_faster_or_slower() -> None:
    verdicts = []
    for seed in range(3):
        level = run(JitterLoad(1.0, seed + 10), 300, _against(_baseline()))["levels"][0]
        verdicts.append(level["verdict"])
        assert level["verdict_requests"] <= 300
    assert set(verdicts) <= {"equivalent", "undecided"}
    assert "equivalent" in verdicts


def test_output_throughput_precision_ends_a_level_at_its_rate() -> None:
    # 2 users, 50 tokens in 0.5 s each (first at 0.05 s): 200 tok/s
    plan = StopPlan(metric("output_tps"), precision=0.02)
    load = JitterLoad(1.0, 3)
    summary = run(load, 2000, plan)
    level = summary["levels"][0]
    assert level["stop_reason"] == "precise"
    assert 0 < level["precision_half_width"] <= 0.02
    assert level["completed"] < 2000
    assert level["output_throughput"] == pytest.approx(200.0, rel=0.05)


def test_against_is_refused_for_output_throughput(tmp_path: Path) -> None:
    args = build_parser().parse_args(
        ["run", "--out", str(tmp_path / "o"), "--against", str(tmp_path), "--requests", "50",
         "--precision-metric", "output_tps"]
    )  # fmt: skip
    with pytest.raises(UsageError, match="--against: judges a request's figure"):
        settings_from_args(args)
