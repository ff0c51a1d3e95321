#!/usr/bin/env python3
"""Generate specload's Grafana boards (stdlib only).

    python grafana/generate.py           # write grafana/dashboards/<folder>/<uid>.json
    python grafana/generate.py --check   # exit 1 if the committed JSON differs

The committed JSON is the product (Grafana provisions it from
grafana/provisioning/); this file is how it is written. A unit test fails when
the two drift apart. Queries use the recording rules of deploy/prometheus/rules
where one exists, so boards and alerts read the same numbers.

Every board has the variables ``datasource``, ``model`` and ``variant``
(multi-select, "All" = every value), links to the other boards (time range and
variables kept) and an annotation at each reload of a selected variant.
"""

from __future__ import annotations

import argparse
import json
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
DASHBOARDS = HERE / "dashboards"
DS = {"type": "prometheus", "uid": "${datasource}"}
TAG = "specload"
SCHEMA_VERSION = 39

# Board UIDs and folders (fixed: links, alerts and bookmarks use them).
OVERVIEW = ("specload-overview", "specload-overview", "Specload / Overview")
VARIANTS = ("specload-variants", "specload-variant-comparison", "Specload / Variant comparison")
RELOAD = ("specload-reload", "specload-reload", "Specload / Reload")
LOADTEST = ("specload-loadtest", "specload-load-test", "Specload / Load test")

V = 'variant=~"$variant"'
M = 'model=~"$model"'
VM = f"{V}, {M}"
REF = 'variant="$reference"'


@dataclass
class Query:
    expr: str
    legend: str = ""
    instant: bool = False
    table: bool = False


@dataclass
class Panel:
    title: str
    queries: list[Query]
    unit: str
    kind: str = "timeseries"
    description: str = ""
    width: int = 12
    height: int = 8
    thresholds: list[tuple[str, float | None]] = field(default_factory=lambda: [("green", None)])
    mappings: list[dict[str, Any]] = field(default_factory=list)
    min: float | None = None
    max: float | None = None
    links: list[dict[str, Any]] = field(default_factory=list)
    stack: bool = False


@dataclass
class Row:
    title: str


Item = Panel | Row


def q(expr: str, legend: str = "{{variant}}") -> Query:
    return Query(" ".join(expr.split()), legend)


def qi(expr: str, legend: str = "{{variant}}") -> Query:
    """An instant query shown as a table."""
    return Query(" ".join(expr.split()), legend, instant=True, table=True)


def by_variant(series: str, selector: str = "") -> str:
    """``max by (variant) (series{$variant...})``: one line per variant."""
    return f"max by (variant) ({series}{{{selector or V}}})"


def stat(title: str, queries: list[Query], unit: str, **options: Any) -> Panel:
    """A small stat panel, four to a row."""
    options.setdefault("width", 6)
    options.setdefault("height", 5)
    return Panel(title, queries, unit, kind="stat", **options)


def in_flight_queries() -> list[Query]:
    """Requests running and waiting in the server, per variant."""
    return [
        q(f"sum by (variant) (vllm:num_requests_running{{{VM}}})", "{{variant}} running"),
        q(f"sum by (variant) (vllm:num_requests_waiting{{{VM}}})", "{{variant}} waiting"),
    ]


# KV-cache usage: a ratio, orange near full, red where vLLM starts preempting.
KV_USAGE_SCALE: dict[str, Any] = {
    "min": 0,
    "max": 1,
    "thresholds": [("green", None), ("orange", 0.9), ("red", 0.98)],
}


def board_link(board: tuple[str, str, str], title: str = "") -> dict[str, Any]:
    uid, slug, name = board
    return {
        "title": title or f"Open {name}",
        "url": f"/d/{uid}/{slug}?"
        + "${__url_time_range}&${model:queryparam}&${variant:queryparam}",
    }


UP_MAPPINGS = [
    {
        "type": "value",
        "options": {
            "0": {"text": "DOWN", "color": "red", "index": 0},
            "1": {"text": "UP", "color": "green", "index": 1},
        },
    },
]
STATE_MAPPINGS = [
    {
        "type": "value",
        "options": {
            "0": {"text": "unknown", "color": "text", "index": 0},
            "1": {"text": "down", "color": "red", "index": 1},
            "2": {"text": "loading", "color": "blue", "index": 2},
            "3": {"text": "ready", "color": "green", "index": 3},
        },
    },
]
TOKS = "suffix: tok/s"
TIMES = "suffix: \u00d7"  # multiplication sign


