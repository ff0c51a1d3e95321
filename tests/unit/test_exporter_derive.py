"""exporter.vllm_metrics: what is read from real vLLM 0.32 pages and derived from it."""

from __future__ import annotations

import pytest

from exporter.vllm_metrics import derive, extract, keep
from specload.promtext import parse
from tests.fixtures.exporter import set_process_start, set_values, vllm_page

pytestmark = pytest.mark.unit

L = '{engine="0",model_name="tiny-plain"'


def reading(page: str, t: float) -> object:
    return extract(parse(page, keep), t)


def later_page() -> str:
    """The captured n-gram page with known increases over the original."""
    return set_values(
        vllm_page("ngram"),
        {
            f"vllm:spec_decode_num_drafts_total{L}": 20.0,  # +8
            f"vllm:spec_decode_num_draft_tokens_total{L}": 60.0,  # +24
            f"vllm:spec_decode_num_accepted_tokens_total{L}": 50.0,  # +14
            f'vllm:spec_decode_num_accepted_tokens_per_pos_total{L},position="0"': 19.0,  # +7
            f'vllm:spec_decode_num_accepted_tokens_per_pos_total{L},position="1"': 16.0,  # +4
            f'vllm:spec_decode_num_accepted_tokens_per_pos_total{L},position="2"': 15.0,  # +3
            f"vllm:generation_tokens_total{L}": 244.0,  # +100
            f"vllm:request_time_per_output_token_seconds_sum{L}": 0.05706001721002286,  # +0.04
            f"vllm:request_time_per_output_token_seconds_count{L}": 8.0,  # +4
            f"vllm:inter_token_latency_seconds_sum{L}": 1.5985625090000894,  # +1.0
            f"vllm:inter_token_latency_seconds_count{L}": 208.0,  # +100
            f"vllm:num_requests_running{L}": 3.0,
            f"vllm:kv_cache_usage_perc{L}": 0.25,
        },
    )


def test_extract_real_ngram_page() -> None:
    r = extract(parse(vllm_page("ngram"), keep), 100.0)
    assert r.model == "tiny-plain"
    assert r.process_start_s == 1.79594697905e09
    assert (r.drafts, r.draft_tokens, r.accepted) == (12.0, 36.0, 36.0)
    assert dict(r.accepted_per_pos) == {0: 12.0, 1: 12.0, 2: 12.0}
    assert r.generation_tokens == 144.0
    assert r.itl_sum_count == (pytest.approx(0.5985625090000894), 108.0)
    assert r.tpot_sum_count == (pytest.approx(0.01706001721002286), 4.0)
    assert r.has_spec_decode and r.num_positions == 3


def test_plain_page_has_no_spec_values() -> None:
    r = extract(parse(vllm_page("plain"), keep), 100.0)
    assert not r.has_spec_decode
    d = derive(None, r)
    assert d.acceptance_ratio == {}
    assert d.mean_acceptance_length == {}
    assert d.position_acceptance_ratio == {}
    assert d.drafted_tokens_per_s is None
    assert "lifetime" in d.itl_mean_s  # the rest is there


def test_lifetime_values_from_real_counters() -> None:
    d = derive(None, extract(parse(later_page(), keep), 100.0))
    assert d.acceptance_ratio == {"lifetime": pytest.approx(50 / 60)}
    assert d.mean_acceptance_length == {"lifetime": pytest.approx(1 + 50 / 20)}
    assert d.position_acceptance_ratio == {
        ("lifetime", 0): pytest.approx(19 / 20),
        ("lifetime", 1): pytest.approx(16 / 20),
        ("lifetime", 2): pytest.approx(15 / 20),
    }
    assert d.tpot_mean_s == {"lifetime": pytest.approx(0.05706001721002286 / 8)}
    assert d.running == 3.0 and d.kv_usage_ratio == 0.25
    assert d.drafted_tokens_per_s is None  # no interval without a previous reading


def test_interval_values_from_deltas() -> None:
    r0 = extract(parse(vllm_page("ngram"), keep), 100.0)
    r1 = extract(parse(later_page(), keep), 104.0)
    d = derive(r0, r1)
    assert d.acceptance_ratio["interval"] == pytest.approx(14 / 24)
    assert d.mean_acceptance_length["interval"] == pytest.approx(1 + 14 / 8)
    assert d.position_acceptance_ratio[("interval", 0)] == pytest.approx(7 / 8)
    assert d.position_acceptance_ratio[("interval", 2)] == pytest.approx(3 / 8)
    assert d.drafted_tokens_per_s == pytest.approx(24 / 4)
    assert d.accepted_tokens_per_s == pytest.approx(14 / 4)
    assert d.generation_tokens_per_s == pytest.approx(100 / 4)
    assert d.tpot_mean_s["interval"] == pytest.approx(0.04 / 4)
    assert d.itl_mean_s["interval"] == pytest.approx(1.0 / 100)


def test_idle_interval_is_absent_not_zero() -> None:
    r0 = extract(parse(vllm_page("ngram"), keep), 100.0)
    r1 = extract(parse(vllm_page("ngram"), keep), 105.0)
    d = derive(r0, r1)
    assert "interval" not in d.acceptance_ratio
    assert "interval" not in d.tpot_mean_s
    assert d.drafted_tokens_per_s == 0.0


def test_restart_never_gives_negative_deltas() -> None:
    before = extract(parse(later_page(), keep), 100.0)
    # After a restart the counters start again: the original (smaller) page.
    after_page = set_process_start(vllm_page("ngram"), 1.8e9)
    after = extract(parse(after_page, keep), 110.0)
    d = derive(before, after)
    assert d.drafted_tokens_per_s == pytest.approx(36 / 10)
    assert d.acceptance_ratio["interval"] == pytest.approx(36 / 36)
    assert d.generation_tokens_per_s == pytest.approx(144 / 10)
    for value in (*d.acceptance_ratio.values(), *d.tpot_mean_s.values(), *d.itl_mean_s.values()):
        assert value >= 0


def test_v0_gauge_used_when_no_v1_counters() -> None:
    page = (
        "# TYPE vllm:spec_decode_draft_acceptance_rate gauge\n"
        'vllm:spec_decode_draft_acceptance_rate{model_name="old"} 0.42\n'
        "# TYPE vllm:spec_decode_num_draft_tokens_total counter\n"
        'vllm:spec_decode_num_draft_tokens_total{model_name="old"} 50\n'
        "# TYPE vllm:spec_decode_num_accepted_tokens_total counter\n"
        'vllm:spec_decode_num_accepted_tokens_total{model_name="old"} 21\n'
    )
    d = derive(None, extract(parse(page, keep), 1.0), k=5)
    assert d.acceptance_ratio["lifetime"] == pytest.approx(21 / 50)
    # V0 has no drafts counter: drafts = draft tokens / k.
    assert d.mean_acceptance_length["lifetime"] == pytest.approx(1 + 21 / 10)
    gauge_only = page.split("# TYPE vllm:spec_decode_num_draft", maxsplit=1)[0]
    only_gauge = extract(parse(gauge_only, keep), 1.0)
    assert derive(None, only_gauge).acceptance_ratio == {"lifetime": pytest.approx(0.42)}
