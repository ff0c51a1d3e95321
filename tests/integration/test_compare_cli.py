"""``specload compare`` and ``specload results repair`` as real processes.

Hand-built runs for the refusals (one stderr line, exit 2, no traceback); then a real
``specload run`` against the simulator killed with SIGKILL inside its second level,
repaired, and compared.
"""

from __future__ import annotations

import signal
import time

import orjson
import pytest

from specload.results import read_requests, read_summary
from tests.fixtures.results import make_run

pytestmark = pytest.mark.integration


def _one_line_error(result) -> str:
    assert result.returncode == 2, (result.stdout, result.stderr)
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in result.stderr, result.stderr
    return lines[0]


def test_compare_refusals_and_strict_are_one_line(specload_run, tmp_path):
    a = make_run(tmp_path / "a", "baseline", 13.6, levels=(1,), n=60)
    b = make_run(
        tmp_path / "b", "ngram", 15.0, levels=(1,), n=60, seed=2, options={"max_tokens": 1024}
    )
    killed = make_run(tmp_path / "k", "ngram", 15.0, levels=(1,), n=60, seed=3, status="running")
    out = str(tmp_path / "cmp")
    line = _one_line_error(specload_run(["compare", str(a), str(b), "--strict", "--out", out]))
    assert line.startswith("specload: error: compare --strict:") and "max_tokens" in line
    line = _one_line_error(specload_run(["compare", str(a), str(killed), "--out", out]))
    assert "status running" in line and "results repair" in line
    ok = specload_run(["compare", str(a), str(b), "--out", out, "--no-plots", "--json"])
    assert ok.returncode == 0, ok.stderr
    assert "warning: max_tokens differs: baseline 256, ngram 1024" in ok.stderr
    data = orjson.loads((tmp_path / "cmp" / "comparison.json").read_bytes())
    assert data["warnings"] == ["max_tokens differs: baseline 256, ngram 1024"]


def test_killed_sweep_is_repaired_and_compared(sweep_sim, specload_popen, specload_run, tmp_path):
    sim = sweep_sim(["--variant", "baseline", "--time-scale", "10"])
    load = [
        "--host",
        sim.url,
        "--warmup",
        "1",
        "--max-tokens",
        "48",
        "--prompt-seed",
        "1",
        "--metrics-address",
        "off",
        "--progress",
        "off",
        "--no-plots",
    ]
    ref = tmp_path / "ref"
    done = specload_run(
        [
            "run",
            "--variant",
            "baseline",
            "--concurrency",
            "2,4",
            "--duration",
            "3",
            "--out",
            str(ref),
            *load,
        ]
    )
    assert done.returncode == 0, done.stderr
    out = tmp_path / "killed"
    proc = specload_popen(
        [
            "run",
            "--variant",
            "baseline",
            "--concurrency",
            "2,4",
            "--duration",
            "8",
            "--out",
            str(out),
            *load,
        ]
    )
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        if sum(1 for r in read_requests(out) if r.get("step") == "c4") >= 5:
            break
        assert proc.poll() is None, proc.communicate()
        time.sleep(0.1)
    else:
        pytest.fail("no c4 records")
    proc.send_signal(signal.SIGKILL)
    proc.communicate(timeout=30)
    assert read_summary(out)["status"] == "running"

    refused = specload_run(
        ["compare", str(ref), str(out), "--no-plots", "--out", str(tmp_path / "cmp")]
    )
    assert "status running" in _one_line_error(refused)

    repaired = specload_run(["results", "repair", str(out)])
    assert repaired.returncode == 0, repaired.stderr
    summary = read_summary(out)
    assert summary["status"] == "repaired"
    records = read_requests(out)
    by_name = {level["name"]: level for level in summary["levels"]}
    assert set(by_name) == {"c2", "c4"}
    for name, level in by_name.items():
        mine = [r for r in records if r["step"] == name]
        assert level["completed"] == sum(1 for r in mine if r["ok"])
        assert level["completed"] + level["failed"] + level.get("unfinished", 0) == len(mine)
    assert by_name["c2"]["complete"] is True and by_name["c4"]["complete"] is False
    assert by_name["c2"]["duration"] == pytest.approx(8.0, abs=0.5)
    assert 0 < by_name["c4"]["duration"] < 8.0

    cmp_dir = tmp_path / "cmp"
    compared = specload_run(
        [
            "compare",
            str(ref),
            str(out),
            "--no-plots",
            "--allow-incomplete",
            "--out",
            str(cmp_dir),
            "--json",
        ]
    )
    assert compared.returncode == 0, compared.stderr
    data = orjson.loads((cmp_dir / "comparison.json").read_bytes())
    assert any("summary rebuilt from requests.jsonl" in w for w in data["warnings"])
    # two runs of one variant: named by their directories
    assert (
        f"window duration (s) differs: baseline ({ref}) 3, baseline ({out}) 8" in (data["warnings"])
    ), data["warnings"]
    c4 = next(level for level in data["levels"] if level["name"] == "c4")
    assert c4["marks"][1] == ["incomplete"]
    assert not [w for w in data["warnings"] if "disagree" in w], data["warnings"]