# --------------------------------------------------------------------------- boards


def overview() -> list[Item]:
    return [
        Row("Traffic"),
        stat(
            "Variants up",
            [q(f"max by (variant) (specload_target_up{{{VM}}})")],
            "none",
            mappings=UP_MAPPINGS,
            thresholds=[("red", None), ("green", 1)],
            description="1 when the exporter's last poll of the variant's /metrics worked.",
        ),
        stat(
            "Alerts firing",
            [
                q(
                    'count(ALERTS{alertstate="firing", alertname=~"Specload.*"}) or vector(0)',
                    "firing",
                )
            ],
            "none",
            thresholds=[("green", None), ("orange", 1)],
            description="specload alerts firing now (all variants).",
        ),
        stat(
            "Requests in flight (server)",
            in_flight_queries(),
            "short",
            min=0,
        ),
        stat(
            "KV-cache usage",
            [q(f"variant_model:vllm_kv_cache_usage:ratio{{{VM}}}")],
            "percentunit",
            **KV_USAGE_SCALE,
        ),
        Panel(
            "Requests finished /s (server)",
            [q(f"sum by (variant) (variant_model_reason:vllm_request_success:rate5m{{{VM}}})")],
            "reqps",
            min=0,
        ),
        Panel(
            "Requests finished /s (load generator)",
            [
                q(
                    f"""sum by (variant, outcome) (
                       rate(specload_client_requests_total{{{VM}}}[$__rate_interval]))""",
                    "{{variant}} {{outcome}}",
                )
            ],
            "reqps",
            min=0,
        ),
        Panel(
            "Output tokens /s (server, all streams)",
            [q(f"variant_model:vllm_generation_tokens:rate5m{{{VM}}}")],
            TOKS,
            min=0,
        ),
        Panel(
            "Output tokens /s (load generator, all streams)",
            [q(f"variant_model:specload_client_output_tokens:rate5m{{{VM}}}")],
            TOKS,
            min=0,
        ),
        Row("Latency"),
        Panel(
            "TPOT percentiles (load generator)",
            [
                q(
                    f"variant_model:specload_client_tpot_seconds:p{p}_5m{{{VM}}}",
                    f"{{{{variant}}}} p{p}",
                )
                for p in (50, 90, 99)
            ],
            "s",
            min=0,
            links=[board_link(VARIANTS, "Compare variants")],
            description="(e2e - ttft) / (output tokens - 1) per request, reasoning included.",
        ),
        Panel(
            "TPOT per request (server)",
            [
                q(
                    f"variant_model:vllm_request_time_per_output_token_seconds:p{p}_5m{{{VM}}}",
                    f"{{{{variant}}}} p{p}",
                )
                for p in (50, 90, 99)
            ]
            + [
                q(
                    f"variant_model:vllm_request_time_per_output_token_seconds:mean_5m{{{VM}}}",
                    "{{variant}} mean",
                )
            ],
            "s",
            min=0,
            description="vLLM's TPOT buckets are coarse (10, 25, 50 ms...): percentiles are "
            "interpolated inside a bucket; the mean is exact.",
        ),
        Panel(
            "TTFT (load generator and server)",
            [
                q(
                    f"variant_model:specload_client_ttft_seconds:p{p}_5m{{{VM}}}",
                    f"{{{{variant}}}} client p{p}",
                )
                for p in (50, 90)
            ]
            + [
                q(
                    f"variant_model:vllm_time_to_first_token_seconds:p{p}_5m{{{VM}}}",
                    f"{{{{variant}}}} server p{p}",
                )
                for p in (50, 90)
            ],
            "s",
            min=0,
        ),
        Panel(
            "Inter-token latency (load generator and server)",
            [
                q(
                    f"variant_model:specload_client_itl_seconds:p{p}_5m{{{VM}}}",
                    f"{{{{variant}}}} client p{p}",
                )
                for p in (50, 99)
            ]
            + [
                q(
                    f"variant_model:vllm_inter_token_latency_seconds:p{p}_5m{{{VM}}}",
                    f"{{{{variant}}}} server p{p}",
                )
                for p in (50, 99)
            ],
            "s",
            min=0,
            description="Client ITL is per token (a chunk's gap divided by its tokens).",
        ),
        Row("Engine and errors"),
        Panel(
            "Requests running and waiting",
            in_flight_queries(),
            "short",
            min=0,
        ),
        Panel(
            "KV-cache usage over time",
            [q(f"variant_model:vllm_kv_cache_usage:ratio{{{VM}}}")],
            "percentunit",
            **KV_USAGE_SCALE,
        ),
        Panel(
            "Errors /s by class (load generator)",
            [
                q(
                    f"""sum by (variant, kind) (
                       rate(specload_client_errors_total{{{VM}}}[$__rate_interval]))""",
                    "{{variant}} {{kind}}",
                )
            ],
            "reqps",
            min=0,
            links=[board_link(LOADTEST)],
        ),
        Panel(
            "Error ratio (load generator)",
            [q(f"variant_model:specload_client_errors:ratio_5m{{{VM}}}")],
            "percentunit",
            min=0,
            thresholds=[("green", None), ("red", 0.05)],
        ),
        Panel(
            "Alerts firing by variant",
            [
                qi(
                    'sum by (alertname, variant, severity) (ALERTS{alertstate="firing", '
                    'alertname=~"Specload.*"})',
                    "",
                )
            ],
            "none",
            kind="table",
            width=24,
            height=6,
            description="Empty while nothing fires.",
        ),
    ]


