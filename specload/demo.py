"""``specload demo``: the whole story on the local stack, no GPU needed.

Stages, in order (each a small function over a shared :class:`DemoContext`):

1. ``specload stack up`` under ``OUT/stack`` on free ports: one simulated
   server ``baseline`` (the deployment), the exporter, Prometheus, Alertmanager;
2. a baseline sweep (``specload run --record-token-ids``) of it, ``baseline export``, and
   the baseline served by the exporter (Prometheus shows it);
3. ``specload predict`` of the simulator's n-gram variant from the baseline sweep alone,
   before paying for the reload: predicted TPOT per level and whether the reload is worth it;
4. ``stack reload baseline --as ngram``, watched live in Prometheus
   (``specload_target_state``, reload elapsed, load progress), then the reload
   duration the exporter recorded;
5. an ngram sweep of the same server and the comparison (ngram slower), with
   the acceptance rate from the sweep and from Prometheus, then the prediction of
   stage 3 beside what was measured (``specload predict --measured``);
6. the alert state from Prometheus and Alertmanager, and the ratio behind
   ``SpecloadTPOTRegression`` level by level;
7. ``stack down`` (also on Ctrl-C and errors; ``--keep-stack`` keeps it), then
   where the results, plots, the prediction and the comparison are.

The facts of the story are written to ``OUT/demo.json`` as they are learnt.
"""

from __future__ import annotations

import argparse
import math
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from types import FrameType
from typing import Any

import httpx

from specload import vllm_metrics as vm
from specload.durations import parse_duration
from specload.errors import UsageError
from specload.promapi import PrometheusAPI
from specload.results.aggregate import finite_number, level_window
from specload.results.writer import atomic_write_bytes, dump_json, prepare_out_dir

#: The stack's one server: it starts as ``baseline`` and is reloaded into ``ngram``.
SERVER = "baseline"
RELOAD_AS = "ngram"
VARIANTS = ("baseline", "ngram")

#: Option defaults: (normal, --quick).
DEFAULTS: dict[str, tuple[str, str]] = {
    "concurrency": ("1,4,16", "1,4"),
    "warmup": ("3s", "1s"),
    "duration": ("20s", "4s"),
    "max_tokens": ("128", "48"),
    "time_scale": ("2", "5"),
    "load_time": ("12s", "4s"),
    "scrape_interval": ("1s", "500ms"),
}


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


Stage = Callable[[DemoContext], None]


def _specload(*argv: str) -> list[str]:
    return [sys.executable, "-m", "specload", *argv]


def _stack(*argv: str) -> int:
    """``specload stack ARGV…`` in this process (its output goes to ours)."""
    from specload.stack import cli as stack_cli  # noqa: PLC0415

    parser = argparse.ArgumentParser(prog="specload stack")
    stack_cli.add_arguments(parser)
    return stack_cli.run(parser.parse_args(list(argv)))


# --- 1. stack up ------------------------------------------------------------------------------


def stack_up(ctx: DemoContext) -> None:
    args = ctx.args
    ctx.say(
        f"== 1. specload stack up: a simulated vLLM server '{SERVER}' (time scale "
        f"{args.time_scale:g}x, ratios kept; each load takes {args.load_time_s:g}s here, ~30 min "
        "for the 1T-parameter reference model), the exporter, Prometheus, Alertmanager"
    )
    from specload.stack.state import load  # noqa: PLC0415

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
    ctx.record("stack", {"state_dir": str(ctx.state_dir), "parts": ctx.stack})


# --- 2. baseline sweep --------------------------------------------------------------------------


