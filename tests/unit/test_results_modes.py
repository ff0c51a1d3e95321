"""Every result file gets one mode: 0666 less the umask, as any file the user creates
(``requests.jsonl``, ``tokens.jsonl``, ``summary.json``, ``summary.md``, the plots,
``baseline.json``, and compare's ``comparison.md``/``.json`` and plots alike)."""

from __future__ import annotations

import contextlib
import errno
import os
import stat
from collections.abc import Iterator
from pathlib import Path

import pytest

from specload.cli import main
from specload.results import writer as writer_mod
from specload.results.plots import write_plots
from specload.results.report import summary_markdown
from specload.results.writer import SUMMARY_MD_FILE, ResultsWriter, read_summary
from tests.fixtures.results import make_run

pytestmark = pytest.mark.unit


@contextlib.contextmanager
def umask(mask: int) -> Iterator[None]:
    old = os.umask(mask)
    try:
        yield
    finally:
        os.umask(old)


def modes(directory: Path) -> dict[str, int]:
    return {
        str(p.relative_to(directory)): stat.S_IMODE(p.stat().st_mode)
        for p in sorted(directory.rglob("*"))
        if p.is_file()
    }


@pytest.mark.parametrize(("mask", "mode"), [(0o022, 0o644), (0o077, 0o600), (0o002, 0o664)])
def test_every_file_of_a_run_baseline_and_comparison_has_the_umasks_mode(
    tmp_path: Path, mask: int, mode: int, capsys: pytest.CaptureFixture[str]
) -> None:
    with umask(mask):
        a = make_run(tmp_path / "a", "baseline", 13.6, seed=1, levels=(1, 2), n=40)
        b = make_run(tmp_path / "b", "ngram", 12.0, seed=2, levels=(1, 2), n=40)
        writer = ResultsWriter(a, spare_bytes=4096)
        writer.append_tokens({"step": "c1", "prompt_token_ids": [1], "output_token_ids": [2]})
        writer.write_summary(read_summary(a))
        writer.close()
        writer.write_text(SUMMARY_MD_FILE, summary_markdown(read_summary(a)))
        write_plots([read_summary(a)], a)
        assert main(["baseline", "export", str(a)]) == 0
        out = tmp_path / "cmp"
        args = ["compare", str(a), str(b), "--out", str(out), "--json", "--bootstrap", "200"]
        assert main(args) == 0
        assert main(args) == 0  # and again: every file replaced
    capsys.readouterr()
    # (at least these: other outputs may join them, and must have the mode too)
    assert set(modes(a)) >= {
        "requests.jsonl",
        "tokens.jsonl",
        "summary.json",
        "summary.md",
        "tpot.png",
        "throughput.png",
        "baseline.json",
    }
    assert set(modes(out)) >= {
        "comparison.md",
        "comparison.json",
        "compare_tpot.png",
        "compare_throughput.png",
    }
    for directory in (a, b, out):
        assert modes(directory) == dict.fromkeys(modes(directory), mode), directory


def test_a_file_from_an_older_version_gets_the_mode_when_replaced(tmp_path: Path) -> None:
    """A 0600 summary.json (what tempfile.mkstemp made) takes the umask's mode once rewritten."""
    with umask(0o022):
        run = make_run(tmp_path / "a", "baseline", 13.6, levels=(1,), n=20)
        (run / "summary.json").chmod(0o600)
        writer = ResultsWriter(run)
        writer.write_summary(read_summary(run))
        writer.close()
    assert modes(run) == {"requests.jsonl": 0o644, "summary.json": 0o644}


def test_the_summary_written_through_the_spare_has_the_mode_too(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """On a full disk the last summary goes into the spare's blocks and is renamed."""

    def full(path: Path, payload: bytes) -> None:
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    with umask(0o027):
        writer = ResultsWriter(tmp_path, spare_bytes=1 << 16)
        writer.append({"step": "c1", "ok": True})
        monkeypatch.setattr(writer_mod, "atomic_write_bytes", full)
        writer.write_summary({"status": "complete", "levels": []})
        assert writer.summary_error is None  # written through the spare
        writer.close()
    assert read_summary(tmp_path)["status"] == "complete"
    assert modes(tmp_path) == {"requests.jsonl": 0o640, "summary.json": 0o640}


def test_no_temporary_file_is_left_when_a_write_fails(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    def broken(fd: int) -> None:
        raise OSError(errno.EIO, os.strerror(errno.EIO))

    monkeypatch.setattr(writer_mod.os, "fsync", broken)
    with pytest.raises(OSError, match="Input/output"):
        writer_mod.atomic_write_bytes(tmp_path / "summary.json", b"{}")
    assert list(tmp_path.iterdir()) == []
