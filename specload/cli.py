"""The ``specload`` command and its subcommands.

Each subcommand lives in its own module, imported only when it is used, and
exposes two functions::

    def add_arguments(parser: argparse.ArgumentParser) -> None: ...
    def run(args: argparse.Namespace) -> int: ...

Errors a user can cause raise :class:`specload.errors.UsageError`; they are
printed as one line and exit with status 2 (argparse's own errors too).
"""

from __future__ import annotations

import argparse
import importlib
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import NoReturn, Protocol, cast

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


# Order is the order shown by --help.
SUBCOMMANDS: tuple[Subcommand, ...] = (
    Subcommand("demo", "specload.demo", "run the whole story on simulated vLLM variants"),
    Subcommand("run", "specload.sweep.cli", "headless sweep over concurrency levels"),
    Subcommand("compare", "specload.compare.cli", "compare result directories of variants"),
    Subcommand("baseline", "specload.baseline", "export a baseline for the exporter and alerts"),
    Subcommand("results", "specload.results.repair", "repair a killed run's results (repair DIR)"),
    Subcommand("sim", "simulator.cli", "serve a simulated vLLM (the embedded default)"),
    Subcommand("exporter", "exporter.cli", "export vLLM variants' metrics to Prometheus"),
    Subcommand("profile", "specload.profile.cli", "capture and analyse vLLM profiler traces"),
    Subcommand("stack", "specload.stack.cli", "start/stop the local stack as processes"),
    Subcommand("deploy", "specload.deploy.cli", "generate systemd units and Kubernetes manifests"),
)


class _Parser(argparse.ArgumentParser):
    """argparse with one-line errors (no usage dump), exit status 2."""

    def error(self, message: str) -> NoReturn:
        self.exit(2, f"{self.prog}: error: {' '.join(message.split())}\n")


def _modules() -> list[tuple[Subcommand, _Command]]:
    return [(sub, cast(_Command, importlib.import_module(sub.module))) for sub in SUBCOMMANDS]


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(
        prog=PROG,
        description="Measure whether a vLLM service variant really decodes faster.",
    )
    parser.add_argument("--version", action="version", version=f"{PROG} {__version__}")
    subparsers = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=_Parser)
    subparsers.required = True
    for sub, mod in _modules():
        sp = subparsers.add_parser(sub.name, help=sub.help, description=sub.help)
        mod.add_arguments(sp)
        sp.set_defaults(_run=mod.run)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
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
