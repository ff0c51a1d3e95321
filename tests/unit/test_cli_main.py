"""The ``specload`` command: help, version, one-line errors with exit status 2."""

from __future__ import annotations

import subprocess
import sys

import pytest

import specload.compare.cli as compare_cli
from specload import __version__
from specload.cli import SUBCOMMANDS, main
from specload.errors import UsageError

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
