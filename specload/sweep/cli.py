"""``specload run``: a headless sweep over concurrency levels (or request rates).

Options: the sweep's own (levels, windows, target, results, outages,
workers) plus every load option of the load generator (``--prompts``,
``--max-tokens``, ``--temperature``, ``--model``, ``--api-key``, ``--stream``
…), taken from :func:`specload.load.options.add_options` so they never drift.
"""

from __future__ import annotations

import argparse
import os
import re
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from specload.load.options import add_options as add_load_options
from specload.load.options import validate as validate_load_options
from specload.sweep.settings import settings_from_args

# Load options the sweep sets itself.
_SWEEP_OWNED = {"step"}
_LOCUST_ONLY_KWARGS = ("env_var", "is_secret", "include_in_web_ui", "is_required", "is_multiple")


@dataclass(frozen=True)
class LoadOption:
    flag: str
    dest: str
    secret: bool
    env_var: str | None


LOAD_OPTIONS: list[LoadOption] = []


class _LoadOptionAdapter:
    """Lets the load generator's Locust option declarations fill a plain argparse group."""

    def __init__(self, group: Any) -> None:
        self.group = group
        self.found: list[LoadOption] = []

    def add_argument(self, *flags: str, **kwargs: Any) -> None:
        env_var = kwargs.get("env_var")
        secret = bool(kwargs.get("is_secret"))
        for key in _LOCUST_ONLY_KWARGS:
            kwargs.pop(key, None)
        flag = next(f for f in flags if f.startswith("--"))
        dest = kwargs.get("dest") or flag[2:].replace("-", "_")
        if dest in _SWEEP_OWNED:
            return
        if env_var and env_var in os.environ:
            kwargs["default"] = os.environ[env_var]  # argparse applies `type` to it
        self.group.add_argument(*flags, **kwargs)
        self.found.append(LoadOption(flag, dest, secret, env_var))


def add_arguments(parser: argparse.ArgumentParser) -> None:
    sweep = parser.add_argument_group("sweep")
    sweep.add_argument(
        "--host",
        default=os.environ.get("SPECLOAD_HOST", "http://127.0.0.1:8000"),
        help="the server's base URL (with or without /v1; env SPECLOAD_HOST)",
    )
    sweep.add_argument(
        "--metrics-url",
        default=None,
        help="vLLM /metrics scraped at each level's start and end "
        "(default: HOST/metrics; 'off' to skip)",
    )
    sweep.add_argument(
        "--concurrency",
        default=None,
        metavar="LIST",
        help="closed loop: users per level, e.g. 1,4,16,64 (the default)",
    )
    sweep.add_argument(
        "--request-rate",
        default=None,
        metavar="LIST",
        help="open loop: Poisson request rates per level (1/s), e.g. 0.5,1,2",
    )
    sweep.add_argument(
        "--max-concurrency",
        type=int,
        default=None,
        help="open loop: at most this many requests in flight (default 256)",
    )
    sweep.add_argument(
        "--warmup",
        default="10s",
        help="warm-up before each level's window, not measured (default 10s; 0 ok)",
    )
    sweep.add_argument(
        "--duration",
        default=None,
        help="measured window per level: 30 (seconds), 30s, 2m (default 60s)",
    )
    sweep.add_argument(
        "--requests",
        type=int,
        default=None,
        help="measured window per level by count instead of time",
    )
    sweep.add_argument(
        "--out",
        default=None,
        metavar="DIR",
        help="results directory (default results/VARIANT-TIMESTAMP)",
    )
    sweep.add_argument(
        "--ready-timeout",
        default="10m",
        help="how long to wait for /health and /v1/models at the start",
    )
    sweep.add_argument(
        "--on-outage",
        choices=("wait", "fail"),
        default="wait",
        help="when the target refuses connections mid-level: pause and wait for "
        "it (default) or stop the run",
    )
    sweep.add_argument(
        "--outage-timeout",
        default="45m",
        help="how long to wait for the target in an outage (default 45m)",
    )
    sweep.add_argument(
        "--drain-timeout",
        default="60s",
        help="at the end, longest wait for the last level's in-flight requests",
    )
    sweep.add_argument("--no-plots", action="store_true", help="skip the PNG plots")
    sweep.add_argument(
        "--progress",
        choices=("auto", "rich", "plain", "off"),
        default="auto",
        help="live display: rich on a terminal, plain lines otherwise",
    )
    dist = parser.add_argument_group("distributed (Locust master and workers)")
    dist.add_argument(
        "--workers",
        type=int,
        default=0,
        help="start N local worker processes (master + N workers); 0: one process",
    )
    dist.add_argument(
        "--expect-workers",
        type=int,
        default=None,
        help="wait for this many workers in all (local plus ones on other hosts "
        "started with `locust -f <specload/sweep/locustfile.py> --worker`)",
    )
    dist.add_argument(
        "--master-bind-host",
        default="127.0.0.1",
        help="interface the master listens on for workers (default 127.0.0.1)",
    )
    dist.add_argument(
        "--master-bind-port",
        type=int,
        default=None,
        help="port the master listens on (default: a free port)",
    )
    load = parser.add_argument_group("load (the load generator's options)")
    adapter = _LoadOptionAdapter(load)
    add_load_options(adapter)
    LOAD_OPTIONS[:] = adapter.found


def _slug(text: str) -> str:
    return re.sub(r"[^A-Za-z0-9_.-]+", "-", text).strip("-") or "run"


def default_out_dir(variant: str) -> str:
    stamp = datetime.now(UTC).strftime("%Y%m%d-%H%M%S")
    return os.path.join("results", f"{_slug(variant)}-{stamp}")


def worker_argv(args: argparse.Namespace) -> tuple[list[str], dict[str, str]]:
    """The load options as command-line flags for worker processes (secrets by environment)."""
    argv: list[str] = []
    env: dict[str, str] = {}
    for opt in LOAD_OPTIONS:
        value = getattr(args, opt.dest, None)
        if value is None or value == "":
            continue
        if isinstance(value, bool):
            value = "true" if value else "false"
        if opt.secret:
            if opt.env_var:
                env[opt.env_var] = str(value)
            continue
        if opt.dest == "metrics_address":
            continue  # only the master serves client metrics
        argv += [opt.flag, str(value)]
    argv += ["--metrics-address", "off"]
    return argv, env


def public_options(args: argparse.Namespace) -> dict[str, Any]:
    """The run's options for summary.json: everything except secrets and internals."""
    secret = {o.dest for o in LOAD_OPTIONS if o.secret}
    out: dict[str, Any] = {}
    for key, value in sorted(vars(args).items()):
        if key.startswith("_") or key in secret or key == "command":
            continue
        if isinstance(value, str | int | float | bool) or value is None:
            out[key] = value
    return out


def run(args: argparse.Namespace) -> int:
    # Every option is checked before Locust is imported (it monkey-patches the process).
    validate_load_options(args)
    settings = settings_from_args(args, args.out or default_out_dir(args.variant))
    from specload.sweep.session import run_sweep  # noqa: PLC0415

    return run_sweep(args, settings)
