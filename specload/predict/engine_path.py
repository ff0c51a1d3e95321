"""The engine path a speculative variant runs on, and the baseline's.

The same ``--speculative-config`` runs differently on different vLLM builds and devices,
and the forecast has to know which: the proposer's rule decides the counts, the scheduler's
mode and the graph mode decide what each step costs beyond the baseline's curve.

========================  ===============================================================
field                     what it decides
========================  ===============================================================
``replay_rule``           the n-gram rule replayed: ``v1`` (the longest n-gram at its
                          earliest occurrence, 0..k drafts: vLLM's CPU numba proposer and
                          the 0.16 reference) or ``v2`` (Model Runner V2's Triton kernel:
                          the rightmost occurrence, always k drafts)
``baseline_async`` /      whether the scheduler overlaps the host's per-step work with the
``variant_async``         forward pass (on GPUs on by default; off for every CPU server in
                          0.32, and for the CPU-proposer n-gram method everywhere)
``graph_mode`` /          CUDA graphs: the captured batch sizes a step is padded up to, and
``capture_sizes``         whether a step replays a full graph or piecewise ones
========================  ===============================================================

Every field says where it came from (``sources``): a preset, ``--engine-path``, the
baseline's recorded server information, the server's log, or a default — printed with
every forecast.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

REPLAY_RULES = ("v1", "v2")
GRAPH_MODES = ("none", "piecewise", "full", "full_and_piecewise")


@dataclass(frozen=True)
class EnginePath:
    """What the baseline and the variant run on (see the module's table)."""

    name: str  # the preset's name, or "detected" / "custom"
    vllm_version: str | None
    device: str  # "cpu" | "gpu" | "unknown"
    runner: str  # "v1" | "v2": the model runner serving the variant
    proposer: str  # "ngram-numba" | "ngram-gpu" | "ngram-triton-v2"
    replay_rule: str  # one of REPLAY_RULES
    baseline_async: bool | None  # None: not known
    variant_async: bool | None
    graph_mode: str  # one of GRAPH_MODES ("none": eager, no padding)
    capture_sizes: tuple[int, ...] = ()  # the baseline's captured batch sizes (tokens)
    sources: Mapping[str, str] = field(default_factory=dict)  # field -> where it came from

    def source(self, name: str) -> str:
        return self.sources.get(name, "default")


# vLLM 0.32's CPU build: every CPU server runs synchronously (vllm/platforms/cpu.py), no
# CUDA graphs, the V1 runner with the numba n-gram proposer (earliest occurrence, 0..k).
CPU_032 = EnginePath(
    name="cpu-0.32",
    vllm_version="0.32.0",
    device="cpu",
    runner="v1",
    proposer="ngram-numba",
    replay_rule="v1",
    baseline_async=False,
    variant_async=False,
    graph_mode="none",
    sources={"*": "preset cpu-0.32"},
)

PRESETS: dict[str, EnginePath] = {CPU_032.name: CPU_032}
