"""The exporter end to end in-process: fake vLLM transport → poller → collector → registry."""

from __future__ import annotations

import math
import time
from pathlib import Path

import httpx
import pytest
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.core import GaugeMetricFamily

from exporter.app import Exporter
from exporter.config import ExporterConfig, TargetConfig, parse_config
from exporter.fetch import REASONS
from specload.promtext import parse
from specload.urls import parse_server_url
from tests.fixtures.exporter import (
    Behaviour,
    FakeClock,
    FakeVllm,
    free_port,
    set_process_start,
    set_values,
    vllm_page,
)

pytestmark = pytest.mark.unit

L = '{engine="0",model_name="tiny-plain"'


def make(
    fake: FakeVllm, clock: FakeClock, variants: list[str], *, timeout_s: float = 1.0, **kw: object
) -> Exporter:
    targets = tuple(
        TargetConfig(variant=v, url=parse_server_url(f"http://{v}.test:8000"), timeout_s=timeout_s)
        for v in variants
    )
    cfg = ExporterConfig(targets=targets, interval_s=1.0, **kw)  # type: ignore[arg-type]
    return Exporter(cfg, sources=[], transport=fake.transport(), clock=clock)


def value(ex: Exporter, name: str, **labels: str) -> float | None:
    return ex.registry.get_sample_value(name, labels)


def test_values_and_labels_from_real_page(fake_vllm: FakeVllm, fake_clock: FakeClock) -> None:
    fake_vllm.set("ngram.test", Behaviour(page=vllm_page("ngram")))
    fake_vllm.set("plain.test", Behaviour(page=vllm_page("plain")))
    ex = make(fake_vllm, fake_clock, ["ngram", "plain"])
    ex.poller.once()
    m = {"variant": "ngram", "model": "tiny-plain"}
    assert value(ex, "specload_target_up", **m) == 1.0
    drafts, tokens, acc = (base(ex, f) for f in ("drafts", "draft_tokens", "accepted"))
    assert value(ex, "specload_spec_decode_acceptance_ratio", **m, window="lifetime") == (
        pytest.approx(acc / tokens)
    )
    assert value(ex, "specload_spec_decode_mean_acceptance_length", **m, window="lifetime") == (
        pytest.approx(1 + acc / drafts)
    )
    assert value(ex, "specload_target_state", **m, state="ready") == 1.0
    assert value(ex, "specload_target_state", **m, state="loading") == 0.0
    info = {
        **m,
        "method": "unknown",  # no log: /metrics says speculation is on, not which
        "num_speculative_tokens": "3",  # from the number of position labels
        "draft_model": "",
        "tensor_parallel_size": "",
        "vllm_version": "0.32.0",  # from GET /version
    }
    assert value(ex, "specload_variant_info", **info) == 1.0
    p = {"variant": "plain", "model": "tiny-plain"}
    assert value(ex, "specload_target_up", **p) == 1.0
    assert value(ex, "specload_spec_decode_acceptance_ratio", **p, window="lifetime") is None
    assert value(ex, "specload_server_itl_mean_seconds", **p, window="lifetime") is not None
    assert (
        value(ex, "specload_variant_info", **p, method="none", num_speculative_tokens="0",
              draft_model="", tensor_parallel_size="", vllm_version="0.32.0")
        == 1.0
    )  # fmt: skip
    # No spec family at all for the plain target's labels.
    page = parse(generate_latest(ex.registry).decode())
    for fam in page.values():
        if fam.name.startswith("specload_spec_decode"):
            assert all(s.labels["variant"] != "plain" for s in fam.samples)


def base(ex: Exporter, field: str) -> float:
    """A raw counter of the target's last reading."""
    prev = ex.monitors[0]._prev
    assert prev is not None
    val = getattr(prev, field)
    assert isinstance(val, float)
    return val


def test_interval_window_over_two_polls(fake_vllm: FakeVllm, fake_clock: FakeClock) -> None:
    fake_vllm.set("ngram.test", Behaviour(page=vllm_page("ngram")))
    ex = make(fake_vllm, fake_clock, ["ngram"])
    ex.poller.once()
    fake_clock.advance(5.0)
    fake_vllm.set(
        "ngram.test",
        Behaviour(
            page=set_values(
                vllm_page("ngram"),
                {  # +10 drafts, +30 draft tokens, +15 accepted
                    f"vllm:spec_decode_num_drafts_total{L}": base(ex, "drafts") + 10,
                    f"vllm:spec_decode_num_draft_tokens_total{L}": base(ex, "draft_tokens") + 30,
                    f"vllm:spec_decode_num_accepted_tokens_total{L}": base(ex, "accepted") + 15,
                },
            )
        ),
    )
    ex.poller.once()
    m = {"variant": "ngram", "model": "tiny-plain"}
    assert value(ex, "specload_spec_decode_acceptance_ratio", **m, window="interval") == (
        pytest.approx(15 / 30)
    )
    assert value(ex, "specload_spec_decode_mean_acceptance_length", **m, window="interval") == (
        pytest.approx(1 + 15 / 10)
    )
    assert value(ex, "specload_spec_decode_drafted_tokens_per_second", **m) == pytest.approx(6.0)
    assert value(ex, "specload_spec_decode_accepted_tokens_per_second", **m) == pytest.approx(3.0)


