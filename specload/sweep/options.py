"""``specload run``'s options: their declarations, and the load options as worker flags.

Below both the command line (:mod:`specload.commands.run`, which builds the
settings) and the run (:mod:`specload.sweep.session`, which starts the
workers), so neither imports the other. The load options are the load
generator's own declarations (:func:`specload.load.options.add_options`),
recorded once into :data:`LOAD_OPTIONS`, so the sweep's parser, the values it
hands Locust and the flags its workers get never drift from them.
"""

from __future__ import annotations

import argparse
import os
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from specload.load.options import add_options as add_load_options

# Load options the sweep sets itself (the step label changes per level).
SWEEP_OWNED = frozenset({"step"})
DEFAULT_HOST = "http://127.0.0.1:8000"  # vLLM's own address when --host is not given
DEFAULT_READY_TIMEOUT = "10m"  # a server that reloads takes long
IMPLICIT_READY_TIMEOUT = "1m"  # nothing named: a typo'd or missing --host fails fast
# Keywords of Locust's (configargparse) parser that plain argparse does not know.
_LOCUST_ONLY_KWARGS = ("env_var", "is_secret", "include_in_web_ui", "is_required", "is_multiple")
# Only the master (or the single process) serves client metrics.
_MASTER_ONLY = frozenset({"metrics_address"})


@dataclass(frozen=True)
class LoadOption:
    """One option of the load generator, as the sweep accepts it."""

    flag: str  # the long flag, e.g. "--max-tokens"
    dest: str
    secret: bool  # given to workers through ``env_var``, never on a command line or in results
    env_var: str | None
    flags: tuple[str, ...]
    kwargs: tuple[tuple[str, Any], ...]  # argparse keywords, Locust-only ones removed

    def add_to(self, group: Any) -> None:
        kwargs = dict(self.kwargs)
        if self.env_var and self.env_var in os.environ:
            kwargs["default"] = os.environ[self.env_var]  # argparse applies `type` to it
        if self.secret:
            # --help shows every default (specload.cli): never a secret's.
            kwargs["help"] = f"{kwargs.get('help') or ''} (default: ${self.env_var}, not shown)"
        group.add_argument(*self.flags, **kwargs)


class _Recorder:
    """Stands in for Locust's parser to record the load generator's declarations."""

    def __init__(self) -> None:
        self.found: list[LoadOption] = []

    def add_argument(self, *flags: str, **kwargs: Any) -> None:
        env_var = kwargs.get("env_var")
        secret = bool(kwargs.get("is_secret"))
        for key in _LOCUST_ONLY_KWARGS:
            kwargs.pop(key, None)
        flag = next(f for f in flags if f.startswith("--"))
        dest = kwargs.get("dest") or flag[2:].replace("-", "_")
        if dest in SWEEP_OWNED:
            return
        self.found.append(LoadOption(flag, dest, secret, env_var, flags, tuple(kwargs.items())))


def _declared() -> tuple[LoadOption, ...]:
    recorder = _Recorder()
    add_load_options(recorder)
    return tuple(recorder.found)


LOAD_OPTIONS: tuple[LoadOption, ...] = _declared()


