"""``specload run``'s settings: every option checked and resolved before anything starts.

:func:`settings_from_args` is the only reader of the command line's namespace;
it raises one-line :class:`UsageError` s (no Locust yet) and returns a frozen
:class:`SweepSettings`, which is all :func:`specload.sweep.session.run_sweep`
reads.
"""

from __future__ import annotations

import argparse
import errno
import os
import re
import socket
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime
from pathlib import Path
from types import MappingProxyType
from typing import Any, Literal, cast

from specload.durations import parse_duration
from specload.errors import UsageError
from specload.load.metrics import parse_address
from specload.load.options import cache_bust_nonce
from specload.load.options import validate as validate_load_options
from specload.prompts.trace import load_trace
from specload.results.stopping import MIN_REQUESTS_DEFAULT, THROUGHPUT, metric
from specload.results.writer import prepare_out_dir
from specload.slo import parse_slo
from specload.sweep.options import (
    DEFAULT_HOST,
    DEFAULT_READY_TIMEOUT,
    IMPLICIT_READY_TIMEOUT,
    LOAD_OPTIONS,
    worker_argv,
)
from specload.sweep.plan import MAX_REQUESTS, SweepPlan, build_plan
from specload.sweep.search import SloSearch, parse_range
from specload.sweep.stopping import StopPlan, load_against, parse_share
from specload.urls import ServerURL, parse_server_url, redact_url

#: Local worker processes (``--workers``) and workers in all (``--expect-workers``): beyond
#: these a typo would fork the machine to its knees or wait for workers that never come.
MAX_LOCAL_WORKERS = 256
MAX_EXPECT_WORKERS = 1024

OnOutage = Literal["wait", "fail"]
ProgressMode = Literal["auto", "rich", "plain", "off"]

# Namespace entries that are the command line's machinery, not options of the run.
_NOT_OPTIONS = frozenset({"command"})


@dataclass(frozen=True)
class SweepSettings:
    """One sweep, resolved: the target, the levels, the limits, the load and its workers."""

    url: ServerURL
    metrics_url: str | None  # None: no server-side scrapes
    plan: SweepPlan
    out_dir: Path
    ready_timeout_s: float
    on_outage: OnOutage
    outage_timeout_s: float
    drain_timeout_s: float
    progress: ProgressMode
    plots: bool
    workers: int  # local worker processes; 0: one process
    expect_workers: int | None  # workers in all (local and remote); None: ``workers``
    master_bind_host: str
    master_bind_port: int | None  # None: a free port
    # The load generator's option values by dest (secrets apart), read-only.
    load: Mapping[str, Any]
    # The sweep's own options as given (durations as typed), for summary.json.
    given: Mapping[str, Any]
    # The secret load options by dest (--api-key): workers get them by environment; never
    # shown, logged or written to the results.
    secrets: Mapping[str, str] = field(default_factory=dict, repr=False)
    # Reset the server's prefix cache at the start of every level (where it allows it).
    prefix_cache_reset: bool = True
    # --search slo: the search (its first level is the plan's one level); None: the plan.
    search: SloSearch | None = None
    # False: no --host (nor SPECLOAD_HOST): vLLM's default address, waited for briefly.
    host_given: bool = True
    # --precision, --against: what ends a level before its budget (None: nothing).
    stopping: StopPlan | None = None

    def __post_init__(self) -> None:
        for name in ("load", "given", "secrets"):  # copies nobody else holds: read-only
            object.__setattr__(self, name, MappingProxyType(dict(getattr(self, name))))

    @property
    def api_key(self) -> str:
        return self.secrets.get("api_key", "")

    @property
    def variant(self) -> str:
        return str(self.load["variant"])

    @property
    def model(self) -> str:
        """``--model``; empty until the readiness gate names one (:meth:`with_model`)."""
        return str(self.load.get("model") or "")

    def with_model(self, model: str) -> SweepSettings:
        """These settings with the model the target serves (what workers and results see)."""
        return replace(self, load={**self.load, "model": model})

    def load_values(self) -> dict[str, Any]:
        """Every load option by dest, secrets included: the options the Locust runner gets."""
        return {o.dest: (self.secrets if o.secret else self.load).get(o.dest) for o in LOAD_OPTIONS}

    def worker_argv(self) -> tuple[list[str], dict[str, str]]:
        """Flags and environment (the secrets) for worker processes."""
        return worker_argv(self.load_values())

    def public_options(self) -> dict[str, Any]:
        """The run's options for summary.json: every scalar option except secrets, by name."""
        merged = {**self.given, **self.load}
        out: dict[str, Any] = {}
        for key, value in sorted(merged.items()):
            if isinstance(value, str | int | float | bool) or value is None:
                # a URL's password never reaches the results
                url_text = key in _URL_OPTIONS and isinstance(value, str)
                out[key] = redact_url(str(value)) if url_text else value
        return out


