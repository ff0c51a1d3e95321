"""``specload exporter``: scrape vLLM variants' /metrics and serve ``specload_*`` metrics.

specload exporter --target baseline=http://h:8000 --target ngram=http://h:8001
specload exporter --config deploy/exporter.example.yaml
specload exporter --target a=http://h:8000 --once     # poll once, print the page
"""

from __future__ import annotations

import argparse
import logging
import os
import signal
import sys
import threading
from pathlib import Path
from types import FrameType

from prometheus_client import generate_latest

from exporter.app import Exporter
from exporter.config import (
    DEFAULT_ADDRESS,
    DEFAULT_INTERVAL_S,
    DEFAULT_PORT,
    ExporterConfig,
    load_config,
    merge_flags,
    parse_target_flag,
)
from specload.durations import parse_duration
from specload.errors import UsageError
from specload.redact import scrub_logs


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--config",
        metavar="FILE",
        default=os.environ.get("SPECLOAD_EXPORTER_CONFIG"),
        help="YAML config (see docs/exporter.md) [env SPECLOAD_EXPORTER_CONFIG]",
    )
    parser.add_argument(
        "--target",
        metavar="NAME=URL",
        action="append",
        default=[],
        help="a vLLM server to scrape, named by its variant (repeatable)",
    )
    parser.add_argument(
        "--address",
        default=None,
        help=f"listen address (default {DEFAULT_ADDRESS}; the config's 'address')",
    )
    parser.add_argument(
        "--port",
        type=int,
        default=None,
        help=f"listen port, 0 for any free one (default {DEFAULT_PORT})",
    )
    parser.add_argument(
        "--interval",
        default=None,
        help=f"seconds between polls of the targets (default {DEFAULT_INTERVAL_S:g})",
    )
    parser.add_argument(
        "--once",
        action="store_true",
        help="poll every target once, print the metrics page and exit",
    )
    parser.add_argument("--log-level", default="WARNING", help="logging level (default WARNING)")


def build_config(args: argparse.Namespace) -> ExporterConfig:
    cfg = ExporterConfig(targets=())
    if args.config:
        cfg = load_config(Path(args.config), env=os.environ)
    targets = [parse_target_flag(t) for t in args.target]
    interval = None
    if args.interval is not None:
        interval = parse_duration(args.interval, name="--interval", allow_zero=False)
    if args.port is not None and not 0 <= args.port <= 65535:
        raise UsageError(f"--port: {args.port} is not a port number (0-65535)")
    cfg = merge_flags(
        cfg, targets=targets, address=args.address, port=args.port, interval_s=interval
    )
    if not cfg.targets:
        raise UsageError("no targets: give --target NAME=URL or a --config with 'targets'")
    return cfg


def run(args: argparse.Namespace) -> int:
    level = getattr(logging, str(args.log_level).upper(), None)
    if not isinstance(level, int):
        raise UsageError(f"--log-level: {args.log_level!r} is not a logging level")
    logging.basicConfig(level=level, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    cfg = build_config(args)
    exporter = Exporter(cfg)
    # Whatever a library logs (httpcore's DEBUG trace quotes its exceptions), no key shows.
    scrub_logs(s for m in exporter.monitors for s in m.secrets)
    if args.once:
        try:
            exporter.poller.once()
        finally:
            exporter.stop()
        sys.stdout.write(generate_latest(exporter.registry).decode())
        return 0
    try:
        exporter.start()
    except OSError as exc:
        exporter.stop()
        raise UsageError(
            f"--address/--port: cannot listen on {cfg.address}:{cfg.port} ({exc.strerror or exc})"
        ) from None
    print(
        f"specload exporter: {len(cfg.targets)} target(s), listening on {exporter.url}/metrics",
        file=sys.stderr,
        flush=True,
    )
    done = threading.Event()

    def on_signal(signum: int, frame: FrameType | None) -> None:
        del signum, frame
        done.set()

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    try:
        done.wait()
    finally:
        exporter.stop()
    return 0
