"""Variant comparison (benchmarks): the selected variants side by side, as
ratios to a reference variant, and against the recorded baseline."""

from __future__ import annotations

from specload_boards import addresses
from specload_boards.model import (
    RATIO_TO_REFERENCE,
    TOKENS_PER_SECOND,
    Board,
    Link,
    Panel,
    Row,
    Threshold,
    Variable,
    instant_query,
    range_query,
)
from specload_boards.queries import MODELS, VARIANTS, max_per_variant, percentiles, selected

REFERENCE = 'variant="$reference"'
TPOT_P50 = "variant_model:specload_client_tpot_seconds:p50_5m"
TPOT_P90 = "variant_model:specload_client_tpot_seconds:p90_5m"
OUTPUT_TOKENS = "variant_model:specload_client_output_tokens:rate5m"
TPOT_P50_PER_STEP = "variant_model_step:specload_client_tpot_seconds:p50_5m"
CLIENT_ACCEPTANCE = "variant_model_channel:specload_client_spec_decode_acceptance:ratio_5m"
CLIENT_ACCEPTANCE_LENGTH = (
    "variant_model_channel:specload_client_spec_decode_acceptance_length:mean_5m"
)
SLO_ATTAINMENT = "variant_model_objective:specload_client_slo_attainment:ratio_5m"
# Ratios to a reference: above 1.1 is a regression worth seeing (the alert's
# default margin is 10%).
SLOWER_IS_RED: list[Threshold] = [("green", None), ("red", 1.1)]


def relative_to_reference(metric: str) -> str:
    """Each selected variant's ``metric`` over the reference variant's, same model."""
    return (
        f"{selected(metric)} / ignoring (variant) group_left () {metric}{{{REFERENCE}, {MODELS}}}"
    )


def median_tpot_per_step_over_range(selector: str) -> str:
    """The median TPOT per variant, model and step of the series ``selector`` matches,
    over the board's whole time range (``>= 0``: a step without requests in the range
    has no row rather than NaN)."""
    return (
        "(histogram_quantile(0.5, sum by (variant, model, step, le) "
        f"(increase(specload_client_tpot_seconds_bucket{{{selector}}}[$__range]))) >= 0)"
    )


def tpot_per_step_relative_to_reference_over_range() -> str:
    """Each selected variant's median TPOT over the reference's, same model and step,
    over the time range: steps the two ran at different times still meet."""
    return (
        f"{median_tpot_per_step_over_range(f'{VARIANTS}, {MODELS}')}"
        " / ignoring (variant) group_left () "
        f"{median_tpot_per_step_over_range(f'{REFERENCE}, {MODELS}')}"
    )


def per_category(metric: str) -> str:
    return selected(f"variant_model_category:specload_client_{metric}")