def _sweep(ctx: DemoContext, variant: str, *extra: str) -> Path:
    """``specload run`` of the stack's server as ``variant`` (``extra``: more of its options);
    Ctrl-C lets it finish cleanly."""
    args = ctx.args
    out = ctx.out / variant
    cmd = _specload(
        "run",
        "--host",
        ctx.server_url,
        "--variant",
        variant,
        "--concurrency",
        args.concurrency,
        "--warmup",
        args.warmup,
        "--duration",
        args.duration,
        "--max-tokens",
        str(args.max_tokens),
        "--prompt-seed",
        str(args.seed),
        "--ready-timeout",
        "2m",
        "--out",
        str(out),
        "--metrics-address",
        "off",
        "--progress",
        "auto" if sys.stdout.isatty() else "plain",
        *extra,
    )
    proc = subprocess.Popen(cmd)
    try:
        code = proc.wait()
    except BaseException:
        # Ctrl-C reached it too (same terminal); SIGTERM to us did not: pass it on.
        if proc.poll() is None:
            proc.send_signal(signal.SIGINT)
        try:
            proc.wait(30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        raise
    if code != 0:
        raise UsageError(
            f"demo: the sweep of {variant} failed (exit {code}); see {out}", exit_code=1
        )
    ctx.results[variant] = out
    return out


def baseline_sweep(ctx: DemoContext) -> None:
    args = ctx.args
    ctx.say(
        f"== 2. baseline sweep of {ctx.server_url}: concurrency {args.concurrency}, warm-up "
        f"{args.warmup}, window {args.duration} per level, max_tokens {args.max_tokens}, "
        "token ids recorded (tokens.jsonl, for the prediction)"
    )
    from specload.baseline import baseline_from_summary  # noqa: PLC0415
    from specload.results import read_summary  # noqa: PLC0415

    out = _sweep(ctx, "baseline", "--record-token-ids")
    baseline = baseline_from_summary(read_summary(out), str(out))
    assert ctx.baseline_file is not None
    atomic_write_bytes(ctx.baseline_file, dump_json(baseline))
    ctx.say(
        f"   specload baseline export {out} -> {ctx.baseline_file} "
        f"({len(baseline['entries'])} entries), served by the exporter"
    )
    expr = f'specload_baseline_tpot_seconds{{variant="{SERVER}",quantile="0.5",category="all"}}'
    seen = _wait_for(lambda: ctx.prom.samples(expr), timeout_s=30)
    levels = sorted(seen, key=lambda s: float(s[0].get("concurrency") or 0))
    ctx.say(
        "   Prometheus has it: baseline median TPOT "
        + ", ".join(f"{v * 1000:.2f} ms at concurrency {m.get('concurrency')}" for m, v in levels)
    )
    ctx.record(
        "baseline",
        {
            "file": str(ctx.baseline_file),
            "entries": len(baseline["entries"]),
            "in_prometheus": len(levels),
        },
    )


def _wait_for(check: Callable[[], Any], timeout_s: float, every_s: float = 0.25) -> Any:
    deadline = time.monotonic() + timeout_s
    result = check()
    while not result and time.monotonic() < deadline:
        time.sleep(every_s)
        result = check()
    return result


# --- 3. the n-gram variant predicted from the baseline ------------------------------------------


def _ngram_preset() -> tuple[int, int, int]:
    """k and the lookup window of the simulator's n-gram variant (what the reload serves)."""
    from simulator.variants import PRESETS  # noqa: PLC0415

    v = PRESETS[RELOAD_AS]
    return v.num_speculative_tokens, v.prompt_lookup_min, v.prompt_lookup_max


def _predict(ctx: DemoContext, measured: Path | None = None) -> dict[str, Any] | str:
    """``specload predict`` of the baseline sweep as the n-gram variant (``--measured``: beside
    the variant's own sweep), writing ``OUT/prediction``: its JSON, or one line saying why not."""
    import orjson  # noqa: PLC0415

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
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=120, check=False)
    except subprocess.TimeoutExpired:
        return "specload predict did not finish within 120s"
    if proc.returncode != 0:
        lines = [ln for ln in proc.stderr.splitlines() if ln.strip()]
        return f"specload predict failed (exit {proc.returncode}): {lines[-1] if lines else '-'}"
    try:
        data = orjson.loads(proc.stdout)
    except orjson.JSONDecodeError:
        return "specload predict printed no JSON"
    if not isinstance(data, dict) or not isinstance(data.get("levels"), list):
        return "specload predict printed JSON without levels"
    return data


def _ms(value: Any) -> str:
    v = finite_number(value)
    return "-" if v is None else f"{v:.2f} ms"


def _signed_pct(value: Any) -> str:
    v = finite_number(value)
    return "-" if v is None else f"{100 * v:+.1f}%"


def _change(level: dict[str, Any]) -> str:
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
        f"== 3. specload predict {ctx.results['baseline']} --method ngram "
        f"--num-speculative-tokens {k} --prompt-lookup-min {lo} --prompt-lookup-max {hi}: "
        f"the {RELOAD_AS} variant forecast from the baseline sweep alone, before the reload "
        "(~30 min on the reference model)"
    )
    t0 = time.monotonic()
    data = _predict(ctx)
    took_s = time.monotonic() - t0
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
            "" if low is None or high is None else f"{conf:.0%} interval {low:.2f}..{high:.2f}, "
        )
        ctx.say(
            f"   n-gram k={k} at concurrency {lv.get('concurrency')}: predicted {_change(lv)} "
            f"(TPOT {_ms(lv.get('predicted_median_tpot_ms'))}, {interval}vs "
            f"{_ms(lv.get('baseline_median_tpot_ms'))} measured baseline; speedup "
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
            f" (TPOT {_ms(lv.get('predicted_median_tpot_ms'))} vs "
            f"{_ms(lv.get('baseline_median_tpot_ms'))} measured baseline)"
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
                | {"extrapolated": bool(lv.get("extrapolated"))}
                for lv in levels
            ],
            "worth_reload": bool(faster),
            "decision": decision,
            "took_s": round(took_s, 1),
        },
    )


