"""``specload run`` whose results disk fills up mid-run (a small tmpfs, filled by another
file): one line and exit 5, whole lines only in requests.jsonl, and summary.json says
``failed`` with the reason — written into the spare file the writer allocated up front."""

from __future__ import annotations

import contextlib
import subprocess
import time
import uuid
from pathlib import Path

import orjson
import pytest

from specload.results import read_summary

pytestmark = pytest.mark.integration

SIM = ["--time-scale", "10"]
LOAD = ["--metrics-address", "off", "--progress", "plain", "--no-plots", "--max-tokens", "64"]


@pytest.fixture
def small_disk(tmp_path: Path):
    mount = tmp_path / f"disk-{uuid.uuid4().hex[:8]}"
    mount.mkdir()
    done = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", "size=4m", "tmpfs", str(mount)],
        capture_output=True,
        text=True,
        check=False,
    )
    if done.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {done.stderr.strip() or done.returncode}")
    try:
        yield mount
    finally:
        subprocess.run(["umount", "-l", str(mount)], check=False)


def fill(path: Path) -> None:
    """Take every byte left on ``path``'s filesystem."""
    with contextlib.suppress(OSError), path.open("wb", buffering=0) as fh:
        while True:
            fh.write(b"\0" * 65536)
    with contextlib.suppress(OSError), path.open("ab", buffering=0) as fh:
        while True:
            fh.write(b"\0" * 512)


def test_a_full_disk_ends_the_run_in_one_line_with_whole_records(
    sweep_sim, specload_popen, small_disk
):
    sim = sweep_sim(["--variant", "baseline", *SIM])
    out = small_disk / "run"
    proc = specload_popen(
        [
            "run",
            "--host",
            sim.url,
            "--concurrency",
            "4",
            "--warmup",
            "0",
            "--duration",
            "60",
            "--out",
            str(out),
            *LOAD,
        ]
    )
    requests = out / "requests.jsonl"
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline and (
        not requests.exists() or requests.read_bytes().count(b"\n") < 10
    ):
        assert proc.poll() is None, proc.communicate()[1][-3000:]
        time.sleep(0.1)
    fill(small_disk / "filler")
    stdout, stderr = proc.communicate(timeout=60)
    assert proc.returncode == 5, stdout[-2000:] + stderr[-2000:]
    assert "Traceback" not in stdout + stderr and "Logging error" not in stderr, stderr[-3000:]
    stopped = [line for line in stdout.splitlines() if "stopped:" in line]
    assert len(stopped) == 1 and "disk full: cannot write requests.jsonl" in stopped[0], stdout
    raw = requests.read_bytes()
    assert raw.endswith(b"\n")
    records = [orjson.loads(line) for line in raw.splitlines()]  # every line whole
    assert len(records) >= 10
    summary = read_summary(out)
    assert summary["status"] == "failed", summary["status"]
    assert summary["stop_reason"].startswith(
        "disk full: cannot write requests.jsonl (No space left on device) after "
    )
    assert summary["ended_at"] is not None  # the final summary, not the last one before
    assert not (out / ".summary.json.spare").exists()
