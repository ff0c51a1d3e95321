"""The TPOT alert: the reloaded server under steady load (stage 6), and the alert state
(stage 8)."""

from __future__ import annotations

import math
import signal
import subprocess
import time
from datetime import datetime
from typing import IO, Any

import httpx

from specload import vllm_metrics as vm
from specload.commands.demo import figures
from specload.commands.demo.constants import (
    ALERT_TIMEOUT_S,
    REFERENCE_TYPES,
    RELOAD_AS,
    SERVER,
    TPOT_ALERT,
)
from specload.commands.demo.context import DemoContext
from specload.commands.demo.sweeps import _run_cmd
from specload.commands.demo.webhook import Notification
from specload.errors import UsageError
from specload.promapi import PrometheusError
from specload.stack.rules import DEMO, duration_s


def _stamp(t: float | None) -> str:
    return "-" if t is None else datetime.fromtimestamp(t).strftime("%H:%M:%S.%f")[:-4]


# --- 6. the reloaded server under steady load: the TPOT alert -----------------------------------


def _tpot_alert(ctx: DemoContext) -> dict[str, Any] | None:
    try:
        alerts = ctx.prom.alerts()
    except (PrometheusError, httpx.HTTPError):
        return None
    return next((a for a in alerts if a.get("labels", {}).get("alertname") == TPOT_ALERT), None)


def _rfc3339(text: Any) -> float | None:
    if not isinstance(text, str) or not text:
        return None
    head, _, frac = text.rstrip("Z").partition(".")
    try:
        whole = datetime.fromisoformat(head + "+00:00").timestamp()
    except ValueError:
        return None
    digits = "".join(ch for ch in frac if ch.isdigit())
    return whole + (float("0." + digits) if digits else 0.0)


def _received_tpot(ctx: DemoContext) -> Notification | None:
    if ctx.webhook is None:
        return None
    for note in ctx.webhook.received():
        if any(
            a.get("labels", {}).get("alertname") == TPOT_ALERT and a.get("status") == "firing"
            for a in note.alerts()
        ):
            return note
    return None


def _signals(ctx: DemoContext) -> dict[str, float | None]:
    sel = f'{{variant="{SERVER}"}}'
    reload = f"max(max_over_time(specload_target_reload_in_progress{sel}[{DEMO.window}]))"
    return {
        "reloading": ctx.prom.value(reload),
        "ratio": ctx.prom.value(f"variant_model:specload_tpot_seconds:baseline_ratio_5m{sel}"),
        "load": ctx.prom.value(f"variant_model:specload_load_concurrency:avg5m{sel}"),
        "requests": ctx.prom.value(f"variant_model:specload_requests_completed:increase5m{sel}"),
    }


def _stop_run(proc: subprocess.Popen[Any]) -> int:
    """Stop a run as Ctrl-C would (it keeps what it measured)."""
    if proc.poll() is None:
        proc.send_signal(signal.SIGINT)
    try:
        return proc.wait(60)
    except subprocess.TimeoutExpired:
        proc.kill()
        return proc.wait()


