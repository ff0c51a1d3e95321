"""The sweep's server block against raw counters (V1 formulas, V0 gauges, resets, prefix
cache, legacy names)."""

from __future__ import annotations

import httpx
import pytest

from specload.sweep.server_metrics import ServerProbe, server_block, snapshot

pytestmark = pytest.mark.unit


def page(gen, drafts, draft_tokens, accepted, per_pos, tpot_sum, tpot_count, success=0.0):
    lines = [
        "# HELP vllm:generation_tokens_total Number of generation tokens processed.",
        "# TYPE vllm:generation_tokens_total counter",
        f'vllm:generation_tokens_total{{engine="0",model_name="m"}} {gen}',
        "# TYPE vllm:request_success_total counter",
        f'vllm:request_success_total{{finished_reason="length",model_name="m"}} {success}',
        "# TYPE vllm:spec_decode_num_drafts_total counter",
        f'vllm:spec_decode_num_drafts_total{{engine="0",model_name="m"}} {drafts}',
        "# TYPE vllm:spec_decode_num_draft_tokens_total counter",
        f'vllm:spec_decode_num_draft_tokens_total{{engine="0",model_name="m"}} {draft_tokens}',
        "# TYPE vllm:spec_decode_num_accepted_tokens_total counter",
        f'vllm:spec_decode_num_accepted_tokens_total{{engine="0",model_name="m"}} {accepted}',
        "# TYPE vllm:spec_decode_num_accepted_tokens_per_pos_total counter",
    ]
    for pos, value in enumerate(per_pos):
        lines.append(
            f'vllm:spec_decode_num_accepted_tokens_per_pos_total{{engine="0",model_name="m",'
            f'position="{pos}"}} {value}'
        )
    lines += [
        "# TYPE vllm:request_time_per_output_token_seconds histogram",
        f'vllm:request_time_per_output_token_seconds_bucket{{le="+Inf",model_name="m"}} '
        f"{tpot_count}",
        f'vllm:request_time_per_output_token_seconds_sum{{model_name="m"}} {tpot_sum}',
        f'vllm:request_time_per_output_token_seconds_count{{model_name="m"}} {tpot_count}',
    ]
    return "\n".join(lines) + "\n"


def test_v1_formulas_on_deltas():
    start = snapshot(page(1000, 100, 300, 90, [50, 30, 10], 1.0, 100))
    end = snapshot(page(5000, 1100, 3300, 1290, [650, 430, 210], 1.0 + 0.015 * 50, 150, 7))
    block = server_block(start, end)
    assert block["generation_tokens"] == 4000
    assert block["spec_decode_num_drafts"] == 1000
    assert block["spec_decode_num_draft_tokens"] == 3000
    assert block["spec_decode_num_accepted_tokens"] == 1200
    assert block["spec_decode_acceptance_rate"] == pytest.approx(1200 / 3000)
    assert block["spec_decode_mean_acceptance_length"] == pytest.approx(1 + 1200 / 1000)
    assert block["spec_decode_acceptance_per_position"] == pytest.approx(
        {"0": 0.6, "1": 0.4, "2": 0.2}
    )
    assert block["mean_tpot_ms"] == pytest.approx(15.0)
    assert block["requests_success"] == 7
    assert block["source"] == "v1_counters"
    assert "counter_reset" not in block


def test_counter_reset_counts_from_zero():
    start = snapshot(page(5000, 100, 300, 90, [50, 30, 10], 9.0, 900))
    end = snapshot(page(400, 10, 30, 6, [4, 2, 0], 0.5, 50))
    block = server_block(start, end)
    assert block["counter_reset"] is True
    assert block["generation_tokens"] == 400
    assert block["spec_decode_acceptance_rate"] == pytest.approx(6 / 30)
    assert block["mean_tpot_ms"] == pytest.approx(10.0)


def test_no_speculation_has_no_acceptance():
    text = "# TYPE vllm:generation_tokens_total counter\nvllm:generation_tokens_total 10\n"
    block = server_block(snapshot(text), snapshot(text.replace(" 10", " 25")))
    assert block == {"generation_tokens": 15.0}


