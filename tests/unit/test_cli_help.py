"""Every option of every ``specload`` command has help text, and shows its default.

Walks the parsers themselves (each subcommand's, and the actions of subcommands with
their own subcommands), so an option added without help, or with a default the help
does not show, fails here whatever command it belongs to.
"""

from __future__ import annotations

import argparse
from collections.abc import Iterator
from pathlib import Path

import pytest

from specload.cli import SUBCOMMANDS, _Subcommands, build_parser

pytestmark = pytest.mark.unit

# Actions that print and exit: no default to show.
_NO_DEFAULT = (argparse._HelpAction, argparse._VersionAction)


def _sub_parsers(parser: argparse.ArgumentParser) -> Iterator[tuple[str, argparse.ArgumentParser]]:
    for action in parser._actions:
        if isinstance(action, _Subcommands):
            for name in list(action._name_parser_map):
                yield name, action.load(name)
        elif isinstance(action, argparse._SubParsersAction):
            yield from action.choices.items()


def _all_parsers() -> Iterator[tuple[str, argparse.ArgumentParser]]:
    """(command words, parser) of every command and subcommand, the root included."""
    todo = [("specload", build_parser())]
    while todo:
        words, parser = todo.pop()
        yield words, parser
        todo.extend((f"{words} {name}", sub) for name, sub in _sub_parsers(parser))


def _default_texts(default: object) -> list[str]:
    """Ways a help text may write ``default`` (lower case)."""
    if isinstance(default, bool):
        return ["true", "on", "yes"] if default else ["false", "off", "no"]
    if isinstance(default, float):
        return [f"{default:g}", str(default)]
    if isinstance(default, (list, tuple)):
        return [",".join(map(str, default)), ", ".join(map(str, default))]
    if isinstance(default, Path):
        return [str(default)]
    texts = [str(default).lower()]
    try:
        texts.append(f"{float(str(default)):g}")  # "600.0" written as 600
    except ValueError:
        pass
    return texts


def _options() -> Iterator[tuple[str, argparse.ArgumentParser, argparse.Action]]:
    for words, parser in _all_parsers():
        for action in parser._actions:
            if action.option_strings and not isinstance(action, _NO_DEFAULT):
                yield words, parser, action


def test_every_subcommand_is_walked() -> None:
    words = {w for w, _ in _all_parsers()}
    assert {f"specload {sub.name}" for sub in SUBCOMMANDS} <= words
    assert "specload stack up" in words and "specload results repair" in words


def test_every_option_has_help_text() -> None:
    missing = [
        f"{words} {'/'.join(a.option_strings)}"
        for words, _, a in _options()
        if not (a.help or "").strip()
    ]
    assert not missing, "options without help text: " + "; ".join(missing)


def test_every_default_is_in_the_help() -> None:
    missing = []
    for words, parser, action in _options():
        default = action.default
        if default is None or default is False or default in ("", [], (), argparse.SUPPRESS):
            continue
        if action.help == argparse.SUPPRESS:
            continue
        text = parser._get_formatter()._expand_help(action).lower() if action.help else ""
        if "default" not in text or not any(t in text for t in _default_texts(default)):
            missing.append(f"{words} {action.option_strings[-1]} (default {default!r}): {text!r}")
    assert not missing, "help without its default:\n" + "\n".join(missing)


def test_run_help_shows_the_request_timeout_default(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exc:
        build_parser().parse_args(["run", "--help"])
    assert exc.value.code == 0
    out = " ".join(capsys.readouterr().out.split())
    assert "seconds before a request counts as a timeout (default: 600)" in out


def test_help_never_shows_a_secret_default(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("SPECLOAD_API_KEY", "sk-secret-in-env")
    with pytest.raises(SystemExit):
        build_parser().parse_args(["run", "--help"])
    out = " ".join(capsys.readouterr().out.split())
    assert "sk-secret-in-env" not in out
    assert "(default: $SPECLOAD_API_KEY, not shown)" in out