# --- 4. reload watched in Prometheus ------------------------------------------------------------


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
        f"== 4. specload stack reload {SERVER} --as {RELOAD_AS}: the server closes its port "
        f"for {load_s:g}s (vLLM does not listen while it loads), watched in Prometheus"
    )
    sel = f'{{variant="{SERVER}"}}'
    reloads_before = ctx.prom.value(f"specload_target_reloads_total{sel}") or 0.0
    code = _stack("reload", SERVER, "--as", RELOAD_AS, "--state-dir", str(ctx.state_dir))
    if code != 0:
        raise UsageError("demo: stack reload failed", exit_code=1)
    t0 = time.monotonic()
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
        },
    )


# --- 5. ngram sweep and comparison --------------------------------------------------------------


def _client_acceptance(summary: dict[str, Any]) -> float | None:
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


def ngram_sweep_and_compare(ctx: DemoContext) -> None:
    ctx.say(
        f"== 5. {RELOAD_AS} sweep of the same server, then the comparison "
        "(95% bootstrap confidence intervals)"
    )
    out = _sweep(ctx, RELOAD_AS)
    from specload.compare.model import compare_runs, load_run  # noqa: PLC0415 (numpy)
    from specload.compare.plots import write_comparison_plots  # noqa: PLC0415 (matplotlib)
    from specload.compare.report import comparison_markdown, headline  # noqa: PLC0415
    from specload.results import read_summary  # noqa: PLC0415
    from specload.results.writer import atomic_write_text  # noqa: PLC0415

    runs = [load_run(ctx.results[v]) for v in VARIANTS]
    comp = compare_runs(runs)
    cmp_dir = ctx.out / "comparison"
    cmp_dir.mkdir(exist_ok=True)
    atomic_write_text(cmp_dir / "comparison.md", comparison_markdown(comp))
    write_comparison_plots(runs, cmp_dir)
    ctx.comparison = cmp_dir
    lines = headline(comp)
    for line in lines:
        ctx.say("   " + line)
    client = _client_acceptance(read_summary(out))
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
            "headline": lines,
            "acceptance_client": client,
            "acceptance_prometheus": prom,
        },
    )
    predicted_against_measured(ctx, out)


