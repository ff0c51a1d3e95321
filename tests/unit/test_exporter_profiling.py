"""The exporter's profiling source: metrics from captures, failures by reason, scheduling."""

from __future__ import annotations

import threading
import time
from pathlib import Path

import pytest
from prometheus_client import CollectorRegistry

from exporter.config import ProfileConfig, TargetConfig
from exporter.profiling import ProfileTarget, ProfilingSource
from specload.profile.analysis import analyze
from specload.profile.capture import REASON_NOT_ENABLED, CaptureError
from specload.profile.synthetic import StepSpec, write_trace
from specload.urls import parse_server_url

pytestmark = pytest.mark.unit


def _target(variant: str, tmp_path: Path, interval_s: float | None = None) -> ProfileTarget:
    return ProfileTarget(
        variant, parse_server_url("http://127.0.0.1:1"), tmp_path, interval_s, seconds=0.01
    )


@pytest.fixture
def report_path(tmp_path: Path) -> Path:
    path = tmp_path / "rank0.pt.trace.json.gz"
    write_trace(path, [StepSpec(1, 13600.0, 7000.0, allreduces=4, other_kernels=4)] * 3)
    return path


def test_collect_after_success_and_failure(tmp_path: Path, report_path: Path) -> None:
    calls: list[str] = []

    def fake_capture(target: ProfileTarget, cancel: threading.Event):  # type: ignore[no-untyped-def]
        calls.append(target.variant)
        if target.variant == "ngram":
            raise CaptureError("profiler not enabled on x (404)", REASON_NOT_ENABLED)
        if target.variant == "broken":
            raise RuntimeError("boom")
        return analyze([report_path])

    source = ProfilingSource(
        [_target(v, tmp_path) for v in ("baseline", "ngram", "broken")],
        capture_fn=fake_capture,
        clock=lambda: 1234.5,
    )
    registry = CollectorRegistry()
    registry.register(source)  # describe() is empty: registering does no work
    assert calls == []
    get = registry.get_sample_value
    assert get("specload_decode_allreduce_ratio", {"variant": "baseline"}) is None
    assert (
        get("specload_profile_failures_total", {"variant": "baseline", "reason": "timeout"}) == 0.0
    )
    for v in ("baseline", "ngram", "broken"):
        source.run_once(v)
    assert get("specload_decode_allreduce_ratio", {"variant": "baseline"}) == pytest.approx(
        7000 / 13600, abs=1e-4
    )
    assert get("specload_decode_step_seconds", {"variant": "baseline"}) == pytest.approx(0.0136)
    assert get(
        "specload_decode_allreduce_seconds_per_step", {"variant": "baseline"}
    ) == pytest.approx(0.007)
    assert get("specload_profile_decode_steps", {"variant": "baseline"}) == 3
    assert get("specload_profile_last_success_timestamp_seconds", {"variant": "baseline"}) == 1234.5
    assert get("specload_profile_captures_total", {"variant": "baseline"}) == 1
    assert get("specload_decode_allreduce_ratio", {"variant": "ngram"}) is None
    assert (
        get(
            "specload_profile_failures_total",
            {"variant": "ngram", "reason": "profiler_not_enabled"},
        )
        == 1
    )
    assert (
        get("specload_profile_failures_total", {"variant": "broken", "reason": "internal_error"})
        == 1
    )
    assert get("specload_profile_in_progress", {"variant": "ngram"}) == 0
    assert "404" in (source.last_error("ngram") or "")


def test_trigger_runs_in_background_and_interval_schedules(
    tmp_path: Path, report_path: Path
) -> None:
    done = threading.Event()
    counts = {"on_demand": 0, "scheduled": 0}

    def fake_capture(target: ProfileTarget, cancel: threading.Event):  # type: ignore[no-untyped-def]
        counts[target.variant] += 1
        if counts["scheduled"] >= 2:
            done.set()
        return analyze([report_path])

    source = ProfilingSource(
        [_target("on_demand", tmp_path), _target("scheduled", tmp_path, interval_s=0.05)],
        capture_fn=fake_capture,
    )
    assert source.trigger("unknown") is False
    source.start()
    try:
        assert source.trigger("on_demand") is True
        assert done.wait(5.0)
        deadline = time.monotonic() + 5.0
        while counts["on_demand"] < 1 and time.monotonic() < deadline:
            time.sleep(0.01)
    finally:
        source.stop()
    assert counts["on_demand"] == 1  # no interval: only when asked
    assert counts["scheduled"] >= 2


def test_stop_cuts_a_capture_short(tmp_path: Path) -> None:
    started = threading.Event()

    def slow_capture(target: ProfileTarget, cancel: threading.Event):  # type: ignore[no-untyped-def]
        started.set()
        cancel.wait(30.0)
        raise CaptureError("stopped", "timeout")

    source = ProfilingSource([_target("v", tmp_path)], capture_fn=slow_capture)
    source.trigger("v")
    assert started.wait(5.0)
    t0 = time.monotonic()
    source.stop()
    assert time.monotonic() - t0 < 5.0


def test_from_exporter_config(tmp_path: Path) -> None:
    url = parse_server_url("http://127.0.0.1:8000")
    targets = [
        TargetConfig("baseline", url, profile=ProfileConfig(tmp_path, 600.0, 15.0)),
        TargetConfig("ngram", url),
    ]
    source = ProfilingSource.from_config(targets)
    assert source.variants == ["baseline"]
    t = ProfileTarget.from_target_config(targets[0])
    assert t is not None and (t.trace_dir, t.interval_s, t.seconds) == (tmp_path, 600.0, 15.0)
