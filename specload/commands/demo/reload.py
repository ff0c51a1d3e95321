"""Stage 5: ``specload stack reload baseline --as ngram``, watched in Prometheus."""

from __future__ import annotations

import math
import time

import httpx

from specload.commands.demo.constants import RELOAD_AS, SERVER
from specload.commands.demo.context import DemoContext, _wait_for
from specload.errors import UsageError
from specload.stack import control

# --- 5. reload watched in Prometheus ------------------------------------------------------------


def _serving(url: str) -> bool:
    try:
        return httpx.get(url + "/health", timeout=0.5).is_success
    except httpx.HTTPError:
        return False


def _watch_line(ctx: DemoContext, t0: float) -> tuple[str, str]:
    sel = f'{{variant="{SERVER}"}}'
    states = ctx.prom.samples(f"specload_target_state{sel} == 1")
    state = states[0][0].get("state", "?") if states else "?"
    elapsed = ctx.prom.value(f"specload_target_reload_elapsed_seconds{sel}")
    progress = ctx.prom.value(f"specload_target_load_progress_ratio{sel}")
    t = time.monotonic() - t0  # after the answers (a busy machine can delay them)
    line = f"   t+{t:4.1f}s  Prometheus: specload_target_state {state}"
    if elapsed is not None:
        line += f", reload elapsed {elapsed:.1f}s"
    if progress is not None:
        line += f", load progress {progress:.0%}"
    return state, line


def reload_watched(ctx: DemoContext) -> None:
    load_s = ctx.args.load_time_s
    ctx.say(
        f"== 5. specload stack reload {SERVER} --as {RELOAD_AS}: the server closes its port "
        f"for {load_s:g}s (vLLM does not listen while it loads; on the reference 25-35 min: "
        "the load time is wall clock, not on the time scale), watched in Prometheus"
    )
    sel = f'{{variant="{SERVER}"}}'
    reloads_before = ctx.prom.value(f"specload_target_reloads_total{sel}") or 0.0
    code = control.reload(ctx.state_dir, SERVER, RELOAD_AS)
    if code != 0:
        raise UsageError("demo: stack reload failed", exit_code=1)
    t0, t0_wall = time.monotonic(), time.time()
    down_at: float | None = None
    up_at: float | None = None
    seen_loading = False
    last_state, last_print = "", -math.inf
    period = max(1.0, load_s / 5)
    deadline = t0 + 3 * load_s + 60
    while time.monotonic() < deadline:
        now = time.monotonic()
        serving = _serving(ctx.server_url)
        if not serving and down_at is None:
            down_at = now
        if serving and down_at is not None and up_at is None:
            up_at = now
        state, line = _watch_line(ctx, t0)
        seen_loading = seen_loading or state == "loading"
        if state != last_state or now - last_print >= period:
            ctx.say(line)
            last_state, last_print = state, now
        if seen_loading and state == "ready" and up_at is not None:
            break
        time.sleep(0.2)
    else:
        raise UsageError(
            f"demo: {SERVER} did not come back within {3 * load_s + 60:g}s", exit_code=1
        )
    true_s = (up_at - down_at) if down_at is not None and up_at is not None else None
    reloads = _wait_for(
        lambda: (ctx.prom.value(f"specload_target_reloads_total{sel}") or 0) > reloads_before,
        timeout_s=10,
    )
    recorded = ctx.prom.value(f"specload_target_last_reload_duration_seconds{sel}")
    expected = ctx.prom.value(f"specload_target_expected_reload_seconds{sel}")
    ctx.say(
        f"   reload recorded by the exporter: specload_target_last_reload_duration_seconds "
        f"{'-' if recorded is None else f'{recorded:.1f}s'} (port closed for "
        f"{'-' if true_s is None else f'{true_s:.1f}s'} as seen by the demo; expected "
        f"{'-' if expected is None else f'{expected:g}s'}); now serving {RELOAD_AS}"
    )
    ctx.record(
        "reload",
        {
            "as": RELOAD_AS,
            "load_time_s": load_s,
            "true_s": true_s,
            "recorded_s": recorded,
            "counted": bool(reloads),
            "expected_s": expected,
            "ready_at": None if up_at is None else t0_wall + (up_at - t0),
        },
    )
