"""Bad flags give one line naming the flag, exit status 2 (no server is started)."""

from __future__ import annotations

import argparse

import pytest

from simulator.costmodel import CostModel
from simulator.variants import PRESETS
from specload.cli import main
from specload.commands.sim import add_arguments, build_config

pytestmark = pytest.mark.unit


@pytest.mark.parametrize(
    ("args", "needle"),
    [
        (["--variant", "medusa"], "--variant 'medusa'"),
        (["--time-scale", "0"], "--time-scale"),
        (["--tp", "0"], "--tp 0"),
        (["--load-time", "soon"], "--load-time"),
        (["--fault-rate", "http500=2"], "--fault-rate 'http500=2'"),
        (["--fault-rate", "explode=0.1"], "unknown kind 'explode'"),
        (["--cost", "warp_factor=9"], "--cost warp_factor=9"),
        (["--cost", "step_fixed_s=abc"], "--cost step_fixed_s=abc"),
        (["--spec", "acceptance=coding:x"], "--spec acceptance"),
        (["--spec", "nonsense"], "--spec 'nonsense'"),
        (["--reasoning-field", "thoughts"], "--reasoning-field"),
        (["--allreduce-kernel", "mpi"], "--allreduce-kernel 'mpi'"),
        (["--timing", "fixed", "--fixed-tokens-per-chunk", "0"], "--fixed-tokens-per-chunk"),
        (["--timing", "fixed", "--fixed-itl", "-1"], "--fixed-itl"),
        (["--port", "70000"], "--port 70000"),
        (["--max-num-seqs", "0"], "--max-num-seqs 0"),
        # vLLM refuses per-request spec-decode metrics without speculation
        (["--per-request-spec-decode-metrics", "summary"],
         "--per-request-spec-decode-metrics summary: requires speculative decoding"),
        (["--variant", "ngram", "--num-speculative-tokens", "0",
          "--per-request-spec-decode-metrics", "detailed"], "--variant ngram does not speculate"),
        (["--variant", "eagle3", "--timing", "fixed", "--per-request-spec-decode-metrics",
          "summary"], "--timing fixed does not speculate"),
    ],
)  # fmt: skip
def test_bad_flags_are_one_line_errors(
    args: list[str], needle: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["sim", *args]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("specload: error: ")
    assert needle in err


@pytest.mark.parametrize(
    "args",
    [
        ["--port", "abc"],
        ["--variant", "ngram", "--per-request-spec-decode-metrics", "full"],
        ["--dev-mode", "maybe"],
    ],
)
def test_argparse_errors_are_one_line(args: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exc:
        main(["sim", *args])
    assert exc.value.code == 2
    assert capsys.readouterr().err.count("\n") == 1


def test_spec_metrics_and_dev_mode_options() -> None:
    parser = argparse.ArgumentParser()
    add_arguments(parser)
    default = build_config(parser.parse_args([]))
    assert (default.spec_decode_metrics, default.dev_mode) == ("none", True)
    args = ["--variant", "eagle3", "--per-request-spec-decode-metrics", "detailed"]
    config = build_config(parser.parse_args([*args, "--dev-mode", "off"]))
    assert (config.spec_decode_metrics, config.dev_mode) == ("detailed", False)


def test_overrides_apply() -> None:
    cost = CostModel().with_overrides({"allreduce_hop_latency_s": "1e-5", "layers": "30"})
    assert cost.layers == 30 and cost.allreduce_s(1) > 14e-5
    ngram = PRESETS["ngram"].with_overrides(
        {"acceptance": "coding:0.9", "num_speculative_tokens": "3"}
    )
    assert (
        ngram.acceptance["coding"] == 0.9
        and ngram.acceptance["math"] == PRESETS["ngram"].acceptance["math"]
    )
    assert ngram.position_acceptance("coding") == pytest.approx([0.9, 0.9 * 0.85, 0.9 * 0.85**2])
    assert PRESETS["ngram"].speculative_config() == (
        "SpeculativeConfig(method='ngram', model=None, num_spec_tokens=5)"
    )
    assert PRESETS["baseline"].speculative_config() == "None"


@pytest.mark.parametrize(
    ("args", "needle"),
    [
        (["--cost", "step_fixed_s=inf"], "--cost step_fixed_s=inf: must be a number in [0, 10]"),
        (["--cost", "step_fixed_s=nan"], "--cost step_fixed_s=nan: must be a number in [0, 10]"),
        (["--cost", "compute_s_per_token=1e308"], "in [0, 10] (seconds)"),
        (["--cost", "memory_bandwidth_Bps=0"], "memory_bandwidth_Bps=0: must be a number in (0,"),
        (["--cost", "allreduce_bus_Bps=inf"], "allreduce_bus_Bps=inf"),
        (["--cost", "tp=100000"], "--cost tp=100000: must be an integer in [1, 1024]"),
        (["--cost", "experts_per_token=500"], "at most routed_experts (384)"),
        (["--spec", "acceptance=2"], "--spec acceptance=2: must be a number in [0, 1]"),
        (["--spec", "acceptance=nan"], "--spec acceptance=nan: must be a number in [0, 1]"),
        (["--spec", "acceptance=coding:inf"], "--spec acceptance=coding:inf: must be"),
        (["--spec", "proposal_rate=math:1.5"], "--spec proposal_rate=math:1.5: must be"),
        (["--variant", "ngram", "--spec", "num_speculative_tokens=100000"],
         "--spec num_speculative_tokens=100000: must be an integer in [0, 32]"),
        (["--num-speculative-tokens", "100000"],
         "--num-speculative-tokens 100000: must be an integer in [0, 32]"),
        (["--num-speculative-tokens", "-1"], "--num-speculative-tokens -1"),
        (["--spec", "acceptance_decay=inf"], "--spec acceptance_decay=inf: must be"),
        (["--spec", "acceptance_decay=1.5"], "in [0, 1]"),
        (["--spec", "draft_step_s=nan"], "--spec draft_step_s=nan"),
        (["--spec", "prompt_lookup_min=9"], "at most prompt_lookup_max (4)"),
        (["--spec", "method=medusa"], "--spec method=medusa: must be one of ngram, eagle3"),
        (["--load-time", "1e308"], "--load-time 1e308: must be a number in [0, 86400]"),
        (["--stall-seconds", "1e308"], "--stall-seconds 1e308: must be"),
        (["--degrade-after", "1e9"], "--degrade-after 1e9: must be"),
        (["--degrade-factor", "nan"], "--degrade-factor nan: must be a number in (0, 1000]"),
        (["--degrade-factor", "inf"], "--degrade-factor inf"),
        (["--time-scale", "1e308"], "--time-scale 1e+308: must be a number in (0, 10000]"),
        (["--time-scale", "nan"], "--time-scale nan"),
        (["--tp", "100000"], "--tp 100000: must be an integer in [1, 1024]"),
        (["--max-model-len", "1000000000000"], "--max-model-len 1000000000000: must be"),
        (["--kv-cache-tokens", "1000000000000000"], "--kv-cache-tokens"),
        (["--timing", "fixed", "--fixed-itl", "1e308"], "--fixed-itl 1e308: must be"),
        (["--timing", "fixed", "--fixed-content-tokens", "1000000000"],
         "--fixed-content-tokens 1000000000: must be an integer in [0, 10000000]"),
    ],
)  # fmt: skip
def test_unbounded_numbers_are_one_line_errors_naming_the_limit(
    args: list[str], needle: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["sim", *args]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("specload: error: "), err
    assert needle in err, err


def test_values_at_the_limits_are_accepted() -> None:
    cost = CostModel().with_overrides({"step_fixed_s": "10", "memory_bandwidth_Bps": "1e16"})
    assert cost.step_fixed_s == 10.0
    ngram = PRESETS["ngram"].with_overrides(
        {"acceptance": "1", "num_speculative_tokens": "32", "acceptance_decay": "1"}
    )
    assert ngram.num_speculative_tokens == 32 and set(ngram.acceptance.values()) == {1.0}
