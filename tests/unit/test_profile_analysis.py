"""Decode all-reduce share from traces with a known truth."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from specload.profile.analysis import (
    MODE_CPU_OPS,
    MODE_GPU_RANGES,
    MODE_KERNEL_START,
    MODE_LAUNCH,
    analyze,
    analyze_file,
    batch_bucket,
)
from specload.profile.render import render_text
from specload.profile.synthetic import StepSpec, write_trace
from specload.profile.tracefile import (
    ALLREDUCE_KERNEL_EXAMPLES,
    CPU_OP_FAMILIES,
    TraceFileError,
    TraceWriter,
    iter_events,
    step_annotation_name,
)

pytestmark = pytest.mark.unit

GPU_FAMILIES = sorted(set(ALLREDUCE_KERNEL_EXAMPLES) - CPU_OP_FAMILIES)
MODES = {
    "gpu_annotation": MODE_GPU_RANGES,
    "launch": MODE_LAUNCH,
    "kernel_start": MODE_KERNEL_START,
    "cpu": MODE_CPU_OPS,
}


def _steps(ar1: float = 7000.0, ar32: float = 6000.0) -> list[StepSpec]:
    # Batch 1: 13.6 ms steps, ~51% all-reduce (the reference); batch 32: 20 ms, 30%.
    # Mixed prefill steps in between must not count.
    out: list[StepSpec] = []
    for i in range(6):
        out.append(StepSpec(1, 13600.0, ar1 + 50 * i, allreduces=16, other_kernels=16))
        out.append(StepSpec(32, 20000.0, ar32 - 40 * i, allreduces=16, other_kernels=16))
        if i % 3 == 0:
            out.append(StepSpec(8, 40000.0, 2000.0, allreduces=16, other_kernels=16, prefill=2))
    return out


@pytest.mark.parametrize("style", ["gpu_annotation", "launch", "kernel_start"])
@pytest.mark.parametrize("family", GPU_FAMILIES)
def test_recovers_true_share_gpu(tmp_path: Path, style: str, family: str) -> None:
    path = tmp_path / "rank0.pt.trace.json.gz"
    truth = write_trace(path, _steps(), family=family, style=style)
    report = analyze([path])
    j = report.to_json()
    assert j["ranks"][0]["mode"] == MODES[style]
    for batch in (1, 32):
        got = j["batch_sizes"][str(batch)]["allreduce_ratio"]
        assert got == pytest.approx(truth.ratio(batch), abs=1e-4)
        assert j["batch_sizes"][str(batch)]["steps"] == truth.steps[batch]
    assert j["decode_allreduce_ratio"] == pytest.approx(truth.ratio(), abs=1e-4)
    assert j["decode_steps"] == 12
    assert j["mixed"]["steps"] == 2
    assert j["allreduce_kernels"] == {family: 12 * 16}
    assert j["ranks"][0]["allreduce_outside_steps"] == 0  # mixed-step kernels are in steps
    step_s = (6 * 13600.0 + 6 * 20000.0) / 12 * 1e-6
    assert j["decode_step_seconds"] == pytest.approx(step_s, rel=1e-6)


def test_recovers_true_share_cpu(tmp_path: Path) -> None:
    path = tmp_path / "cpu.json.gz"
    truth = write_trace(path, _steps(ar1=3000.0, ar32=2000.0), family="cpu_shm", style="cpu")
    j = analyze([path]).to_json()
    assert j["ranks"][0]["mode"] == MODE_CPU_OPS
    for batch in (1, 32):
        # Nested c10d::allreduce_ ⊃ _C::shm_allreduce count once.
        assert j["batch_sizes"][str(batch)]["allreduce_ratio"] == pytest.approx(
            truth.ratio(batch), abs=1e-4
        )
    assert j["ranks"][0]["decode_allreduce_kernels_per_step"] == 16
    assert set(j["allreduce_kernels"]) == {"cpu_shm", "cpu_gloo"}


def test_launch_correlation_matters(tmp_path: Path) -> None:
    """Without GPU ranges the kernels run past the CPU range: only launches place them."""
    path = tmp_path / "l.json"
    truth = write_trace(path, _steps(), style="launch", lag_us=400.0)
    ranges = [
        (ev["ts"], ev["ts"] + ev["dur"])
        for ev in iter_events(path)
        if ev.get("cat") == "user_annotation"
    ]
    late = sum(
        1
        for ev in iter_events(path)
        if ev.get("cat") == "kernel" and not any(a <= ev["ts"] <= b for a, b in ranges)
    )
    assert late > 0  # the trace does put kernels beyond their step's CPU range
    report = analyze([path])
    j = report.to_json()
    assert j["ranks"][0]["mode"] == MODE_LAUNCH
    assert j["batch_sizes"]["1"]["allreduce_ratio"] == pytest.approx(truth.ratio(1), abs=1e-4)
    assert j["ranks"][0]["allreduce_outside_steps"] == 0
    assert "outside every step range" not in render_text(report)


def test_kernels_outside_steps_are_reported(tmp_path: Path) -> None:
    path = tmp_path / "w.json"
    nccl = ALLREDUCE_KERNEL_EXAMPLES["nccl"]
    with TraceWriter(path, rank=0) as w:
        w.kernel(nccl, 0.0, 50.0)  # warm-up, before any step
        name = step_annotation_name(0, 0, 1, 1)
        w.gpu_annotation(name, 100.0, 100.0)
        w.kernel(nccl, 120.0, 50.0)
    report = analyze([path])
    assert report.ranks[0].allreduce_outside_steps == 1
    assert report.decode_allreduce_ratio == pytest.approx(0.5)
    assert "1 all-reduce kernel(s) or op(s) lie outside every step range" in render_text(report)


def test_cuda_graph_launch_places_all_its_kernels(tmp_path: Path) -> None:
    """All kernels of one cudaGraphLaunch share its correlation id."""
    path = tmp_path / "g.json"
    nccl = ALLREDUCE_KERNEL_EXAMPLES["nccl"]
    with TraceWriter(path, rank=0) as w:
        for step in range(3):
            t0 = step * 10_000.0
            w.annotation(step_annotation_name(0, 0, 1, 1), t0, 100.0)
            # Graph replay: kernels start after the CPU range has ended.
            w.kernel(nccl, t0 + 500.0, 1000.0, launch_ts_us=t0 + 10.0)
            corr = w._correlation
            for k in range(3):
                w._x(
                    "kernel", nccl, (0, 7), (t0 + 2000.0 + k * 1000.0, 500.0), {"correlation": corr}
                )
    j = analyze([path]).to_json()
    assert j["ranks"][0]["mode"] == MODE_LAUNCH
    assert j["decode_allreduce_seconds_per_step"] == pytest.approx(2500e-6)
    assert j["ranks"][0]["decode_allreduce_kernels_per_step"] == 4


def test_gpu_ranges_recorded_per_stream_merge(tmp_path: Path) -> None:
    path = tmp_path / "s.json"
    with TraceWriter(path, rank=0) as w:
        name = step_annotation_name(0, 0, 2, 2)
        w.annotation(name, 0.0, 50.0)
        w.gpu_annotation(name, 100.0, 1000.0, stream=7)
        w.gpu_annotation(name, 100.0, 1000.0, stream=13)
        w.kernel(ALLREDUCE_KERNEL_EXAMPLES["custom"], 200.0, 250.0, stream=7)
        w.kernel(ALLREDUCE_KERNEL_EXAMPLES["custom"], 500.0, 250.0, stream=13)
    j = analyze([path]).to_json()
    assert j["decode_steps"] == 1
    assert j["decode_allreduce_ratio"] == pytest.approx(0.5)


def test_back_to_back_steps_of_one_shape_stay_apart(tmp_path: Path) -> None:
    """Steps that touch (next start == previous end, after rounding) are separate steps."""
    path = tmp_path / "b.json"
    nccl = ALLREDUCE_KERNEL_EXAMPLES["nccl"]
    name = step_annotation_name(0, 0, 1, 1)
    with TraceWriter(path, rank=0) as w:
        t = 0.0
        for _ in range(10):
            w.annotation(name, t, 1000.0001)
            w.gpu_annotation(name, t, 1000.0004)
            w.kernel(nccl, t + 100.0, 400.0)
            t += 1000.0
    j = analyze([path]).to_json()
    assert j["decode_steps"] == 10
    assert j["decode_step_seconds"] == pytest.approx(1e-3)
    assert j["decode_allreduce_ratio"] == pytest.approx(0.4)


def test_ranks_median_max_and_straggler(tmp_path: Path) -> None:
    paths = []
    truths = []
    for rank in range(4):
        # Rank 2 is the straggler: it arrives last and waits least in all-reduce.
        ar = 3000.0 if rank == 2 else 7000.0 + rank * 100.0
        path = tmp_path / f"dp0_pp0_tp{rank}_rank{rank}.pt.trace.json.gz"
        truths.append(write_trace(path, [StepSpec(1, 13600.0, ar)] * 5, rank=rank, world_size=4))
        paths.append(path)
    report = analyze(list(reversed(paths)))
    j = report.to_json()
    assert [r["rank"] for r in j["ranks"]] == [0, 1, 2, 3]
    ratios = sorted(t.ratio() for t in truths)
    assert j["decode_allreduce_ratio"] == pytest.approx((ratios[1] + ratios[2]) / 2, abs=1e-6)
    assert j["decode_allreduce_ratio_max"] == pytest.approx(ratios[-1], abs=1e-6)
    assert j["straggler_rank"] == 2
    assert any("straggler" in n for n in j["notes"])
    json.dumps(j)  # serialisable
    text = render_text(report)
    assert "rank 2 spends" in text and "the others likely wait for it" in text


def test_rank_from_file_name_when_header_has_none(tmp_path: Path) -> None:
    path = tmp_path / "worker_rank6.123.pt.trace.json"
    write_trace(path, [StepSpec(1, 1000.0, 100.0, allreduces=2, other_kernels=2)])
    text = path.read_text().replace(
        '"distributedInfo":{"backend":"nccl","rank":0,"world_size":1},', ""
    )
    path.write_text(text)
    assert analyze_file(path).rank == 6


def test_steps_written_out_of_order(tmp_path: Path) -> None:
    path = tmp_path / "o.json"
    nccl = ALLREDUCE_KERNEL_EXAMPLES["nccl"]
    with TraceWriter(path, rank=0) as w:
        for step in (2, 0, 1):
            t0 = step * 1000.0
            name = step_annotation_name(0, 0, 1 + step, 1 + step)
            w.gpu_annotation(name, t0, 500.0)
            w.annotation(name, t0 - 50, 20.0)
        for step in (1, 2, 0):
            w.kernel(nccl, step * 1000.0 + 10, 100.0 * (step + 1))
    j = analyze([path]).to_json()
    assert {k: v["allreduce_seconds_per_step"] for k, v in j["batch_sizes"].items()} == {
        "1": pytest.approx(100e-6),
        "2": pytest.approx(200e-6),
        "3": pytest.approx(300e-6),
    }


def test_no_step_annotations_is_an_error(tmp_path: Path) -> None:
    path = tmp_path / "frontend.json"
    with TraceWriter(path, rank=0) as w:
        w.annotation("some_python_function", 0.0, 10.0)
    with pytest.raises(TraceFileError, match="no vLLM step annotations"):
        analyze([path])


def test_two_traces_for_one_rank_is_an_error(tmp_path: Path) -> None:
    a, b = tmp_path / "a.json", tmp_path / "b.json"
    for p in (a, b):
        write_trace(p, [StepSpec(1, 1000.0, 100.0, allreduces=2, other_kernels=2)])
    with pytest.raises(TraceFileError, match="two traces for rank 0"):
        analyze([a, b])


@pytest.mark.parametrize(
    ("batch", "label"),
    [
        (1, "1"),
        (2, "2"),
        (3, "3-4"),
        (4, "3-4"),
        (17, "17-32"),
        (32, "17-32"),
        (33, "33-64"),
        (5000, ">1024"),
    ],
)
def test_batch_buckets(batch: int, label: str) -> None:
    assert batch_bucket(batch) == label