@pytest.mark.parametrize(
    ("behaviour", "reason"),
    [
        (Behaviour("refused"), "refused"),
        (Behaviour("hang"), "timeout"),
        (Behaviour("status", status=500), "http_5xx"),
        (Behaviour("status", status=404), "http_4xx"),
        (Behaviour("body", body=b"<html>oops</html>\n"), "malformed"),
        (Behaviour("body", body=b"\xff\xfe not utf-8 \n"), "malformed"),
        (Behaviour("endless"), "too_large"),
    ],
)
def test_fault_marks_only_that_target(
    fake_vllm: FakeVllm, fake_clock: FakeClock, behaviour: Behaviour, reason: str
) -> None:
    fake_vllm.set("good.test", Behaviour(page=vllm_page("ngram")))
    fake_vllm.set("bad.test", behaviour)
    ex = make(fake_vllm, fake_clock, ["good", "bad"], max_response_bytes=1024 * 1024)
    t0 = time.monotonic()
    ex.poller.once()
    assert time.monotonic() - t0 < 5  # the hang is cut at the target's deadline
    bad = {"variant": "bad", "model": "unknown"}
    assert value(ex, "specload_target_up", **bad) == 0.0
    for r in REASONS:
        expected = 1.0 if r == reason else 0.0
        assert value(ex, "specload_target_scrape_errors_total", **bad, reason=r) == expected
    assert value(ex, "specload_target_state", **bad, state="down") == 1.0
    good = {"variant": "good", "model": "tiny-plain"}
    assert value(ex, "specload_target_up", **good) == 1.0
    assert value(ex, "specload_spec_decode_acceptance_ratio", **good, window="lifetime") is not None


def test_gzip_answers_are_inflated_within_the_cap(
    fake_vllm: FakeVllm, fake_clock: FakeClock
) -> None:
    fake_vllm.set("z.test", Behaviour("gzip", page=vllm_page("ngram")))
    # A small page that inflates past the cap: a zip bomb is a fault too.
    fake_vllm.set("bomb.test", Behaviour("gzip", body=b"#" * (4 * 1024 * 1024)))
    ex = make(fake_vllm, fake_clock, ["z", "bomb"], max_response_bytes=1024 * 1024)
    ex.poller.once()
    assert value(ex, "specload_target_up", variant="z", model="tiny-plain") == 1.0
    bomb = {"variant": "bomb", "model": "unknown"}
    assert value(ex, "specload_target_scrape_errors_total", **bomb, reason="too_large") == 1.0


def test_refused_after_up_is_a_reload_and_back(fake_vllm: FakeVllm, fake_clock: FakeClock) -> None:
    page = vllm_page("ngram")
    fake_vllm.set("v.test", Behaviour(page=page))
    ex = make(fake_vllm, fake_clock, ["v"])
    m = {"variant": "v", "model": "tiny-plain"}
    ex.poller.once()
    fake_clock.advance(1)
    fake_vllm.set("v.test", Behaviour("refused"))
    ex.poller.once()
    assert value(ex, "specload_target_state", **m, state="loading") == 1.0
    assert value(ex, "specload_target_reload_in_progress", **m) == 1.0
    assert value(ex, "specload_target_up", **m) == 0.0
    # While down, derived families are absent, the lifecycle ones are there.
    assert value(ex, "specload_spec_decode_acceptance_ratio", **m, window="lifetime") is None
    fake_clock.advance(9)
    assert value(ex, "specload_target_reload_elapsed_seconds", **m) == pytest.approx(9.0)
    ex.poller.once()
    fake_clock.advance(5)
    new_start = fake_clock.now - 3
    fake_vllm.set("v.test", Behaviour(page=set_process_start(page, new_start)))
    ex.poller.once()
    assert value(ex, "specload_target_state", **m, state="ready") == 1.0
    assert value(ex, "specload_target_reloads_total", **m) == 1.0
    assert value(ex, "specload_target_last_reload_duration_seconds", **m) == pytest.approx(14.0)
    assert value(ex, "specload_target_reload_elapsed_seconds", **m) is None
    assert value(ex, "specload_target_start_time_seconds", **m) == pytest.approx(new_start)


def test_metrics_answer_while_every_target_is_down() -> None:
    fake = FakeVllm()
    ex = make(fake, FakeClock(), ["a", "b"])
    ex.poller.once()
    text = generate_latest(ex.registry).decode()
    fams = parse(text)
    ups = fams["specload_target_up"].samples
    assert sorted(s.labels["variant"] for s in ups) == ["a", "b"]
    assert all(s.value == 0.0 for s in ups)
    assert fams["specload_exporter_polls_total"].total() == 2.0  # one per target


