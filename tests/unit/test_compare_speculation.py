"""compare's speculation figures on synthetic runs with known truth: the crossover (exact
crossing of known TPOTs, its interval, the reasons for none), the efficiency rows (ideal
speedup from the client aggregate or the server counters, measured speedup and its
interval), the all-reduce share from profile reports."""

from __future__ import annotations

import math
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np
import orjson
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from specload.cli import main
from specload.compare.crossover import (
    FASTER_AT_HIGH_LOAD,
    FASTER_EVERYWHERE,
    OPEN_LOOP,
    SLOWER_EVERYWHERE,
    crossing,
    crossings,
)
from specload.compare.efficiency import (
    HIGH_IDEAL,
    NO_SPEEDUP,
    SOURCE_CLIENT,
    SOURCE_SERVER,
    Ideal,
    ideal_speedup,
    speedup,
)
from specload.compare.model import ALL, compare_runs, load_run
from specload.compare.report import comparison_json, comparison_markdown
from specload.compare.stats import Difference
from specload.errors import UsageError
from tests.fixtures.results import LEVEL_GAP_S, T0, level_entry, make_records, write_run

pytestmark = pytest.mark.unit


def _run(
    path: Path,
    variant: str,
    tpot_ms: Mapping[int, float],
    *,
    server: Mapping[int, Mapping[str, Any]] | None = None,
    extra: Mapping[int, Mapping[str, Any]] | None = None,
    spread: float = 0.0,
    n: int = 60,
    seed: int = 1,
    rate: bool = False,
) -> Path:
    """A run with the given median TPOT per concurrency (``spread`` 0: every request has it)."""
    entries, records = [], []
    for k, (c, tpot) in enumerate(tpot_ms.items()):
        name = f"r{c}" if rate else f"c{c}"
        start = T0 + k * LEVEL_GAP_S
        recs = make_records(
            name,
            n=n,
            tpot_ms=tpot,
            start=start,
            seed=seed * 100 + k,
            spread=spread,
            variant=variant,
        )
        records += recs
        entries.append(
            level_entry(
                name,
                recs,
                start=start,
                server=(server or {}).get(c),
                **(extra or {}).get(c, {}),
            )
        )
    levels = ",".join(str(c) for c in tpot_ms)
    return write_run(path, variant, entries, records, options={"concurrency": levels})


def _server(accepted: float, generated: float = 10_100, requests: float = 100) -> dict[str, Any]:
    return {
        "generation_tokens": generated,
        "requests_success": requests,
        "spec_decode_num_drafts": 3000,
        "spec_decode_num_draft_tokens": 9000,
        "spec_decode_num_accepted_tokens": accepted,
        "spec_decode_acceptance_rate": accepted / 9000,
    }


BASE = {1: 10.0, 2: 11.0, 4: 12.0, 8: 14.0, 16: 18.0}


# -- crossover ------------------------------------------------------------------------------


def test_crossing_is_interpolated_on_log2_concurrency():
    # 0.9 at 4, 1.1 at 8: halfway in log2, 2 ** 2.5
    assert crossing([1, 2, 4, 8], [0.7, 0.8, 0.9, 1.1]) == (pytest.approx(2**2.5), 2)
    # a quarter of the way from 2 to 8 in log2 (1 + 0.25 * 2 = 1.5)
    got = crossing([2, 8], [0.8, 1.6])
    assert isinstance(got, tuple)
    assert got[0] == pytest.approx(2**1.5) and got[1] == 0
    # exactly 1 at a level: the crossing is that level
    assert crossing([1, 4, 16], [0.8, 1.0, 1.3]) == (pytest.approx(4.0), 0)
    # the first faster-to-slower crossing counts
    assert crossing([1, 2, 4, 8], [0.9, 1.1, 0.9, 1.2]) == (pytest.approx(2**0.5), 0)
    assert crossing([1, 2, 4], [0.5, 0.7, 0.9]) == FASTER_EVERYWHERE
    assert crossing([1, 2, 4], [1.0, 1.2, 1.4]) == SLOWER_EVERYWHERE
    assert crossing([1, 2, 4], [1.1, 1.0, 0.9]) == FASTER_AT_HIGH_LOAD