def variant_comparison() -> list[Item]:
    def vs_ref(metric: str) -> str:
        return f"{metric}{{{VM}}} / ignoring (variant) group_left () {metric}{{{REF}, {M}}}"

    tpot50 = "variant_model:specload_client_tpot_seconds:p50_5m"
    tpot90 = "variant_model:specload_client_tpot_seconds:p90_5m"
    toks = "variant_model:specload_client_output_tokens:rate5m"
    ratio_thresholds: list[tuple[str, float | None]] = [("green", None), ("red", 1.1)]
    return [
        Row("Decode speed"),
        Panel(
            "Median and p90 TPOT",
            [q(f"{tpot50}{{{VM}}}", "{{variant}} p50"), q(f"{tpot90}{{{VM}}}", "{{variant}} p90")],
            "s",
            min=0,
            description="From the load generator: (e2e - ttft) / (output tokens - 1).",
        ),
        Panel(
            "TPOT relative to $reference",
            [q(vs_ref(tpot50), "{{variant}} p50"), q(vs_ref(tpot90), "{{variant}} p90")],
            TIMES,
            min=0,
            thresholds=ratio_thresholds,
            description="Above 1: slower than the reference variant.",
        ),
        Panel(
            "Single-stream decode speed (1 / median TPOT)",
            [q(f"1 / {tpot50}{{{VM}}}")],
            TOKS,
            min=0,
            description="Tokens per second one stream sees; the reference deployment's "
            "baseline is ~74 tok/s.",
        ),
        Panel(
            "Median TPOT against the recorded baseline",
            [q(f"variant_model:specload_tpot_seconds:baseline_ratio_5m{{{VM}}}")],
            TIMES,
            min=0,
            thresholds=ratio_thresholds,
            links=[board_link(LOADTEST)],
            description="Current median TPOT over the baseline exported by `specload baseline "
            "export`, at the same concurrency (what SpecloadTPOTRegression judges).",
        ),
        Panel("Output tokens /s (all streams)", [q(f"{toks}{{{VM}}}")], TOKS, min=0),
        Panel(
            "Output tokens /s relative to $reference",
            [q(vs_ref(toks))],
            TIMES,
            min=0,
            thresholds=[("red", None), ("green", 1)],
        ),
        Row("Latency to first tokens"),
        Panel(
            "TTFT (first token of any channel)",
            [
                q(
                    f"variant_model:specload_client_ttft_seconds:p{p}_5m{{{VM}}}",
                    f"{{{{variant}}}} p{p}",
                )
                for p in (50, 90)
            ],
            "s",
            min=0,
        ),
        Panel(
            "Time to first content token (after reasoning)",
            [
                q(
                    f"variant_model:specload_client_ttfct_seconds:p{p}_5m{{{VM}}}",
                    f"{{{{variant}}}} p{p}",
                )
                for p in (50, 90)
            ],
            "s",
            min=0,
        ),
        Row("Speculative decoding"),
        Panel(
            "Draft acceptance rate",
            [q(f"variant_model:vllm_spec_decode_acceptance:ratio_5m{{{VM}}}")],
            "percentunit",
            min=0,
            max=1,
            description="Accepted / drafted tokens (vLLM V1 counters). No series: no speculation.",
        ),
        Panel(
            "Mean acceptance length",
            [q(f"variant_model:vllm_spec_decode_acceptance_length:mean_5m{{{VM}}}")],
            "suffix: tokens/step",
            min=1,
            description="1 + accepted tokens / drafts: tokens each verification step yields.",
        ),
        Panel(
            "Acceptance per draft position",
            [
                q(
                    f"variant_model_position:vllm_spec_decode_position_acceptance:ratio_5m{{{VM}}}",
                    "{{variant}} position {{position}}",
                )
            ],
            "percentunit",
            min=0,
            max=1,
        ),
        Panel(
            "All-reduce share of decode time",
            [q(by_variant("specload_decode_allreduce_ratio"))],
            "percentunit",
            min=0,
            max=1,
            thresholds=[("green", None), ("orange", 0.4)],
            description="From torch-profiler captures (specload profile / the exporter's "
            "scheduled capture); 51.5% on the 8-GPU PCIe reference.",
        ),
        Row("Reasoning and categories"),
        Panel(
            "Reasoning-truncated ratio",
            [q(f"variant_model:specload_client_reasoning_truncated:ratio_5m{{{VM}}}")],
            "percentunit",
            min=0,
            max=1,
            thresholds=[("green", None), ("orange", 0.2)],
            description="Requests that hit max_tokens with no content token.",
        ),
        Panel(
            "Median TPOT by prompt category",
            [
                q(
                    f"variant_model_category:specload_client_tpot_seconds:p50_5m{{{VM}}}",
                    "{{variant}} {{category}}",
                )
            ],
            "s",
            min=0,
        ),
        Panel(
            "Per category (now)",
            [
                qi(
                    f"variant_model_category:specload_client_tpot_seconds:p50_5m{{{VM}}}",
                    "tpot p50",
                ),
                qi(
                    f"variant_model_category:specload_client_tpot_seconds:p90_5m{{{VM}}}",
                    "tpot p90",
                ),
                qi(
                    f"variant_model_category:specload_client_ttfct_seconds:p50_5m{{{VM}}}",
                    "ttfct p50",
                ),
                qi(f"variant_model_category:specload_client_output_tokens:rate5m{{{VM}}}", "tok/s"),
                qi(
                    f"variant_model_category:specload_client_reasoning_truncated:ratio_5m{{{VM}}}",
                    "truncated",
                ),
            ],
            "s",
            kind="table",
            width=24,
        ),
        Panel(
            "Variant configuration",
            [
                qi(
                    f"max by (variant, model, method, num_speculative_tokens, draft_model, "
                    f"tensor_parallel_size, vllm_version) (specload_variant_info{{{VM}}})",
                    "",
                )
            ],
            "none",
            kind="table",
            width=24,
            height=6,
        ),
    ]


