"""specload.vllm_metrics: the names against real vLLM 0.32 pages, the deltas, the formulas."""

from __future__ import annotations

from pathlib import Path

import pytest

from specload import vllm_metrics as vm
from specload.promtext import parse
from tests.fixtures.vllm_families import EMULATED_FAMILIES, SPEC_DECODE_FAMILIES

pytestmark = pytest.mark.unit

DATA = Path(__file__).resolve().parents[1] / "data" / "vllm-0.32.0"

NAMES = {
    attr: value
    for attr, value in vars(vm).items()
    if attr.isupper() and isinstance(value, str) and value.startswith(("vllm:", "process_"))
}
LEGACY = {a: n for a, n in NAMES.items() if a.endswith("_LEGACY") or a.startswith("V0_")}
CURRENT = {a: n for a, n in NAMES.items() if a not in LEGACY}


def test_current_names_are_on_real_vllm_0_32_pages_and_legacy_ones_are_not() -> None:
    page = parse((DATA / "metrics_ngram.txt").read_text())
    plain = parse((DATA / "metrics_plain.txt").read_text())
    assert len(CURRENT) >= 15 and len(LEGACY) >= 5
    for attr, name in CURRENT.items():
        assert name in page, f"{attr} = {name!r} is not a family of vLLM 0.32"
        if name not in SPEC_DECODE_FAMILIES:
            assert name in plain, f"{attr} = {name!r} is not on the plain page"
    for attr, name in LEGACY.items():
        assert page.get_family(name) is None, f"{attr} = {name!r} is still served"
    # Each renamed family: the current name first.
    for names in (vm.TPOT_NAMES, vm.ITL_NAMES, vm.KV_CACHE_USAGE_NAMES,
                  vm.PREFIX_CACHE_QUERIES_NAMES, vm.PREFIX_CACHE_HITS_NAMES):  # fmt: skip
        assert names[0] in CURRENT.values() and all(n in LEGACY.values() for n in names[1:])


def test_the_simulator_is_checked_for_every_family_specload_reads() -> None:
    assert set(CURRENT.values()) <= {*EMULATED_FAMILIES, *SPEC_DECODE_FAMILIES}


def test_prefix_cache_counters_on_the_captured_page() -> None:
    page = parse((DATA / "metrics_ngram.txt").read_text())
    queries = vm.counter_total(page, vm.PREFIX_CACHE_QUERIES_NAMES)
    hits = vm.counter_total(page, vm.PREFIX_CACHE_HITS_NAMES)
    assert queries is not None and queries > 0 and hits is not None
    assert page[vm.PREFIX_CACHE_QUERIES].type == "counter"
    assert vm.hit_ratio(hits, queries) == pytest.approx(hits / queries)


def test_family_filter_wants_both_counter_spellings() -> None:
    keep = vm.family_filter([vm.GENERATION_TOKENS, vm.REQUEST_TPOT])
    assert keep("vllm:generation_tokens_total") and keep("vllm:generation_tokens")
    assert keep(vm.REQUEST_TPOT)
    assert not keep("vllm:prompt_tokens_total") and not keep("vllm:request_tpot")


def test_first_family_skips_absent_and_empty_families() -> None:
    text = (
        "# TYPE vllm:request_time_per_output_token_seconds histogram\n"
        "# TYPE vllm:time_per_output_token_seconds histogram\n"
        'vllm:time_per_output_token_seconds_sum{model_name="m"} 2.0\n'
        'vllm:time_per_output_token_seconds_count{model_name="m"} 100\n'
        "# TYPE vllm:gpu_prefix_cache_hits counter\n"
        'vllm:gpu_prefix_cache_hits_total{model_name="m"} 7\n'
    )
    fams = parse(text)
    assert vm.sum_count(fams, vm.TPOT_NAMES) == (2.0, 100.0)  # the typed, empty one skipped
    assert vm.sum_count(fams, vm.E2E_LATENCY) is None
    # A counter typed without _total, under its legacy name.
    assert vm.counter_total(fams, vm.PREFIX_CACHE_HITS_NAMES) == 7.0
    assert vm.counter_total(fams, vm.PREFIX_CACHE_QUERIES_NAMES) is None


def test_increase_is_never_negative_and_says_when_it_counted_from_zero() -> None:
    assert vm.increase(10.0, 25.0) == (15.0, False)
    assert vm.increase(None, 25.0) == (25.0, False)  # new counter: from zero
    assert vm.increase(500.0, 25.0) == (25.0, True)  # went down: restarted
    assert vm.increase(10.0, 25.0, restarted=True) == (25.0, True)
    assert vm.histogram_increase((1.0, 10.0), (3.0, 30.0)) == ((2.0, 20.0), False)
    assert vm.histogram_increase(None, (3.0, 30.0)) == ((3.0, 30.0), False)
    assert vm.histogram_increase((9.0, 90.0), (3.0, 30.0)) == ((3.0, 30.0), True)
    assert vm.histogram_increase((1.0, 10.0), (3.0, 30.0), restarted=True) == ((3.0, 30.0), True)
    assert vm.any_went_down([(1.0, 2.0), (None, 0.0), (5.0, 4.0)])
    assert not vm.any_went_down([(1.0, 2.0), (3.0, None), (None, None)])


def test_formulas() -> None:
    assert vm.acceptance_rate(14, 24) == pytest.approx(14 / 24)
    assert vm.mean_acceptance_length(14, 8) == pytest.approx(1 + 14 / 8)
    assert vm.position_acceptance({0: 7.0, 2: 3.0}, 8) == {0: 7 / 8, 2: 3 / 8}
    assert vm.histogram_mean((0.04, 4.0)) == pytest.approx(0.01)
    assert vm.hit_ratio(300, 400) == pytest.approx(0.75)
    assert vm.drafts_from_draft_tokens(50, 5) == 10
    # Nothing to divide by: absent, not zero.
    assert vm.acceptance_rate(0, 0) is None and vm.acceptance_rate(None, 10) is None
    assert vm.mean_acceptance_length(3, 0) is None and vm.mean_acceptance_length(None, 3) is None
    assert (
        vm.position_acceptance({0: 1.0}, 0) == {} and vm.position_acceptance({0: 1.0}, None) == {}
    )
    assert vm.histogram_mean((0.0, 0.0)) is None and vm.histogram_mean(None) is None
    assert vm.hit_ratio(0, 0) is None
    assert (
        vm.drafts_from_draft_tokens(50, None) is None
        and vm.drafts_from_draft_tokens(None, 5) is None
    )
