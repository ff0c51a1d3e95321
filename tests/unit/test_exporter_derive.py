"""exporter.vllm_metrics: what is read from real vLLM 0.32 pages and derived from it."""

from __future__ import annotations

import pytest
from prometheus_client.parser import text_string_to_metric_families

from exporter.vllm_metrics import derive, extract, keep
from specload.promtext import parse
from tests.fixtures.exporter import set_process_start, set_values, vllm_page

pytestmark = pytest.mark.unit

L = '{engine="0",model_name="tiny-plain"'


def truth(page: str) -> dict[str, float]:
    """The page's values read with prometheus_client's parser (not ours), by sample name."""
    out: dict[str, float] = {}
    for fam in text_string_to_metric_families(page):
        for s in fam.samples:
            key = s.name + (f"[{s.labels['position']}]" if "position" in s.labels else "")
            out[key] = out.get(key, 0.0) + s.value
    return out


BASE = truth(vllm_page("ngram"))
DRAFTS = "vllm:spec_decode_num_drafts_total"
TOKENS = "vllm:spec_decode_num_draft_tokens_total"
ACC = "vllm:spec_decode_num_accepted_tokens_total"
POS = "vllm:spec_decode_num_accepted_tokens_per_pos_total"
GEN = "vllm:generation_tokens_total"
TPOT = "vllm:request_time_per_output_token_seconds"
ITL = "vllm:inter_token_latency_seconds"
# Known increases for a "later" page: 8 drafts of 3 tokens, 14 accepted (7, 4, 3 by position).
DELTAS = {DRAFTS: 8.0, TOKENS: 24.0, ACC: 14.0, f"{POS}[0]": 7.0, f"{POS}[1]": 4.0,
          f"{POS}[2]": 3.0, GEN: 100.0, TPOT + "_sum": 0.04, TPOT + "_count": 4.0,
          ITL + "_sum": 1.0, ITL + "_count": 100.0}  # fmt: skip


def later_page() -> str:
    """The captured n-gram page with the DELTAS added to its counters."""
    values: dict[str, float] = {}
    for key, d in DELTAS.items():
        if key.startswith(POS):
            p = key[len(POS) + 1 : -1]
            values[f'{POS}{L},position="{p}"'] = BASE[key] + d
        else:
            values[key + L] = BASE[key] + d
    values[f"vllm:num_requests_running{L}"] = 3.0
    values[f"vllm:kv_cache_usage_perc{L}"] = 0.25
    return set_values(vllm_page("ngram"), values)


def test_extract_real_ngram_page() -> None:
    r = extract(parse(vllm_page("ngram"), keep), 100.0)
    assert r.model == "tiny-plain"
    assert r.process_start_s == pytest.approx(BASE["process_start_time_seconds"])
    assert (r.drafts, r.draft_tokens, r.accepted) == (BASE[DRAFTS], BASE[TOKENS], BASE[ACC])
    assert BASE[DRAFTS] > 0 and BASE[TOKENS] == 3 * BASE[DRAFTS]
    assert dict(r.accepted_per_pos) == {p: BASE[f"{POS}[{p}]"] for p in range(3)}
    assert r.generation_tokens == BASE[GEN]
    assert r.itl_sum_count == (pytest.approx(BASE[ITL + "_sum"]), BASE[ITL + "_count"])
    assert r.tpot_sum_count == (pytest.approx(BASE[TPOT + "_sum"]), BASE[TPOT + "_count"])
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
    drafts, tokens, acc = (BASE[k] + DELTAS[k] for k in (DRAFTS, TOKENS, ACC))
    assert d.acceptance_ratio == {"lifetime": pytest.approx(acc / tokens)}
    assert d.mean_acceptance_length == {"lifetime": pytest.approx(1 + acc / drafts)}
    assert d.position_acceptance_ratio == {
        ("lifetime", p): pytest.approx((BASE[f"{POS}[{p}]"] + DELTAS[f"{POS}[{p}]"]) / drafts)
        for p in range(3)
    }
    tpot_sum, tpot_count = (BASE[TPOT + s] + DELTAS[TPOT + s] for s in ("_sum", "_count"))
    assert d.tpot_mean_s == {"lifetime": pytest.approx(tpot_sum / tpot_count)}
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
    after_page = set_process_start(vllm_page("ngram"), 1.9e9)
    after = extract(parse(after_page, keep), 110.0)
    d = derive(before, after)
    assert d.drafted_tokens_per_s == pytest.approx(BASE[TOKENS] / 10)
    assert d.acceptance_ratio["interval"] == pytest.approx(BASE[ACC] / BASE[TOKENS])
    assert d.generation_tokens_per_s == pytest.approx(BASE[GEN] / 10)
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


def test_legacy_names_of_older_vllm() -> None:
    # vLLM <= 0.10: one per-token histogram, time_per_output_token_seconds (the ITL later
    # renamed, and vLLM's TPOT then), and the KV cache usage gauge with its gpu_ prefix.
    name = "vllm:time_per_output_token_seconds"

    def old_page(total: float, count: float) -> str:
        return (
            f"# TYPE {name} histogram\n"
            f'{name}_bucket{{le="+Inf",model_name="old"}} {count}\n'
            f'{name}_sum{{model_name="old"}} {total}\n'
            f'{name}_count{{model_name="old"}} {count}\n'
            "# TYPE vllm:gpu_cache_usage_perc gauge\n"
            'vllm:gpu_cache_usage_perc{model_name="old"} 0.5\n'
        )

    r0 = extract(parse(old_page(1.0, 100), keep), 1.0)
    r1 = extract(parse(old_page(3.0, 200), keep), 2.0)
    assert r1.model == "old"
    d = derive(r0, r1)
    assert d.itl_mean_s == {"lifetime": pytest.approx(0.015), "interval": pytest.approx(0.02)}
    assert d.tpot_mean_s == d.itl_mean_s
    assert d.kv_usage_ratio == 0.5
