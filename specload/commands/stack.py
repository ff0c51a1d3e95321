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
import contextlib
import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import httpx

from specload.durations import parse_duration
from specload.errors import UsageError
from specload.stack import procs
from specload.stack.configs import write_configs
from specload.stack.plan import Part, StackOptions, build_plan, check_options, find_repo
from specload.stack.state import PartState, StackState, load, locked, remove, save

DEFAULT_STATE_DIR = ".state/stack"


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
        return _up(args, state_dir)
    if action == "down":
        return _down(state_dir, purge=args.purge)
    if action == "status":
        return _status(state_dir, as_json=args.json)
    return _reload(args, state_dir)


# --- health -----------------------------------------------------------------------------------


def probe(url: str, timeout_s: float = 1.0) -> bool:
    try:
        response = httpx.get(url, timeout=timeout_s)
    except httpx.HTTPError:
        return False
    return response.is_success


def part_health(part: PartState) -> str:
    """healthy | unhealthy | stopped."""
    proc = part.process
    if proc is None or not procs.is_running(proc):
        return "stopped"
    if part.health_url is None or probe(part.health_url):
        return "healthy"
    return "unhealthy"


# --- up ---------------------------------------------------------------------------------------


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


def _part_state(part: Part) -> PartState:
    return PartState(
        part.name, part.kind, str(part.log), part.url, part.health_url, dict(part.ports)
    )


def _stop_all(state: StackState, popens: dict[str, subprocess.Popen[bytes]] | None = None) -> None:
    procs.stop_all([p.process for p in reversed(state.parts) if p.process is not None])
    for popen in (popens or {}).values():
        with contextlib.suppress(subprocess.TimeoutExpired):
            popen.wait(timeout=5)  # reap our own children


def _wait_ready(
    state: StackState, popens: dict[str, subprocess.Popen[bytes]], timeout_s: float
) -> list[tuple[PartState, str]]:
    """Parts that failed (with a reason); empty when all are healthy."""
    pending = {p.name: p for p in state.parts}
    started = time.monotonic()
    deadline = started + timeout_s
    while pending:
        for name, part in list(pending.items()):
            code = popens[name].poll()
            if code is not None:
                return [(part, f"exited with status {code}")]
            if part.health_url is None:
                if time.monotonic() - started >= 1.0:
                    del pending[name]
            elif probe(part.health_url, timeout_s=0.5):
                del pending[name]
        if not pending:
            break
        if time.monotonic() > deadline:
            return [(p, f"not healthy after {timeout_s:g}s") for p in pending.values()]
        time.sleep(0.2)
    return []


def _print_parts(state: StackState) -> None:
    width = max(len(p.name) for p in state.parts)
    for part in state.parts:
        extra = ""
        if part.kind == "sim":
            extra = f"  (control :{part.ports['control']}, log {part.log})"
        print(f"  {part.name:<{width}}  {part.url or '-':<32}{extra}")


def _up(args: argparse.Namespace, state_dir: Path) -> int:
    options = _options(args, state_dir)
    timeout_s = parse_duration(args.timeout, name="--timeout", allow_zero=False)
    with locked(state_dir):
        existing = load(state_dir)
        if existing is not None:
            if any(part_health(p) != "stopped" for p in existing.parts):
                raise UsageError(
                    f"--state-dir: a stack is already running from {state_dir}; "
                    "run `specload stack down` first"
                )
            remove(state_dir)
        plan = build_plan(options)
        state = StackState(str(state_dir), str(options.repo), [_part_state(p) for p in plan.parts])
        try:
            write_configs(plan)
            save(state)
        except OSError as exc:
            raise UsageError(
                f"--state-dir {state_dir}: cannot write {exc.filename or 'in it'} "
                f"({exc.strerror or exc})"
            ) from None
        env = {**os.environ, "PYTHONUNBUFFERED": "1"}
        popens: dict[str, subprocess.Popen[bytes]] = {}
        try:
            for part, part_state in zip(plan.parts, state.parts, strict=True):
                try:
                    popen, pid = procs.spawn(part.argv, log=part.log, cwd=options.repo, env=env)
                except OSError as exc:
                    part.log.parent.mkdir(parents=True, exist_ok=True)
                    with part.log.open("a") as log:
                        log.write(f"cannot start {part.argv[0]}: {exc}\n")
                    _fail(state, popens, [(part_state, f"cannot start ({exc.strerror})")])
                    return 1
                popens[part.name] = popen
                part_state.pid, part_state.start_ticks = pid.pid, pid.start_ticks
                save(state)
            failed = _wait_ready(state, popens, timeout_s)
        except BaseException:
            _stop_all(state, popens)
            remove(state_dir)
            raise
        if failed:
            _fail(state, popens, failed)
            return 1
    print(f"specload stack: up ({len(state.parts)} parts, state in {state_dir})")
    _print_parts(state)
    prometheus = state.part("prometheus")
    if prometheus is not None and prometheus.url:
        print(f"targets: {prometheus.url}/targets   alerts: {prometheus.url}/alerts")
    print("stop with: specload stack down" + _state_flag(state_dir))
    return 0


