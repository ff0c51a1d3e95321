"""``specload stack up|down|status|reload``: the local stack as processes, no Docker.

    specload stack up                      # sims baseline+ngram, exporter, Prometheus, Alertmanager
    specload stack up --workers 2          # … plus a Locust master and 2 workers
    specload stack status                  # each part's health
    specload stack reload ngram            # the ngram server reloads (as ngram)
    specload stack reload baseline --as ngram
    specload stack down                    # stops exactly what `up` started

Everything lives in one state folder (``.state/stack`` in the current
directory, or ``--state-dir``): ``stack.json`` (pids), ``logs/``, the
generated Prometheus config and target lists, Prometheus and Alertmanager data.
"""

from __future__ import annotations

import argparse
import os
from pathlib import Path

from specload.durations import parse_duration
from specload.errors import UsageError
from specload.stack import control
from specload.stack.control import DEFAULT_STATE_DIR
from specload.stack.plan import StackOptions, check_options, find_repo


def add_arguments(parser: argparse.ArgumentParser) -> None:
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument(
        "--state-dir",
        default=os.environ.get("SPECLOAD_STACK_DIR", DEFAULT_STATE_DIR),
        help="the stack's folder: pids, logs, configs, data "
        f"(default {DEFAULT_STATE_DIR}) [env SPECLOAD_STACK_DIR]",
    )
    sub = parser.add_subparsers(dest="stack_action", metavar="ACTION")
    sub.required = True
    up = sub.add_parser(
        "up",
        parents=[common],
        help="start the stack and print its URLs",
        description="Start the stack as processes and print its URLs.",
    )
    up.add_argument(
        "--variants",
        default="baseline,ngram",
        help="simulated variants, comma-separated (default baseline,ngram)",
    )
    up.add_argument(
        "--workers",
        type=int,
        default=0,
        help="start a Locust master with this many workers (default 0: no Locust)",
    )
    up.add_argument(
        "--free-ports",
        action="store_true",
        help="use any free ports instead of the defaults (8000…, 9090, 9093, 9464)",
    )
    up.add_argument(
        "--load-time",
        default="10s",
        help="simulated model load (start and reload) time (default 10s)",
    )
    up.add_argument(
        "--time-scale",
        type=float,
        default=None,
        help="simulator time scale (faster than real time when > 1)",
    )
    up.add_argument(
        "--scrape-interval",
        default="5s",
        help="Prometheus scrape/evaluation and exporter poll interval (default 5s)",
    )
    up.add_argument(
        "--baseline",
        action="append",
        default=[],
        metavar="FILE",
        help="a `specload baseline export` file for the exporter to serve "
        "(repeatable; it may be written later, it is read when it appears)",
    )
    up.add_argument(
        "--timeout",
        default="120s",
        help="how long to wait for every part to be healthy (default 120s)",
    )
    up.add_argument(
        "--repo",
        default=None,
        help="the specload source tree (deploy/, locustfiles/) [env SPECLOAD_REPO]",
    )
    down = sub.add_parser(
        "down",
        parents=[common],
        help="stop what `up` started",
        description="Stop exactly the processes `up` started.",
    )
    down.add_argument(
        "--purge", action="store_true", help="also delete the state folder (logs, Prometheus data)"
    )
    status = sub.add_parser(
        "status",
        parents=[common],
        help="each part's health",
        description="Show each part's process and health.",
    )
    status.add_argument("--json", action="store_true", help="machine-readable output")
    reload = sub.add_parser(
        "reload",
        parents=[common],
        help="simulate a reload of a variant",
        description="Make a simulated server reload (refusing connections "
        "while it loads), optionally coming back as another variant.",
    )
    reload.add_argument("variant", metavar="VARIANT", help="the stack's server to reload")
    reload.add_argument(
        "--as",
        dest="as_variant",
        metavar="OTHER",
        help="come back as this variant (default: the same)",
    )
    reload.add_argument("--wait", action="store_true", help="wait until it serves again")
    reload.add_argument("--timeout", default="120s", help="with --wait: how long (default 120s)")


def run(args: argparse.Namespace) -> int:
    state_dir = Path(args.state_dir).resolve()
    action: str = args.stack_action
    if action == "up":
        options = _options(args, state_dir)
        timeout_s = parse_duration(args.timeout, name="--timeout", allow_zero=False)
        return control.up(options, timeout_s=timeout_s)
    if action == "down":
        return control.down(state_dir, purge=args.purge)
    if action == "status":
        return control.status(state_dir, as_json=args.json)
    wait_s = parse_duration(args.timeout, name="--timeout", allow_zero=False) if args.wait else None
    return control.reload(state_dir, args.variant, args.as_variant, wait_s=wait_s)


def _options(args: argparse.Namespace, state_dir: Path) -> StackOptions:
    variants = tuple(v.strip() for v in str(args.variants).split(",") if v.strip())
    time_scale = args.time_scale
    if time_scale is not None and not time_scale > 0:
        raise UsageError(f"--time-scale: {time_scale} must be greater than zero")
    options = StackOptions(
        state_dir=state_dir,
        repo=find_repo(args.repo),
        variants=variants,
        workers=args.workers,
        free_ports=args.free_ports,
        load_time_s=parse_duration(args.load_time, name="--load-time"),
        time_scale=time_scale,
        scrape_interval_s=parse_duration(
            args.scrape_interval, name="--scrape-interval", allow_zero=False
        ),
        baselines=tuple(Path(b).resolve() for b in getattr(args, "baseline", None) or ()),
    )
    check_options(options)
    return options