@settings(max_examples=200, deadline=None)
@given(st.lists(st.floats(0.5, 1.5), min_size=2, max_size=6))
def test_replicate_crossings_follow_the_point_rule(ratios):
    loads = [2.0**k for k in range(len(ratios))]
    got = float(crossings(loads, np.asarray([ratios], dtype=np.float64))[0])
    want = crossing(loads, ratios)
    if isinstance(want, tuple):
        assert got == pytest.approx(want[0], rel=1e-12)
    elif want == SLOWER_EVERYWHERE:
        assert got == -math.inf  # stops being faster below the range
    else:
        assert got == math.inf  # still faster at the highest level


def test_exact_crossover_of_known_tpots(tmp_path):
    base = _run(tmp_path / "b", "baseline", BASE)
    # ratios 0.7, 0.8, 0.9, 1.1, 1.3: the crossing is halfway (in log2) between 4 and 8
    ratios = {1: 0.7, 2: 0.8, 4: 0.9, 8: 1.1, 16: 1.3}
    var = _run(tmp_path / "e", "eagle3", {c: BASE[c] * r for c, r in ratios.items()}, seed=2)
    comp = compare_runs([load_run(base), load_run(var)], n_boot=300)
    (cross,) = comp.crossovers
    assert cross.concurrency == pytest.approx(2**2.5, rel=1e-9)
    assert cross.between == (4.0, 8.0)
    # every request has its level's TPOT: every replicate crosses at the same point
    assert cross.interval == (pytest.approx(2**2.5), pytest.approx(2**2.5))
    assert cross.below_share == 0.0 and cross.above_share == 0.0
    assert [c for c, _ in cross.ratios] == [1, 2, 4, 8, 16]
    assert [r for _, r in cross.ratios] == pytest.approx(list(ratios.values()))
    data = comparison_json(comp)["crossovers"][0]
    assert data["variant"] == "eagle3" and data["reason"] is None
    assert data["crossover"]["concurrency"] == pytest.approx(5.657, abs=1e-3)
    assert data["crossover"]["between"] == [4.0, 8.0]
    assert data["crossover"]["interval"] == [pytest.approx(5.657, abs=1e-3)] * 2
    text = comparison_markdown(comp)
    assert "eagle3 vs baseline: stops being faster at concurrency ≈ 5.7 (between 4 and 8" in text


def test_noisy_crossover_interval_contains_the_estimate_within_the_bracket(tmp_path):
    base = _run(tmp_path / "b", "baseline", BASE, spread=0.03, n=200)
    ratios = {1: 0.7, 2: 0.8, 4: 0.9, 8: 1.1, 16: 1.3}
    var = _run(
        tmp_path / "e",
        "eagle3",
        {c: BASE[c] * r for c, r in ratios.items()},
        spread=0.03,
        n=200,
        seed=2,
    )
    (cross,) = compare_runs([load_run(base), load_run(var)], n_boot=500).crossovers
    assert cross.concurrency == pytest.approx(2**2.5, rel=0.05)
    assert cross.interval is not None
    low, high = cross.interval
    assert low is not None and high is not None
    assert 4.0 < low <= cross.concurrency <= high < 8.0
    assert high - low < 1.0


def test_replicates_beyond_the_range_are_shares_and_open_ends(tmp_path):
    # faster only at the lowest level, and barely: many replicates are slower everywhere
    base = _run(tmp_path / "b", "baseline", {2: 10.0, 8: 12.0}, spread=0.05, n=80)
    var = _run(tmp_path / "e", "eagle3", {2: 9.8, 8: 15.0}, spread=0.05, n=80, seed=3)
    comp = compare_runs([load_run(base), load_run(var)], n_boot=400)
    (cross,) = comp.crossovers
    assert cross.between == (2.0, 8.0)
    assert cross.below_share is not None and cross.below_share > 0.2
    assert cross.above_share == 0.0
    assert cross.interval is not None and cross.interval[0] is None  # below the lowest level
    assert cross.interval[1] is not None and cross.interval[1] >= cross.concurrency
    text = comparison_markdown(comp)
    assert "CI below 2 .. " in text and "replicates crossing below the levels" in text
    found = comparison_json(comp)["crossovers"][0]["crossover"]
    assert found["interval"][0] is None and found["below_share"] == cross.below_share