_URL_OPTIONS = frozenset({"host", "metrics_url"})


def metrics_url_of(text: str | None, url: ServerURL) -> str | None:
    """``None``/empty → ``HOST/metrics``; ``off`` → no scrapes; a base URL gains ``/metrics``."""
    if text is None:
        return url.metrics
    if text.strip().lower() in ("off", "none", ""):
        return None
    root = parse_server_url(text, name="--metrics-url").root
    return root if root.endswith("/metrics") else root + "/metrics"


def _slug(text: str) -> str:
    return re.sub(r"[^A-Za-z0-9_.-]+", "-", text).strip("-") or "run"


def default_out_dir(variant: str) -> str:
    stamp = datetime.now(UTC).strftime("%Y%m%d-%H%M%S")
    return os.path.join("results", f"{_slug(variant)}-{stamp}")


def check_workers(workers: int, expect_workers: int | None, master_bind_port: int | None) -> None:
    """``--workers``, ``--expect-workers`` and ``--master-bind-port`` within their bounds."""
    if workers < 0:
        raise UsageError(f"--workers: {workers} must be 0 or more")
    if workers > MAX_LOCAL_WORKERS:
        raise UsageError(
            f"--workers: {workers} is beyond the limit of {MAX_LOCAL_WORKERS} local worker "
            "processes (more load: --expect-workers with workers on other hosts)"
        )
    if expect_workers is not None:
        if expect_workers < workers:
            raise UsageError(
                f"--expect-workers: {expect_workers} is fewer than --workers {workers}"
            )
        if expect_workers > MAX_EXPECT_WORKERS:
            raise UsageError(
                f"--expect-workers: {expect_workers} is beyond the limit of {MAX_EXPECT_WORKERS}"
            )
    if master_bind_port is not None and not 1 <= master_bind_port <= 65535:
        raise UsageError(f"--master-bind-port: {master_bind_port} is not a port (1-65535)")


def check_metrics_port(text: str | None) -> None:
    """``--metrics-address``'s port is free now: the run checks it before its readiness gate,
    so a taken port is one line at once, not after the model has loaded (the listener
    fails the same way if the port is taken in between)."""
    address = parse_address(text or "off")
    if address is None or address[1] == 0:
        return
    host, port = address
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    with socket.socket(family, socket.SOCK_STREAM) as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # as the listener does
        try:
            sock.bind((host, port))
        except OSError as exc:
            busy = exc.errno == errno.EADDRINUSE
            raise UsageError(
                f"--metrics-address {text}: "
                + (
                    f"port {port} is in use (another run?)"
                    if busy
                    else f"cannot listen ({exc.strerror or exc})"
                )
                + "; choose another with --metrics-address HOST:PORT "
                "(env SPECLOAD_METRICS_ADDRESS; 127.0.0.1:0 for any free port) or off"
            ) from None


def _trace_shape(args: argparse.Namespace) -> tuple[int, float] | None:
    """``--trace``: its entries and span (s, speedup applied), read once to plan the run."""
    path = getattr(args, "trace", "") or ""
    if not path:
        return None
    entries = load_trace(path, speedup=float(getattr(args, "trace_speedup", 1.0) or 1.0))
    return len(entries), entries[-1].offset_s