def reload_board() -> list[Item]:
    state = (
        f'max by (variant) (specload_target_state{{{V}, state="ready"}}) * 3'
        f' + max by (variant) (specload_target_state{{{V}, state="loading"}}) * 2'
        f' + max by (variant) (specload_target_state{{{V}, state="down"}})'
    )
    return [
        Panel(
            "State",
            [q(state)],
            "none",
            kind="state-timeline",
            width=24,
            height=6,
            mappings=STATE_MAPPINGS,
            thresholds=[("text", None)],
            description="ready / loading (a reload: refused after being up, or a new "
            "process start) / down, as the exporter sees each variant.",
        ),
        stat(
            "Ready",
            [q(by_variant("specload_target_up"))],
            "none",
            mappings=UP_MAPPINGS,
            thresholds=[("red", None), ("green", 1)],
        ),
        stat(
            "Reloads seen",
            [q(by_variant("specload_target_reloads_total"))],
            "short",
        ),
        stat(
            "Last reload took",
            [q(by_variant("specload_target_last_reload_duration_seconds"))],
            "s",
            thresholds=[("green", None), ("orange", 1800)],
        ),
        stat(
            "Server up for",
            [q(f"time() - max by (variant) (specload_target_start_time_seconds{{{V}}})")],
            "s",
        ),
        Panel(
            "Reload elapsed against expected",
            [
                q(
                    by_variant("specload_target_reload_elapsed_seconds"),
                    "{{variant}} elapsed",
                ),
                q(
                    by_variant("specload_target_expected_reload_seconds"),
                    "{{variant}} expected",
                ),
            ],
            "s",
            min=0,
            description="SpecloadReloadTooLong fires at 1.25 x expected.",
        ),
        Panel(
            "Weight loading progress",
            [q(by_variant("specload_target_load_progress_ratio"))],
            "percentunit",
            min=0,
            max=1,
            description="From the server log's checkpoint-shard lines while a reload runs.",
        ),
        Panel(
            "Load generator through the reload",
            [
                q(
                    f"""sum by (variant, outcome) (
                       rate(specload_client_requests_total{{{VM}}}[$__rate_interval]))""",
                    "{{variant}} {{outcome}}",
                ),
                q(
                    f"""sum by (variant, kind) (
                       rate(specload_client_errors_total{{{VM}}}[$__rate_interval]))""",
                    "{{variant}} error {{kind}}",
                ),
            ],
            "reqps",
            min=0,
            links=[board_link(LOADTEST)],
        ),
        Panel(
            "Server throughput through the reload",
            [q(f"variant_model:vllm_generation_tokens:rate5m{{{VM}}}")],
            TOKS,
            min=0,
            links=[board_link(OVERVIEW)],
        ),
    ]


