"""The server-side block against raw counters (V1 formulas, V0 gauges, resets)."""

from __future__ import annotations

import httpx
import pytest

from specload.sweep.server import ServerProbe, server_block, snapshot

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
    text = (
        "# TYPE vllm:generation_tokens_total counter\n"
        "vllm:generation_tokens_total 10\n"
    )
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