class Boom:
    def collect(self) -> list[object]:
        raise RuntimeError("source broke")


class Fixed:
    def collect(self) -> list[object]:
        return [GaugeMetricFamily("specload_test_extra", "x", value=7.0)]


def test_extra_sources_plug_in_and_a_failing_one_is_isolated() -> None:
    fake = FakeVllm()
    cfg = ExporterConfig(
        targets=(TargetConfig("a", parse_server_url("http://a.test")),), interval_s=1.0
    )
    ex = Exporter(
        cfg,
        sources=[("boom", Boom()), ("fixed", Fixed())],  # type: ignore[list-item]
        transport=fake.transport(),
        clock=FakeClock(),
    )
    ex.poller.once()
    fams = parse(generate_latest(ex.registry).decode())  # one scrape
    assert fams["specload_test_extra"].total() == 7.0
    assert fams.get_family("specload_exporter_source_errors_total").total({"source": "boom"}) == 1
    assert fams["specload_target_up"].total({"variant": "a"}) == 0.0


def test_background_poller_and_http_server(fake_vllm: FakeVllm) -> None:
    fake_vllm.set("a.test", Behaviour(page=vllm_page("ngram")))
    targets = [{"variant": "a", "url": "a.test"}]
    cfg = parse_config({"port": 0, "interval": 0.05, "targets": targets})
    ex = Exporter(cfg, sources=[], transport=fake_vllm.transport())
    ex.start()
    try:
        deadline = time.monotonic() + 5
        while ex.poller.stats.polls_total < 3 and time.monotonic() < deadline:
            time.sleep(0.02)
        assert ex.poller.stats.polls_total >= 3
        r = httpx.get(ex.url + "/metrics", timeout=5)
        assert r.status_code == 200
        fams = parse(r.text)
        assert fams["specload_target_up"].total() == 1.0
        cpu = fams["specload_exporter_poll_round_cpu_seconds"].total()
        assert cpu is not None and 0 <= cpu < 1
        assert httpx.get(ex.url + "/-/healthy", timeout=5).text == "ok\n"
        targets = httpx.get(ex.url + "/-/targets", timeout=5).json()
        assert targets[0]["state"] == "ready"
        assert httpx.post(ex.url + "/-/profile/a", timeout=5).status_code == 404
    finally:
        ex.stop()


def test_no_nan_or_inf_leaks_from_zero_counts(fake_vllm: FakeVllm, fake_clock: FakeClock) -> None:
    zeroed = set_values(
        vllm_page("ngram"),
        {
            f"vllm:spec_decode_num_drafts_total{L}": 0.0,
            f"vllm:spec_decode_num_draft_tokens_total{L}": 0.0,
            f"vllm:spec_decode_num_accepted_tokens_total{L}": 0.0,
        },
    )
    fake_vllm.set("z.test", Behaviour(page=zeroed))
    ex = make(fake_vllm, fake_clock, ["z"])
    ex.poller.once()
    registry: CollectorRegistry = ex.registry
    for fam in registry.collect():
        for s in fam.samples:
            assert math.isfinite(s.value), s
    m = {"variant": "z", "model": "tiny-plain"}
    assert value(ex, "specload_spec_decode_acceptance_ratio", **m, window="lifetime") is None


def test_profile_config_wires_the_profiling_source(tmp_path: Path) -> None:
    cfg = parse_config(
        {
            "port": 0,
            "interval": 10,
            "targets": [
                {"variant": "p", "url": f"http://127.0.0.1:{free_port()}",
                 "profile": {"trace_dir": str(tmp_path), "interval": None, "seconds": 1}},
                {"variant": "q", "url": "http://q.test"},
            ],
        }
    )  # fmt: skip
    ex = Exporter(cfg)
    assert [type(s).__name__ for s in ex.sources] == ["ProfilingSource"]
    ex.start()
    try:
        assert httpx.post(ex.url + "/-/profile/p", timeout=5).status_code == 202
        assert httpx.post(ex.url + "/-/profile/q", timeout=5).status_code == 404
        assert httpx.get(ex.url + "/-/profile/p", timeout=5).status_code == 405
        deadline = time.monotonic() + 10
        while True:  # the capture fails (nothing listens) and says why, the rest goes on
            fams = parse(httpx.get(ex.url + "/metrics", timeout=5).text)
            failures = fams.get_family("specload_profile_failures_total")
            if failures is not None and (failures.total({"variant": "p"}) or 0) >= 1:
                break
            assert time.monotonic() < deadline, "capture never failed"
            time.sleep(0.1)
        assert fams["specload_target_up"].total({"variant": "p"}) == 0.0
    finally:
        ex.stop()