def alert_under_load(ctx: DemoContext) -> None:
    levels = [int(c) for c in str(ctx.args.concurrency).split(",") if c.strip()]
    users = max(levels)
    scale = ctx.scale
    window_s, for_s = duration_s(DEMO.window), duration_s(DEMO.for_regression)
    ctx.say(
        f"== 6. the reloaded server under steady load, {users} users as in production: "
        f"{TPOT_ALERT} judges its median TPOT against the baseline at the same load — "
        f"demo profile: silent {DEMO.window} after a reload, then pending, firing after "
        f"{DEMO.for_regression} [{for_s * scale / 60:g} min], delivered by Alertmanager after "
        "its group_wait (30s, wall clock)"
    )
    out = ctx.out / "ngram-steady"
    cmd = _run_cmd(
        ctx,
        RELOAD_AS,
        out,
        prompts="builtin:" + ",".join(REFERENCE_TYPES),
        concurrency=str(users),
        warmup="0s",
        duration=f"{ALERT_TIMEOUT_S + 30:g}s",
        extra=("--no-plots",),
        progress="plain",
    )
    out.mkdir(parents=True, exist_ok=True)
    log: IO[bytes] = (ctx.state_dir / "logs" / "ngram-steady.log").open("wb")
    proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT)
    t0_wall, t0 = time.time(), time.monotonic()
    pending_at = firing_at = None
    active_at: float | None = None
    received: Notification | None = None
    last_status = -math.inf
    margin = 1 + (ctx.prom.value("specload:tpot_regression_margin:ratio") or 0.10)
    minimum = ctx.prom.value("specload:min_requests_to_judge:count") or 20

    def t(at: float | None) -> str:
        return "-" if at is None else f"t+{at - t0_wall:5.1f}s"

    try:
        while time.monotonic() - t0 < ALERT_TIMEOUT_S and proc.poll() is None:
            now = time.time()
            alert = _tpot_alert(ctx)
            state = alert.get("state") if alert else None
            if state in ("pending", "firing") and pending_at is None:
                assert alert is not None
                pending_at, active_at = now, _rfc3339(alert.get("activeAt"))
                ctx.say(
                    f'   {t(now)}  {TPOT_ALERT}{{variant="{SERVER}"}} pending (active since '
                    f"{_stamp(active_at)}): median TPOT {float(alert.get('value') or 0):.2f}x "
                    f"the baseline at this load, threshold {margin:.2f}x"
                )
            elif state is None and pending_at is not None and firing_at is None:
                ctx.say(f"   {t(now)}  {TPOT_ALERT} inactive again: watching on")
                pending_at = active_at = None
            if state == "firing" and firing_at is None:
                firing_at = now
                ctx.say(
                    f"   {t(now)}  {TPOT_ALERT} firing: sent to Alertmanager, which holds "
                    "it for its group_wait"
                )
            received = _received_tpot(ctx)
            if received is not None:
                ctx.say(
                    f"   {t(received.received_at)}  the webhook received it "
                    f"({ctx.webhook.url if ctx.webhook else '-'})"
                )
                break
            if now - last_status >= 5:
                sig = _signals(ctx)
                ratio, load, requests = sig["ratio"], sig["load"], sig["requests"]
                silent = f" (silent: the reload is in the last {DEMO.window})"
                ctx.say(
                    f"   {t(now)}  ratio "
                    f"{'-' if ratio is None else f'{ratio:.2f}x'}, load "
                    f"{'-' if load is None else f'{load:.1f}'} in flight, "
                    f"{'-' if requests is None else f'{requests:.0f}'} requests in {DEMO.window} "
                    f"(>= {minimum:.0f} to judge): {state or 'inactive'}"
                    + (silent if state is None and (sig["reloading"] or 0) > 0 else "")
                )
                last_status = now
            time.sleep(0.5)
    finally:
        code = _stop_run(proc)
        log.close()
    notes = ctx.webhook.received() if ctx.webhook else []
    delivered = [
        {
            "received_at": n.received_at,
            "status": n.payload.get("status"),
            "group_labels": n.payload.get("groupLabels"),
            "alerts": [
                {
                    "alertname": a.get("labels", {}).get("alertname"),
                    "status": a.get("status"),
                    "labels": a.get("labels"),
                    "summary": (a.get("annotations") or {}).get("summary"),
                    "description": (a.get("annotations") or {}).get("description"),
                }
                for a in n.alerts()
            ],
        }
        for n in notes
    ]
    served = ctx.prom.samples(f'specload_variant_info{{variant="{SERVER}"}}')
    method = served[0][0].get("method") if served else None
    if received is not None:
        alert = next(a for a in received.alerts() if a.get("labels", {}).get("alertname"))
        labels = alert.get("labels", {})
        ctx.say(
            f'   {TPOT_ALERT}{{variant="{labels.get("variant")}", model="{labels.get("model")}'
            f'", severity="{labels.get("severity")}"}}: '
            + " ".join(str((alert.get("annotations") or {}).get("description", "")).split())
        )
        ctx.say(
            f'   variant="{SERVER}" is the server\'s name in Prometheus, kept through the '
            f"reload; it serves {method or RELOAD_AS} now (specload_variant_info method="
            f"{method or '-'}): the deployment is slower than its own baseline since the reload"
        )
    elif code not in (0, 130):
        raise UsageError(
            f"demo: the steady {RELOAD_AS} load failed (exit {code}); see "
            f"{ctx.state_dir / 'logs' / 'ngram-steady.log'}",
            exit_code=1,
        )
    else:
        listening = (ctx.facts.get("stack") or {}).get("webhook_listening")
        ctx.say(
            f"   the webhook received no {TPOT_ALERT} within {ALERT_TIMEOUT_S:g}s"
            + ("" if listening else " (the demo could not listen: see stage 1)")
        )
    timeline = {
        "pending_at": active_at if active_at is not None else pending_at,
        "pending_seen_at": pending_at,
        "firing_at": firing_at,
        "received_at": None if received is None else received.received_at,
    }
    if timeline["pending_at"] and firing_at and received:
        ctx.say(
            f"   pending {_stamp(timeline['pending_at'])} -> firing {_stamp(firing_at)} "
            f"({firing_at - timeline['pending_at']:.1f}s "
            f"[{(firing_at - timeline['pending_at']) * scale / 60:.1f} min]) -> webhook "
            f"{_stamp(received.received_at)} ({received.received_at - firing_at:.1f}s later); "
            f"{window_s * scale / 60:g}-minute windows on the reference clock"
        )
    ctx.record(
        "alert",
        {
            "alertname": TPOT_ALERT,
            "load_started_at": t0_wall,
            **timeline,
            "served_method": method,
            "webhook": delivered,
            "run": str(out),
            "run_exit": code,
            "users": users,
            "window_s": window_s,
            "for_s": for_s,
        },
    )
    ctx.results["ngram-steady"] = out


