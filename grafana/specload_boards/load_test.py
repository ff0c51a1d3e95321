"""Load test (benchmarks): the load generator's own view, per sweep step and
prompt category.

The recording rules keep no ``step`` label, and every query here is narrowed
to the selected categories too, so they read the load generator's raw counters
and histograms.
"""

from __future__ import annotations

from specload_boards import addresses
from specload_boards.model import (
    TOKENS_PER_SECOND,
    Board,
    Link,
    Panel,
    Row,
    Variable,
    instant_query,
    range_query,
    stat,
)
from specload_boards.queries import CATEGORIES, VARIANTS, selected

FAILED = 'outcome="failed"'


def chosen(metric: str, *matchers: str) -> str:
    """``metric`` of the selected variants, models and categories."""
    return selected(metric, CATEGORIES, *matchers)


def rate_by(labels: str, metric: str) -> str:
    return f"""sum by ({labels}) (
        rate({chosen(metric)}[$__rate_interval]))"""


def increase_over_range_by(labels: str, metric: str) -> str:
    return f"""sum by ({labels}) (
        increase({chosen(metric)}[$__range]))"""


def median_by(labels: str, histogram: str) -> str:
    """The median of ``histogram`` (a ``_seconds`` family) per ``labels``, over
    each rate interval."""
    return f"histogram_quantile(0.5, {rate_by(f'{labels}, le', f'{histogram}_bucket')})"


def tpot_over_range(quantile: float) -> str:
    """A TPOT quantile per variant and step over the whole time range."""
    return (
        f"histogram_quantile({quantile}, "
        f"{increase_over_range_by('variant, step, le', 'specload_client_tpot_seconds_bucket')})"
    )


BOARD = Board(
    addresses.LOAD_TEST,
    "benchmarks",
    "The load generator's view per sweep step and prompt category.",
    [
        stat(
            "Users",
            [range_query("sum by (instance) (specload_client_users)", "{{instance}}")],
            "short",
        ),
        stat(
            "Requests lost with a worker",
            [
                range_query(
                    "sum by (instance) (specload_client_requests_lost_total)", "{{instance}}"
                )
            ],
            "short",
            thresholds=[("green", None), ("red", 1)],
        ),
        stat(
            "Reasoning-truncated requests",
            [
                range_query(
                    increase_over_range_by("variant", "specload_client_reasoning_truncated_total")
                )
            ],
            "short",
            thresholds=[("green", None), ("orange", 1)],
        ),
        stat(
            "Failed requests",
            [
                range_query(
                    f"""sum by (variant) (increase(
                        {chosen("specload_client_requests_total", FAILED)}[$__range]))"""
                )
            ],
            "short",
            thresholds=[("green", None), ("red", 1)],
        ),
        Row("Per sweep step"),
        Panel(
            "Median TPOT per step",
            [
                range_query(
                    median_by("variant, step", "specload_client_tpot_seconds"),
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
                range_query(
                    rate_by("variant, step", "specload_client_output_tokens_total"),
                    "{{variant}} {{step}}",
                )
            ],
            TOKENS_PER_SECOND,
            min=0,
        ),
        Panel(
            "Steps over the time range",
            [
                instant_query(tpot_over_range(0.5), "tpot p50"),
                instant_query(tpot_over_range(0.9), "tpot p90"),
                instant_query(
                    increase_over_range_by("variant, step", "specload_client_requests_total"),
                    "requests",
                ),
                instant_query(
                    increase_over_range_by("variant, step", "specload_client_errors_total"),
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
                range_query(
                    median_by("variant, category", "specload_client_tpot_seconds"),
                    "{{variant}} {{category}}",
                )
            ],
            "s",
            min=0,
        ),
        Panel(
            "TTFT and time to first content token by category",
            [
                range_query(
                    median_by("variant, category", f"specload_client_{latency}_seconds"),
                    f"{{{{variant}}}} {{{{category}}}} {latency} p50",
                )
                for latency in ("ttft", "ttfct")
            ],
            "s",
            min=0,
        ),
        Panel(
            "Output tokens /s by channel",
            [
                range_query(
                    rate_by("variant, channel", "specload_client_output_tokens_total"),
                    "{{variant}} {{channel}}",
                )
            ],
            TOKENS_PER_SECOND,
            min=0,
            stacked=True,
            description="Reasoning and content tokens; a benchmark counting only content "
            "would miss the first.",
        ),
        Row("Errors and streaming"),
        Panel(
            "Errors /s by class",
            [
                range_query(
                    rate_by("variant, kind", "specload_client_errors_total"),
                    "{{variant}} {{kind}}",
                )
            ],
            "reqps",
            min=0,
            links=[Link(addresses.RELOAD, "Reloads")],
        ),
        Panel(
            "Tokens per chunk",
            [
                range_query(
                    f"{rate_by('variant', 'specload_client_output_tokens_total')}"
                    f" / {rate_by('variant', 'specload_client_chunks_total')}"
                )
            ],
            "short",
            min=0,
            description="Above 1 with speculation: several tokens leave in one step and chunk.",
        ),
    ],
    extra_variables=[
        Variable(
            "category",
            "Category",
            f"label_values(specload_client_requests_total{{{VARIANTS}}}, category)",
        )
    ],
)
