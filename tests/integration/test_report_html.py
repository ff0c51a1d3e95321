"""``specload report`` on real simulator runs, read back in headless Chromium.

Two variants (baseline, ngram) on their own simulators, two levels, a few short requests
each (every request hits max_tokens inside its reasoning: the truncation warnings must be
on the page), an objective (``--slo``) and a prediction of ngram from the baseline
(``specload predict --measured``). The known truth is what the runs wrote: every figure on
the page is looked up in ``summary.json`` / ``prediction.json``, every verdict in
:func:`specload.compare.model.compare_runs` run here with the report's defaults.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from specload.cli import main
from specload.compare.model import ALL, compare_runs, load_run
from tests.fixtures.browser import Browser, Page
from tests.fixtures.sim import start_sim
from tests.fixtures.sweep import run_specload, specload_cmd

# Its simulator sweeps must fill every category's row in short windows: alone under pytest -n.
pytestmark = [pytest.mark.integration, pytest.mark.serial]

SIM = ["--load-time", "0", "--time-scale", "4"]
LEVELS = (1, 2)
RUN = [
    "--concurrency",
    ",".join(str(c) for c in LEVELS),
    "--warmup",
    "0",
    "--requests",
    "12",
    "--max-tokens",
    "32",
    "--prompts",
    "builtin:math,coding",
    "--slo",
    "tpot=50ms",
    "--record-token-ids",
    "--metrics-address",
    "off",
    "--progress",
    "off",
    "--no-plots",
]
VARIANTS = ("baseline", "ngram")


@pytest.fixture(scope="module")
def results(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Path]]:
    """The two runs (at the same time, on their own simulators) and the prediction."""
    root = tmp_path_factory.mktemp("report")
    sims = [start_sim(["--variant", v, *SIM], root / f"sim-{v}") for v in VARIANTS]
    try:
        procs = {
            v: subprocess.Popen(
                specload_cmd(
                    "run", "--host", sim.url, "--variant", v, "--out", str(root / v), *RUN
                ),
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                text=True,
            )
            for v, sim in zip(VARIANTS, sims, strict=True)
        }
        try:
            for v, proc in procs.items():
                _, err = proc.communicate(timeout=120)
                assert proc.returncode == 0, (v, err[-2000:])
        finally:
            for proc in procs.values():
                if proc.poll() is None:
                    proc.kill()
                    proc.wait(timeout=10)
    finally:
        for sim in sims:
            sim.stop()
    predicted = run_specload(
        [
            "predict",
            str(root / "baseline"),
            "--num-speculative-tokens",
            "3",
            "--measured",
            str(root / "ngram"),
            "--bootstrap",
            "200",
            "--no-plots",
            "--out",
            str(root / "prediction"),
        ]
    )
    assert predicted.returncode == 0, predicted.stderr[-2000:]
    yield {
        "baseline": root / "baseline",
        "ngram": root / "ngram",
        "prediction": root / "prediction" / "prediction.json",
        "root": root,
    }


def _summary(path: Path) -> dict[str, Any]:
    data: dict[str, Any] = json.loads((path / "summary.json").read_text())
    return data


def _rows(page: Page) -> list[list[str]]:
    """The page's table rows as rendered (innerText: cells split by tabs)."""
    return [line.split("\t") for line in page.text.splitlines() if "\t" in line]


def _row(rows: list[list[str]], *first: str) -> list[str]:
    found = [r for r in rows if [c.strip() for c in r[: len(first)]] == list(first)]
    assert len(found) == 1, (first, found)
    return [c.strip() for c in found[0]]


def _close(cell: str, truth: float | None, digits: int) -> None:
    if truth is None:
        assert cell == "-"
    else:
        assert abs(float(cell) - truth) <= 0.51 * 10**-digits, (cell, truth)


def _artifact(path: Path) -> None:
    where = os.environ.get("SPECLOAD_ARTIFACTS")
    if where:
        Path(where).mkdir(parents=True, exist_ok=True)
        shutil.copy(path, Path(where) / path.name)