def load_test() -> list[Item]:
    sel = f'{VM}, category=~"$category"'
    return [
        stat(
            "Users",
            [q("sum by (instance) (specload_client_users)", "{{instance}}")],
            "short",
        ),
        stat(
            "Requests lost with a worker",
            [q("sum by (instance) (specload_client_requests_lost_total)", "{{instance}}")],
            "short",
            thresholds=[("green", None), ("red", 1)],
        ),
        stat(
            "Reasoning-truncated requests",
            [
                q(
                    f"""sum by (variant) (
                          increase(specload_client_reasoning_truncated_total{{{sel}}}[$__range]))"""
                )
            ],
            "short",
            thresholds=[("green", None), ("orange", 1)],
        ),
        stat(
            "Failed requests",
            [
                q(
                    f"""sum by (variant) (increase(
                          specload_client_requests_total{{{sel}, outcome="failed"}}[$__range]))"""
                )
            ],
            "short",
            thresholds=[("green", None), ("red", 1)],
        ),
        Row("Per sweep step"),
        Panel(
            "Median TPOT per step",
            [
                q(
                    f"""histogram_quantile(0.5, sum by (variant, step, le) (
                       rate(specload_client_tpot_seconds_bucket{{{sel}}}[$__rate_interval])))""",
                    "{{variant}} {{step}}",
                )
            ],
            "s",
            min=0,
            description="Steps are the sweep's levels (c16 = 16 concurrent users).",
        ),
        Panel(
            "Output tokens /s per step",
            [
                q(
                    f"""sum by (variant, step) (
                       rate(specload_client_output_tokens_total{{{sel}}}[$__rate_interval]))""",
                    "{{variant}} {{step}}",
                )
            ],
            TOKS,
            min=0,
        ),
        Panel(
            "Steps over the time range",
            [
                qi(
                    f"""histogram_quantile(0.5, sum by (variant, step, le) (
                        increase(specload_client_tpot_seconds_bucket{{{sel}}}[$__range])))""",
                    "tpot p50",
                ),
                qi(
                    f"""histogram_quantile(0.9, sum by (variant, step, le) (
                        increase(specload_client_tpot_seconds_bucket{{{sel}}}[$__range])))""",
                    "tpot p90",
                ),
                qi(
                    f"""sum by (variant, step) (
                        increase(specload_client_requests_total{{{sel}}}[$__range]))""",
                    "requests",
                ),
                qi(
                    f"""sum by (variant, step) (
                        increase(specload_client_errors_total{{{sel}}}[$__range]))""",
                    "errors",
                ),
            ],
            "s",
            kind="table",
            width=24,
            description="TPOT against concurrency: one row per variant and step.",
        ),
        Row("Per category"),
        Panel(
            "Median TPOT by category",
            [
                q(
                    f"""histogram_quantile(0.5, sum by (variant, category, le) (
                       rate(specload_client_tpot_seconds_bucket{{{sel}}}[$__rate_interval])))""",
                    "{{variant}} {{category}}",
                )
            ],
            "s",
            min=0,
        ),
        Panel(
            "TTFT and time to first content token by category",
            [
                q(
                    f"""histogram_quantile(0.5, sum by (variant, category, le) (
                       rate(specload_client_{h}_seconds_bucket{{{sel}}}[$__rate_interval])))""",
                    f"{{{{variant}}}} {{{{category}}}} {h} p50",
                )
                for h in ("ttft", "ttfct")
            ],
            "s",
            min=0,
        ),
        Panel(
            "Output tokens /s by channel",
            [
                q(
                    f"""sum by (variant, channel) (
                       rate(specload_client_output_tokens_total{{{sel}}}[$__rate_interval]))""",
                    "{{variant}} {{channel}}",
                )
            ],
            TOKS,
            min=0,
            stack=True,
            description="Reasoning and content tokens; a benchmark counting only content "
            "would miss the first.",
        ),
        Row("Errors and streaming"),
        Panel(
            "Errors /s by class",
            [
                q(
                    f"""sum by (variant, kind) (
                       rate(specload_client_errors_total{{{sel}}}[$__rate_interval]))""",
                    "{{variant}} {{kind}}",
                )
            ],
            "reqps",
            min=0,
            links=[board_link(RELOAD, "Reloads")],
        ),
        Panel(
            "Tokens per chunk",
            [
                q(f"""sum by (variant) (
                          rate(specload_client_output_tokens_total{{{sel}}}[$__rate_interval]))
                      / sum by (variant) (
                          rate(specload_client_chunks_total{{{sel}}}[$__rate_interval]))""")
            ],
            "short",
            min=0,
            description="Above 1 with speculation: several tokens leave in one step and chunk.",
        ),
    ]


