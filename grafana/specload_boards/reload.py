"""Reload (live): a variant's life through a reload, as the exporter sees it."""

from __future__ import annotations

from specload_boards import addresses
from specload_boards.model import (
    TOKENS_PER_SECOND,
    UP_OR_DOWN,
    Board,
    Link,
    Panel,
    range_query,
    stat,
)
from specload_boards.queries import VARIANTS, max_per_variant, selected

# specload_target_state is one 0/1 series per state; weighting them gives one
# line per variant whose value names the state (0: none of them is 1).
STATE = (
    f'max by (variant) (specload_target_state{{{VARIANTS}, state="ready"}}) * 3'
    f' + max by (variant) (specload_target_state{{{VARIANTS}, state="loading"}}) * 2'
    f' + max by (variant) (specload_target_state{{{VARIANTS}, state="down"}})'
)
STATE_NAMES = (("unknown", "text"), ("down", "red"), ("loading", "blue"), ("ready", "green"))

BOARD = Board(
    addresses.RELOAD,
    "live",
    "A variant's life through a reload: state, elapsed against "
    "expected, load progress, last durations, readiness.",
    [
        Panel(
            "State",
            [range_query(STATE)],
            "none",
            kind="state-timeline",
            width=24,
            height=6,
            value_names=STATE_NAMES,
            thresholds=[("text", None)],
            description="ready / loading (a reload: refused after being up, or a new "
            "process start) / down, as the exporter sees each variant.",
        ),
        stat(
            "Ready",
            [range_query(max_per_variant("specload_target_up"))],
            "none",
            value_names=UP_OR_DOWN,
            thresholds=[("red", None), ("green", 1)],
        ),
        stat(
            "Reloads seen",
            [range_query(max_per_variant("specload_target_reloads_total"))],
            "short",
        ),
        stat(
            "Last reload took",
            [range_query(max_per_variant("specload_target_last_reload_duration_seconds"))],
            "s",
            thresholds=[("green", None), ("orange", 1800)],
        ),
        stat(
            "Server up for",
            [range_query(f"time() - {max_per_variant('specload_target_start_time_seconds')}")],
            "s",
        ),
        Panel(
            "Reload elapsed against expected",
            [
                range_query(
                    max_per_variant("specload_target_reload_elapsed_seconds"),
                    "{{variant}} elapsed",
                ),
                range_query(
                    max_per_variant("specload_target_expected_reload_seconds"),
                    "{{variant}} expected",
                ),
            ],
            "s",
            min=0,
            description="SpecloadReloadTooLong fires at 1.25 x expected.",
        ),
        Panel(
            "Weight loading progress",
            [range_query(max_per_variant("specload_target_load_progress_ratio"))],
            "percentunit",
            min=0,
            max=1,
            description="From the server log's checkpoint-shard lines while a reload runs.",
        ),
        Panel(
            "Load generator through the reload",
            [
                range_query(
                    f"""sum by (variant, outcome) (
                        rate({selected("specload_client_requests_total")}[$__rate_interval]))""",
                    "{{variant}} {{outcome}}",
                ),
                range_query(
                    f"""sum by (variant, kind) (
                        rate({selected("specload_client_errors_total")}[$__rate_interval]))""",
                    "{{variant}} error {{kind}}",
                ),
            ],
            "reqps",
            min=0,
            links=[Link(addresses.LOAD_TEST)],
        ),
        Panel(
            "Server throughput through the reload",
            [range_query(selected("variant_model:vllm_generation_tokens:rate5m"))],
            TOKENS_PER_SECOND,
            min=0,
            links=[Link(addresses.OVERVIEW)],
        ),
    ],
)