def settings_from_args(args: argparse.Namespace) -> SweepSettings:
    """Check every option (one-line errors naming it) and resolve them; creates ``--out``."""
    validate_load_options(args)
    search_range = None
    variable = getattr(args, "search_variable", "concurrency") or "concurrency"
    if getattr(args, "search", None) == "slo":
        if not parse_slo(args.slo):
            raise UsageError("--search slo: give the objectives with --slo (e.g. tpot=20ms)")
        if args.concurrency is not None or args.request_rate is not None or args.trace:
            raise UsageError(
                "--search slo: searches the load itself (--search-range, not "
                "--concurrency, --request-rate or --trace)"
            )
        default_range = "0.5:64" if variable == "request_rate" else "1:512"
        search_range = parse_range(args.search_range or default_range, variable)
    rate_search = search_range is not None and variable == "request_rate"
    plan = build_plan(
        concurrency=f"{search_range[0]:g}"
        if search_range and not rate_search
        else args.concurrency,
        request_rate=f"{search_range[0]:g}" if search_range and rate_search else args.request_rate,
        max_concurrency=args.max_concurrency,
        warmup=args.warmup,
        duration=args.duration,
        requests=args.requests,
        ramp_up=args.ramp_up,
        trace=_trace_shape(args),
    )
    stopping = stop_plan_of(args, plan)
    host_given = bool(args.host)
    url = parse_server_url(args.host or DEFAULT_HOST)
    check_workers(args.workers, args.expect_workers, args.master_bind_port)
    parse_address(args.metrics_address or "off")  # a bad one is a one-line error
    metrics_url = metrics_url_of(args.metrics_url, url)
    ready_timeout = args.ready_timeout or (
        DEFAULT_READY_TIMEOUT if host_given else IMPLICIT_READY_TIMEOUT
    )
    ready_timeout_s = parse_duration(ready_timeout, name="--ready-timeout")
    outage_timeout_s = parse_duration(args.outage_timeout, name="--outage-timeout")
    drain_timeout_s = parse_duration(args.drain_timeout, name="--drain-timeout")
    load_dests = {o.dest for o in LOAD_OPTIONS}
    given = {
        key: value
        for key, value in vars(args).items()
        if not key.startswith("_") and key not in _NOT_OPTIONS and key not in load_dests
    }
    given |= {"host": args.host or DEFAULT_HOST, "ready_timeout": ready_timeout}
    load = {o.dest: getattr(args, o.dest) for o in LOAD_OPTIONS if not o.secret}
    # One nonce for the run, shared with every worker: prompts repeated in a level still
    # share their prefix, across processes too.
    load["cache_bust"] = cache_bust_nonce(load.get("cache_bust")) or "off"
    secrets = {o.dest: getattr(args, o.dest) for o in LOAD_OPTIONS if o.secret}
    return SweepSettings(
        url=url,
        metrics_url=metrics_url,
        plan=plan,
        out_dir=prepare_out_dir(args.out or default_out_dir(args.variant)),
        ready_timeout_s=ready_timeout_s,
        host_given=host_given,
        on_outage=cast(OnOutage, args.on_outage),
        outage_timeout_s=outage_timeout_s,
        drain_timeout_s=drain_timeout_s,
        progress=cast(ProgressMode, args.progress),
        plots=not args.no_plots,
        workers=args.workers,
        expect_workers=args.expect_workers,
        master_bind_host=args.master_bind_host,
        master_bind_port=args.master_bind_port,
        load=load,
        given=given,
        secrets=secrets,
        prefix_cache_reset=args.prefix_cache_reset != "off",
        search=SloSearch(
            plan.levels[0],
            args.attainment,
            search_range[0],
            search_range[1],
            args.search_precision,
            variable,
        )
        if search_range
        else None,
        stopping=stopping,
    )


def stop_plan_of(args: argparse.Namespace, plan: SweepPlan) -> StopPlan | None:
    """``--precision``, ``--against``, ``--margin``, ``--min-requests`` checked (one line each)."""
    precision_text = getattr(args, "precision", None)
    against_dir = getattr(args, "against", None)
    min_requests = getattr(args, "min_requests", None)
    if precision_text is None and against_dir is None:
        if min_requests is not None:
            raise UsageError("--min-requests: only with --precision or --against")
        return None
    if getattr(args, "search", None):
        raise UsageError("--precision/--against: not with --search (it ends its own levels)")
    if min_requests is None:
        min_requests = MIN_REQUESTS_DEFAULT
    if not 2 <= min_requests <= MAX_REQUESTS:
        raise UsageError(f"--min-requests: {min_requests} out of range (2 to {MAX_REQUESTS})")
    for level in plan.levels:
        if level.requests is not None and level.requests < min_requests:
            raise UsageError(
                f"--requests {level.requests}: fewer than --min-requests {min_requests} "
                "(a level could never stop early)"
            )
    key = metric(getattr(args, "precision_metric", None) or "tpot")
    precision = parse_share(precision_text, name="--precision") if precision_text else None
    margin = None
    against = None
    if against_dir is not None:
        if key.key == THROUGHPUT:
            raise UsageError(
                "--against: judges a request's figure (--precision-metric tpot or ttft), "
                "not output_tps"
            )
        margin = parse_share(getattr(args, "margin", None) or "5%", name="--margin")
        against = load_against(against_dir, plan, key, min_requests)
    return StopPlan(key, precision, min_requests, margin, against)