def test_v0_gauges():
    text = (
        "# TYPE vllm:spec_decode_draft_acceptance_rate gauge\n"
        'vllm:spec_decode_draft_acceptance_rate{model_name="m"} 0.31\n'
        "# TYPE vllm:spec_decode_efficiency gauge\n"
        'vllm:spec_decode_efficiency{model_name="m"} 0.42\n'
    )
    block = server_block(snapshot(text), snapshot(text))
    assert block["spec_decode_draft_acceptance_rate_gauge"] == pytest.approx(0.31)
    assert block["spec_decode_efficiency_gauge"] == pytest.approx(0.42)
    assert block["source"] == "v0_gauges"


def test_probe_failure_is_an_error_not_a_crash():
    calls = iter([page(1, 1, 1, 1, [1], 1, 1)])

    def scrape():
        try:
            return next(calls)
        except StopIteration:
            raise httpx.ConnectError("refused") from None

    probe = ServerProbe(scrape)
    probe.start()
    assert "error" in probe.end()
    probe2 = ServerProbe(lambda: "garbage line without value\n")
    probe2.start()
    assert probe2.end()["error"].startswith("scrape at level end failed")


def prefix_cache_page(queries: float, hits: float, prefix: str = "") -> str:
    return (
        f"# TYPE vllm:{prefix}prefix_cache_queries_total counter\n"
        f'vllm:{prefix}prefix_cache_queries_total{{engine="0",model_name="m"}} {queries}\n'
        f"# TYPE vllm:{prefix}prefix_cache_hits_total counter\n"
        f'vllm:{prefix}prefix_cache_hits_total{{engine="0",model_name="m"}} {hits}\n'
        # A KV connector's cache, not the prefix cache: never read.
        "# TYPE vllm:external_prefix_cache_queries_total counter\n"
        'vllm:external_prefix_cache_queries_total{engine="0",model_name="m"} 999\n'
    )


def test_prefix_cache_hit_ratio_from_deltas():
    block = server_block(snapshot(prefix_cache_page(128, 0)), snapshot(prefix_cache_page(528, 300)))
    assert block["prefix_cache_queries"] == 400
    assert block["prefix_cache_hits"] == 300
    assert block["prefix_cache_hit_ratio"] == pytest.approx(0.75)
    assert "counter_reset" not in block


def test_prefix_cache_idle_window_has_no_ratio_and_resets_count_from_zero():
    idle = server_block(snapshot(prefix_cache_page(128, 64)), snapshot(prefix_cache_page(128, 64)))
    assert idle["prefix_cache_queries"] == 0
    assert "prefix_cache_hit_ratio" not in idle
    restarted = server_block(
        snapshot(prefix_cache_page(5000, 4000)), snapshot(prefix_cache_page(100, 25))
    )
    assert restarted["counter_reset"] is True
    assert restarted["prefix_cache_hit_ratio"] == pytest.approx(0.25)


def test_prefix_cache_legacy_gpu_names():
    old = server_block(
        snapshot(prefix_cache_page(10, 5, "gpu_")), snapshot(prefix_cache_page(110, 55, "gpu_"))
    )
    assert old["prefix_cache_queries"] == 100
    assert old["prefix_cache_hit_ratio"] == pytest.approx(0.5)


def legacy_tpot_page(total: float, count: float) -> str:
    name = "vllm:time_per_output_token_seconds"
    return (
        f"# TYPE {name} histogram\n"
        f'{name}_bucket{{le="+Inf",model_name="m"}} {count}\n'
        f'{name}_sum{{model_name="m"}} {total}\n'
        f'{name}_count{{model_name="m"}} {count}\n'
    )


def test_legacy_tpot_histogram_of_vllm_0_10():
    # vLLM <= 0.10 had no per-request TPOT: its time_per_output_token_seconds stands in,
    # for TPOT as before and for ITL (what it measured, renamed inter_token_latency later).
    block = server_block(snapshot(legacy_tpot_page(1.0, 100)), snapshot(legacy_tpot_page(3.0, 200)))
    assert block["mean_tpot_ms"] == pytest.approx(20.0)
    assert block["mean_itl_ms"] == pytest.approx(20.0)
    # Where both are served (vLLM 0.11), the per-request TPOT wins.
    both = page(0, 0, 0, 0, [], 1.0, 100) + legacy_tpot_page(9.0, 100)
    later = page(0, 0, 0, 0, [], 2.0, 200) + legacy_tpot_page(99.0, 200)
    assert server_block(snapshot(both), snapshot(later))["mean_tpot_ms"] == pytest.approx(10.0)