# --------------------------------------------------------------------------- JSON


def _variable(
    name: str, label: str, query: str, *, multi: bool, include_all: bool, default: str | None = None
) -> dict[str, Any]:
    current: dict[str, Any] = (
        {"selected": True, "text": ["All"], "value": ["$__all"]}
        if include_all and default is None
        else {"selected": True, "text": default or "", "value": default or ""}
    )
    var: dict[str, Any] = {
        "name": name,
        "label": label,
        "type": "query",
        "datasource": DS,
        "query": query,  # the classic form; every Grafana since 7 reads it
        "definition": query,
        "refresh": 2,
        "sort": 1,
        "multi": multi,
        "includeAll": include_all,
        "current": current,
        "options": [],
        "hide": 0,
        "regex": "",
    }
    if include_all:
        var["allValue"] = ".+"
    return var


def _templating(extra: list[dict[str, Any]]) -> dict[str, Any]:
    return {
        "list": [
            {
                "name": "datasource",
                "label": "Prometheus",
                "type": "datasource",
                "query": "prometheus",
                "current": {
                    "selected": True,
                    "text": "specload Prometheus",
                    "value": "specload-prometheus",
                },
                "hide": 0,
                "includeAll": False,
                "multi": False,
                "options": [],
                "refresh": 1,
                "regex": "",
            },
            _variable("model", "Model", "label_values(model)", multi=True, include_all=True),
            _variable(
                "variant",
                "Variant",
                'label_values({model=~"$model"}, variant)',
                multi=True,
                include_all=True,
            ),
            *extra,
        ]
    }