@pytest.mark.parametrize(
    ("ratios", "reason"),
    [
        ({1: 0.7, 4: 0.8, 16: 0.95}, FASTER_EVERYWHERE),
        ({1: 1.1, 4: 1.2, 16: 1.3}, SLOWER_EVERYWHERE),
        ({1: 1.2, 4: 1.0, 16: 0.9}, FASTER_AT_HIGH_LOAD),
    ],
)
def test_no_crossover_says_why(tmp_path, ratios, reason):
    base_tpot = {c: BASE.get(c, 14.0) for c in ratios}
    base = _run(tmp_path / "b", "baseline", base_tpot)
    var = _run(tmp_path / "e", "v", {c: base_tpot[c] * r for c, r in ratios.items()}, seed=2)
    comp = compare_runs([load_run(base), load_run(var)], n_boot=200)
    (cross,) = comp.crossovers
    assert cross.concurrency is None and cross.reason == reason
    data = comparison_json(comp)["crossovers"][0]
    assert data["crossover"] is None and data["reason"] == reason
    assert f"v vs baseline: no crossover — {reason}" in comparison_markdown(comp)


def test_crossover_without_an_interval_when_a_level_has_too_few(tmp_path):
    base = _run(tmp_path / "b", "baseline", {2: 10.0, 8: 12.0}, n=5)
    var = _run(tmp_path / "e", "eagle3", {2: 8.0, 8: 14.0}, n=5, seed=2)
    (cross,) = compare_runs([load_run(base), load_run(var)], n_boot=200).crossovers
    assert cross.concurrency is not None and cross.interval is None
    assert cross.note is not None and "fewer than 10 samples" in cross.note


def test_open_loop_levels_have_no_crossover(tmp_path):
    base = _run(tmp_path / "b", "baseline", {1: 10.0, 4: 12.0}, rate=True)
    var = _run(tmp_path / "e", "eagle3", {1: 8.0, 4: 14.0}, rate=True, seed=2)
    (cross,) = compare_runs([load_run(base), load_run(var)], n_boot=200).crossovers
    assert cross.reason == OPEN_LOOP


# -- efficiency -----------------------------------------------------------------------------


def test_ideal_speedup_from_the_client_aggregate_or_the_server_counters():
    # decode = 10100 - 100 = 10000 tokens, 5000 accepted: 5000 steps, ideal 2
    server = _server(5000)
    assert ideal_speedup({"server": server}) == Ideal(2.0, SOURCE_SERVER)
    # the client's aggregate wins
    assert ideal_speedup({"server": server, "spec_decode": {"ideal_speedup": 1.8}}) == Ideal(
        1.8, SOURCE_CLIENT
    )
    assert ideal_speedup({"server": server, "spec_decode": {"ideal_speedup": None}}).speedup == 2
    # no speculation data, or nonsense: none
    assert ideal_speedup({"server": {"generation_tokens": 100, "requests_success": 1}}) is None
    assert ideal_speedup({"server": {"error": "not scraped"}}) is None
    assert ideal_speedup({}) is None
    assert ideal_speedup({"server": _server(20_000)}) is None  # more accepted than decoded


def test_measured_speedup_interval_is_the_tpot_interval_as_a_ratio():
    diff = Difference(10.0, 8.0, -0.2, -0.25, -0.1, 100, 100)
    point, ci = speedup(diff)
    assert point == pytest.approx(1.25)
    assert ci == (pytest.approx(1 / 0.9), pytest.approx(1 / 0.75))
    assert speedup(Difference(10.0, 8.0, -0.2, None, None, 3, 3)) == (pytest.approx(1.25), None)
    assert speedup(None) == (None, None)


