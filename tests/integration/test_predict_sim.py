"""``specload predict`` against the simulator's own n-gram variant (known truth: the variant
is run after the forecast, with the same prompts and levels).

The simulator's n-gram proposes by vLLM's rule over the text it generates and its cost model
charges verification with a concave MoE curve, so this checks the whole chain: the proposer
replay (counts), the step-cost curve from the baseline's levels (the ``--plan`` levels
included) and the batch replay (median TPOT within 5% at concurrency 1, 4 and 16 for k = 3
and 5). With sampling, the variant's server runs with another seed: its texts differ from the
baseline's, and the acceptance the replay gives still matches within 10%.
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from simulator.variants import PRESETS
from tests.fixtures.sim import SimHandle, start_sim
from tests.fixtures.sweep import run_specload

pytestmark = [pytest.mark.integration, pytest.mark.slow]

TIME_SCALE = "10"
# the simulated n-gram variant's own lookup window
LOOKUP = [
    *("--prompt-lookup-min", str(PRESETS["ngram"].prompt_lookup_min)),
    *("--prompt-lookup-max", str(PRESETS["ngram"].prompt_lookup_max)),
]
# c1, 4 and 16 are forecast; 32..96 measure the step sizes the variant puts in a step at c16
# (16·(1+k) at most: 96 at k = 5), as `specload predict --plan` asks.
BASELINE_LEVELS = "1,4,16,32,64,96"
VARIANT_LEVELS = "1,4,16"
COMMON = [
    "--requests",
    "96",
    "--max-tokens",
    "200",
    "--warmup",
    "0",
    "--metrics-address",
    "off",
    "--progress",
    "off",
    "--no-plots",
    "--record-token-ids",
]


@contextlib.contextmanager
def _sim(args: list[str], tmp: Path, time_scale: str = TIME_SCALE) -> Iterator[SimHandle]:
    # No prefix caching: the forecast counts every prompt token as computed at prefill (it
    # names a baseline that hit the cache; docs/predict.md).
    base = ["--load-time", "0", "--time-scale", time_scale, "--no-enable-prefix-caching"]
    handle = start_sim([*base, *args], tmp)
    try:
        yield handle
    finally:
        handle.stop()


def _sweep(
    sim_args: list[str], levels: str, temperature: str, out: Path, time_scale: str = TIME_SCALE
) -> Path:
    with _sim(sim_args, out.parent / f"{out.name}-sim", time_scale) as sim:
        variant = "ngram" if "ngram" in sim_args else "baseline"
        result = run_specload(
            [
                *("run", "--host", sim.url, "--variant", variant, "--out", str(out)),
                *("--concurrency", levels, "--temperature", temperature, *COMMON),
            ],
            timeout=300,
        )
    assert result.returncode == 0, result.stderr + result.stdout
    return out


def _predict(baseline: Path, k: int, measured: Path, *extra: str) -> dict[str, Any]:
    result = run_specload(
        [
            *("predict", str(baseline), "--method", "ngram", "--num-speculative-tokens", str(k)),
            *(*LOOKUP, "--measured", str(measured), "--json", *extra),
        ]
    )
    assert result.returncode == 0, result.stderr
    data: dict[str, Any] = json.loads(result.stdout)
    return data


@pytest.fixture(scope="module")
def greedy_baseline(tmp_path_factory: pytest.TempPathFactory) -> Path:
    tmp = tmp_path_factory.mktemp("predict-sim")
    return _sweep(["--variant", "baseline"], BASELINE_LEVELS, "0", tmp / "baseline")


@pytest.mark.parametrize("k", [3, 5])
def test_predicted_tpot_and_counts_match_the_simulated_variant(
    greedy_baseline: Path, tmp_path: Path, k: int
) -> None:
    variant = _sweep(
        ["--variant", "ngram", "--num-speculative-tokens", str(k)],
        VARIANT_LEVELS,
        "0",
        tmp_path / f"ngram-k{k}",
    )
    data = _predict(greedy_baseline, k, variant, "--concurrency", VARIANT_LEVELS)
    rows = {row["concurrency"]: row for row in data["measured"]["levels"]}
    assert sorted(rows) == [1, 4, 16]
    report = {
        c: (r["predicted_median_tpot_ms"], r["measured_median_tpot_ms"]) for c, r in rows.items()
    }
    # c16 puts 64 (k 3) to 90 (k 5) tokens of 16 sequences in a step; the baseline measured
    # those token counts in 64..96 sequences, whose per-sequence costs (attention over each
    # context) the curve cannot tell from per-token ones (docs/predict.md): measured -5..+6%
    # there (k 3: -5.1% with a negative fixed part in the fit, +5.2% with it held at zero).
    tolerance = {1: 0.05, 4: 0.05, 16: 0.08}
    for c, row in rows.items():
        assert abs(row["error_ratio"]) <= tolerance[c], (k, c, report)
    # the variant is slower than the baseline here, as on the reference deployment
    assert all(row["measured_speedup"] < 1 for row in rows.values()), report
    verdicts = {lv["concurrency"]: lv["verdict"] for lv in data["levels"]}
    assert verdicts[4] == verdicts[16] == "slower", verdicts  # c1 k3: ~5%, may be noise
    # Counts: the forecast covers every level of the baseline, the variant ran three of
    # them; compare what the replay says for exactly those levels.
    per_level = {lv["concurrency"]: lv for lv in data["levels"]}
    for name in ("drafts", "draft_tokens", "accepted_tokens"):
        predicted = sum(per_level[c][name] for c in rows)
        measured = data["measured"]["totals"][name]["measured"]
        assert abs(predicted / measured - 1) <= 0.03, (name, predicted, measured)


def test_with_sampling_the_replayed_acceptance_matches_another_seeds_run(tmp_path: Path) -> None:
    # Counts only (token ids and the server's counters, not timing): the simulator 40 times
    # faster than its own cost model, not 10.
    fast = "40"
    baseline = _sweep(["--variant", "baseline"], "1,4", "1", tmp_path / "baseline", fast)
    variant = _sweep(
        ["--variant", "ngram", "--num-speculative-tokens", "3", "--seed", "7"],
        "1,4",
        "1",
        tmp_path / "ngram",
        fast,
    )

    def outputs(path: Path) -> dict[tuple[int, ...], list[int]]:
        lines = (path / "tokens.jsonl").read_text().splitlines()
        return {tuple(r["prompt_ids"]): r["output_ids"] for r in map(json.loads, lines)}

    a, b = outputs(baseline), outputs(variant)
    assert set(a) == set(b)  # the same prompts
    assert sum(a[p] == b[p] for p in a) <= len(a) // 10  # but other texts
    data = _predict(baseline, 3, variant)
    totals = data["measured"]["totals"]
    measured_rate = totals["accepted_tokens"]["measured"] / totals["draft_tokens"]["measured"]
    predicted_rate = data["totals"]["acceptance_rate"]
    assert 0.02 < measured_rate < 0.5
    assert abs(predicted_rate / measured_rate - 1) <= 0.10, (predicted_rate, measured_rate)
