"""The exporter's prefix-cache, preemption and sleep-state series: read from the real
vLLM 0.32 pages (known values), derived over two polls, absent without the families."""

from __future__ import annotations

import re

import pytest
from prometheus_client import generate_latest
from prometheus_client.parser import text_string_to_metric_families

from exporter.app import Exporter
from exporter.config import ExporterConfig, TargetConfig
from exporter.vllm_metrics import SLEEP_STATES, derive, extract, keep, went_backwards
from specload.promtext import parse
from specload.urls import parse_server_url
from tests.fixtures.exporter import (
    Behaviour,
    FakeClock,
    FakeVllm,
    set_process_start,
    set_values,
    vllm_page,
)

pytestmark = pytest.mark.unit

L = '{engine="0",model_name="tiny-plain"'
QUERIES = "vllm:prefix_cache_queries_total"
HITS = "vllm:prefix_cache_hits_total"
PREEMPTIONS = "vllm:num_preemptions_total"
SLEEP = "vllm:engine_sleep_state"
NEW_FAMILIES = (
    "specload_server_prefix_cache_hit_ratio",
    "specload_server_prefix_cache_queries_tokens",
    "specload_server_prefix_cache_hits_tokens",
    "specload_server_preemptions",
    "specload_server_sleep_state",
)
AWAKE = {"awake": 1.0, "weights_offloaded": 0.0, "discard_all": 0.0}


def truth(page: str) -> dict[str, float]:
    """The page's values read with prometheus_client's parser (not ours), per sample name
    (the sleep state per state)."""
    out: dict[str, float] = {}
    for fam in text_string_to_metric_families(page):
        for s in fam.samples:
            key = s.name + (f"[{s.labels['sleep_state']}]" if "sleep_state" in s.labels else "")
            out[key] = out.get(key, 0.0) + s.value
    return out


def without_families(page: str, *names: str) -> str:
    """The page without any line (samples, HELP, TYPE) of the families ``names``."""
    bases = {re.sub(r"_total$", "", n) for n in names}
    pattern = re.compile(
        r"^(?:# (?:HELP|TYPE) )?(" + "|".join(map(re.escape, bases)) + r")(?:_total|_created)?[ {]"
    )
    return "\n".join(line for line in page.split("\n") if not pattern.match(line))


def older_page() -> str:
    """A real page as an older vLLM (or a simulator of one) serves it: none of the four
    families."""
    return without_families(
        vllm_page("plain"),
        QUERIES,
        HITS,
        PREEMPTIONS,
        SLEEP,
        "vllm:external_prefix_cache_queries_total",
        "vllm:external_prefix_cache_hits_total",
    )


@pytest.mark.parametrize("kind", ["plain", "ngram"])
def test_real_pages_known_values(kind: str) -> None:
    page = vllm_page(kind)
    known = truth(page)
    # What the captured pages hold (tests/data/vllm-0.32.0): prompts were looked up, none hit
    # (no prompt repeated a cached block), nothing preempted, the engine awake.
    assert known[QUERIES] == {"plain": 160.0, "ngram": 128.0}[kind]
    assert known[HITS] == 0.0 and known[PREEMPTIONS] == 0.0
    assert {s: known[f"{SLEEP}[{s}]"] for s in SLEEP_STATES} == AWAKE
    r = extract(parse(page, keep), 100.0)
    assert (r.prefix_cache_queries, r.prefix_cache_hits) == (known[QUERIES], known[HITS])
    assert r.preemptions == 0.0
    assert r.sleep_state == AWAKE
    d = derive(None, r)
    assert d.prefix_cache_hit_ratio == {"lifetime": 0.0}  # looked up, nothing hit: a real 0
    assert (d.prefix_cache_queries, d.prefix_cache_hits, d.preemptions) == (
        known[QUERIES],
        0.0,
        0.0,
    )
    assert d.sleep_state == AWAKE


