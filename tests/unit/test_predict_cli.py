"""``specload predict``: options, the JSON shape, bad baselines as one line naming the gap."""

from __future__ import annotations

import argparse

import orjson
import pytest

from specload.commands import predict as cli
from specload.errors import UsageError
from specload.predict.synthetic import LinearCost, make_records, write_synthetic_baseline

LEVELS = [1, 2, 4]


def parse(*argv: str) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="specload predict")
    cli.add_arguments(p)
    return p.parse_args(list(argv))


def run(*argv: str) -> int:
    return cli.run(parse(*argv))


NGRAM = (
    "--num-speculative-tokens",
    "3",
    "--prompt-lookup-min",
    "2",
    "--prompt-lookup-max",
    "4",
    "--bootstrap",
    "200",
)


@pytest.fixture
def baseline(tmp_path):
    recs = make_records(24, levels=LEVELS, seed=2, min_tokens=80, max_tokens=300)
    return write_synthetic_baseline(tmp_path / "base", recs, levels=LEVELS, cost=LinearCost())


def test_json_shape(baseline, capsys):
    assert run(str(baseline), *NGRAM, "--json") == 0
    data = orjson.loads(capsys.readouterr().out)
    for key in (
        "method",
        "num_speculative_tokens",
        "prompt_lookup_min",
        "prompt_lookup_max",
        "levels",
        "totals",
        "k_schedule",
        "fit",
        "plan",
    ):
        assert key in data
    assert (data["method"], data["num_speculative_tokens"]) == ("ngram", 3)
    assert (data["prompt_lookup_min"], data["prompt_lookup_max"]) == (2, 4)
    assert [lv["concurrency"] for lv in data["levels"]] == LEVELS
    for lv in data["levels"]:
        for key in (
            "concurrency",
            "acceptance_rate",
            "mean_acceptance_length",
            "position_acceptance",
            "baseline_median_tpot_ms",
            "predicted_median_tpot_ms",
            "predicted_low_ms",
            "predicted_high_ms",
            "speedup",
            "verdict",
        ):
            assert key in lv
        assert len(lv["position_acceptance"]) == 3
        assert lv["predicted_low_ms"] <= lv["predicted_median_tpot_ms"] <= lv["predicted_high_ms"]
        assert lv["verdict"] in ("faster", "slower", "within noise")
    assert set(data["totals"]) >= {"drafts", "draft_tokens", "accepted_tokens"}
    assert data["totals"]["drafts"] == sum(lv["drafts"] for lv in data["levels"])
    assert sorted(data["k_schedule"]["ks"]) == list(range(1, 9))
    # k = 3 puts up to c·4 tokens in a step; the baseline measured steps of 1, 2 and 4
    steps = {
        lv["concurrency"]: (lv["step_tokens_max"], lv["extrapolated"]) for lv in data["levels"]
    }
    assert steps == {1: (4, False), 2: (8, True), 4: (16, True)}


