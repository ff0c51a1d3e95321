"""``specload run``: a headless sweep over concurrency levels (or request rates).

Options: the sweep's own (levels, windows, target, results, outages,
workers) plus every load option of the load generator (``--prompts``,
``--max-tokens``, ``--temperature``, ``--model``, ``--api-key``, ``--stream``
…), declared in :mod:`specload.sweep.options`. The namespace ends here: it
becomes one frozen :class:`~specload.sweep.settings.SweepSettings`, and the
run reads nothing else.
"""

from __future__ import annotations

import argparse

from specload.sweep.options import add_arguments
from specload.sweep.settings import settings_from_args


def run(args: argparse.Namespace) -> int:
    # Every option is checked before Locust is imported (it monkey-patches the process).
    settings = settings_from_args(args)
    from specload.sweep.session import run_sweep  # noqa: PLC0415

    return run_sweep(settings)


__all__ = ["add_arguments", "run"]
