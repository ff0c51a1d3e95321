"""The server-side block against the simulator's raw counters, read independently."""

from __future__ import annotations

import re

import httpx
import pytest

from specload.sweep.server_metrics import ServerProbe, http_scraper

pytestmark = pytest.mark.integration


def raw(text: str, name: str, label: str | None = None) -> float:
    """Sum of a metric's samples (optionally one position) by regex, not by promtext."""
    total = 0.0
    for line in text.splitlines():
        m = re.match(rf"^{re.escape(name)}(\{{[^}}]*\}})? (\S+)$", line)
        if m and (label is None or label in (m.group(1) or "")):
            total += float(m.group(2))
    return total


def test_server_block_matches_raw_counter_deltas(sweep_sim):
    sim = sweep_sim(["--variant", "ngram", "--time-scale", "10"])
    metrics = sim.url + "/metrics"
    before = httpx.get(metrics).text
    probe = ServerProbe(http_scraper(metrics))
    probe.start()
    for i in range(4):
        r = httpx.post(
            sim.url + "/v1/chat/completions",
            timeout=30,
            json={
                "model": "moonshotai/Kimi-K2.5",
                "max_tokens": 40 + i,
                "messages": [
                    {"role": "user", "content": f"Prove that sqrt(2) is irrational ({i})"}
                ],
            },
        )
        r.raise_for_status()
    block = probe.end()
    after = httpx.get(metrics).text

    def delta(name: str, label: str | None = None) -> float:
        return raw(after, name, label) - raw(before, name, label)

    assert block["generation_tokens"] == delta("vllm:generation_tokens_total") == 40 + 41 + 42 + 43
    drafts = delta("vllm:spec_decode_num_drafts_total")
    draft_tokens = delta("vllm:spec_decode_num_draft_tokens_total")
    accepted = delta("vllm:spec_decode_num_accepted_tokens_total")
    assert drafts > 0 and draft_tokens > 0
    assert block["spec_decode_num_drafts"] == drafts
    assert block["spec_decode_acceptance_rate"] == pytest.approx(accepted / draft_tokens)
    assert block["spec_decode_mean_acceptance_length"] == pytest.approx(1 + accepted / drafts)
    for pos, share in block["spec_decode_acceptance_per_position"].items():
        per_pos = delta("vllm:spec_decode_num_accepted_tokens_per_pos_total", f'position="{pos}"')
        assert share == pytest.approx(per_pos / drafts)
    tpot_sum = delta("vllm:request_time_per_output_token_seconds_sum")
    tpot_count = delta("vllm:request_time_per_output_token_seconds_count")
    assert tpot_count == 4
    assert block["mean_tpot_ms"] == pytest.approx(tpot_sum / tpot_count * 1000)
    assert block["requests_success"] == 4
    queries = delta("vllm:prefix_cache_queries_total")
    hits = delta("vllm:prefix_cache_hits_total")
    assert queries > 0 and block["prefix_cache_queries"] == queries
    assert block["prefix_cache_hits"] == hits
    assert block["prefix_cache_hit_ratio"] == pytest.approx(hits / queries)
