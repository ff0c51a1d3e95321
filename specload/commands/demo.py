"""``specload demo``: the whole story on the local stack, no GPU needed.

The reference deployment's own experiment (``docs/demo.md``), on a simulated vLLM that runs
:data:`~specload.stack.rules.DEMO_TIME_SCALE` times faster than it (every figure is printed
beside its reading on the reference scale: times x the time scale, rates / it). Stages, in
order (each a small function over a shared :class:`DemoContext`):

1. ``specload stack up`` under ``OUT/stack`` on free ports: one simulated server ``baseline``
   (the deployment), the exporter, Prometheus — switched to the *demo profile* of the rules
   (``deploy/prometheus/demo``, rendered from the same source as production by
   :mod:`specload.stack.rules`: shorter windows and ``for:``, the same thresholds) — and
   Alertmanager, whose committed webhook receiver the demo plays;
2. the baseline sweep over the reference's four prompt types at ``max_tokens`` 4096, as the
   reference measured (``specload run --record-token-ids``, client metrics scraped by the
   stack's Prometheus): per type median TPOT against the reference's table, how many requests
   reached their answer; ``baseline export``, served by the exporter;
3. the reference's fifth prompt (long reasoning) at the same budget: it ends inside reasoning,
   and the sweep's truncation guard says so — while ``specload predict`` runs beside it;
4. the prediction of the n-gram variant from the baseline sweep alone, as the decision it
   supports (``… slower at concurrency 1, … at 4: not worth a 30-minute reload``);
5. ``stack reload baseline --as ngram``, watched live in Prometheus;
6. the reloaded server under steady load: ``SpecloadTPOTRegression`` goes pending, fires and
   reaches the webhook (each moment printed);
7. the ngram sweep and the comparison, then the prediction of stage 4 beside what was
   measured (``specload predict --measured``);
8. the alert state from Prometheus, Alertmanager and the webhook;
9. ``stack down`` (also on Ctrl-C and errors; ``--keep-stack`` keeps it), then one verdict
   per variant, where the report is, and the wall time.

The facts of the story are written to ``OUT/demo.json`` as they are learnt.
"""

from __future__ import annotations

import argparse
import contextlib
import http.server
import io
import json
import math
import shutil
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from types import FrameType
from typing import IO, Any
from urllib.parse import urlsplit

import httpx

from specload import vllm_metrics as vm
from specload.durations import parse_duration
from specload.errors import UsageError
from specload.promapi import PrometheusAPI, PrometheusError
from specload.results.aggregate import finite_number, level_window
from specload.results.writer import atomic_write_bytes, dump_json, prepare_out_dir
from specload.stack.rules import DEMO, DEMO_TIME_SCALE, duration_s
from specload.sweep.ports import free_port

#: The stack's one server: it starts as ``baseline`` and is reloaded into ``ngram``.
SERVER = "baseline"
RELOAD_AS = "ngram"
VARIANTS = ("baseline", "ngram")
HOST = "127.0.0.1"

#: The reference deployment (``shared/REFERENCE.md``): single stream, max_tokens 4096,
#: reasoning counted — median TPOT per prompt type.
REFERENCE_MAX_TOKENS = 4096
REFERENCE_TPOT_MS: Mapping[str, float] = {
    "coding": 16.0,
    "math": 12.8,
    "structured": 13.1,
    "explanation": 12.6,
}
REFERENCE_TYPES = tuple(REFERENCE_TPOT_MS)
#: The reference's fifth prompt, which spent all 4096 tokens reasoning.
FIFTH_PROMPT = "long_reasoning"
FIFTH_REQUESTS = 12
FIFTH_CONCURRENCY = 4
TPOT_ALERT = "SpecloadTPOTRegression"
#: How long the steady load of stage 6 waits for the alert to reach the webhook.
ALERT_TIMEOUT_S = 150.0

#: Option defaults: (normal, --quick).
DEFAULTS: dict[str, tuple[str, str]] = {
    "concurrency": ("1,4", "1,4"),
    "warmup": ("2s", "1s"),
    "duration": ("20s", "10s"),
    "max_tokens": (str(REFERENCE_MAX_TOKENS), str(REFERENCE_MAX_TOKENS)),
    "time_scale": (str(DEMO_TIME_SCALE), str(DEMO_TIME_SCALE)),
    "load_time": ("8s", "3s"),
    "scrape_interval": ("1s", "1s"),
}


# --- the webhook receiver ---------------------------------------------------------------------


@dataclass
class Notification:
    received_at: float  # time.time()
    payload: dict[str, Any]

    def alerts(self) -> list[dict[str, Any]]:
        alerts = self.payload.get("alerts")
        return [a for a in alerts if isinstance(a, dict)] if isinstance(alerts, list) else []


class WebhookReceiver:
    """Alertmanager's webhook receiver of ``deploy/alertmanager/alertmanager.yml``, played by
    the demo: every POST to its path is kept with the time it arrived."""

    def __init__(self, url: str) -> None:
        self.url = url
        parts = urlsplit(url)
        self.host = parts.hostname or HOST
        self.port = parts.port or 80
        self.path = parts.path or "/"
        self.notifications: list[Notification] = []
        self._lock = threading.Lock()
        self._server: http.server.ThreadingHTTPServer | None = None

    def start(self) -> str | None:
        """Listen; None, or why it cannot (the port is taken)."""
        keep, lock, path = self.notifications, self._lock, self.path

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                body = self.rfile.read(min(length, 1 << 22))
                try:
                    payload = json.loads(body)
                except ValueError:
                    payload = None
                if self.path.split("?")[0] == path and isinstance(payload, dict):
                    with lock:
                        keep.append(Notification(time.time(), payload))
                self.send_response(200)
                self.end_headers()

            def log_message(self, format: str, *args: Any) -> None:
                pass

        try:
            self._server = http.server.ThreadingHTTPServer((self.host, self.port), Handler)
        except OSError as exc:
            return f"{self.host}:{self.port} {exc.strerror or exc}"
        threading.Thread(target=self._server.serve_forever, daemon=True).start()
        return None

    def stop(self) -> None:
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            self._server = None

    def received(self) -> list[Notification]:
        with self._lock:
            return list(self.notifications)