def _annotations() -> dict[str, Any]:
    return {
        "list": [
            {
                "builtIn": 1,
                "datasource": {"type": "grafana", "uid": "-- Grafana --"},
                "enable": True,
                "hide": True,
                "iconColor": "rgba(0, 211, 255, 1)",
                "name": "Annotations & Alerts",
                "type": "dashboard",
            },
            {
                "name": "Reloads",
                "datasource": DS,
                "enable": True,
                "iconColor": "orange",
                "expr": f"max by (variant) (specload_target_reload_in_progress{{{V}}}) > 0",
                "step": "10s",
                "titleFormat": "reload of {{variant}}",
                "textFormat": "variant {{variant}} reloading",
                "tagKeys": "variant",
                "useValueForTime": False,
            },
        ]
    }


def _links() -> list[dict[str, Any]]:
    return [
        {
            "title": "specload boards",
            "type": "dashboards",
            "tags": [TAG],
            "asDropdown": False,
            "includeVars": True,
            "keepTime": True,
            "targetBlank": False,
            "icon": "external link",
            "tooltip": "",
            "url": "",
        }
    ]


def _thresholds(steps: list[tuple[str, float | None]]) -> dict[str, Any]:
    return {"mode": "absolute", "steps": [{"color": c, "value": v} for c, v in steps]}


def _panel(p: Panel, pid: int, grid: dict[str, int]) -> dict[str, Any]:
    defaults: dict[str, Any] = {
        "unit": p.unit,
        "thresholds": _thresholds(p.thresholds),
        "mappings": p.mappings,
        "color": {
            "mode": "thresholds" if p.kind in ("stat", "state-timeline") else "palette-classic"
        },
    }
    if p.min is not None:
        defaults["min"] = p.min
    if p.max is not None:
        defaults["max"] = p.max
    options: dict[str, Any]
    if p.kind == "timeseries":
        defaults["custom"] = {
            "drawStyle": "line",
            "lineWidth": 1,
            "fillOpacity": 10 if p.stack else 0,
            "showPoints": "never",
            "spanNulls": False,
            "stacking": {"mode": "normal" if p.stack else "none", "group": "A"},
        }
        options = {
            "legend": {"displayMode": "list", "placement": "bottom", "showLegend": True},
            "tooltip": {"mode": "multi", "sort": "desc"},
        }
    elif p.kind == "stat":
        options = {
            "reduceOptions": {"calcs": ["lastNotNull"], "fields": "", "values": False},
            "colorMode": "background",
            "graphMode": "area",
            "textMode": "auto",
            "orientation": "auto",
            "justifyMode": "auto",
        }
    elif p.kind == "state-timeline":
        options = {
            "showValue": "auto",
            "mergeValues": True,
            "alignValue": "left",
            "rowHeight": 0.9,
            "legend": {"displayMode": "list", "placement": "bottom", "showLegend": True},
            "tooltip": {"mode": "single", "sort": "none"},
        }
    elif p.kind == "table":
        options = {"showHeader": True, "cellHeight": "sm", "footer": {"show": False}}
    else:  # pragma: no cover - a new kind must be added above
        raise ValueError(p.kind)
    targets = []
    for i, query in enumerate(p.queries):
        target: dict[str, Any] = {
            "datasource": DS,
            "refId": chr(ord("A") + i),
            "expr": query.expr,
            "legendFormat": query.legend,
            "range": not query.instant,
            "instant": query.instant,
            "editorMode": "code",
        }
        if query.table:
            target["format"] = "table"
        targets.append(target)
    panel: dict[str, Any] = {
        "id": pid,
        "type": p.kind,
        "title": p.title,
        "description": p.description,
        "datasource": DS,
        "gridPos": grid,
        "targets": targets,
        "fieldConfig": {"defaults": defaults, "overrides": []},
        "options": options,
    }
    if p.kind == "table" and len(p.queries) > 1:
        panel["transformations"] = [{"id": "merge", "options": {}}]
    if p.links:
        panel["links"] = p.links
    return panel


