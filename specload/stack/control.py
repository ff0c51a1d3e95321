"""Start, watch, reload and stop the local stack's processes: what ``specload stack
up|down|status|reload`` does, for the command and the demo.

Everything lives in one state folder: ``stack.json`` (pids), ``logs/``, the generated
Prometheus config and target lists, Prometheus and Alertmanager data. Each function prints
what it did, as the command shows it.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import httpx

from specload.errors import UsageError
from specload.stack import procs
from specload.stack.configs import write_configs
from specload.stack.plan import Part, StackOptions, build_plan
from specload.stack.state import PartState, StackState, load, locked, remove, save

#: ``specload stack``'s state folder when none is given (relative to the current directory).
DEFAULT_STATE_DIR = ".state/stack"


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


def up(options: StackOptions, *, timeout_s: float = 120.0) -> int:
    """Start the stack of ``options`` and print its URLs; 0, or 1 when a part did not come up
    (what did start is stopped, the failure printed to stderr)."""
    state_dir = options.state_dir
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


def down(state_dir: Path, *, purge: bool = False) -> int:
    """Stop exactly what `up` started (``purge``: delete the state folder too)."""
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


def status(state_dir: Path, *, as_json: bool = False) -> int:
    """Each part's health; 0 when all are healthy, 1 when not, 3 when there is no stack."""
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


def reload(
    state_dir: Path, variant: str, as_variant: str | None = None, *, wait_s: float | None = None
) -> int:
    """Make the stack's server ``variant`` reload, coming back as ``as_variant`` (default: the
    same); with ``wait_s``, wait that long for it to serve again."""
    state = load(state_dir)
    if state is None:
        raise UsageError(f"--state-dir: no stack in {state_dir}; run `specload stack up`")
    part = state.part(variant)
    sims = [p.name for p in state.parts if p.kind == "sim"]
    if part is None or part.kind != "sim":
        raise UsageError(
            f"VARIANT: {variant!r} is not a server of this stack (servers: {', '.join(sims)})"
        )
    target = as_variant or variant
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
    if wait_s is None:
        return 0
    timeout_s = wait_s
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
