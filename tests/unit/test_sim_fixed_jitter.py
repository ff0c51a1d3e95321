"""``specload sim --timing fixed --fixed-itl-jitter J``: each request's ITL is the fixed ITL
times a factor drawn once per request, uniform in [1 - J, 1 + J], from a seeded RNG — so the
true median TPOT over requests is exactly ``--fixed-itl`` with a known spread.

The driver's schedule is checked on a fake event loop and clock (no lateness), so each
request's chunk intervals are exactly its own ITL."""

from __future__ import annotations

import argparse
import heapq
import itertools
import random
import statistics
from collections.abc import Callable
from types import SimpleNamespace
from typing import Any

import pytest

import simulator.driver as driver_mod
from simulator.driver import Degradation, FixedDriver, LagStats
from simulator.engine import Sequence
from simulator.metrics import EngineMetrics
from specload.cli import main
from specload.commands.sim import add_arguments, build_config

ITL = 0.005


def _metrics() -> EngineMetrics:
    return EngineMetrics(
        model_name="m", max_model_len=8192, speculative_positions=0, cache_info={}, start_time=0.0
    )


def _driver(jitter: float, seed: int = 0) -> FixedDriver:
    return FixedDriver(
        _metrics(),
        ttft_s=0.02,
        itl_s=ITL,
        tokens_per_chunk=1,
        degradation=Degradation(),
        lag=LagStats(),
        kv_cache_tokens=1 << 20,
        itl_jitter=jitter,
        rng=random.Random(seed),
    )


def test_factors_spread_uniformly_and_their_median_is_the_fixed_itl() -> None:
    jitter = 0.1
    driver = _driver(jitter, seed=1)
    draws = [driver.draw_itl() for _ in range(20001)]
    factors = [d / ITL for d in draws]
    # inside [1 - J, 1 + J], and reaching both ends of it
    assert 1 - jitter <= min(factors) < 1 - 0.99 * jitter
    assert 1 + 0.99 * jitter < max(factors) <= 1 + jitter
    # a uniform's quartiles and spread (standard deviation J / sqrt(3))
    q1, q2, q3 = statistics.quantiles(factors, n=4)
    assert q1 == pytest.approx(1 - jitter / 2, abs=0.005)
    assert q3 == pytest.approx(1 + jitter / 2, abs=0.005)
    assert statistics.stdev(factors) == pytest.approx(jitter / 3**0.5, rel=0.03)
    # the median is the fixed ITL: the sample's within 0.3% (its standard error ~0.07%)
    assert statistics.median(draws) == pytest.approx(ITL, rel=0.003)
    assert q2 == pytest.approx(1.0, abs=0.003)


def test_the_draws_are_seeded_and_no_jitter_touches_no_rng() -> None:
    rng = random.Random(7)
    expected = [ITL * rng.uniform(0.7, 1.3) for _ in range(50)]
    seeded = _driver(0.3, seed=7)
    assert [seeded.draw_itl() for _ in range(50)] == expected
    other = _driver(0.3, seed=8)
    assert [other.draw_itl() for _ in range(50)] != expected
    plain = _driver(0.0, seed=7)
    state = plain.rng.getstate()
    assert {plain.draw_itl() for _ in range(100)} == {ITL}
    assert plain.rng.getstate() == state
    with pytest.raises(ValueError):
        _driver(1.0)


class _FakeLoop:
    """``call_later`` on a virtual clock: callbacks run exactly when due, in order."""

    def __init__(self) -> None:
        self.now = 0.0
        self._queue: list[tuple[float, int, Callable[..., None], tuple[Any, ...]]] = []
        self._order = itertools.count()

    def call_later(self, delay: float, callback: Callable[..., None], *args: Any) -> Any:
        heapq.heappush(self._queue, (self.now + delay, next(self._order), callback, args))
        return SimpleNamespace(cancel=lambda: None)

    def run(self) -> None:
        while self._queue:
            when, _, callback, args = heapq.heappop(self._queue)
            self.now = max(self.now, when)
            callback(*args)


