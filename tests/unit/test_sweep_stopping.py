"""The sweep's levels end by their stopping rules (``--precision``, ``--against``) on a
simulated clock: why each level stopped, how precise it got, its verdict."""

from __future__ import annotations

import heapq
from pathlib import Path

import jsonschema
import numpy as np
import orjson
import pytest

from specload.results import summary_schema
from specload.results.stopping import metric
from specload.sweep.stopping import Against, StopPlan
from tests.unit.test_sweep_driver import FakeLoad, closed_plan, make_driver

pytestmark = pytest.mark.unit


class NoisyLoad(FakeLoad):
    """FakeLoad whose requests' TPOT varies: a seeded lognormal factor times ``scale``."""

    def __init__(self, scale: float = 1.0, sd: float = 0.1, seed: int = 0) -> None:
        super().__init__(e2e_s=0.5)
        self.scale = scale
        self.sd = sd
        self.rng = np.random.default_rng(seed)

    def _send(self, user):  # type: ignore[no-untyped-def]
        before = self.seq
        super()._send(user)
        if self.seq == before:
            return
        for _end, seq, _user, rec in self.events:
            if seq == self.seq and rec.tpot_s is not None:
                rec.tpot_s = 0.02 * self.scale * float(np.exp(self.sd * self.rng.standard_normal()))
        heapq.heapify(self.events)


def run(load: FakeLoad, requests: int, stopping: StopPlan | None, concurrency: str = "2"):
    records: list[dict] = []
    summaries: list[dict] = []
    plan = closed_plan(concurrency, requests=requests)
    driver = make_driver(load, plan, records, summaries, stopping=stopping)
    summary = driver.run()
    jsonschema.validate(orjson.loads(orjson.dumps(summary)), summary_schema())
    return summary, records


def test_a_precise_level_ends_before_its_budget() -> None:
    summary, _ = run(NoisyLoad(), 1000, StopPlan(precision=0.02))
    level = summary["levels"][0]
    assert level["stop_reason"] == "precise"
    assert level["precision_half_width"] <= 0.02
    assert 60 <= level["precision_requests"] < 1000
    assert level["completed"] < 1000
    assert summary["status"] == "complete"


def test_a_level_that_cannot_get_there_says_budget_and_how_close_it_got() -> None:
    summary, _ = run(NoisyLoad(), 30, StopPlan(precision=0.002))
    level = summary["levels"][0]
    assert level["stop_reason"] == "budget"
    assert level["precision_half_width"] > 0.002
    assert level["completed"] == 30


def test_without_a_rule_every_level_runs_its_budget() -> None:
    summary, _ = run(NoisyLoad(), 40, None)
    level = summary["levels"][0]
    assert level["stop_reason"] == "budget" and level["completed"] == 40
    assert "verdict" not in level and "precision_half_width" not in level


def _against(samples: list[float], margin: float = 0.05) -> StopPlan:
    return StopPlan(
        metric("tpot"),
        margin=margin,
        # the driver reads the samples only (the run: comparability, checked before)
        against=Against(Path("base"), run=None, samples={"c2": samples}),  # type: ignore[arg-type]
    )


def _baseline(n: int = 300) -> list[float]:
    rng = np.random.default_rng(99)
    return [0.02 * float(np.exp(0.1 * rng.standard_normal())) for _ in range(n)]


def test_a_slower_variant_is_decided_slower_early() -> None:
    summary, _ = run(NoisyLoad(scale=1.3, seed=1), 300, _against(_baseline()))
    level = summary["levels"][0]
    assert (level["stop_reason"], level["verdict"]) == ("decided", "slower")
    assert level["verdict_requests"] < 100
    low, high = level["verdict_interval"]
    assert 1.05 < low <= level["verdict_ratio"] <= high


def test_an_equal_variant_is_never_called_faster_or_slower() -> None:
    verdicts = []
    for seed in range(3):
        summary, _ = run(NoisyLoad(seed=seed + 10), 300, _against(_baseline()))
        level = summary["levels"][0]
        verdicts.append(level["verdict"])
        assert level["verdict_requests"] <= 300
    assert set(verdicts) <= {"equivalent", "undecided"}
    assert "equivalent" in verdicts


def test_an_interrupted_level_says_so() -> None:
    load = NoisyLoad()
    records: list[dict] = []
    summaries: list[dict] = []
    driver = make_driver(
        load, closed_plan("2", requests=500), records, summaries, stopping=StopPlan(precision=0.001)
    )
    driver.on_tick = lambda d: d.request_stop("SIGINT") if d.records > 40 else None
    summary = driver.run()
    assert summary["status"] == "interrupted"
    assert summary["levels"][0]["stop_reason"] == "interrupted"
