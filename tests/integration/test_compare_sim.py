"""compare on real simulator runs: ngram slower with an interval excluding zero; two runs of
the same variant, no significant difference.

The four sweeps run at the same time, so a busy machine affects them alike; two runs share
each server (so both variants decode the same batch sizes), and the two runs of the same
variant share one server (two simulator processes on a loaded machine get different
CPU shares, and a simulated step that waits for the CPU is a slower step — a real difference
between servers, which is not what this test is about). The simulator runs at only twice the
reference speed with 64-token answers: a client descheduled for a few milliseconds on a busy
machine must not weigh much against a whole answer's decode time."""

from __future__ import annotations

import pytest

from specload.cli import main
from specload.compare.model import ALL, SAME, SLOWER, compare_runs, load_run

pytestmark = pytest.mark.integration

SIM = ["--time-scale", "2"]
RUN = [
    "--concurrency",
    "2",
    # No warm-up, so no random start spread: with equal-length requests a closed loop keeps
    # its users' phases through the window, and two clients of one server started out of
    # phase differ by ~6% in TPOT for good (seen: -6.4% and +6.5%, intervals excluding zero).
    "--warmup",
    "0",
    "--duration",
    "8",
    "--max-tokens",
    "64",
    "--prompts",
    "builtin:math",
    "--metrics-address",
    "off",
    "--progress",
    "off",
    "--no-plots",
]


def test_compare_ngram_slower_and_same_variant_same(sweep_sim, specload_popen, tmp_path):
    baseline = sweep_sim(["--variant", "baseline", *SIM])
    ngram = sweep_sim(["--variant", "ngram", *SIM])
    # each server carries two clients, so both variants decode batches of the same size
    sims = {
        "baseline": baseline,
        "baseline-again": baseline,
        "ngram": ngram,
        "ngram-again": ngram,
    }
    # different prompt orders, so the two clients of one server do not run in lockstep
    procs = {
        name: specload_popen(
            [
                "run",
                "--host",
                sim.url,
                "--variant",
                name,
                "--prompt-seed",
                str(seed),
                "--out",
                str(tmp_path / name),
                *RUN,
            ]
        )
        for seed, (name, sim) in enumerate(sims.items())
    }
    for name, proc in procs.items():
        _, err = proc.communicate(timeout=120)
        assert proc.returncode == 0, (name, err)

    same = compare_runs([load_run(tmp_path / "baseline"), load_run(tmp_path / "baseline-again")])
    cell = same.levels[0].cells[(ALL, "tpot")]
    assert cell.verdicts[1] == SAME, cell.diffs[1]

    comp = compare_runs([load_run(tmp_path / "baseline"), load_run(tmp_path / "ngram")])
    cell = comp.levels[0].cells[(ALL, "tpot")]
    diff = cell.diffs[1]
    assert cell.verdicts[1] == SLOWER, diff
    assert diff.ci_low > 0.02, diff  # the interval excludes zero, by a margin
    assert 0 < comp.levels[0].acceptance[1] < 1 and comp.levels[0].acceptance[0] is None

    # the command line for CI: ngram's regression fails it, the same variant passes
    out = str(tmp_path / "cmp")
    assert (
        main(
            [
                "compare",
                str(tmp_path / "baseline"),
                str(tmp_path / "ngram"),
                "--out",
                out,
                "--no-plots",
                "--fail-on-regression",
                "2",
            ]
        )
        == 1
    )
    assert (
        main(
            [
                "compare",
                str(tmp_path / "baseline"),
                str(tmp_path / "baseline-again"),
                "--out",
                out,
                "--no-plots",
                "--fail-on-regression",
                "5",
            ]
        )
        == 0
    )