BOARD = Board(
    addresses.VARIANT_COMPARISON,
    "benchmarks",
    "Selected variants side by side and relative to a "
    "reference variant and to the recorded baseline.",
    [
        Row("Decode speed"),
        Panel(
            "Median and p90 TPOT",
            [
                range_query(selected(TPOT_P50), "{{variant}} p50"),
                range_query(selected(TPOT_P90), "{{variant}} p90"),
            ],
            "s",
            min=0,
            description="From the load generator: (e2e - ttft) / (output tokens - 1).",
        ),
        Panel(
            "TPOT relative to $reference",
            [
                range_query(relative_to_reference(TPOT_P50), "{{variant}} p50"),
                range_query(relative_to_reference(TPOT_P90), "{{variant}} p90"),
            ],
            RATIO_TO_REFERENCE,
            min=0,
            thresholds=SLOWER_IS_RED,
            description="Above 1: slower than the reference variant.",
        ),
        Panel(
            "Single-stream decode speed (1 / median TPOT)",
            [range_query(f"1 / {selected(TPOT_P50)}")],
            TOKENS_PER_SECOND,
            min=0,
            description="Tokens per second one stream sees; the reference deployment's "
            "baseline is ~74 tok/s.",
        ),
        Panel(
            "Median TPOT against the recorded baseline",
            [range_query(selected("variant_model:specload_tpot_seconds:baseline_ratio_5m"))],
            RATIO_TO_REFERENCE,
            min=0,
            thresholds=SLOWER_IS_RED,
            links=[Link(addresses.LOAD_TEST)],
            description="Current median TPOT over the baseline exported by `specload baseline "
            "export`, at the same concurrency (what SpecloadTPOTRegression judges).",
        ),
        Panel(
            "Output tokens /s (all streams)",
            [range_query(selected(OUTPUT_TOKENS))],
            TOKENS_PER_SECOND,
            min=0,
        ),
        Panel(
            "Output tokens /s relative to $reference",
            [range_query(relative_to_reference(OUTPUT_TOKENS))],
            RATIO_TO_REFERENCE,
            min=0,
            thresholds=[("red", None), ("green", 1)],
        ),
        Panel(
            "SLO attainment",
            [range_query(selected(SLO_ATTAINMENT), "{{variant}} {{objective}}")],
            "percentunit",
            min=0,
            max=1,
            description="Share of the completed requests that met the run's objectives "
            "(`--slo`; objective=all: every one), over 5m: what goodput is made of. No series: "
            "the runs gave no objectives.",
        ),
        Row("Crossover: TPOT per sweep step"),
        Panel(
            "Median TPOT relative to $reference per step",
            [range_query(relative_to_reference(TPOT_P50_PER_STEP), "{{variant}} {{step}}")],
            RATIO_TO_REFERENCE,
            min=0,
            thresholds=SLOWER_IS_RED,
            description="Each variant's median TPOT over the reference's at the same sweep "
            "step (c4 = 4 users), over 5m windows: where a variant crosses 1 as the load "
            "grows, speculation stops paying. Needs both variants measured at the same time.",
        ),
        Panel(
            "Median TPOT relative to $reference per step (time range)",
            [
                instant_query(
                    tpot_per_step_relative_to_reference_over_range(), "{{variant}} {{step}}"
                )
            ],
            RATIO_TO_REFERENCE,
            kind="table",
            thresholds=SLOWER_IS_RED,
            description="The same over the whole time range, one row per variant and step: "
            "sweeps run one after the other compare as long as both are in the range.",
        ),
        Row("Latency to first tokens"),
        Panel(
            "TTFT (first token of any channel)",
            percentiles("variant_model:specload_client_ttft_seconds", (50, 90)),
            "s",
            min=0,
        ),
        Panel(
            "Time to first content token (after reasoning)",
            percentiles("variant_model:specload_client_ttfct_seconds", (50, 90)),
            "s",
            min=0,
        ),
        Row("Speculative decoding"),
        Panel(
            "Draft acceptance rate",
            [range_query(selected("variant_model:vllm_spec_decode_acceptance:ratio_5m"))],
            "percentunit",
            min=0,
            max=1,
            description="Accepted / drafted tokens (vLLM V1 counters). No series: no speculation.",
        ),
        Panel(
            "Draft acceptance rate by channel (client)",
            [range_query(selected(CLIENT_ACCEPTANCE), "{{variant}} {{channel}}")],
            "percentunit",
            min=0,
            max=1,
            description="Accepted / drafted tokens of the load generator's requests, by the "
            "channel the verification step produced: reasoning, content, or unknown (the "
            "request's split was not known). No series for a channel: no draft there.",
        ),
        Panel(
            "Mean acceptance length",
            [range_query(selected("variant_model:vllm_spec_decode_acceptance_length:mean_5m"))],
            "suffix: tokens/step",
            min=1,
            description="1 + accepted tokens / drafts: tokens each verification step yields.",
        ),
        Panel(
            "Mean acceptance length by channel (client)",
            [range_query(selected(CLIENT_ACCEPTANCE_LENGTH), "{{variant}} {{channel}}")],
            "suffix: tokens/step",
            min=1,
            description="1 + accepted tokens / drafts of the load generator's requests, by "
            "channel.",
        ),
        Panel(
            "Acceptance per draft position",
            [
                range_query(
                    selected(
                        "variant_model_position:vllm_spec_decode_position_acceptance:ratio_5m"
                    ),
                    "{{variant}} position {{position}}",
                )
            ],
            "percentunit",
            min=0,
            max=1,
        ),
        Panel(
            "All-reduce share of decode time",
            [range_query(max_per_variant("specload_decode_allreduce_ratio"))],
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
            [range_query(selected("variant_model:specload_client_reasoning_truncated:ratio_5m"))],
            "percentunit",
            min=0,
            max=1,
            thresholds=[("green", None), ("orange", 0.2)],
            description="Requests that hit max_tokens with no content token.",
        ),
        Panel(
            "Median TPOT by prompt category",
            [range_query(per_category("tpot_seconds:p50_5m"), "{{variant}} {{category}}")],
            "s",
            min=0,
        ),
        Panel(
            "Per category (now)",
            [
                instant_query(per_category("tpot_seconds:p50_5m"), "tpot p50"),
                instant_query(per_category("tpot_seconds:p90_5m"), "tpot p90"),
                instant_query(per_category("ttfct_seconds:p50_5m"), "ttfct p50"),
                instant_query(per_category("output_tokens:rate5m"), "tok/s"),
                instant_query(per_category("reasoning_truncated:ratio_5m"), "truncated"),
            ],
            "s",
            kind="table",
            width=24,
        ),
        Panel(
            "Variant configuration",
            [
                instant_query(
                    "max by (variant, model, method, num_speculative_tokens, draft_model, "
                    f"tensor_parallel_size, vllm_version) ({selected('specload_variant_info')})",
                    "",
                )
            ],
            "none",
            kind="table",
            width=24,
            height=6,
        ),
    ],
    extra_variables=[
        Variable(
            "reference",
            "Reference variant",
            "label_values(variant)",
            multi=False,
            include_all=False,
            default="baseline",
        )
    ],
)