def test_each_request_keeps_its_own_itl_and_the_median_tpot_is_the_fixed_itl(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    loop = _FakeLoop()
    monkeypatch.setattr(driver_mod, "monotonic", lambda: loop.now)
    monkeypatch.setattr(driver_mod, "asyncio", SimpleNamespace(get_running_loop=lambda: loop))
    jitter, n, tokens = 0.2, 401, 9
    driver = _driver(jitter, seed=3)
    expected = random.Random(3)  # the same stream: the factors in arrival order
    times: dict[int, list[float]] = {}

    def emit(seq: Sequence, r: int, c: int, finish: str | None, now: float) -> None:
        times.setdefault(seq.rid, []).append(now)

    for rid in range(n):  # staggered arrivals, 1 ms apart: the streams overlap
        seq = Sequence(
            rid,
            category="math",
            prompt_tokens=16,
            reasoning_tokens=tokens,
            content_tokens=0,
            max_tokens=tokens,
            arrival=rid * 0.001,
            emit=emit,
        )
        loop.call_later(seq.arrival, driver.submit, seq)
    loop.run()
    tpots = []
    for rid in range(n):
        stamps = times[rid]
        assert len(stamps) == tokens
        assert stamps[0] == pytest.approx(rid * 0.001 + 0.02)  # TTFT has no jitter
        itl = ITL * expected.uniform(1 - jitter, 1 + jitter)
        gaps = [b - a for a, b in itertools.pairwise(stamps)]
        assert gaps == pytest.approx([itl] * (tokens - 1), abs=1e-12)
        tpots.append((stamps[-1] - stamps[0]) / (tokens - 1))
    assert min(tpots) >= ITL * (1 - jitter) and max(tpots) <= ITL * (1 + jitter)
    assert statistics.median(tpots) == pytest.approx(ITL, rel=0.02)
    assert driver.active == {}


def _config(argv: list[str]) -> Any:
    parser = argparse.ArgumentParser()
    add_arguments(parser)
    return build_config(parser.parse_args(argv))


def test_the_flag_reaches_the_fixed_timing() -> None:
    config = _config(["--timing", "fixed", "--fixed-itl", "0.005", "--fixed-itl-jitter", "0.1"])
    assert config.fixed.itl_s == 0.005 and config.fixed.itl_jitter == 0.1
    assert _config(["--timing", "fixed"]).fixed.itl_jitter == 0.0
    assert _config(["--timing", "fixed", "--fixed-itl-jitter", "0.899"]).fixed.itl_jitter == 0.899


@pytest.mark.parametrize(
    ("value", "message"),
    [
        ("0.9", "--fixed-itl-jitter 0.9: must be a number in [0, 0.9)"),
        ("1.5", "--fixed-itl-jitter 1.5: must be a number in [0, 0.9)"),
        ("-0.1", "--fixed-itl-jitter -0.1: must be a number in [0, 0.9)"),
        ("nan", "--fixed-itl-jitter nan: must be a number in [0, 0.9)"),
        ("inf", "--fixed-itl-jitter inf: must be a number in [0, 0.9)"),
        ("abc", "--fixed-itl-jitter abc: must be a number in [0, 0.9)"),
    ],
)
def test_a_jitter_outside_0_to_0_9_is_a_one_line_error(
    value: str, message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    code = main(["sim", "--timing", "fixed", "--fixed-itl-jitter", value])
    assert code == 2
    err = capsys.readouterr().err
    assert message in err and len(err.strip().splitlines()) == 1, err


def test_jitter_without_fixed_timing_is_refused(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["sim", "--fixed-itl-jitter", "0.1"]) == 2
    err = capsys.readouterr().err.strip()
    assert err.endswith("--fixed-itl-jitter 0.1: only with --timing fixed"), err
    assert len(err.splitlines()) == 1
