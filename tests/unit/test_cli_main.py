"""The ``specload`` command: help, version, one-line errors with exit status 2."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

import specload.commands.compare as compare_cli
from specload import __version__
from specload.cli import BROKEN_PIPE_EXIT, SUBCOMMANDS, main
from specload.errors import UsageError
from tests.fixtures.results import make_run

pytestmark = pytest.mark.unit


def _run(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "specload", *args],
        check=False,
        capture_output=True,
        text=True,
        timeout=60,
    )


def test_help_lists_every_subcommand() -> None:
    out = _run("--help")
    assert out.returncode == 0
    for sub in SUBCOMMANDS:
        assert sub.name in out.stdout


def test_version() -> None:
    out = _run("--version")
    assert out.returncode == 0
    assert out.stdout.strip() == f"specload {__version__}"


@pytest.mark.parametrize(
    "args",
    [("bogus",), ("--bogus",), ("run", "--no-such-flag"), ("sim", "--port", "notaport"), ()],
)
def test_bad_input_is_one_line_exit_2(args: tuple[str, ...]) -> None:
    out = _run(*args)
    assert out.returncode == 2, out
    lines = out.stderr.strip().splitlines()
    assert len(lines) == 1, out.stderr
    assert lines[0].startswith("specload")
    assert "Traceback" not in out.stderr


def test_usage_error_from_a_subcommand_is_one_line(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    def boom(args: object) -> int:
        raise UsageError("--out: /nowhere is not writable\n(permission denied)")

    monkeypatch.setattr(compare_cli, "run", boom)
    assert main(["compare", "a", "b"]) == 2
    err = capsys.readouterr().err
    assert err == "specload: error: --out: /nowhere is not writable (permission denied)\n"


def _closed_reader(args: list[str], *, read_first_line: bool) -> tuple[int, str]:
    """Run ``specload ARGS`` into a pipe whose reader goes away: at once (before any
    output is written: always a broken pipe), or after one line, like ``| head -1``."""
    proc = subprocess.Popen(
        [sys.executable, "-m", "specload", *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    assert proc.stdout is not None
    if read_first_line:
        proc.stdout.readline()
    proc.stdout.close()
    # communicate() must not touch the closed stdout: gevent's (the suite may run
    # monkey-patched, once Locust is imported) reads every pipe it still holds.
    proc.stdout = None
    try:
        _, err = proc.communicate(timeout=60)
    finally:
        proc.kill()
    return proc.returncode, err


@pytest.mark.parametrize("read_first_line", [False, True])
def test_output_to_a_closed_pipe_ends_quietly(tmp_path: Path, read_first_line: bool) -> None:
    a = make_run(tmp_path / "a", "baseline", 13.6, seed=1, n=40)
    b = make_run(tmp_path / "b", "ngram", 14.5, seed=2, n=40)
    compare = ["compare", str(a), str(b), "--out", str(tmp_path / "cmp"), "--no-plots"]
    for args in (["--help"], ["run", "--help"], [*compare, "--bootstrap", "100"]):
        code, err = _closed_reader(args, read_first_line=read_first_line)
        assert "Traceback" not in err and "BrokenPipe" not in err, (args, err)
        assert err == "", (args, err)
        # 141 (128 + SIGPIPE) when a write met the closed pipe; 0 when all was read first
        # (and for --help, whose writes argparse makes quiet itself).
        if read_first_line or args[-1] == "--help":
            assert code in (0, BROKEN_PIPE_EXIT), (args, code)
        else:
            assert code == BROKEN_PIPE_EXIT, (args, code)
