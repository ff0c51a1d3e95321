"""A target that is really several replicas behind one address: its pages alternate between
processes. No reload is counted for it, no rate is derived across processes, interval ratios
come from one process's own pages, and the target says so (metric and /-/targets); a real
restart still counts."""

from __future__ import annotations

import orjson
import pytest

from exporter.app import Exporter
from exporter.config import ExporterConfig, TargetConfig
from exporter.target import PROCESS_MEMORY_POLLS
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
M = {"variant": "lb", "model": "tiny-plain"}
INTERVAL_S = 2.0


class Replica:
    """One vLLM process: its start time and counters growing at its own rates."""

    def __init__(self, start_s: float, generated: float, tok_per_s: float, accept: float) -> None:
        self.start_s = start_s
        self.generated = generated
        self.drafts = generated / 4
        self.tok_per_s = tok_per_s
        self.accept = accept  # accepted / draft tokens of its new work

    def page(self, now_s: float, since_s: float) -> str:
        """Its page at ``now_s``, having worked at its rates since ``since_s``."""
        new = self.tok_per_s * (now_s - since_s)
        generated = self.generated + new
        drafts = self.drafts + new / 4
        return set_process_start(
            set_values(
                vllm_page("ngram"),
                {
                    f"vllm:generation_tokens_total{L}": generated,
                    f"vllm:spec_decode_num_drafts_total{L}": drafts,
                    f"vllm:spec_decode_num_draft_tokens_total{L}": drafts * 3,
                    f"vllm:spec_decode_num_accepted_tokens_total{L}": (
                        self.drafts * 3 * 0.9 + new / 4 * 3 * self.accept
                    ),
                },
            ),
            self.start_s,
        )


def exporter(fake: FakeVllm, clock: FakeClock) -> Exporter:
    target = TargetConfig(variant="lb", url=parse_server_url("http://lb.test:8000"), timeout_s=1)
    cfg = ExporterConfig(targets=(target,), interval_s=INTERVAL_S)
    return Exporter(cfg, sources=[], transport=fake.transport(), clock=clock)


def poll_as(ex: Exporter, fake: FakeVllm, clock: FakeClock, replica: Replica, t0: float) -> None:
    clock.advance(INTERVAL_S)
    fake.set("lb.test", Behaviour(page=replica.page(clock.now, t0)))
    ex.poller.once()


def value(ex: Exporter, name: str, **labels: str) -> float | None:
    return ex.registry.get_sample_value(name, {**M, **labels})


def targets(ex: Exporter) -> dict[str, object]:
    start: list[str] = []
    body = b"".join(
        ex.wsgi()({"PATH_INFO": "/-/targets"}, lambda status, headers: start.append(status))
    )
    (target,) = orjson.loads(body)
    return target  # type: ignore[no-any-return]


def test_alternating_replicas_are_no_reloads_and_no_false_rates(
    fake_vllm: FakeVllm, fake_clock: FakeClock
) -> None:
    t0 = fake_clock.now
    # Two replicas, up for an hour and for two, 20 tok/s each (40 for the service), one
    # accepting 60% of its drafted tokens and the other 20%.
    a = Replica(t0 - 3600, 400_000, 20.0, 0.6)
    b = Replica(t0 - 7200, 900_000, 20.0, 0.2)
    ex = exporter(fake_vllm, fake_clock)
    for i in range(12):  # the load balancer answers in turn
        poll_as(ex, fake_vllm, fake_clock, (a, b)[i % 2], t0)
    assert value(ex, "specload_target_reloads_total") == 0.0
    assert value(ex, "specload_target_state", state="ready") == 1.0
    assert value(ex, "specload_target_processes") == 2.0
    # Across processes a rate would be ~250,000 tok/s (500,000 tokens apart in 2 s): withheld.
    assert value(ex, "specload_server_generation_tokens_per_second") is None
    assert value(ex, "specload_spec_decode_drafted_tokens_per_second") is None
    assert value(ex, "specload_server_prefix_cache_queries_tokens_total") is None
    # The interval ratio is the last page's own process's, over its own two pages (b's 20%).
    interval = value(ex, "specload_spec_decode_acceptance_ratio", window="interval")
    assert interval == pytest.approx(0.2)
    # The start time shown stays the first process's (not flipping at every poll).
    assert value(ex, "specload_target_start_time_seconds") == pytest.approx(a.start_s)
    page = targets(ex)
    assert page["processes"] == 2 and page["reloads_total"] == 0
    assert "several server processes" in str(page["warning"])
    # The load balancer drops b: once b is forgotten, one process and its rates again.
    for _ in range(PROCESS_MEMORY_POLLS):
        poll_as(ex, fake_vllm, fake_clock, a, t0)
    assert value(ex, "specload_target_processes") == 1.0
    assert value(ex, "specload_server_generation_tokens_per_second") == pytest.approx(20.0)
    assert value(ex, "specload_spec_decode_acceptance_ratio", window="interval") == (
        pytest.approx(0.6)
    )
    assert "warning" not in targets(ex) and value(ex, "specload_target_reloads_total") == 0.0


def test_an_older_process_answering_is_not_a_reload(
    fake_vllm: FakeVllm, fake_clock: FakeClock
) -> None:
    # A then B where B is older: the second replica's first page is no restart either.
    t0 = fake_clock.now
    a = Replica(t0 - 60, 1000, 10.0, 0.5)
    b = Replica(t0 - 7200, 900_000, 10.0, 0.5)
    ex = exporter(fake_vllm, fake_clock)
    poll_as(ex, fake_vllm, fake_clock, a, t0)
    poll_as(ex, fake_vllm, fake_clock, a, t0)
    assert value(ex, "specload_server_generation_tokens_per_second") == pytest.approx(10.0)
    poll_as(ex, fake_vllm, fake_clock, b, t0)
    assert value(ex, "specload_target_reloads_total") == 0.0
    assert value(ex, "specload_target_processes") == 2.0
    assert value(ex, "specload_server_generation_tokens_per_second") is None


def test_a_real_restart_is_still_a_reload(fake_vllm: FakeVllm, fake_clock: FakeClock) -> None:
    t0 = fake_clock.now
    old = Replica(t0 - 3600, 400_000, 20.0, 0.5)
    ex = exporter(fake_vllm, fake_clock)
    poll_as(ex, fake_vllm, fake_clock, old, t0)
    poll_as(ex, fake_vllm, fake_clock, old, t0)
    # Restarted between two polls: the new process started after the last page of the old.
    new = Replica(fake_clock.now + 1.0, 0, 20.0, 0.5)
    poll_as(ex, fake_vllm, fake_clock, new, fake_clock.now + 1.0)
    assert value(ex, "specload_target_reloads_total") == 1.0
    assert value(ex, "specload_target_processes") == 1.0
    # Deltas never negative: the new counter is its increase since the start.
    assert value(ex, "specload_server_generation_tokens_per_second") == pytest.approx(10.0)
    # The old process answering after all: a replica beside the new one, not a reload.
    poll_as(ex, fake_vllm, fake_clock, old, t0)
    assert value(ex, "specload_target_processes") == 2.0
    assert value(ex, "specload_target_reloads_total") == 1.0