def later_plain_page() -> str:
    """The plain page 4 s later: +200 tokens looked up, 150 of them hit; 2 preemptions;
    the engine put to sleep at level 1."""
    base = truth(vllm_page("plain"))
    return set_values(
        vllm_page("plain"),
        {
            f"{QUERIES}{L}": base[QUERIES] + 200,
            f"{HITS}{L}": base[HITS] + 150,
            f"{PREEMPTIONS}{L}": base[PREEMPTIONS] + 2,
            f'{SLEEP}{L},sleep_state="awake"': 0.0,
            f'{SLEEP}{L},sleep_state="weights_offloaded"': 1.0,
        },
    )


def test_interval_hit_ratio_from_deltas() -> None:
    r0 = extract(parse(vllm_page("plain"), keep), 100.0)
    r1 = extract(parse(later_plain_page(), keep), 104.0)
    d = derive(r0, r1)
    assert d.prefix_cache_hit_ratio["interval"] == pytest.approx(150 / 200)
    assert d.prefix_cache_hit_ratio["lifetime"] == pytest.approx(150 / 360)
    assert (d.prefix_cache_queries, d.prefix_cache_hits, d.preemptions) == (360.0, 150.0, 2.0)
    assert d.sleep_state == {"awake": 0.0, "weights_offloaded": 1.0, "discard_all": 0.0}


def test_idle_interval_has_no_hit_ratio() -> None:
    r0 = extract(parse(vllm_page("plain"), keep), 100.0)
    r1 = extract(parse(vllm_page("plain"), keep), 105.0)
    d = derive(r0, r1)
    assert "interval" not in d.prefix_cache_hit_ratio  # nothing looked up: absent, not 0 or NaN
    assert d.prefix_cache_hit_ratio["lifetime"] == 0.0


def test_restart_counts_the_new_values_as_the_increase() -> None:
    before = extract(parse(later_plain_page(), keep), 100.0)
    # After a restart the counters begin again: the captured (smaller) page.
    after = extract(parse(set_process_start(vllm_page("plain"), 1.9e9), keep), 110.0)
    d = derive(before, after)
    assert d.prefix_cache_hit_ratio["interval"] == 0.0  # 0 hits of 160 since the restart


@pytest.mark.parametrize("counter", [QUERIES, HITS, PREEMPTIONS])
def test_one_of_these_counters_going_down_is_a_restart(counter: str) -> None:
    # Only this counter went down (the process start time unchanged): the server restarted,
    # so every counter's delta counts from zero, not just this one's.
    before = extract(parse(later_plain_page(), keep), 100.0)
    smaller = set_values(later_plain_page(), {f"{counter}{L}": 1.0})
    after = extract(parse(smaller, keep), 104.0)
    assert went_backwards(before, after)
    assert not went_backwards(before, extract(parse(later_plain_page(), keep), 104.0))


def test_families_missing_leave_the_values_absent() -> None:
    r = extract(parse(older_page(), keep), 100.0)
    assert (r.prefix_cache_queries, r.prefix_cache_hits, r.preemptions) == (None, None, None)
    assert r.sleep_state == {}
    d = derive(r, extract(parse(older_page(), keep), 104.0))
    assert d.prefix_cache_hit_ratio == {}
    assert (d.prefix_cache_queries, d.prefix_cache_hits, d.preemptions) == (None, None, None)
    assert d.sleep_state == {}
    assert d.itl_mean_s  # the rest of the page is still read


def test_legacy_gpu_prefix_counters() -> None:
    # vLLM <= 0.11 named them with a gpu_ prefix (specload.vllm_metrics' legacy names).
    page = (
        "# TYPE vllm:gpu_prefix_cache_queries_total counter\n"
        'vllm:gpu_prefix_cache_queries_total{model_name="old"} 40\n'
        "# TYPE vllm:gpu_prefix_cache_hits_total counter\n"
        'vllm:gpu_prefix_cache_hits_total{model_name="old"} 10\n'
    )
    d = derive(None, extract(parse(page, keep), 1.0))
    assert d.prefix_cache_hit_ratio == {"lifetime": 0.25}
    assert (d.prefix_cache_queries, d.prefix_cache_hits) == (40.0, 10.0)