def add_arguments(parser: argparse.ArgumentParser) -> None:
    sweep = parser.add_argument_group("sweep")
    sweep.add_argument(
        "--host",
        default=os.environ.get("SPECLOAD_HOST"),
        help=f"the server's base URL, with or without /v1 (env SPECLOAD_HOST; default "
        f"vLLM's own {DEFAULT_HOST}, waited for {IMPLICIT_READY_TIMEOUT} only)",
    )
    sweep.add_argument(
        "--metrics-url",
        default=None,
        help="vLLM /metrics scraped at each level's start and end "
        "(default: HOST/metrics; 'off' to skip)",
    )
    sweep.add_argument(
        "--server-log",
        default=None,
        metavar="FILE",
        help="the server's startup log: its engine path (version, device, model runner, async "
        "scheduling, CUDA graphs) goes into summary.json's server_info for `specload predict`",
    )
    sweep.add_argument(
        "--concurrency",
        default=None,
        metavar="LIST",
        help="closed loop: users per level (default 1,4,16,64 when neither this nor "
        "--request-rate is given)",
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
        "--ramp-up",
        default="0",
        help="closed loop: start each level's new users over this long, inside its warm-up "
        "(e.g. 30s; default 0: at once, each first request spread over a second)",
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
        default=None,
        help="how long to wait for /health and /v1/models at the start (default 10m: a "
        f"reload takes long; {IMPLICIT_READY_TIMEOUT} without --host)",
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
        help="at the end, longest wait for the last level's in-flight requests "
        "(default: %(default)s)",
    )
    sweep.add_argument(
        "--search",
        choices=("slo",),
        default=None,
        help="find the highest load at which --attainment of the requests meet every --slo "
        "objective: levels doubling from the range's low end, then bisection; a level whose "
        "verdict is known early (too many misses, queueing growing) is cut short",
    )
    sweep.add_argument(
        "--search-variable",
        choices=("concurrency", "request_rate"),
        default="concurrency",
        help="--search slo: what is searched, users (closed loop) or requests/s (open loop, "
        "--burstiness and --max-concurrency apply) (default: %(default)s)",
    )
    sweep.add_argument(
        "--attainment",
        type=float,
        default=0.9,
        help="--search slo: the share of completed requests that must meet the objectives "
        "(default: %(default)s)",
    )
    sweep.add_argument(
        "--search-range",
        default=None,
        metavar="LOW:HIGH",
        help="--search slo: the range searched (default 1:512 users, 0.5:64 requests/s)",
    )
    sweep.add_argument(
        "--search-precision",
        type=float,
        default=None,
        metavar="STEP",
        help="--search slo: stop when the highest level that held and the lowest that did not "
        "are this close (default 1 user, or the range's low end in requests/s)",
    )
    sweep.add_argument(
        "--prefix-cache-reset",
        choices=("auto", "off"),
        default="auto",
        help="at the start of every level, reset the server's prefix cache where it "
        "allows it (vLLM: POST /reset_prefix_cache, served with VLLM_SERVER_DEV_MODE=1), "
        "so no level starts on another's warm cache (default auto; else see --cache-bust)",
    )
    stop = parser.add_argument_group(
        "stopping (a level ends before its --duration/--requests budget)"
    )
    stop.add_argument(
        "--precision",
        default=None,
        metavar="SHARE",
        help="end a level once the 95%% interval of its --precision-metric is within this "
        "share of the estimate, e.g. 2%% (the moving-block bootstrap compare uses); the "
        "level's --duration/--requests is its budget",
    )
    stop.add_argument(
        "--precision-metric",
        choices=("tpot", "ttft", "output_tps"),
        default="tpot",
        help="what --precision judges: the median TPOT or TTFT, or the level's output "
        "throughput (tokens arrived over the window); --against judges tpot or ttft "
        "(default: %(default)s)",
    )
    stop.add_argument(
        "--min-requests",
        type=int,
        default=None,
        help="--precision/--against: never stop a level before this many requests with "
        "the metric (default 20)",
    )
    stop.add_argument(
        "--against",
        default=None,
        metavar="DIR",
        help="a baseline's results directory: each level ends once the variant is known "
        "faster or slower by more than --margin, or equivalent within it (repeated "
        "confidence intervals with error spending: a wrong verdict at most 5%% of the time)",
    )
    stop.add_argument(
        "--margin",
        default="5%",
        metavar="SHARE",
        help="--against: the smallest difference that matters, e.g. 5%% (default %(default)s)",
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
    for option in LOAD_OPTIONS:
        option.add_to(load)


def worker_argv(values: Mapping[str, Any]) -> tuple[list[str], dict[str, str]]:
    """The load options' ``values`` (by dest) as flags for worker processes, and the
    environment that carries the secrets."""
    argv: list[str] = []
    env: dict[str, str] = {}
    for opt in LOAD_OPTIONS:
        value = values.get(opt.dest)
        if value is None or value == "":
            continue
        if isinstance(value, bool):
            value = "true" if value else "false"
        if opt.secret:
            if opt.env_var:
                env[opt.env_var] = str(value)
            continue
        if opt.dest in _MASTER_ONLY:
            continue
        argv += [opt.flag, str(value)]
    argv += ["--metrics-address", "off"]
    return argv, env
