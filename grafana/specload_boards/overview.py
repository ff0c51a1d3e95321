"""Overview (live): every variant's traffic, latency, engine state and errors."""

from __future__ import annotations

from specload_boards import addresses
from specload_boards.model import (
    TOKENS_PER_SECOND,
    UP_OR_DOWN,
    Board,
    Link,
    Panel,
    Query,
    Row,
    Threshold,
    instant_query,
    range_query,
    stat,
)
from specload_boards.queries import percentiles, selected

# KV-cache usage is a ratio: orange near full, red where vLLM starts preempting.
KV_USAGE_THRESHOLDS: list[Threshold] = [("green", None), ("orange", 0.9), ("red", 0.98)]
KV_USAGE = selected("variant_model:vllm_kv_cache_usage:ratio")
SPECLOAD_ALERTS = 'alertstate="firing", alertname=~"Specload.*"'


def requests_in_flight() -> list[Query]:
    """Requests running and waiting in the server, per variant."""
    return [
        range_query(
            f"sum by (variant) ({selected('vllm:num_requests_running')})", "{{variant}} running"
        ),
        range_query(
            f"sum by (variant) ({selected('vllm:num_requests_waiting')})", "{{variant}} waiting"
        ),
    ]


BOARD = Board(
    addresses.OVERVIEW,
    "live",
    "Live view of every variant: traffic, latency server- and "
    "client-side, throughput, queue, KV cache, errors and alerts.",
    [
        Row("Traffic"),
        stat(
            "Variants up",
            [range_query(f"max by (variant) ({selected('specload_target_up')})")],
            "none",
            value_names=UP_OR_DOWN,
            thresholds=[("red", None), ("green", 1)],
            description="1 when the exporter's last poll of the variant's /metrics worked.",
        ),
        stat(
            "Alerts firing",
            [range_query(f"count(ALERTS{{{SPECLOAD_ALERTS}}}) or vector(0)", "firing")],
            "none",
            thresholds=[("green", None), ("orange", 1)],
            description="specload alerts firing now (all variants).",
        ),
        stat("Requests in flight (server)", requests_in_flight(), "short", min=0),
        stat(
            "KV-cache usage",
            [range_query(KV_USAGE)],
            "percentunit",
            min=0,
            max=1,
            thresholds=KV_USAGE_THRESHOLDS,
        ),
        Panel(
            "Requests finished /s (server)",
            [
                range_query(
                    "sum by (variant) "
                    f"({selected('variant_model_reason:vllm_request_success:rate5m')})"
                )
            ],
            "reqps",
            min=0,
        ),
        Panel(
            "Requests finished /s (load generator)",
            [
                range_query(
                    f"""sum by (variant, outcome) (
                        rate({selected("specload_client_requests_total")}[$__rate_interval]))""",
                    "{{variant}} {{outcome}}",
                )
            ],
            "reqps",
            min=0,
        ),
        Panel(
            "Output tokens /s (server, all streams)",
            [range_query(selected("variant_model:vllm_generation_tokens:rate5m"))],
            TOKENS_PER_SECOND,
            min=0,
        ),
        Panel(
            "Output tokens /s (load generator, all streams)",
            [range_query(selected("variant_model:specload_client_output_tokens:rate5m"))],
            TOKENS_PER_SECOND,
            min=0,
        ),
        Row("Latency"),
        Panel(
            "TPOT percentiles (load generator)",
            percentiles("variant_model:specload_client_tpot_seconds", (50, 90, 99)),
            "s",
            min=0,
            links=[Link(addresses.VARIANT_COMPARISON, "Compare variants")],
            description="(e2e - ttft) / (output tokens - 1) per request, reasoning included.",
        ),
        Panel(
            "TPOT per request (server)",
            [
                *percentiles(
                    "variant_model:vllm_request_time_per_output_token_seconds", (50, 90, 99)
                ),
                range_query(
                    selected("variant_model:vllm_request_time_per_output_token_seconds:mean_5m"),
                    "{{variant}} mean",
                ),
            ],
            "s",
            min=0,
            description="vLLM's TPOT buckets are coarse (10, 25, 50 ms...): percentiles are "
            "interpolated inside a bucket; the mean is exact.",
        ),
        Panel(
            "TTFT (load generator and server)",
            [
                *percentiles("variant_model:specload_client_ttft_seconds", (50, 90), "client "),
                *percentiles("variant_model:vllm_time_to_first_token_seconds", (50, 90), "server "),
            ],
            "s",
            min=0,
        ),
        Panel(
            "Inter-token latency (load generator and server)",
            [
                *percentiles("variant_model:specload_client_itl_seconds", (50, 99), "client "),
                *percentiles("variant_model:vllm_inter_token_latency_seconds", (50, 99), "server "),
            ],
            "s",
            min=0,
            description="Client ITL is per token (a chunk's gap divided by its tokens).",
        ),
        Row("Engine and errors"),
        Panel("Requests running and waiting", requests_in_flight(), "short", min=0),
        Panel(
            "KV-cache usage over time",
            [range_query(KV_USAGE)],
            "percentunit",
            min=0,
            max=1,
            thresholds=KV_USAGE_THRESHOLDS,
        ),
        Panel(
            "Errors /s by class (load generator)",
            [
                range_query(
                    f"""sum by (variant, kind) (
                        rate({selected("specload_client_errors_total")}[$__rate_interval]))""",
                    "{{variant}} {{kind}}",
                )
            ],
            "reqps",
            min=0,
            links=[Link(addresses.LOAD_TEST)],
        ),
        Panel(
            "Error ratio (load generator)",
            [range_query(selected("variant_model:specload_client_errors:ratio_5m"))],
            "percentunit",
            min=0,
            thresholds=[("green", None), ("red", 0.05)],
        ),
        Panel(
            "Alerts firing by variant",
            [
                instant_query(
                    f"sum by (alertname, variant, severity) (ALERTS{{{SPECLOAD_ALERTS}}})", ""
                )
            ],
            "none",
            kind="table",
            width=24,
            height=6,
            description="Empty while nothing fires.",
        ),
    ],
)
