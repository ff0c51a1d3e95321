"""The ``specload`` command and its subcommands.

Each subcommand lives in its own module, imported only when it is used, and
exposes two functions::

    def add_arguments(parser: argparse.ArgumentParser) -> None: ...
    def run(args: argparse.Namespace) -> int: ...

The table below names each module and its one-line help, so ``specload --help``
lists the subcommands without importing any of them (they pull in Locust,
gevent, httpx, matplotlib…); a subcommand's module is imported when the
subcommand is chosen, which includes its own ``--help``.

Errors a user can cause raise :class:`specload.errors.UsageError`; they are
printed as one line and exit with status 2 (argparse's own errors too). Output
to a pipe whose reader has gone (``specload compare … | head``) ends the command
quietly with status 141 (128 + SIGPIPE, as the shell reports a program the signal
ended; ``set -o pipefail`` scripts see the same status as for ``yes | head``).
"""

from __future__ import annotations

import argparse
import importlib
import os
import select
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, NoReturn, Protocol, cast

from specload import __version__
from specload.errors import UsageError

PROG = "specload"


class _Command(Protocol):
    def add_arguments(self, parser: argparse.ArgumentParser) -> None: ...
    def run(self, args: argparse.Namespace) -> int: ...


@dataclass(frozen=True)
class Subcommand:
    name: str
    module: str
    help: str

    def load(self) -> _Command:
        return cast(_Command, importlib.import_module(self.module))


# Order is the order shown by --help.
SUBCOMMANDS: tuple[Subcommand, ...] = (
    Subcommand("demo", "specload.commands.demo", "run the whole story on simulated vLLM variants"),
    Subcommand("run", "specload.commands.run", "headless sweep over concurrency levels"),
    Subcommand("compare", "specload.commands.compare", "compare result directories of variants"),
    Subcommand(
        "report", "specload.commands.report", "one self-contained HTML report of result dirs"
    ),
    Subcommand(
        "baseline", "specload.commands.baseline", "export a baseline for the exporter and alerts"
    ),
    Subcommand(
        "predict", "specload.commands.predict", "forecast a speculative variant from a baseline"
    ),
    Subcommand(
        "results", "specload.commands.results", "repair a killed run's results (repair DIR)"
    ),
    Subcommand("sim", "specload.commands.sim", "serve a simulated vLLM (the embedded default)"),
    Subcommand(
        "exporter", "specload.commands.exporter", "export vLLM variants' metrics to Prometheus"
    ),
    Subcommand("profile", "specload.commands.profile", "capture and analyse vLLM profiler traces"),
    Subcommand("stack", "specload.commands.stack", "start/stop the local stack as processes"),
    Subcommand(
        "deploy", "specload.commands.deploy", "generate systemd units and Kubernetes manifests"
    ),
)


def default_text(default: Any) -> str | None:
    """An option's default as its help shows it (None: nothing to show)."""
    if default is None or default is False or default == argparse.SUPPRESS:
        return None
    if isinstance(default, bool):
        return "on"
    if isinstance(default, float):
        return f"{default:g}"
    if isinstance(default, (list, tuple)):
        return ",".join(map(str, default)) or None
    text = str(default)
    return text or None


class _HelpFormatter(argparse.HelpFormatter):
    """Every option's help ends with its default, unless it names its default itself
    (``--request-timeout … (default: 600)``); options without one are left alone."""

    def _get_help_string(self, action: argparse.Action) -> str | None:
        help_text = action.help
        if not help_text or help_text == argparse.SUPPRESS or not action.option_strings:
            return help_text
        shown = default_text(action.default)
        if shown is None or "default" in help_text.lower():
            return help_text
        return f"{help_text} (default: {shown.replace('%', '%%')})"


class _Parser(argparse.ArgumentParser):
    """argparse with one-line errors (no usage dump), exit status 2, and every option's
    default in its help (:class:`_HelpFormatter`)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        kwargs.setdefault("formatter_class", _HelpFormatter)
        super().__init__(*args, **kwargs)

    def error(self, message: str) -> NoReturn:
        self.exit(2, f"{self.prog}: error: {' '.join(message.split())}\n")


class _Subcommands(argparse._SubParsersAction):  # type: ignore[type-arg]
    """Subparsers whose arguments are added when one is chosen: only that module is imported."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._pending: dict[str, Subcommand] = {}

    def add_lazy(self, sub: Subcommand) -> None:
        self.add_parser(sub.name, help=sub.help, description=sub.help)
        self._pending[sub.name] = sub

    def load(self, name: str) -> argparse.ArgumentParser:
        parser: argparse.ArgumentParser = self._name_parser_map[name]
        sub = self._pending.pop(name, None)
        if sub is not None:
            mod = sub.load()
            mod.add_arguments(parser)
            parser.set_defaults(_run=mod.run)
        return parser

    def __call__(
        self,
        parser: argparse.ArgumentParser,
        namespace: argparse.Namespace,
        values: str | Sequence[Any] | None,
        option_string: str | None = None,
    ) -> None:
        if values and values[0] in self._name_parser_map:
            self.load(values[0])
        super().__call__(parser, namespace, values, option_string)


def build_parser() -> argparse.ArgumentParser:
    """The whole command line; a subcommand's options are added when it is parsed."""
    parser = _Parser(
        prog=PROG,
        description="Measure whether a vLLM service variant really decodes faster.",
    )
    parser.add_argument("--version", action="version", version=f"{PROG} {__version__}")
    subparsers = parser.add_subparsers(
        dest="command", metavar="COMMAND", parser_class=_Parser, action=_Subcommands
    )
    subparsers.required = True
    for sub in SUBCOMMANDS:
        cast(_Subcommands, subparsers).add_lazy(sub)
    return parser


#: Exit status when the reader of our output went away (``specload compare … | head``):
#: 128 + SIGPIPE, what the shell reports for a program that the signal ended.
BROKEN_PIPE_EXIT = 128 + 13


def _stdout_gone() -> bool:
    """True when stdout is a pipe or socket whose reader has gone (poll says POLLERR)."""
    try:
        poller = select.poll()
        poller.register(sys.stdout.fileno(), select.POLLOUT)
        events = poller.poll(0)
    except (AttributeError, OSError, ValueError):
        return True  # no pollable stdout: the broken pipe can only have been ours
    return any(flags & (select.POLLERR | select.POLLHUP) for _, flags in events)


def main(argv: Sequence[str] | None = None) -> int:
    """Run a command; its output to a closed pipe ends it quietly with status 141.

    As the Python documentation recommends for SIGPIPE, stdout is then pointed at
    ``/dev/null`` so the interpreter's last flush cannot fail again; a broken pipe that
    is not stdout's (a socket of the command's own) is still an error.
    """
    try:
        try:
            return _main(argv)
        finally:
            sys.stdout.flush()  # inside the try: a --help that fits the buffer fails here
    except BrokenPipeError:
        if not _stdout_gone():
            raise
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        os.close(devnull)
        return BROKEN_PIPE_EXIT


def _main(argv: Sequence[str] | None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    run = cast(Callable[[argparse.Namespace], int], args._run)
    try:
        return run(args)
    except UsageError as exc:
        print(f"{PROG}: error: {exc}", file=sys.stderr)
        return exc.exit_code
    except KeyboardInterrupt:
        print(f"{PROG}: interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":
    raise SystemExit(main())