def _webhook_url(repo: Path) -> str:
    """The webhook of the committed Alertmanager config's default receiver."""
    import yaml  # noqa: PLC0415

    config = yaml.safe_load((repo / "deploy" / "alertmanager" / "alertmanager.yml").read_text())
    receiver = config["route"]["receiver"]
    for entry in config.get("receivers") or []:
        if entry.get("name") == receiver and entry.get("webhook_configs"):
            return str(entry["webhook_configs"][0]["url"])
    raise UsageError("deploy/alertmanager/alertmanager.yml: no webhook for the default receiver")


# --- the context ------------------------------------------------------------------------------


@dataclass
class DemoContext:
    args: argparse.Namespace
    out: Path
    state_dir: Path
    stack: dict[str, Any] = field(default_factory=dict)  # part name -> {url, ports, pid…}
    prometheus: PrometheusAPI | None = None
    results: dict[str, Path] = field(default_factory=dict)
    baseline_file: Path | None = None
    comparison: Path | None = None
    stack_running: bool = False
    facts: dict[str, Any] = field(default_factory=dict)
    started: float = field(default_factory=time.monotonic)
    webhook: WebhookReceiver | None = None
    loadgen_address: str | None = None
    #: The simulator's time scale as it reports it (``server_time_scale`` of the sweeps).
    time_scale: float | None = None
    predict_job: tuple[subprocess.Popen[str], float] | None = None

    def say(self, text: str) -> None:
        print(text, flush=True)

    def record(self, key: str, value: Any) -> None:
        """Add a fact of the story to ``demo.json`` (written at once, atomically)."""
        self.facts[key] = value
        atomic_write_bytes(self.out / "demo.json", dump_json(self.facts))

    @property
    def server_url(self) -> str:
        return str(self.stack[SERVER]["url"])

    @property
    def prom(self) -> PrometheusAPI:
        assert self.prometheus is not None
        return self.prometheus

    @property
    def scale(self) -> float:
        """Reference time / simulator time (1: a real server)."""
        if self.time_scale is not None:
            return self.time_scale
        return float(getattr(self.args, "time_scale", 1.0) or 1.0)

    def ref_ms(self, sim_ms: Any) -> float | None:
        v = finite_number(sim_ms)
        return None if v is None else v * self.scale

    def both(self, sim_ms: Any) -> str:
        """``0.51 ms [15.3 ms]``: the simulator's figure, then on the reference scale."""
        v = finite_number(sim_ms)
        if v is None:
            return "-"
        return f"{_time(v)} [{_time(v * self.scale)}]"


Stage = Callable[[DemoContext], None]


def _time(ms: float | None) -> str:
    if ms is None:
        return "-"
    if ms >= 60_000:
        return f"{ms / 60_000:.1f} min"
    if ms >= 1000:
        return f"{ms / 1000:.2f} s"
    return f"{ms:.2f} ms"


def _specload(*argv: str) -> list[str]:
    return [sys.executable, "-m", "specload", *argv]


def _stack(*argv: str) -> int:
    """``specload stack ARGV…`` in this process (its output goes to ours)."""
    from specload.commands import stack as stack_cli  # noqa: PLC0415

    parser = argparse.ArgumentParser(prog="specload stack")
    stack_cli.add_arguments(parser)
    return stack_cli.run(parser.parse_args(list(argv)))


def _wait_for(check: Callable[[], Any], timeout_s: float, every_s: float = 0.25) -> Any:
    deadline = time.monotonic() + timeout_s
    result = check()
    while not result and time.monotonic() < deadline:
        time.sleep(every_s)
        result = check()
    return result


def _stamp(t: float | None) -> str:
    return "-" if t is None else datetime.fromtimestamp(t).strftime("%H:%M:%S.%f")[:-4]


# --- 1. stack up ------------------------------------------------------------------------------


def _switch_rules(ctx: DemoContext, repo: Path) -> list[str]:
    """The stack's Prometheus on the demo profile of the rules, checked by asking it."""
    from specload.stack.configs import use_rule_profile  # noqa: PLC0415

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
    from specload.stack.plan import find_repo  # noqa: PLC0415
    from specload.stack.state import load  # noqa: PLC0415

    repo = find_repo()
    ctx.webhook = WebhookReceiver(_webhook_url(repo))
    busy = ctx.webhook.start()
    ctx.loadgen_address = f"{HOST}:{free_port(HOST)}"
    ctx.baseline_file = ctx.out / "baseline" / "baseline.json"
    ctx.stack_running = True  # from here on, a failure or Ctrl-C runs `stack down`
    try:
        code = _stack(
            "up",
            "--state-dir",
            str(ctx.state_dir),
            "--variants",
            SERVER,
            "--free-ports",
            "--load-time",
            f"{args.load_time_s:g}s",
            "--time-scale",
            f"{args.time_scale:g}",
            "--scrape-interval",
            args.scrape_interval,
            "--baseline",
            str(ctx.baseline_file),
            "--timeout",
            "120s",
        )
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


# --- runs -------------------------------------------------------------------------------------