def test_sleep_state_is_the_share_of_engines_and_bounded() -> None:
    page = (
        "# TYPE vllm:engine_sleep_state gauge\n"
        'vllm:engine_sleep_state{engine="0",model_name="m",sleep_state="awake"} 1.0\n'
        'vllm:engine_sleep_state{engine="0",model_name="m",sleep_state="weights_offloaded"} 0.0\n'
        'vllm:engine_sleep_state{engine="0",model_name="m",sleep_state="discard_all"} 0.0\n'
        'vllm:engine_sleep_state{engine="1",model_name="m",sleep_state="awake"} 0.0\n'
        'vllm:engine_sleep_state{engine="1",model_name="m",sleep_state="weights_offloaded"} 0.0\n'
        'vllm:engine_sleep_state{engine="1",model_name="m",sleep_state="discard_all"} 1.0\n'
        'vllm:engine_sleep_state{engine="1",model_name="m",sleep_state="dreaming"} 1.0\n'
    )
    r = extract(parse(page, keep), 1.0)
    assert r.sleep_state == {"awake": 0.5, "weights_offloaded": 0.0, "discard_all": 0.5}


# -- served by the exporter ---------------------------------------------------------------


def make(fake: FakeVllm, clock: FakeClock, variants: list[str]) -> Exporter:
    targets = tuple(
        TargetConfig(variant=v, url=parse_server_url(f"http://{v}.test:8000"), timeout_s=1.0)
        for v in variants
    )
    cfg = ExporterConfig(targets=targets, interval_s=1.0)
    return Exporter(cfg, sources=[], transport=fake.transport(), clock=clock)


def test_served_per_target_from_real_pages(fake_vllm: FakeVllm, fake_clock: FakeClock) -> None:
    fake_vllm.set("plain.test", Behaviour(page=vllm_page("plain")))
    fake_vllm.set("old.test", Behaviour(page=older_page()))
    ex = make(fake_vllm, fake_clock, ["plain", "old"])
    ex.poller.once()
    fake_clock.advance(4.0)
    fake_vllm.set("plain.test", Behaviour(page=later_plain_page()))
    ex.poller.once()

    def value(name: str, **labels: str) -> float | None:
        return ex.registry.get_sample_value(name, labels)

    m = {"variant": "plain", "model": "tiny-plain"}
    assert value("specload_server_prefix_cache_queries_tokens_total", **m) == 360.0
    assert value("specload_server_prefix_cache_hits_tokens_total", **m) == 150.0
    assert value("specload_server_prefix_cache_hit_ratio", **m, window="interval") == 0.75
    assert value("specload_server_prefix_cache_hit_ratio", **m, window="lifetime") == (
        pytest.approx(150 / 360)
    )
    assert value("specload_server_preemptions_total", **m) == 2.0
    assert value("specload_server_sleep_state", **m, state="weights_offloaded") == 1.0
    assert value("specload_server_sleep_state", **m, state="awake") == 0.0
    assert value("specload_server_sleep_state", **m, state="discard_all") == 0.0

    # A target without the families: up, its other series there, these absent (not zero).
    old = {"variant": "old", "model": "tiny-plain"}
    assert value("specload_target_up", **old) == 1.0
    assert value("specload_server_itl_mean_seconds", **old, window="lifetime") is not None
    served = parse(generate_latest(ex.registry).decode())
    for name in NEW_FAMILIES:
        fam = served.get_family(name)
        assert fam is not None, name
        assert {s.labels["variant"] for s in fam.samples} == {"plain"}, name


def test_absent_while_the_target_is_down(fake_vllm: FakeVllm, fake_clock: FakeClock) -> None:
    ex = make(fake_vllm, fake_clock, ["gone"])  # refused: never up
    ex.poller.once()
    served = parse(generate_latest(ex.registry).decode())
    assert served.get_family("specload_target_up") is not None
    for name in NEW_FAMILIES:
        assert served.get_family(name) is None, name