def test_efficiency_rows_and_the_high_acceptance_no_speedup_case(tmp_path):
    base = _run(tmp_path / "b", "baseline", {1: 10.0, 8: 14.0}, spread=0.02, n=100)
    # acceptance gives 2x at both levels; measured 2x at 1, none at 8
    var = _run(
        tmp_path / "e",
        "eagle3",
        {1: 5.0, 8: 14.0},
        server={1: _server(5000), 8: _server(5000)},
        spread=0.02,
        n=100,
        seed=2,
    )
    comp = compare_runs([load_run(base), load_run(var)], n_boot=300)
    c1, c8 = comp.levels
    assert c1.efficiency[0] is None and c8.efficiency[0] is None  # the reference has no row
    e1, e8 = c1.efficiency[1], c8.efficiency[1]
    assert e1 is not None and e8 is not None
    assert e1.ideal == 2.0 and e1.source == SOURCE_SERVER and e1.reference_ideal == 1.0
    tpot = c1.cells[(ALL, "tpot")]
    assert tpot.values[0] is not None and tpot.values[1] is not None
    assert e1.measured == pytest.approx(tpot.values[0] / tpot.values[1])
    assert e1.efficiency == pytest.approx(e1.measured / 2.0)
    assert e1.measured_ci is not None and e1.efficiency_ci is not None
    assert e1.measured_ci[0] <= e1.measured <= e1.measured_ci[1]
    assert e1.efficiency_ci == (
        pytest.approx(e1.measured_ci[0] / 2),
        pytest.approx(e1.measured_ci[1] / 2),
    )
    assert not e1.no_speedup
    assert e8.measured == pytest.approx(1.0, abs=0.02) and e8.no_speedup
    text = comparison_markdown(comp)
    section = text[text.index("## Speculation efficiency") : text.index("## Crossover")]
    assert "| eagle3 | concurrency 8 | 2.00 (server) | 1.00 |" in section
    assert section.count("**high acceptance, no speedup**") == 1
    assert f"ideal ≥ {HIGH_IDEAL:g} and measured ≤ {NO_SPEEDUP:g}" in section
    row = comparison_json(comp)["levels"][1]["efficiency"][0]
    assert row["ideal_speedup"] == 2.0 and row["ideal_source"] == "server"
    assert row["high_acceptance_no_speedup"] is True
    assert row["measured_speedup_ci"][0] <= row["measured_speedup"]


@pytest.mark.parametrize(
    ("ideal", "measured", "flagged"),
    [(1.3, 1.05, True), (1.29, 1.0, False), (2.0, 1.06, False), (1.5, 0.8, True)],
)
def test_high_acceptance_no_speedup_boundaries(tmp_path, ideal, measured, flagged):
    base = _run(tmp_path / "b", "baseline", {4: 12.0})
    var = _run(
        tmp_path / "e",
        "eagle3",
        {4: 12.0 / measured},
        extra={4: {"spec_decode": {"ideal_speedup": ideal}}},
        seed=2,
    )
    comp = compare_runs([load_run(base), load_run(var)], n_boot=200)
    eff = comp.levels[0].efficiency[1]
    assert eff is not None and eff.source == SOURCE_CLIENT
    assert eff.measured == pytest.approx(measured)
    assert eff.no_speedup is flagged


def test_a_speculative_reference_divides_its_own_ideal_out(tmp_path):
    base = _run(tmp_path / "b", "ngram", {4: 12.0}, server={4: _server(2000)})  # ideal 1.25
    var = _run(tmp_path / "e", "eagle3", {4: 8.0}, server={4: _server(5000)}, seed=2)  # 2.0
    eff = compare_runs([load_run(base), load_run(var)], n_boot=200).levels[0].efficiency[1]
    assert eff is not None
    assert eff.reference_ideal == pytest.approx(1.25) and eff.ideal == pytest.approx(1.6)


def test_no_efficiency_rows_without_speculation(tmp_path):
    base = _run(tmp_path / "b", "baseline", {1: 10.0, 4: 12.0})
    other = _run(tmp_path / "o", "allreduce-fix", {1: 9.0, 4: 10.0}, seed=2)
    comp = compare_runs([load_run(base), load_run(other)], n_boot=200)
    assert all(level.efficiency == [None, None] for level in comp.levels)
    assert "## Speculation efficiency" not in comparison_markdown(comp)
    assert comparison_json(comp)["levels"][0]["efficiency"] == [None]
    assert comp.crossovers[0].reason == FASTER_EVERYWHERE  # any variant has a crossover