# --- 8. alerts ----------------------------------------------------------------------------------


def _ratios_per_level(ctx: DemoContext) -> list[dict[str, Any]]:
    """Server mean TPOT over each ngram level's window / baseline median at that level."""
    rows: list[dict[str, Any]] = []
    for level in figures.read(ctx.results[RELOAD_AS]).levels:
        (start_ts, end_ts), conc = level.window, level.concurrency
        if start_ts is None or end_ts is None or conc is None:
            continue
        window_ms = max(1000, round((end_ts - start_ts) * 1000))
        name = vm.REQUEST_TPOT
        sel = f'{{variant="{SERVER}"}}'
        window = f"[{window_ms}ms]"
        expr = (
            f"(sum(rate({name}_sum{sel}{window})) / sum(rate({name}_count{sel}{window})))"
            f' / on() max(specload_baseline_tpot_seconds{{variant="{SERVER}",quantile="0.5",'
            f'category="all",concurrency="{conc}"}})'
        )
        rows.append({"concurrency": conc, "ratio": ctx.prom.value(expr, at=end_ts)})
    return rows


def alert_state(ctx: DemoContext) -> None:
    ctx.say("== 8. alert state (Prometheus rules, Alertmanager, the webhook)")
    rules = ctx.prom.alert_rules()
    by_state: dict[str, list[str]] = {}
    for alert in rules:
        by_state.setdefault(str(alert.get("state", "?")), []).append(str(alert.get("name")))
    for state in ("firing", "pending", "inactive"):
        names = by_state.get(state, [])
        ctx.say(f"   {state:<8} {len(names)}: {', '.join(sorted(names)) or '-'}")
    am_url = ctx.stack["alertmanager"]["url"]
    held = httpx.get(f"{am_url}/api/v2/alerts", timeout=5).json()
    ctx.say(
        f"   Alertmanager ({am_url}) holds {len(held)} alert(s)"
        + (": " + ", ".join(a["labels"].get("alertname", "?") for a in held) if held else "")
    )
    notes = ctx.webhook.received() if ctx.webhook else []
    delivered = [
        f'{a.get("labels", {}).get("alertname")}{{variant="{a.get("labels", {}).get("variant")}'
        f'"}} {a.get("status")}'
        for n in notes
        for a in n.alerts()
    ]
    ctx.say(
        f"   the webhook received {len(notes)} notification(s)"
        + (": " + ", ".join(delivered) if delivered else "")
    )
    margin = ctx.prom.value("specload:tpot_regression_margin:ratio") or 0.10
    rows = _ratios_per_level(ctx)
    for row in rows:
        ratio = row["ratio"]
        verdict = "-" if ratio is None else ("above" if ratio > 1 + margin else "below")
        ctx.say(
            f"   TPOT of '{SERVER}' (now {RELOAD_AS}) / its baseline over the sweep's level "
            f"c{row['concurrency']}: {'-' if ratio is None else f'{ratio:.2f}x'} "
            f"({verdict} the alert's threshold {1 + margin:.2f}x)"
        )
    ctx.record(
        "alerts",
        {
            "rules": by_state,
            "alertmanager": len(held),
            "webhook_notifications": len(notes),
            "webhook_alerts": delivered,
            "tpot_ratio_per_level": rows,
        },
    )
