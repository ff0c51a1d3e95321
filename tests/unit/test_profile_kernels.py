"""The all-reduce classification table."""

from __future__ import annotations

import pytest

from specload.profile.kernels import ALLREDUCE_FAMILIES, FAMILY_BY_NAME, Classifier, classify
from specload.profile.tracefile import ALLREDUCE_KERNEL_EXAMPLES, CPU_OP_FAMILIES

pytestmark = pytest.mark.unit


@pytest.mark.parametrize("family", sorted(ALLREDUCE_KERNEL_EXAMPLES))
def test_every_example_classifies_to_its_family(family: str) -> None:
    name = ALLREDUCE_KERNEL_EXAMPLES[family]
    on_cpu = family in CPU_OP_FAMILIES
    assert classify(name, cpu_op=on_cpu) == family
    assert FAMILY_BY_NAME[family].on_cpu == on_cpu
    # A GPU kernel name is never a CPU op (CPU ops only launch kernels).
    if not on_cpu:
        assert classify(name, cpu_op=True) is None


@pytest.mark.parametrize(
    ("name", "family"),
    [
        ("ncclDevKernel_AllReduce_Sum_f16_TREE_LL128", "nccl"),
        ("ncclKernel_AllReduce_RING_LL128_Sum_half", "nccl_legacy"),
        ("ncclDevKernel_Generic_4", "nccl_generic"),
        ("void vllm::cross_device_reduce_2stage<__nv_bfloat16, 8>(...)", "custom"),
        ("void aiter::cross_device_reduce_2stage<__hip_bfloat16, 8>(...)", "custom"),
        ("void c10d::symmetric_memory::two_shot_all_reduce_kernel<float, 16, 4>(...)", "symm_mem"),
        (
            "void c10d::symmetric_memory::multimem_all_reduce_kernel<c10::BFloat16, 16>(...)",
            "symm_mem",
        ),
        (
            "void flashinfer::trtllm_allreduce_fusion::allreduce_fusion_kernel_twoshot_sync<...>",
            "flashinfer",
        ),
        ("quickreduce::allreduce_prototype_oneshot<...>", "quick_reduce"),
        ("ncclDevKernel_AllGather_RING_LL", None),
        ("ncclDevKernel_ReduceScatter_Sum_bf16_RING_LL", None),
        ("fused_moe_kernel", None),
        ("void at::native::vectorized_elementwise_kernel<4, at::native::AddFunctor>", None),
        ("void vllm::rms_norm_kernel<c10::BFloat16>(...)", None),
    ],
)
def test_kernel_names(name: str, family: str | None) -> None:
    assert classify(name) == family
    assert Classifier().kernel(name) == family


@pytest.mark.parametrize(
    ("name", "family"),
    [
        ("_C::shm_allreduce", "cpu_shm"),
        ("c10d::allreduce_", "cpu_gloo"),
        ("gloo:all_reduce", "cpu_gloo"),
        ("aten::add_", None),
        ("vllm::all_reduce", None),
    ],
)
def test_cpu_op_names(name: str, family: str | None) -> None:
    assert classify(name, cpu_op=True) == family


def test_table_is_unique_and_cached() -> None:
    families = [f.family for f in ALLREDUCE_FAMILIES]
    assert len(families) == len(set(families))
    c = Classifier()
    name = ALLREDUCE_KERNEL_EXAMPLES["custom"]
    assert c.kernel(name) == c.kernel(name) == "custom"
    assert c.kernel("gemm") is None and c.kernel("gemm") is None
