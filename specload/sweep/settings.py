"""``specload run``'s options checked before anything starts (one-line errors, no Locust yet)."""

from __future__ import annotations

import argparse
from dataclasses import dataclass
from pathlib import Path

from specload.durations import parse_duration
from specload.errors import UsageError
from specload.results.writer import prepare_out_dir
from specload.sweep.plan import SweepPlan, build_plan
from specload.urls import ServerURL, parse_server_url


@dataclass(frozen=True)
class SweepSettings:
    plan: SweepPlan
    url: ServerURL
    metrics_url: str | None
    ready_timeout_s: float
    outage_timeout_s: float
    drain_timeout_s: float
    out_dir: Path


def metrics_url_of(text: str | None, url: ServerURL) -> str | None:
    """``None``/empty → ``HOST/metrics``; ``off`` → no scrapes; a base URL gains ``/metrics``."""
    if text is None:
        return url.metrics
    if text.strip().lower() in ("off", "none", ""):
        return None
    root = parse_server_url(text, name="--metrics-url").root
    return root if root.endswith("/metrics") else root + "/metrics"


def settings_from_args(args: argparse.Namespace, out_dir: str) -> SweepSettings:
    plan = build_plan(
        concurrency=args.concurrency,
        request_rate=args.request_rate,
        max_concurrency=args.max_concurrency,
        warmup=args.warmup,
        duration=args.duration,
        requests=args.requests,
    )
    url = parse_server_url(args.host)
    if args.workers < 0:
        raise UsageError(f"--workers: {args.workers} must be 0 or more")
    if args.expect_workers is not None and args.expect_workers < args.workers:
        raise UsageError(
            f"--expect-workers: {args.expect_workers} is fewer than --workers {args.workers}"
        )
    return SweepSettings(
        plan=plan,
        url=url,
        metrics_url=metrics_url_of(args.metrics_url, url),
        ready_timeout_s=parse_duration(args.ready_timeout, name="--ready-timeout"),
        outage_timeout_s=parse_duration(args.outage_timeout, name="--outage-timeout"),
        drain_timeout_s=parse_duration(args.drain_timeout, name="--drain-timeout"),
        out_dir=prepare_out_dir(out_dir),
    )