def test_markdown_and_out(baseline, tmp_path, capsys):
    out = tmp_path / "pred"
    assert run(str(baseline), *NGRAM, "--out", str(out)) == 0
    text = capsys.readouterr().out
    assert text.startswith("# Forecast: n-gram, k=3, prompt_lookup 2..4")
    assert "## Step-cost curve" in text and "## Best k per concurrency" in text
    assert (out / "prediction.md").read_text().startswith("# Forecast")
    assert orjson.loads((out / "prediction.json").read_bytes())["format"] == "specload-predict/1"
    assert (out / "prediction.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def _json(capsys, *argv):
    assert run(*argv, "--json") == 0
    return orjson.loads(capsys.readouterr().out)


def test_the_break_even_step_overhead_is_where_the_forecast_meets_the_baseline(baseline, capsys):
    # --step-overhead-ms 0: the bare curve (no engine-path terms), against which the
    # break-even overhead is stated
    plain = _json(capsys, str(baseline), *NGRAM, "--step-overhead-ms", "0")
    for lv in plain["levels"]:
        x = lv["break_even_step_overhead_ms"]
        assert x > 0  # cheap drafts (LinearCost): the variant pays without overhead
        at = _json(capsys, str(baseline), *NGRAM, "--step-overhead-ms", f"{x:.9f}")
        same = next(v for v in at["levels"] if v["concurrency"] == lv["concurrency"])
        assert same["predicted_median_tpot_ms"] == pytest.approx(lv["baseline_median_tpot_ms"])
        assert same["predicted_median_tpot_ms"] > lv["predicted_median_tpot_ms"]
        assert at["step_overhead_ms"] == pytest.approx(x)


def test_measured_beside_predicted(baseline, capsys):
    # The baseline measured as if it were the variant: its medians are the baseline's, so
    # the overhead that makes the forecast meet them is each level's break-even overhead.
    data = _json(capsys, str(baseline), *NGRAM, "--measured", str(baseline))
    rows = {r["concurrency"]: r for r in data["measured"]["levels"]}
    assert sorted(rows) == LEVELS
    for lv in data["levels"]:
        row = rows[lv["concurrency"]]
        assert row["measured_median_tpot_ms"] == lv["baseline_median_tpot_ms"]
        assert row["predicted_median_tpot_ms"] == lv["predicted_median_tpot_ms"]
        want = lv["predicted_median_tpot_ms"] / lv["baseline_median_tpot_ms"] - 1
        assert row["error_ratio"] == pytest.approx(want)
        assert row["measured_speedup"] == pytest.approx(1.0)
        assert row["implied_step_overhead_ms"] == pytest.approx(
            lv["break_even_step_overhead_ms"], rel=1e-6
        )
    assert data["measured"]["totals"] == {}  # the synthetic baseline has no server counters
    assert run(str(baseline), *NGRAM, "--measured", str(baseline)) == 0
    assert "## Predicted against measured" in capsys.readouterr().out


def test_measured_must_be_a_results_directory(baseline, tmp_path):
    with pytest.raises(UsageError, match=r"^--measured .*nope: no such results directory$"):
        run(str(baseline), *NGRAM, "--measured", str(tmp_path / "nope"))


def test_draft_method(baseline, capsys):
    assert (
        run(
            str(baseline),
            "--method",
            "draft",
            "--num-speculative-tokens",
            "3",
            "--draft-cost-ratio",
            "0.1",
            "--json",
        )
        == 0
    )
    data = orjson.loads(capsys.readouterr().out)
    assert data["method"] == "draft"
    assert all(lv["break_even_mean_acceptance_length"] > 1 for lv in data["levels"])


def test_no_tokens_file(baseline):
    (baseline / "tokens.jsonl").unlink()
    with pytest.raises(UsageError) as info:
        run(str(baseline), *NGRAM)
    msg = str(info.value)
    assert "no tokens.jsonl" in msg and "--record-token-ids" in msg and "--plan" in msg


def test_one_level_only(tmp_path):
    recs = make_records(6, levels=[4], seed=2, min_tokens=50, max_tokens=80)
    base = write_synthetic_baseline(tmp_path / "b", recs, levels=[4])
    with pytest.raises(UsageError, match=r"one level only \(c4\).*--plan would add levels 1,2,8"):
        run(str(base), *NGRAM)


def test_level_without_completed_requests(baseline):
    s = orjson.loads((baseline / "summary.json").read_bytes())
    s["levels"][2]["completed"] = 0
    s["levels"][2]["median_tpot_ms"] = None
    (baseline / "summary.json").write_bytes(orjson.dumps(s))
    with pytest.raises(UsageError, match="level c4 has no completed requests"):
        run(str(baseline), *NGRAM)


def test_plan_works_on_a_bad_baseline(baseline, capsys):
    (baseline / "tokens.jsonl").unlink()
    assert run(str(baseline), "--plan", "--json") == 0
    data = orjson.loads(capsys.readouterr().out)
    assert data["measured"] == LEVELS
    assert data["extra_levels"] == [8, 16, 32, 36]  # doubling up to c4 x (1 + 8) = 36
    assert any("tokens.jsonl" in p for p in data["problems"])
    assert run(str(baseline), "--plan", "--num-speculative-tokens", "3") == 0
    assert "extra levels" in capsys.readouterr().out


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (("--prompt-lookup-min", "2"), "--num-speculative-tokens: required"),
        (("--num-speculative-tokens", "0"), "--num-speculative-tokens 0"),
        (
            (
                "--num-speculative-tokens",
                "3",
                "--prompt-lookup-min",
                "5",
                "--prompt-lookup-max",
                "4",
            ),
            "--prompt-lookup-min 5: must be at most",
        ),
        (("--num-speculative-tokens", "3", "--draft-cost-ratio", "0.1"), "only with --method"),
        (("--method", "draft", "--num-speculative-tokens", "3"), "--draft-cost-ratio"),
        (("--num-speculative-tokens", "3", "--concurrency", "1,,2"), "--concurrency"),
        (("--num-speculative-tokens", "3", "--confidence", "1.5"), "--confidence"),
        (("--num-speculative-tokens", "3", "--step-overhead-ms", "-1"), "--step-overhead-ms -1"),
        (("--num-speculative-tokens", "3", "--step-overhead-ms", "nan"), "--step-overhead-ms nan"),
    ],
)
def test_bad_options(baseline, argv, message):
    with pytest.raises(UsageError, match=message):
        run(str(baseline), *argv)


def test_no_such_directory(tmp_path):
    with pytest.raises(UsageError, match="no such results directory"):
        run(str(tmp_path / "nope"), *NGRAM)


def test_lookup_defaults_follow_vllm():
    assert cli.lookup_window(None, None) == (5, 5)
    assert cli.lookup_window(None, 4) == (4, 4)
    assert cli.lookup_window(2, None) == (2, 2)


def test_a_baseline_on_a_warm_prefix_cache_is_named(baseline, capsys):
    plain = _json(capsys, str(baseline), *NGRAM)
    assert not any("prefix cache" in w for w in plain["warnings"])
    summary_path = baseline / "summary.json"
    summary = orjson.loads(summary_path.read_bytes())
    summary["levels"][0]["server"] = {"prefix_cache_hit_ratio": 0.45}
    summary["levels"][1]["server"] = {"prefix_cache_hit_ratio": 0.05}  # below 10%: not named
    summary_path.write_bytes(orjson.dumps(summary))
    warm = _json(capsys, str(baseline), *NGRAM)
    (warning,) = [w for w in warm["warnings"] if "prefix cache" in w]
    name = summary["levels"][0]["name"]
    assert f"({name} 45% of prompt tokens)" in warning