def _layout(items: list[Item]) -> list[dict[str, Any]]:
    panels: list[dict[str, Any]] = []
    x = y = row_h = 0
    for pid, item in enumerate(items, start=1):
        if isinstance(item, Row):
            if x:
                y, x, row_h = y + row_h, 0, 0
            panels.append(
                {
                    "id": pid,
                    "type": "row",
                    "title": item.title,
                    "collapsed": False,
                    "gridPos": {"h": 1, "w": 24, "x": 0, "y": y},
                    "panels": [],
                }
            )
            y += 1
            continue
        if x + item.width > 24:
            y, x, row_h = y + row_h, 0, 0
        panels.append(_panel(item, pid, {"h": item.height, "w": item.width, "x": x, "y": y}))
        x += item.width
        row_h = max(row_h, item.height)
    return panels


@dataclass(frozen=True)
class Board:
    ident: tuple[str, str, str]
    folder: str
    description: str
    items: list[Item]
    extra_vars: list[dict[str, Any]] = field(default_factory=list)
    tags: tuple[str, ...] = ()


def boards() -> list[Board]:
    return [
        Board(
            OVERVIEW,
            "live",
            "Live view of every variant: traffic, latency server- and "
            "client-side, throughput, queue, KV cache, errors and alerts.",
            overview(),
            tags=("live",),
        ),
        Board(
            RELOAD,
            "live",
            "A variant's life through a reload: state, elapsed against "
            "expected, load progress, last durations, readiness.",
            reload_board(),
            tags=("live",),
        ),
        Board(
            VARIANTS,
            "benchmarks",
            "Selected variants side by side and relative to a "
            "reference variant and to the recorded baseline.",
            variant_comparison(),
            extra_vars=[
                _variable(
                    "reference",
                    "Reference variant",
                    "label_values(variant)",
                    multi=False,
                    include_all=False,
                    default="baseline",
                )
            ],
            tags=("benchmarks",),
        ),
        Board(
            LOADTEST,
            "benchmarks",
            "The load generator's view per sweep step and prompt category.",
            load_test(),
            extra_vars=[
                _variable(
                    "category",
                    "Category",
                    'label_values(specload_client_requests_total{variant=~"$variant"}, category)',
                    multi=True,
                    include_all=True,
                )
            ],
            tags=("benchmarks",),
        ),
    ]


def dashboard(board: Board) -> dict[str, Any]:
    uid, _slug, title = board.ident
    return {
        "uid": uid,
        "title": title,
        "description": board.description,
        "tags": [TAG, *board.tags],
        "editable": True,
        "graphTooltip": 1,
        "timezone": "browser",
        "time": {"from": "now-1h", "to": "now"},
        "refresh": "10s",
        "schemaVersion": SCHEMA_VERSION,
        "version": 1,
        "fiscalYearStartMonth": 0,
        "liveNow": False,
        "weekStart": "",
        "links": _links(),
        "annotations": _annotations(),
        "templating": _templating(board.extra_vars),
        "panels": _layout(board.items),
    }


def rendered() -> dict[Path, str]:
    """Every board's file path and JSON text."""
    out: dict[Path, str] = {}
    for board in boards():
        path = DASHBOARDS / board.folder / f"{board.ident[0]}.json"
        out[path] = json.dumps(dashboard(board), indent=2, ensure_ascii=False) + "\n"
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--check",
        action="store_true",
        help="exit 1 if the committed JSON differs from what this generates",
    )
    args = parser.parse_args(argv)
    files = rendered()
    stale = sorted(
        p for p, text in files.items() if not p.is_file() or p.read_text(encoding="utf-8") != text
    )
    extra = sorted(set(DASHBOARDS.glob("*/*.json")) - set(files))
    if args.check:
        for p in [*stale, *extra]:
            print(
                f"{p.relative_to(HERE.parent)}: differs from grafana/generate.py "
                "(run python grafana/generate.py)",
                file=sys.stderr,
            )
        return 1 if stale or extra else 0
    for p in stale:
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_text(files[p], encoding="utf-8")
        print(f"wrote {p.relative_to(HERE.parent)}")
    for p in extra:
        p.unlink()
        print(f"removed {p.relative_to(HERE.parent)}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
