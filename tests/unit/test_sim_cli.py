"""Bad flags give one line naming the flag, exit status 2 (no server is started)."""

from __future__ import annotations

import pytest

from simulator.costmodel import CostModel
from simulator.variants import PRESETS
from specload.cli import main

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
    ],
)
def test_bad_flags_are_one_line_errors(
    args: list[str], needle: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["sim", *args]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("specload: error: ")
    assert needle in err


def test_argparse_errors_are_one_line(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exc:
        main(["sim", "--port", "abc"])
    assert exc.value.code == 2
    assert capsys.readouterr().err.count("\n") == 1


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