def _state_flag(state_dir: Path) -> str:
    default = Path(DEFAULT_STATE_DIR).resolve()
    return "" if state_dir == default else f" --state-dir {state_dir}"


def _fail(
    state: StackState,
    popens: dict[str, subprocess.Popen[bytes]],
    failed: list[tuple[PartState, str]],
) -> None:
    for part, reason in failed:
        print(
            f"specload stack: {part.name} failed to start: {reason}; last lines of {part.log}:",
            file=sys.stderr,
        )
        for line in procs.log_tail(Path(part.log)).splitlines():
            print(f"  | {line}", file=sys.stderr)
    print("specload stack: stopping the parts that did start", file=sys.stderr)
    _stop_all(state, popens)
    remove(Path(state.state_dir))


# --- down, status, reload ---------------------------------------------------------------------


def _down(state_dir: Path, *, purge: bool) -> int:
    with locked(state_dir):
        state = load(state_dir)
        if state is None:
            print(f"specload stack: no stack in {state_dir}")
        else:
            started = [p for p in reversed(state.parts) if p.process is not None]
            running = {p.name for p in started if p.process and procs.is_running(p.process)}
            killed = procs.stop_all([p.process for p in started if p.process is not None])
            for part in started:
                assert part.process is not None
                how = (
                    "killed"
                    if part.process in killed
                    else "stopped"
                    if part.name in running
                    else "was not running"
                )
                print(f"  {part.name:<16} pid {part.process.pid:<8} {how}")
            remove(state_dir)
            print(f"specload stack: down ({state_dir})")
    if purge:
        shutil.rmtree(state_dir, ignore_errors=True)
    return 0


def _status(state_dir: Path, *, as_json: bool) -> int:
    state = load(state_dir)
    if state is None:
        if as_json:
            print(json.dumps({"state_dir": str(state_dir), "parts": []}))
        else:
            print(f"specload stack: no stack in {state_dir}")
        return 3
    rows = [(p, part_health(p)) for p in state.parts]
    if as_json:
        print(
            json.dumps(
                {
                    "state_dir": str(state_dir),
                    "parts": [
                        {"name": p.name, "kind": p.kind, "pid": p.pid, "health": h, "url": p.url}
                        for p, h in rows
                    ],
                },
                indent=2,
            )
        )
    else:
        width = max(len(p.name) for p in state.parts)
        for part, health in rows:
            print(f"  {part.name:<{width}}  {health:<9}  pid {part.pid or '-':<8} {part.url or ''}")
    return 0 if all(h == "healthy" for _, h in rows) else 1


def _reload(args: argparse.Namespace, state_dir: Path) -> int:
    state = load(state_dir)
    if state is None:
        raise UsageError(f"--state-dir: no stack in {state_dir}; run `specload stack up`")
    part = state.part(args.variant)
    sims = [p.name for p in state.parts if p.kind == "sim"]
    if part is None or part.kind != "sim":
        raise UsageError(
            f"VARIANT: {args.variant!r} is not a server of this stack (servers: {', '.join(sims)})"
        )
    target = args.as_variant or args.variant
    url = f"http://127.0.0.1:{part.ports['control']}/reload"
    try:
        response = httpx.post(url, json={"variant": target}, timeout=10.0)
    except httpx.HTTPError as exc:
        raise UsageError(
            f"VARIANT: the control port of {part.name} ({url}) does not answer ({exc})", exit_code=1
        ) from None
    if not response.is_success:
        raise UsageError(
            f"VARIANT: {url} answered {response.status_code}: {response.text.strip()[:200]}",
            exit_code=1,
        )
    print(f"specload stack: {part.name} is reloading as {target}")
    if not args.wait:
        return 0
    timeout_s = parse_duration(args.timeout, name="--timeout", allow_zero=False)
    health = part.health_url or f"{part.url}/health"
    deadline = time.monotonic() + timeout_s
    went_down = time.monotonic() + 2.0
    while time.monotonic() < went_down and probe(health, 0.5):
        time.sleep(0.05)  # let the reload begin
    while time.monotonic() < deadline:
        if probe(health, 0.5):
            print(f"specload stack: {part.name} serves again")
            return 0
        time.sleep(0.2)
    raise UsageError(f"--timeout: {part.name} still loading after {timeout_s:g}s", exit_code=1)
