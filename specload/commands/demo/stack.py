"""Stage 1, ``specload stack up`` (the demo profile of the rules, the webhook), and stage 9,
``specload stack down``."""

from __future__ import annotations

from pathlib import Path

import httpx

from specload.commands.demo.constants import HOST, SERVER, TPOT_ALERT
from specload.commands.demo.context import DemoContext, _wait_for
from specload.commands.demo.webhook import WebhookReceiver, _webhook_url
from specload.durations import parse_duration
from specload.errors import UsageError
from specload.promapi import PrometheusAPI
from specload.stack import control
from specload.stack.configs import use_rule_profile
from specload.stack.plan import StackOptions, find_repo
from specload.stack.rules import DEMO, DEMO_TIME_SCALE, duration_s
from specload.stack.state import load
from specload.sweep.ports import free_port

# --- 1. stack up ------------------------------------------------------------------------------


def _switch_rules(ctx: DemoContext, repo: Path) -> list[str]:
    """The stack's Prometheus on the demo profile of the rules, checked by asking it."""
    patterns = use_rule_profile(ctx.state_dir, repo, DEMO)
    url = str(ctx.stack["prometheus"]["url"])
    httpx.post(url + "/-/reload", timeout=30).raise_for_status()
    want = duration_s(DEMO.for_regression)

    def loaded() -> bool:
        rule = next((r for r in ctx.prom.alert_rules() if r.get("name") == TPOT_ALERT), None)
        return rule is not None and float(rule.get("duration") or 0) == want

    if not _wait_for(loaded, timeout_s=10):
        raise UsageError(
            f"demo: Prometheus did not load the demo profile of the rules ({patterns[0]}); "
            f"see {ctx.state_dir / 'logs' / 'prometheus.log'}",
            exit_code=1,
        )
    return patterns


def stack_up(ctx: DemoContext) -> None:
    args = ctx.args
    ctx.say(
        f"== 1. specload stack up: a simulated vLLM server '{SERVER}' ({args.time_scale:g}x "
        f"faster than the reference deployment, ratios kept: every figure below is followed by "
        f"[its reading on the reference scale]; each load takes {args.load_time_s:g}s here, "
        "~30 min for the 1T-parameter reference model), the exporter, Prometheus with the "
        "demo profile of the rules, Alertmanager"
    )
    repo = find_repo()
    ctx.webhook = WebhookReceiver(_webhook_url(repo))
    busy = ctx.webhook.start()
    ctx.loadgen_address = f"{HOST}:{free_port(HOST)}"
    ctx.baseline_file = ctx.out / "baseline" / "baseline.json"
    options = StackOptions(
        state_dir=ctx.state_dir,
        repo=repo,
        variants=(SERVER,),
        free_ports=True,
        load_time_s=args.load_time_s,
        time_scale=args.time_scale,
        scrape_interval_s=parse_duration(
            args.scrape_interval, name="--scrape-interval", allow_zero=False
        ),
        baselines=(ctx.baseline_file,),
    )
    ctx.stack_running = True  # from here on, a failure or Ctrl-C runs `stack down`
    try:
        code = control.up(options, timeout_s=120)
    except UsageError:
        ctx.stack_running = False  # refused before starting anything
        raise
    if code != 0:
        ctx.stack_running = False  # `up` stopped what it had started
        raise UsageError(
            f"demo: the stack did not come up; logs in {ctx.state_dir / 'logs'}", exit_code=1
        )
    state = load(ctx.state_dir)
    assert state is not None
    ctx.stack = {
        p.name: {
            "kind": p.kind,
            "url": p.url,
            "ports": p.ports,
            "pid": p.pid,
            "start_ticks": p.start_ticks,
        }
        for p in state.parts
    }
    ctx.prometheus = PrometheusAPI(str(ctx.stack["prometheus"]["url"]))
    rule_files = _switch_rules(ctx, repo)
    clock = (
        f"at this time scale {DEMO.window} is "
        f"{duration_s(DEMO.window) * args.time_scale / 60:g} reference minutes"
    )
    ctx.say(
        f"   Prometheus runs the demo profile (deploy/prometheus/{DEMO.folder}: windows "
        f"{DEMO.window}, long windows {DEMO.long_window}, for: {DEMO.for_regression} / "
        f"{DEMO.for_traffic}, production's thresholds; {clock}), rendered from "
        "deploy/prometheus/source like the production rules (python -m specload.stack.rules)"
    )
    if args.time_scale != DEMO_TIME_SCALE:
        ctx.say(
            f"   note: the demo profile is made for time scale {DEMO_TIME_SCALE}, this run "
            f"uses {args.time_scale:g}"
        )
    ctx.say(
        "   client metrics of every run below: "
        f"{ctx.loadgen_address}/metrics, scraped as job specload-loadgen; Alertmanager's "
        f"webhook {ctx.webhook.url}: "
        + (f"not listening ({busy}): deliveries are not seen" if busy else "the demo listens")
    )
    ctx.record(
        "stack",
        {
            "state_dir": str(ctx.state_dir),
            "parts": ctx.stack,
            "rules_profile": DEMO.name,
            "rule_files": rule_files,
            "loadgen": ctx.loadgen_address,
            "webhook": ctx.webhook.url,
            "webhook_listening": busy is None,
        },
    )


# --- 9. down ------------------------------ ----------------------------------------------------


def stack_down(ctx: DemoContext) -> None:
    if ctx.args.keep_stack:
        ctx.stack_running = False  # not stopped at exit (Ctrl-C or an error before here does)
        if ctx.prometheus is not None:
            ctx.prometheus.close()
        ctx.record("stack_down", False)
        prom = ctx.stack["prometheus"]["url"]
        ctx.say("== 9. the stack keeps running (--keep-stack)")
        ctx.say(
            f"   Prometheus {prom}/graph  (alerts {prom}/alerts, targets {prom}/targets); "
            f"Alertmanager {ctx.stack['alertmanager']['url']}"
        )
        ctx.say(
            "   Grafana: import grafana/dashboards/*.json with this Prometheus as data source "
            "(or docker compose in deploy/compose/ for a provisioned one)"
        )
        ctx.say(f"   stop it with: specload stack down --state-dir {ctx.state_dir}")
        return
    ctx.say("== 9. specload stack down")
    _down(ctx)


def _down(ctx: DemoContext) -> None:
    if ctx.webhook is not None:
        ctx.webhook.stop()
    # a prediction still running (a daemon thread) ends with the process
    ctx.predict_job = None
    if not ctx.stack_running:
        return
    ctx.stack_running = False
    if ctx.prometheus is not None:
        ctx.prometheus.close()
    control.down(ctx.state_dir)
    ctx.record("stack_down", True)