def predicted_against_measured(ctx: DemoContext, measured: Path) -> None:
    """Stage 3's prediction beside the sweep just measured (``specload predict --measured``)."""
    ctx.say(
        f"   predicted (stage 3, from the baseline alone) against measured ({RELOAD_AS} sweep), "
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
            f"   c{row['concurrency']}: predicted {_ms(row['predicted_median_tpot_ms'])}, "
            f"measured {_ms(row['measured_median_tpot_ms'])} ({_signed_pct(row['error_ratio'])}"
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


# --- 6. alerts ----------------------------------------------------------------------------------


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
    ctx.say("== 6. alert state (Prometheus rules and Alertmanager)")
    rules = ctx.prom.alert_rules()
    by_state: dict[str, list[str]] = {}
    for alert in rules:
        by_state.setdefault(str(alert.get("state", "?")), []).append(str(alert.get("name")))
    for state in ("firing", "pending", "inactive"):
        names = by_state.get(state, [])
        ctx.say(f"   {state:<8} {len(names)}: {', '.join(sorted(names)) or '-'}")
    am_url = ctx.stack["alertmanager"]["url"]
    received = httpx.get(f"{am_url}/api/v2/alerts", timeout=5).json()
    ctx.say(
        f"   Alertmanager ({am_url}) holds {len(received)} alert(s)"
        + (
            ": " + ", ".join(a["labels"].get("alertname", "?") for a in received)
            if received
            else ""
        )
    )
    margin = ctx.prom.value("specload:tpot_regression_margin:ratio") or 0.10
    rows = _ratios_per_level(ctx)
    for row in rows:
        ratio = row["ratio"]
        verdict = "-" if ratio is None else ("above" if ratio > 1 + margin else "below")
        ctx.say(
            f"   TPOT of '{SERVER}' (now {RELOAD_AS}) / its baseline at concurrency "
            f"{row['concurrency']}: {'-' if ratio is None else f'{ratio:.2f}x'} "
            f"({verdict} the alert's threshold {1 + margin:.2f}x)"
        )
    rule: dict[str, Any] | None = next(
        (r for r in rules if r.get("name") == "SpecloadTPOTRegression"), None
    )
    rule_ratio = ctx.prom.value(
        f'variant_model:specload_tpot_seconds:baseline_ratio_5m{{variant="{SERVER}"}}'
    )
    load = ctx.prom.value(f'variant_model:specload_load_concurrency:avg5m{{variant="{SERVER}"}}')
    if rule_ratio is not None:
        now = f"now {rule_ratio:.2f}x"
    elif load is not None:
        now = f"no value now: the 5m average load, {load:.1f} in flight, matches no baseline level"
    else:
        now = "no value now"
    hold_s = float(rule.get("duration", 600)) if rule else 600.0
    ctx.say(
        f"   SpecloadTPOTRegression is {rule.get('state') if rule else 'not loaded'}: it judges "
        "this ratio over 5m windows at the load-matched baseline level (recording rule "
        f"variant_model:specload_tpot_seconds:baseline_ratio_5m, {now}), stays silent for 5m "
        f"after a reload, and the ratio must stay above {1 + margin:.2f}x for {hold_s / 60:g}m: "
        f"under steady {RELOAD_AS} load at a swept level it fires about {5 + hold_s / 60:g} min "
        "after the reload, longer than this demo"
    )
    ctx.record(
        "alerts",
        {
            "rules": by_state,
            "alertmanager": len(received),
            "tpot_ratio_per_level": rows,
            "tpot_ratio_5m_rule": rule_ratio,
            "load_concurrency_5m": load,
            "regression_state": rule.get("state") if rule else None,
        },
    )


# --- 7. down, and where things are --------------------------------------------------------------


def stack_down(ctx: DemoContext) -> None:
    if ctx.args.keep_stack:
        ctx.stack_running = False  # not stopped at exit (Ctrl-C or an error before here does)
        if ctx.prometheus is not None:
            ctx.prometheus.close()
        ctx.record("stack_down", False)
        prom = ctx.stack["prometheus"]["url"]
        ctx.say("== 7. the stack keeps running (--keep-stack)")
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
    ctx.say("== 7. specload stack down")
    _down(ctx)


def _down(ctx: DemoContext) -> None:
    if not ctx.stack_running:
        return
    ctx.stack_running = False
    if ctx.prometheus is not None:
        ctx.prometheus.close()
    _stack("down", "--state-dir", str(ctx.state_dir))
    ctx.record("stack_down", True)


def tell_where(ctx: DemoContext) -> None:
    ctx.say("== results")
    for variant, path in ctx.results.items():
        ctx.say(
            f"   {variant}: {path}/summary.md, summary.json, requests.jsonl, tpot.png, "
            "throughput.png"
        )
    if ctx.baseline_file is not None and ctx.baseline_file.exists():
        ctx.say(f"   baseline for the exporter and alerts: {ctx.baseline_file}")
    prediction = ctx.out / "prediction"
    if (prediction / "prediction.json").exists():
        versus = (ctx.facts.get("predicted_vs_measured") or {}).get("ok")
        ctx.say(
            f"   prediction: {prediction}/prediction.md, prediction.json, prediction.png"
            + (f" (with the measured {RELOAD_AS} sweep beside it)" if versus else "")
        )
    if ctx.comparison is not None:
        ctx.say(
            f"   comparison: {ctx.comparison}/comparison.md, compare_tpot.png, "
            "compare_throughput.png"
        )
    ctx.say(f"   the story's facts: {ctx.out / 'demo.json'}; stack logs: {ctx.state_dir / 'logs'}")
    if not ctx.args.keep_stack:
        ctx.say("   to look around in Prometheus afterwards: specload demo --keep-stack")


STAGES: list[Stage] = [
    stack_up,
    baseline_sweep,
    predict_variant,
    reload_watched,
    ngram_sweep_and_compare,
    alert_state,
    stack_down,
    tell_where,
]


def add_arguments(parser: argparse.ArgumentParser) -> None:
    def default(key: str) -> str:
        normal, quick = DEFAULTS[key]
        return f"default {normal}; --quick {quick}"

    parser.add_argument(
        "--out",
        default="demo-results",
        metavar="DIR",
        help="where results and the stack's state go (default demo-results/)",
    )
    parser.add_argument(
        "--quick",
        action="store_true",
        help="a short run (about a minute) with the same story, for tests",
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
        "--max-tokens", type=int, help=f"max_tokens per request ({default('max_tokens')})"
    )
    parser.add_argument(
        "--time-scale",
        type=float,
        help="run the simulated server this many times faster, ratios kept "
        f"({default('time_scale')})",
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


OUTPUTS = ("baseline", "prediction", "ngram", "comparison", "stack", "demo.json")


def _clear_previous(out: Path) -> None:
    """Remove a previous demo's outputs from ``out`` (results files are appended to)."""
    from specload.stack.cli import part_health  # noqa: PLC0415
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
    ctx.say(f"demo {'done' if code == 0 else 'stopped'} in {wall_s:.0f}s")
    return code


__all__ = ["STAGES", "DemoContext", "Stage", "add_arguments", "run"]