def _run_cmd(
    ctx: DemoContext,
    variant: str,
    out: Path,
    *,
    prompts: str,
    concurrency: str | None = None,
    warmup: str | None = None,
    duration: str | None = None,
    requests: int | None = None,
    extra: tuple[str, ...] = (),
    progress: str | None = None,
) -> list[str]:
    """``specload run`` of the stack's server as ``variant``, its client metrics served where
    the stack's Prometheus scrapes them (the target list is labelled with ``variant``)."""
    from specload.stack.configs import write_loadgen_targets  # noqa: PLC0415

    args = ctx.args
    assert ctx.loadgen_address is not None
    write_loadgen_targets(ctx.state_dir, ctx.loadgen_address, {"variant": variant})
    window = ["--requests", str(requests)] if requests is not None else ["--duration", duration]
    assert requests is not None or duration is not None
    return _specload(
        "run",
        "--host",
        ctx.server_url,
        "--variant",
        variant,
        "--prompts",
        prompts,
        "--concurrency",
        concurrency or args.concurrency,
        "--warmup",
        warmup if warmup is not None else args.warmup,
        *window,
        "--max-tokens",
        str(args.max_tokens),
        "--prompt-seed",
        str(args.seed),
        "--ready-timeout",
        "2m",
        "--out",
        str(out),
        "--metrics-address",
        ctx.loadgen_address,
        "--progress",
        progress or ("auto" if sys.stdout.isatty() else "plain"),
        *extra,
    )