def test_report_of_two_runs_in_chromium(
    results: dict[str, Path], browser: Browser, tmp_path: Path
) -> None:
    out = tmp_path / "report.html"
    done = run_specload(
        [
            "report",
            str(results["baseline"]),
            str(results["ngram"]),
            "--prediction",
            str(results["prediction"]),
            "--out",
            str(out),
        ]
    )
    assert done.returncode == 0, done.stderr
    assert f"report written to {out}" in done.stdout
    shot = tmp_path / "report-two-runs.png"
    page = browser.render(out.as_uri(), screenshot=shot, wait_s=0.3)
    _artifact(shot)
    assert shot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"

    # Self-contained: the file itself is the only request; nothing logged an error.
    assert page.requests == [out.as_uri()]
    assert page.console_errors == []
    assert "<script" not in page.html.lower()

    rows = _rows(page)
    text = " ".join(page.text.split())
    # Verdicts: the comparison model's, with its defaults (seeded bootstrap).
    comp = compare_runs([load_run(results["baseline"]), load_run(results["ngram"])])
    assert [lc.name for lc in comp.levels] == [f"c{c}" for c in LEVELS]
    for lc in comp.levels:
        tpot, tok = lc.cells[(ALL, "tpot")], lc.cells[(ALL, "output_throughput")]
        row = _row(rows, lc.label)
        assert row[1] == f"{tpot.n[0]} / {tpot.n[1]}"
        assert row[6] == tpot.verdicts[1], (row, tpot.diffs[1])
        assert row[11] == tok.verdicts[1], (row, tok.diffs[1])
        diff = tpot.diffs[1]
        assert diff is not None
        assert row[4] == f"{diff.rel * 100:+.1f}%"
        assert tpot.verdicts[1] in ("faster", "slower", "no significant difference")
    # The warnings of the comparison, every one (truncated reasoning among them).
    assert any("ended inside reasoning at max_tokens" in w for w in comp.warnings)
    for warning in comp.warnings:
        assert " ".join(warning.split()) in text

    # Every level's figures per category, as summary.json has them.
    for variant in VARIANTS:
        summary = _summary(results[variant])
        for level in summary["levels"]:
            for cat, st in [(ALL, level), *level["categories"].items()]:
                row = _row(rows, level["name"], variant, cat)
                assert int(row[3]) == st["completed"]
                _close(row[5], st["median_ttft_ms"], 2)
                _close(row[7], st["median_ttfct_ms"], 2)
                _close(row[9], st["median_tpot_ms"], 2)
                _close(row[10], st["p90_tpot_ms"], 2)
                _close(row[11], st["median_itl_ms"], 2)
                _close(row[13], st["output_throughput"], 1)
                assert row[14].startswith(f"{st['reasoning_truncated']} of {st['completed']}")
            # SLO attainment and goodput
            slo = _row(rows, level["name"], variant, "tpot ≤ 50 ms")
            assert slo[3] == f"{level['slo_attainment_ratio'] * 100:.1f}%"
            _close(slo[4], level["request_goodput"], 2)

    # Acceptance per channel where the run knows it (ngram speculates, baseline does not).
    ngram = _summary(results["ngram"])
    for level in ngram["levels"]:
        spec = level["spec_decode"]
        for channel in ("reasoning", "content"):
            row = _row(rows, level["name"], "ngram", channel)
            _close(row[4], spec[channel]["mean_acceptance_length"], 2)
            assert row[5] == f"{spec[channel]['accepted_tokens']:.0f}"
        server = _row(rows, level["name"], "ngram", "all (server counters)")
        assert server[3] == f"{level['server']['spec_decode_acceptance_rate']:.3f}"
    assert not [r for r in rows if r[1:3] == ["baseline", "reasoning"]]

    # Predicted beside measured: prediction.json's numbers, ngram's measured TPOT.
    prediction = json.loads(results["prediction"].read_text())
    measured = {lv["concurrency"]: lv for lv in ngram["levels"]}
    for lv in prediction["levels"]:
        row = _row(rows, str(lv["concurrency"]))
        _close(row[2], lv["predicted_median_tpot_ms"], 2)
        _close(row[4], measured[lv["concurrency"]]["median_tpot_ms"], 2)
        err = lv["predicted_median_tpot_ms"] / measured[lv["concurrency"]]["median_tpot_ms"] - 1
        assert row[5] == f"{err * 100:+.1f}%"
    assert "checked against ngram" in text

    # Charts: x ticks at the measured levels only, n per level.
    ticks = page.html.count('class="xtick" data-level="')
    assert ticks > 0
    for c in LEVELS:
        assert f'class="xtick" data-level="{c}"' in page.html
    assert 'class="xtick" data-level="3"' not in page.html
    assert "<svg" in page.html and "http://" not in page.html.replace(
        'xmlns="http://www.w3.org/2000/svg"', ""
    )


def test_report_of_one_run(results: dict[str, Path], browser: Browser, tmp_path: Path) -> None:
    work = tmp_path / "ngram"
    shutil.copytree(results["ngram"], work)
    done = run_specload(["report", str(work)])
    assert done.returncode == 0, done.stderr
    out = work / "report.html"  # the default for one directory
    assert out.is_file()
    shot = tmp_path / "report-one-run.png"
    page = browser.render(out.as_uri(), screenshot=shot, wait_s=0.2)
    _artifact(shot)
    assert page.requests == [out.as_uri()]
    assert page.console_errors == []
    rows = _rows(page)
    for level in _summary(work)["levels"]:
        row = _row(rows, f"concurrency {level['concurrency']} ({level['name']})")
        assert int(row[1]) == level["completed"]
        _close(row[3], level["median_tpot_ms"], 2)
        _close(row[4], level["output_throughput"], 1)
    assert "no verdict without a reference" in page.text


def test_compare_writes_comparison_html(
    results: dict[str, Path], browser: Browser, tmp_path: Path
) -> None:
    out = tmp_path / "cmp"
    code = main(
        [
            "compare",
            str(results["baseline"]),
            str(results["ngram"]),
            "--out",
            str(out),
            "--no-plots",
        ]
    )
    assert code == 0
    assert (out / "comparison.md").is_file()
    page = browser.render((out / "comparison.html").as_uri(), wait_s=0.2)
    assert page.requests == [(out / "comparison.html").as_uri()]
    assert page.console_errors == []
    comp = compare_runs([load_run(results["baseline"]), load_run(results["ngram"])])
    rows = _rows(page)
    for lc in comp.levels:
        assert _row(rows, lc.label)[6] == lc.cells[(ALL, "tpot")].verdicts[1]
    # The same verdict lines as comparison.md
    md = (out / "comparison.md").read_text()
    for lc in comp.levels:
        assert f"at {lc.label}: median TPOT" in md


@pytest.mark.parametrize(
    ("case", "message"),
    [
        ("missing", "no such results directory"),
        ("empty", "no summary.json (is it a results directory?)"),
        ("file", "not a directory"),
    ],
)
def test_bad_input_one_line_exit_2(tmp_path: Path, case: str, message: str) -> None:
    target = tmp_path / case
    if case == "empty":
        target.mkdir()
    elif case == "file":
        target.write_text("not a results directory")
    done = run_specload(["report", str(target)])
    assert done.returncode == 2
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1, done.stderr
    assert lines[0].startswith("specload: error: ")
    assert str(target) in lines[0] and message in lines[0]
    assert "Traceback" not in done.stderr
    assert not (tmp_path / "report.html").exists()