# -- profiles -------------------------------------------------------------------------------


def _profile(share_by_batch: Mapping[int, float], overall: float) -> bytes:
    return orjson.dumps(
        {
            "decode_allreduce_ratio": overall,
            "decode_steps": 500,
            "batch_sizes": {
                str(b): {"steps": 100, "allreduce_ratio": s} for b, s in share_by_batch.items()
            },
        }
    )


def test_allreduce_share_from_profile_json_beside_the_results(tmp_path):
    base = _run(tmp_path / "b", "baseline", {1: 10.0, 8: 14.0})
    var = _run(
        tmp_path / "e",
        "eagle3",
        {1: 7.0, 8: 15.0},
        server={1: _server(5000), 8: _server(5000)},
        seed=2,
    )
    (base / "profile.json").write_bytes(_profile({1: 0.52, 8: 0.40}, 0.45))
    (var / "profile.json").write_bytes(_profile({1: 0.48}, 0.5))
    comp = compare_runs([load_run(base), load_run(var)], n_boot=200)
    c1, c8 = (level.efficiency[1] for level in comp.levels)
    assert c1 is not None and c8 is not None
    assert c1.allreduce_share == (0.52, 0.48)
    assert c8.allreduce_share == (0.40, None)  # the variant's capture never decoded 8 at once
    text = comparison_markdown(comp)
    assert "| 52% → 48% |" in text
    assert f"Profiles: baseline: {base / 'profile.json'} (decode all-reduce share 45%" in text
    data = comparison_json(comp)
    assert data["profiles"][1]["path"] == str(var / "profile.json")
    assert data["levels"][1]["efficiency"][0]["allreduce_share"] == [0.40, None]


def test_profile_option_and_bad_profiles_are_one_line_errors(tmp_path, capsys):
    base = _run(tmp_path / "b", "baseline", {1: 10.0})
    var = _run(tmp_path / "e", "eagle3", {1: 7.0}, server={1: _server(5000)}, seed=2)
    elsewhere = tmp_path / "captures" / "eagle3.json"
    elsewhere.parent.mkdir()
    elsewhere.write_bytes(_profile({1: 0.33}, 0.3))
    (base / "profile.json").write_bytes(_profile({1: 0.5}, 0.5))
    out = tmp_path / "cmp"
    args = ["compare", str(base), str(var), "--out", str(out), "--no-plots", "--json"]
    assert main([*args, "--bootstrap", "200", "--profile", f"{var}={elsewhere}"]) == 0
    data = orjson.loads((out / "comparison.json").read_bytes())
    assert data["levels"][0]["efficiency"][0]["allreduce_share"] == [0.5, 0.33]
    capsys.readouterr()

    bad = tmp_path / "bad.json"
    for content, want in (
        (b"{not json", "is not JSON"),
        (b'{"ranks": []}', "not a `specload profile"),
        (b'{"decode_allreduce_ratio": "half"}', "is not a number"),
    ):
        bad.write_bytes(content)
        assert main([*args, "--profile", f"{var}={bad}"]) == 2
        err = capsys.readouterr().err.strip()
        assert len(err.splitlines()) == 1 and str(bad) in err and want in err, err
    for option, want in (
        (f"{tmp_path / 'nowhere'}={elsewhere}", "is not one of the compared directories"),
        (str(elsewhere), "expected DIR=FILE"),
        (f"{var}={tmp_path / 'missing.json'}", "no such profile report"),
    ):
        assert main([*args, "--profile", option]) == 2
        err = capsys.readouterr().err.strip()
        assert len(err.splitlines()) == 1 and want in err, err
    # a broken profile.json beside the results is named too
    (var / "profile.json").write_bytes(b"[]")
    with pytest.raises(UsageError, match=r"profile\.json: not a `specload profile"):
        load_run(var)