def _wait_run(proc: subprocess.Popen[Any], what: str, out: Path, ok: tuple[int, ...] = (0,)) -> int:
    """Wait for a run; Ctrl-C reaches it too (same terminal), SIGTERM to us is passed on."""
    try:
        code = proc.wait()
    except BaseException:
        if proc.poll() is None:
            proc.send_signal(signal.SIGINT)
        try:
            proc.wait(30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        raise
    if code not in ok:
        raise UsageError(f"demo: {what} failed (exit {code}); see {out}", exit_code=1)
    return code


def _sweep(ctx: DemoContext, variant: str, *extra: str) -> Path:
    out = ctx.out / variant
    cmd = _run_cmd(
        ctx,
        variant,
        out,
        prompts="builtin:" + ",".join(REFERENCE_TYPES),
        duration=ctx.args.duration,
        extra=extra,
    )
    _wait_run(subprocess.Popen(cmd), f"the sweep of {variant}", out)
    ctx.results[variant] = out
    return out


def _learn_time_scale(ctx: DemoContext, summary: Mapping[str, Any]) -> None:
    scale = finite_number(summary.get("server_time_scale"))
    if scale is not None and scale > 0:
        ctx.time_scale = scale


# --- 2. baseline sweep --------------------------------------------------------------------------


def _category_rows(ctx: DemoContext, level: Mapping[str, Any]) -> list[dict[str, Any]]:
    rows = []
    for name in REFERENCE_TYPES:
        stats = (level.get("categories") or {}).get(name)
        if not isinstance(stats, dict):
            continue
        tpot = finite_number(stats.get("median_tpot_ms"))
        ttfct = finite_number(stats.get("median_ttfct_ms"))
        rows.append(
            {
                "category": name,
                "completed": int(stats.get("completed") or 0),
                "reasoning_truncated": int(stats.get("reasoning_truncated") or 0),
                "median_tpot_ms": tpot,
                "ref_median_tpot_ms": ctx.ref_ms(tpot),
                "reference_deployment_tpot_ms": REFERENCE_TPOT_MS[name],
                "median_ttfct_ms": ttfct,
                "ref_median_ttfct_ms": ctx.ref_ms(ttfct),
            }
        )
    return rows


def _level_rows(ctx: DemoContext, summary: Mapping[str, Any]) -> list[dict[str, Any]]:
    rows = []
    for level in summary.get("levels", []):
        tpot = finite_number(level.get("median_tpot_ms"))
        thr = finite_number(level.get("output_throughput"))
        rows.append(
            {
                "concurrency": level.get("concurrency"),
                "completed": int(level.get("completed") or 0),
                "reasoning_truncated": int(level.get("reasoning_truncated") or 0),
                "median_tpot_ms": tpot,
                "ref_median_tpot_ms": ctx.ref_ms(tpot),
                "output_throughput": thr,
                "ref_output_throughput": None if thr is None else thr / ctx.scale,
                "warnings": list(level.get("warnings") or []),
            }
        )
    return rows


def _say_answers(ctx: DemoContext, levels: list[dict[str, Any]]) -> dict[str, int]:
    completed = sum(r["completed"] for r in levels)
    truncated = sum(r["reasoning_truncated"] for r in levels)
    ctx.say(
        f"   {completed - truncated} of {completed} completed requests reached their answer"
        + (
            f" ({truncated} ended inside reasoning at max_tokens {ctx.args.max_tokens}; the "
            "sweep warns after a level where more than 20% do)"
            if truncated
            else f" (none ended inside reasoning at max_tokens {ctx.args.max_tokens})"
        )
    )
    return {"completed": completed, "reasoning_truncated": truncated}


def _client_metrics_seen(ctx: DemoContext, variant: str) -> float | None:
    """The run's finished requests as the stack's Prometheus scraped them from the client."""
    expr = f'sum(max_over_time(specload_client_requests_total{{variant="{variant}"}}[10m]))'
    value = _wait_for(lambda: ctx.prom.value(expr), timeout_s=5)
    return finite_number(value)


def baseline_sweep(ctx: DemoContext) -> None:
    args = ctx.args
    ctx.say(
        f"== 2. baseline sweep of {ctx.server_url}: the reference's four prompt types "
        f"({', '.join(REFERENCE_TYPES)}) at max_tokens {args.max_tokens} as it measured them, "
        f"concurrency {args.concurrency}, warm-up {args.warmup}, window {args.duration} per level; "
        "token ids recorded (tokens.jsonl, for the prediction)"
    )
    from specload.compare.baseline import baseline_from_summary  # noqa: PLC0415
    from specload.results import read_summary  # noqa: PLC0415

    out = _sweep(ctx, "baseline", "--record-token-ids")
    summary = read_summary(out)
    _learn_time_scale(ctx, summary)
    levels = _level_rows(ctx, summary)
    for row in levels:
        thr, ref_thr = row["output_throughput"], row["ref_output_throughput"]
        ctx.say(
            f"   c{row['concurrency']}: median TPOT {ctx.both(row['median_tpot_ms'])}, "
            + ("" if thr is None else f"{thr:.0f} output tok/s [{ref_thr:.1f} tok/s], ")
            + f"{row['completed']} requests"
        )
    answers = _say_answers(ctx, levels)
    first: Mapping[str, Any] = next(iter(summary.get("levels", [])), {})
    categories = _category_rows(ctx, first)
    ctx.say(
        f"   per prompt type at concurrency {first.get('concurrency')}, median TPOT [reference "
        "scale] against the reference deployment's, and time to the first answer token:"
    )
    for row in categories:
        ctx.say(
            f"     {row['category']:<12} {ctx.both(row['median_tpot_ms'])}, reference "
            f"{row['reference_deployment_tpot_ms']:.1f} ms; "
            f"{row['completed'] - row['reasoning_truncated']} of {row['completed']} answered, "
            f"TTFCT {ctx.both(row['median_ttfct_ms'])}"
        )
    ranked = [r for r in categories if r["median_tpot_ms"] is not None]
    slowest = max(ranked, key=lambda r: r["median_tpot_ms"])["category"] if ranked else None
    if slowest is not None:
        ctx.say(
            f"   {slowest} is the slowest"
            + (
                ", as on the reference: its long reasoning chain makes every step attend to a "
                "longer context"
                if slowest == "coding"
                else f" (on the reference: coding, {REFERENCE_TPOT_MS['coding']} ms)"
            )
        )
    baseline = baseline_from_summary(summary, str(out))
    assert ctx.baseline_file is not None
    atomic_write_bytes(ctx.baseline_file, dump_json(baseline))
    ctx.say(
        f"   specload baseline export {out} -> {ctx.baseline_file} "
        f"({len(baseline['entries'])} entries), served by the exporter"
    )
    expr = f'specload_baseline_tpot_seconds{{variant="{SERVER}",quantile="0.5",category="all"}}'
    seen = _wait_for(lambda: ctx.prom.samples(expr), timeout_s=30)
    in_prom = sorted(seen, key=lambda s: float(s[0].get("concurrency") or 0))
    ctx.say(
        "   Prometheus has it: baseline median TPOT "
        + ", ".join(
            f"{ctx.both(v * 1000)} at concurrency {m.get('concurrency')}" for m, v in in_prom
        )
    )
    client = _client_metrics_seen(ctx, "baseline")
    ctx.say(
        "   and the load generator's own metrics (Load test board, reasoning-truncated alert): "
        + (f"{client:.0f} requests of baseline" if client is not None else "none seen")
    )
    ctx.record(
        "baseline",
        {
            "file": str(ctx.baseline_file),
            "entries": len(baseline["entries"]),
            "in_prometheus": len(in_prom),
            "time_scale": ctx.scale,
            "levels": levels,
            "answers": answers,
            "categories": categories,
            "slowest_category": slowest,
            "client_requests_in_prometheus": client,
        },
    )


# --- 3. the fifth prompt ------------------------------------------------------------------------


def fifth_prompt(ctx: DemoContext) -> None:
    """The reference's fifth prompt at the same budget (while the prediction runs)."""
    ctx.predict_job = _start_predict(ctx)
    out = ctx.out / "fifth-prompt"
    ctx.say(
        f"== 3. the reference's fifth prompt type, {FIFTH_PROMPT}: {FIFTH_REQUESTS} requests, "
        f"{FIFTH_CONCURRENCY} at a time, max_tokens {ctx.args.max_tokens} (specload predict "
        "runs meanwhile)"
    )
    cmd = _run_cmd(
        ctx,
        "baseline",
        out,
        prompts=f"builtin:{FIFTH_PROMPT}",
        concurrency=str(FIFTH_CONCURRENCY),
        warmup="0s",
        requests=FIFTH_REQUESTS,
        extra=("--no-plots",),
    )
    _wait_run(subprocess.Popen(cmd), f"the {FIFTH_PROMPT} run", out)
    ctx.results["fifth-prompt"] = out
    from specload.results import read_summary  # noqa: PLC0415

    levels = read_summary(out).get("levels", [])
    completed = sum(int(lv.get("completed") or 0) for lv in levels)
    truncated = sum(int(lv.get("reasoning_truncated") or 0) for lv in levels)
    warnings = [w for lv in levels for w in lv.get("warnings") or []]
    guard = [w for w in warnings if "ended inside reasoning" in w]
    ctx.say(
        f"   {truncated} of {completed} spent all {ctx.args.max_tokens} tokens reasoning and "
        "produced no answer, as the reference's fifth prompt did: "
        + (
            "the sweep's truncation guard said so above (no TTFCT or content tokens measured "
            "for them; a budget that fits)"
            if guard
            else "below the sweep's 20% warning threshold this time"
        )
    )
    ctx.record(
        "fifth_prompt",
        {
            "category": FIFTH_PROMPT,
            "dir": str(out),
            "completed": completed,
            "reasoning_truncated": truncated,
            "guard_warnings": guard,
        },
    )


# --- 4. the n-gram variant predicted from the baseline ------------------------------------------


def _ngram_preset() -> tuple[int, int, int]:
    """k and the lookup window of the simulator's n-gram variant (what the reload serves)."""
    from simulator.variants import PRESETS  # noqa: PLC0415

    v = PRESETS[RELOAD_AS]
    return v.num_speculative_tokens, v.prompt_lookup_min, v.prompt_lookup_max


def _start_predict(
    ctx: DemoContext, measured: Path | None = None
) -> tuple[subprocess.Popen[str], float]:
    """``specload predict`` of the baseline sweep as the n-gram variant (``--measured``: beside
    the variant's own sweep), writing ``OUT/prediction``, started in the background."""
    k, lo, hi = _ngram_preset()
    cmd = _specload(
        "predict",
        str(ctx.results["baseline"]),
        "--method",
        "ngram",
        "--num-speculative-tokens",
        str(k),
        "--prompt-lookup-min",
        str(lo),
        "--prompt-lookup-max",
        str(hi),
        "--json",
        "--out",
        str(ctx.out / "prediction"),
        *(("--measured", str(measured)) if measured is not None else ()),
    )
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    return proc, time.monotonic()


def _finish_predict(job: tuple[subprocess.Popen[str], float]) -> tuple[dict[str, Any] | str, float]:
    """The prediction's JSON, or one line saying why not; and how long it took."""
    import orjson  # noqa: PLC0415

    proc, t0 = job
    try:
        stdout, stderr = proc.communicate(timeout=max(1.0, 120 - (time.monotonic() - t0)))
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.communicate()
        return "specload predict did not finish within 120s", time.monotonic() - t0
    took_s = time.monotonic() - t0
    if proc.returncode != 0:
        lines = [ln for ln in stderr.splitlines() if ln.strip()]
        error = f"specload predict failed (exit {proc.returncode}): {lines[-1] if lines else '-'}"
        return error, took_s
    try:
        data = orjson.loads(stdout)
    except orjson.JSONDecodeError:
        return "specload predict printed no JSON", took_s
    if not isinstance(data, dict) or not isinstance(data.get("levels"), list):
        return "specload predict printed JSON without levels", took_s
    return data, took_s


def _predict(ctx: DemoContext, measured: Path | None = None) -> dict[str, Any] | str:
    return _finish_predict(_start_predict(ctx, measured))[0]


def _signed_pct(value: Any) -> str:
    v = finite_number(value)
    return "-" if v is None else f"{100 * v:+.1f}%"


def _change(level: Mapping[str, Any]) -> str:
    """``14% slower`` / ``8% faster`` from the predicted and the baseline median."""
    base, pred = (
        finite_number(level.get("baseline_median_tpot_ms")),
        finite_number(level.get("predicted_median_tpot_ms")),
    )
    if base is None or pred is None or base <= 0:
        return "-"
    diff = pred / base - 1
    return f"{abs(diff):.0%} {'slower' if diff > 0 else 'faster'}"


def predict_variant(ctx: DemoContext) -> None:
    k, lo, hi = _ngram_preset()
    ctx.say(
        f"== 4. specload predict {ctx.results['baseline']} --method ngram "
        f"--num-speculative-tokens {k} --prompt-lookup-min {lo} --prompt-lookup-max {hi}: "
        f"the {RELOAD_AS} variant forecast from the baseline sweep alone, before the reload "
        "(~30 min on the reference model)"
    )
    job, ctx.predict_job = ctx.predict_job, None
    data, took_s = _finish_predict(job or _start_predict(ctx))
    if isinstance(data, str):
        ctx.say(f"   no prediction: {data}; going on without it")
        ctx.record("prediction", {"ok": False, "error": data, "took_s": round(took_s, 1)})
        return
    levels = [lv for lv in data["levels"] if isinstance(lv, dict)]
    conf = finite_number(data.get("confidence")) or 0.95
    for lv in levels:
        speedup, acceptance = (
            finite_number(lv.get("speedup")),
            finite_number(lv.get("acceptance_rate")),
        )
        low, high = (
            finite_number(lv.get("predicted_low_ms")),
            finite_number(lv.get("predicted_high_ms")),
        )
        interval = (
            ""
            if low is None or high is None
            else f"{conf:.0%} interval {ctx.both(low)}..{ctx.both(high)}, "
        )
        ctx.say(
            f"   n-gram k={k} at concurrency {lv.get('concurrency')}: predicted {_change(lv)} "
            f"(TPOT {ctx.both(lv.get('predicted_median_tpot_ms'))}, {interval}vs "
            f"{ctx.both(lv.get('baseline_median_tpot_ms'))} measured baseline; speedup "
            f"{'-' if speedup is None else f'{speedup:.3f}x'}, acceptance "
            f"{'-' if acceptance is None else f'{acceptance:.3f}'}): {lv.get('verdict', '-')}"
        )
        if lv.get("extrapolated"):
            ctx.say(
                f"     extrapolated: a step there holds up to {lv.get('step_tokens_max')} tokens, "
                "more than any baseline level measured (`specload predict --plan` names the "
                "levels to add)"
            )
    for warning in data.get("warnings") or []:
        ctx.say(f"   specload predict: warning: {' '.join(str(warning).split())}")
    faster = [lv.get("concurrency") for lv in levels if lv.get("verdict") == "faster"]
    if faster:
        decision = (
            "worth the reload (predicted faster at concurrency "
            + ", ".join(str(c) for c in faster)
            + ")"
        )
    else:
        decision = "not worth a 30-minute reload"
    per_level = []
    for i, lv in enumerate(levels):
        where = (
            f"at concurrency {lv.get('concurrency')}" if i == 0 else f"at {lv.get('concurrency')}"
        )
        change = (
            _change(lv) if lv.get("verdict") != "within noise" else f"within noise ({_change(lv)})"
        )
        figures = (
            f" (TPOT {ctx.both(lv.get('predicted_median_tpot_ms'))} vs "
            f"{ctx.both(lv.get('baseline_median_tpot_ms'))} measured baseline)"
            if i == 0
            else ""
        )
        per_level.append(f"{change} {where}{figures}")
    ctx.say(
        f"   n-gram k={k} predicted {', '.join(per_level) or 'nothing'}: {decision} "
        f"(predicted in {took_s:.1f}s; the demo reloads anyway, to check)"
    )
    ctx.record(
        "prediction",
        {
            "ok": True,
            "dir": str(ctx.out / "prediction"),
            "num_speculative_tokens": k,
            "prompt_lookup_min": lo,
            "prompt_lookup_max": hi,
            "levels": [
                {
                    key: lv.get(key)
                    for key in (
                        "concurrency",
                        "baseline_median_tpot_ms",
                        "predicted_median_tpot_ms",
                        "predicted_low_ms",
                        "predicted_high_ms",
                        "speedup",
                        "verdict",
                        "acceptance_rate",
                    )
                }
                | {
                    "extrapolated": bool(lv.get("extrapolated")),
                    "ref_predicted_median_tpot_ms": ctx.ref_ms(lv.get("predicted_median_tpot_ms")),
                    "ref_baseline_median_tpot_ms": ctx.ref_ms(lv.get("baseline_median_tpot_ms")),
                }
                for lv in levels
            ],
            "worth_reload": bool(faster),
            "decision": decision,
            "took_s": round(took_s, 1),
        },
    )


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
    code = _stack("reload", SERVER, "--as", RELOAD_AS, "--state-dir", str(ctx.state_dir))
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


# --- 7. ngram sweep and comparison --------------------------------------------------------------


def _client_acceptance(summary: Mapping[str, Any]) -> float | None:
    accepted = drafted = 0.0
    for level in summary.get("levels", []):
        server = level.get("server") or {}
        a, d = (
            server.get("spec_decode_num_accepted_tokens"),
            server.get("spec_decode_num_draft_tokens"),
        )
        if a is not None and d:
            accepted, drafted = accepted + float(a), drafted + float(d)
    return accepted / drafted if drafted else None


def _write_report(ctx: DemoContext, cmp_dir: Path) -> Path:
    """``specload compare`` (the report: comparison.md, and comparison.html where it writes
    one; plots), its output kept in ``compare.log``; comparison.html when there is one."""
    from specload.commands import compare as compare_cli  # noqa: PLC0415

    parser = argparse.ArgumentParser(prog="specload compare")
    compare_cli.add_arguments(parser)
    args = parser.parse_args(
        [str(ctx.results[v]) for v in VARIANTS] + ["--out", str(cmp_dir), "--json"]
    )
    buffer = io.StringIO()
    try:
        with contextlib.redirect_stdout(buffer), contextlib.redirect_stderr(buffer):
            compare_cli.run(args)
    except (UsageError, OSError) as exc:
        buffer.write(f"specload compare failed: {exc}\n")
    (cmp_dir / "compare.log").write_text(buffer.getvalue(), encoding="utf-8")
    html = cmp_dir / "comparison.html"
    return html if html.exists() else cmp_dir / "comparison.md"


def ngram_sweep_and_compare(ctx: DemoContext) -> None:
    ctx.say(
        f"== 7. {RELOAD_AS} sweep of the same server, then the comparison "
        "(95% bootstrap confidence intervals)"
    )
    out = _sweep(ctx, RELOAD_AS)
    from specload.compare.model import compare_runs, load_run  # noqa: PLC0415 (numpy)
    from specload.compare.report import comparison_markdown, headline  # noqa: PLC0415
    from specload.results import read_summary  # noqa: PLC0415
    from specload.results.writer import atomic_write_text  # noqa: PLC0415

    summary = read_summary(out)
    levels = _level_rows(ctx, summary)
    _say_answers(ctx, levels)
    runs = [load_run(ctx.results[v]) for v in VARIANTS]
    comp = compare_runs(runs)
    cmp_dir = ctx.out / "comparison"
    cmp_dir.mkdir(exist_ok=True)
    report = _write_report(ctx, cmp_dir)
    if not (cmp_dir / "comparison.md").exists():
        atomic_write_text(cmp_dir / "comparison.md", comparison_markdown(comp))
        report = cmp_dir / "comparison.md"
    ctx.comparison = cmp_dir
    lines = headline(comp)
    for line in lines:
        ctx.say("   " + line)
    rows_tpot: list[dict[str, Any]] = []
    for level in comp.levels:
        cell = level.cells.get(("all", "tpot"))
        if cell is None:
            continue
        diff = cell.diffs[1]
        load = finite_number(level.load)
        rows_tpot.append(
            {
                "concurrency": int(load) if load is not None and load.is_integer() else load,
                "baseline_median_tpot_ms": cell.values[0],
                "ngram_median_tpot_ms": cell.values[1],
                "ref_baseline_median_tpot_ms": ctx.ref_ms(cell.values[0]),
                "ref_ngram_median_tpot_ms": ctx.ref_ms(cell.values[1]),
                "rel": None if diff is None else diff.rel,
                "ci_low": None if diff is None else diff.ci_low,
                "ci_high": None if diff is None else diff.ci_high,
                "verdict": cell.verdicts[1],
            }
        )
    ctx.say(
        "   on the reference scale: "
        + "; ".join(
            f"c{v['concurrency']} {_time(finite_number(v['ref_baseline_median_tpot_ms']))} -> "
            f"{_time(finite_number(v['ref_ngram_median_tpot_ms']))}"
            for v in rows_tpot
        )
    )
    for warning in comp.warnings:
        ctx.say(f"   specload compare: warning: {' '.join(warning.split())}")
    client = _client_acceptance(summary)
    prom = ctx.prom.value(
        f'specload_spec_decode_acceptance_ratio{{variant="{SERVER}",window="lifetime"}}'
    )
    ctx.say(
        f"   {RELOAD_AS} acceptance rate: {'-' if client is None else f'{client:.3f}'} from the "
        f"sweep's /metrics scrapes (measured windows), {'-' if prom is None else f'{prom:.3f}'} "
        "in Prometheus (specload_spec_decode_acceptance_ratio, since the reload)"
    )
    ctx.record(
        "comparison",
        {
            "dir": str(cmp_dir),
            "report": str(report),
            "headline": lines,
            "warnings": comp.warnings,
            "levels": rows_tpot,
            "ngram_levels": levels,
            "acceptance_client": client,
            "acceptance_prometheus": prom,
            "client_requests_in_prometheus": _client_metrics_seen(ctx, RELOAD_AS),
        },
    )
    predicted_against_measured(ctx, out)


def predicted_against_measured(ctx: DemoContext, measured: Path) -> None:
    """Stage 4's prediction beside the sweep just measured (``specload predict --measured``)."""
    ctx.say(
        f"   predicted (stage 4, from the baseline alone) against measured ({RELOAD_AS} sweep), "
        "median TPOT per level:"
    )
    data = _predict(ctx, measured=measured)
    versus = data.get("measured") if isinstance(data, dict) else None
    if not isinstance(versus, dict) or not isinstance(versus.get("levels"), list):
        error = data if isinstance(data, str) else "specload predict gave no measured levels"
        ctx.say(f"   no comparison with the prediction: {error}; going on without it")
        ctx.record("predicted_vs_measured", {"ok": False, "error": error})
        return
    levels = [
        {
            key: row.get(key)
            for key in (
                "concurrency",
                "predicted_median_tpot_ms",
                "measured_median_tpot_ms",
                "error_ratio",
                "within_interval",
                "predicted_acceptance_rate",
                "measured_acceptance_rate",
            )
        }
        for row in versus["levels"]
        if isinstance(row, dict)
    ]
    for row in levels:
        ctx.say(
            f"   c{row['concurrency']}: predicted {ctx.both(row['predicted_median_tpot_ms'])}, "
            f"measured {ctx.both(row['measured_median_tpot_ms'])} "
            f"({_signed_pct(row['error_ratio'])}"
            f"{', inside the interval' if row['within_interval'] else ''})"
        )
    totals = versus.get("totals") if isinstance(versus.get("totals"), dict) else {}
    assert isinstance(totals, dict)
    counters = []
    for name in ("drafts", "draft_tokens", "accepted_tokens"):
        v = totals.get(name)
        if isinstance(v, dict) and finite_number(v.get("predicted")) is not None:
            measured_v = finite_number(v.get("measured"))
            counters.append(
                f"{name.replace('_', ' ')} {v['predicted']:.0f} predicted, "
                f"{'-' if measured_v is None else f'{measured_v:.0f}'} measured "
                f"({_signed_pct(v.get('error_ratio'))})"
            )
    if counters:
        ctx.say(
            "   speculative-decoding counters (predicted over the baseline's requests; measured: "
            "the server's, summed over the level windows): " + "; ".join(counters)
        )
    ctx.record(
        "predicted_vs_measured",
        {
            "ok": True,
            "dir": str(ctx.out / "prediction"),
            "levels": levels,
            "totals": {
                n: totals[n] for n in ("drafts", "draft_tokens", "accepted_tokens") if n in totals
            },
            "implied_step_overhead_ms": versus.get("implied_step_overhead_ms"),
        },
    )


# --- 8. alerts ----------------------------------------------------------------------------------


def _ratios_per_level(ctx: DemoContext) -> list[dict[str, Any]]:
    """Server mean TPOT over each ngram level's window / baseline median at that level."""
    from specload.results import read_summary  # noqa: PLC0415

    rows: list[dict[str, Any]] = []
    for level in read_summary(ctx.results[RELOAD_AS]).get("levels", []):
        start_ts, end_ts = level_window(level)
        conc = level.get("concurrency")
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


# --- 9. down, verdicts, and where things are ----------------------------------------------------


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
    if ctx.predict_job is not None:
        ctx.predict_job[0].kill()
        ctx.predict_job[0].communicate()
        ctx.predict_job = None
    if not ctx.stack_running:
        return
    ctx.stack_running = False
    if ctx.prometheus is not None:
        ctx.prometheus.close()
    _stack("down", "--state-dir", str(ctx.state_dir))
    ctx.record("stack_down", True)


def _pct(rel: Any) -> str:
    v = finite_number(rel)
    return "-" if v is None else f"{abs(v):.0%} {'slower' if v > 0 else 'faster'}"


def verdicts(ctx: DemoContext) -> None:
    """One short verdict per variant, where the report is."""
    ctx.say("== verdict")
    comp = ctx.facts.get("comparison") or {}
    rows = [r for r in comp.get("levels") or [] if isinstance(r, dict)]
    slower = bool(rows) and all(
        (finite_number(r.get("ci_low")) or 0) > 0 and r.get("verdict") == "slower" for r in rows
    )
    lines: dict[str, str] = {}
    base = [r for r in (ctx.facts.get("baseline") or {}).get("levels") or [] if r]
    if base:
        figures = ", ".join(
            f"{_time(finite_number(r['ref_median_tpot_ms']))} at concurrency {r['concurrency']}"
            for r in base
        )
        lines["baseline"] = (
            f"baseline: median TPOT {figures} on the reference scale (the reference deployment: "
            f"~13.6 ms single stream)" + (": keep it" if slower else "")
        )
    if rows:
        pred = ctx.facts.get("prediction") or {}
        measured = ", ".join(
            f"{_pct(r.get('rel'))} at {'concurrency ' if i == 0 else ''}{r['concurrency']}"
            for i, r in enumerate(rows)
        )
        alert = ctx.facts.get("alert") or {}
        predicted = ""
        if pred.get("ok"):
            predicted = (
                ", as predicted before the reload"
                if (not pred.get("worth_reload")) == slower
                else f"; predicted before the reload: {pred.get('decision')}"
            )
        lines["ngram"] = (
            f"ngram (k={pred.get('num_speculative_tokens', '?')}): {measured}"
            + (" (95% intervals above zero)" if slower else "")
            + predicted
            + ("; the TPOT alert fired and reached the webhook" if alert.get("received_at") else "")
            + (": not worth a 30-minute reload" if slower else "")
        )
    for line in lines.values():
        ctx.say("   " + line)
    report = comp.get("report")
    if report:
        ctx.say(f"   report: {report}")
    ctx.record("verdicts", lines)
    tell_where(ctx)


def tell_where(ctx: DemoContext) -> None:
    for variant, path in ctx.results.items():
        ctx.say(f"   {variant}: {path}/summary.md, summary.json, requests.jsonl")
    if ctx.baseline_file is not None and ctx.baseline_file.exists():
        ctx.say(f"   baseline for the exporter and alerts: {ctx.baseline_file}")
    prediction = ctx.out / "prediction"
    if (prediction / "prediction.json").exists():
        versus = (ctx.facts.get("predicted_vs_measured") or {}).get("ok")
        ctx.say(
            f"   prediction: {prediction}/prediction.md, prediction.json, prediction.png"
            + (f" (with the measured {RELOAD_AS} sweep beside it)" if versus else "")
        )
    ctx.say(f"   the story's facts: {ctx.out / 'demo.json'}; stack logs: {ctx.state_dir / 'logs'}")
    if not ctx.args.keep_stack:
        ctx.say(
            "   to look around in Prometheus and Grafana afterwards: specload demo --keep-stack"
        )


STAGES: list[Stage] = [
    stack_up,
    baseline_sweep,
    fifth_prompt,
    predict_variant,
    reload_watched,
    alert_under_load,
    ngram_sweep_and_compare,
    alert_state,
    stack_down,
    verdicts,
]


def add_arguments(parser: argparse.ArgumentParser) -> None:
    def default(key: str) -> str:
        normal, quick = DEFAULTS[key]
        return f"default {normal}" + ("" if quick == normal else f"; --quick {quick}")

    parser.add_argument(
        "--out",
        default="demo-results",
        metavar="DIR",
        help="where results and the stack's state go (default demo-results/)",
    )
    parser.add_argument(
        "--quick",
        action="store_true",
        help="shorter sweeps (about 3 minutes in all) with the same story, for tests",
    )
    parser.add_argument(
        "--keep-stack",
        action="store_true",
        help="leave the stack running when the demo completes (Prometheus, "
        "Alertmanager…); Ctrl-C or an error still stops it",
    )
    parser.add_argument("--concurrency", help=f"levels ({default('concurrency')})")
    parser.add_argument("--warmup", help=f"warm-up per level ({default('warmup')})")
    parser.add_argument("--duration", help=f"measured window per level ({default('duration')})")
    parser.add_argument(
        "--max-tokens",
        type=int,
        help=f"max_tokens per request ({default('max_tokens')}, as the reference measured)",
    )
    parser.add_argument(
        "--time-scale",
        type=float,
        help="run the simulated server this many times faster than the reference deployment, "
        f"ratios kept ({default('time_scale')}: the demo profile's clock)",
    )
    parser.add_argument(
        "--load-time", help=f"the simulated (re)load time, wall clock ({default('load_time')})"
    )
    parser.add_argument(
        "--scrape-interval",
        help=f"Prometheus scrape and exporter poll ({default('scrape_interval')})",
    )
    parser.add_argument("--seed", type=int, default=0, help="seed of the prompts")


def _resolve(args: argparse.Namespace) -> None:
    """Defaults filled in and every option checked — before anything starts (a bad
    ``--duration`` is one line now, not after the stack is up and a sweep has run)."""
    from specload.load.options import MAX_TOKENS_LIMIT  # noqa: PLC0415
    from specload.sweep.plan import build_plan  # noqa: PLC0415

    for key, (normal, quick) in DEFAULTS.items():
        if getattr(args, key) is None:
            setattr(args, key, quick if args.quick else normal)
    args.max_tokens = int(args.max_tokens)
    if not 1 <= args.max_tokens <= MAX_TOKENS_LIMIT:
        raise UsageError(
            f"--max-tokens: {args.max_tokens} must be between 1 and {MAX_TOKENS_LIMIT:,}"
        )
    args.time_scale = float(args.time_scale)
    if not (math.isfinite(args.time_scale) and args.time_scale > 0):
        raise UsageError(f"--time-scale: {args.time_scale} must be positive")
    args.load_time_s = parse_duration(args.load_time, name="--load-time", allow_zero=False)
    parse_duration(args.scrape_interval, name="--scrape-interval", allow_zero=False)
    # The sweeps' levels and windows, checked as `specload run` will check them.
    build_plan(
        concurrency=args.concurrency,
        request_rate=None,
        max_concurrency=None,
        warmup=args.warmup,
        duration=args.duration,
        requests=None,
    )


OUTPUTS = (
    "baseline",
    "fifth-prompt",
    "prediction",
    "ngram-steady",
    "ngram",
    "comparison",
    "stack",
    "demo.json",
)


def _clear_previous(out: Path) -> None:
    """Remove a previous demo's outputs from ``out`` (results files are appended to)."""
    from specload.commands.stack import part_health  # noqa: PLC0415
    from specload.stack.state import load  # noqa: PLC0415

    state_dir = out / "stack"
    previous = load(state_dir)
    if previous is not None and any(part_health(p) != "stopped" for p in previous.parts):
        raise UsageError(
            f"--out: a stack is still running in {state_dir} (--keep-stack?); stop it with "
            f"`specload stack down --state-dir {state_dir}` or give another --out"
        )
    present = [name for name in OUTPUTS if (out / name).exists()]
    if present and not (out / "demo.json").exists():
        raise UsageError(
            f"--out {str(out)!r}: holds {', '.join(present)} not written by the "
            "demo; give an empty or new directory"
        )
    for name in present:
        path = out / name
        if path.is_dir():
            shutil.rmtree(path)
        else:
            path.unlink()


def _raise_interrupt(signum: int, frame: FrameType | None) -> None:
    raise KeyboardInterrupt


def _minutes(seconds: float) -> str:
    return f"{int(seconds // 60)} min {seconds % 60:02.0f} s"


def run(args: argparse.Namespace) -> int:
    _resolve(args)
    out = prepare_out_dir(args.out).resolve()
    _clear_previous(out)
    ctx = DemoContext(args, out, out / "stack")
    ctx.record("options", {k: getattr(args, k) for k in (*DEFAULTS, "quick", "keep_stack")})
    previous = signal.signal(signal.SIGTERM, _raise_interrupt)
    code = 0
    try:
        for stage in STAGES:
            stage(ctx)
    except KeyboardInterrupt:
        ctx.say("demo interrupted: stopping the stack")
        code = 130
    finally:
        try:
            _down(ctx)
        finally:
            signal.signal(signal.SIGTERM, previous)
    wall_s = time.monotonic() - ctx.started
    ctx.record("wall_s", round(wall_s, 1))
    ctx.say(f"demo {'done' if code == 0 else 'stopped'} in {_minutes(wall_s)} (wall time)")
    return code


__all__ = ["STAGES", "DemoContext", "Stage", "add_arguments", "run"]
