"""The step-time cost model: how long one engine step takes, in virtual seconds.

A step of continuous batching runs every scheduled sequence through the model
once. Its time is the sum of named terms (see docs/simulator.md):

* ``step_fixed_s`` + ``step_per_seq_s`` x sequences — scheduler, sampling,
  launch overhead;
* tensor-parallel all-reduce: ``allreduces_per_layer`` x ``layers`` of them,
  each alpha + 2(p-1)/p x bytes/beta (ring; alpha = 2(p-1) hops x ``allreduce_hop_latency_s``,
  bytes = tokens x ``hidden_size`` x ``activation_bytes``);
* MoE expert weight reads: the distinct experts hit by all tokens of the step
  (each token picks ``experts_per_token`` of ``routed_experts``, plus the shared
  expert) x ``expert_bytes`` / p / ``memory_bandwidth_Bps``, over ``moe_layers``;
* dense weight reads (attention projections, dense layer, embeddings):
  ``dense_bytes`` / p / ``memory_bandwidth_Bps``;
* compute: tokens x ``compute_s_per_token`` (matters only at large batches);
* attention: sum  context x ``attention_s_per_ctx_token`` x (1 + ``attention_query_growth``
  x (q - 1)) for q tokens verified per sequence, plus prefill tokens x ``prefill_s_per_token``;
* speculation's drafting cost (variant specific, see :mod:`simulator.variants`).

Everything here is pure arithmetic so calibration can be checked in virtual
time, without sleeping.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, fields, replace
from typing import Any

from simulator.limits import COST_BOUNDS, Bound
from specload.errors import UsageError


@dataclass(frozen=True)
class CostModel:
    """Named parameters of the step-time model (defaults: Kimi-K2.5-shaped, TP 8, PCIe)."""

    tp: int = 8
    layers: int = 61
    moe_layers: int = 60
    hidden_size: int = 7168
    activation_bytes: int = 2
    routed_experts: int = 384
    experts_per_token: int = 8
    shared_experts: int = 1
    # One routed expert of one layer, INT4 (3 x 7168 x 2048 weights x 0.5 B), all ranks together.
    expert_bytes: float = 3 * 7168 * 2048 * 0.5
    # Non-expert weights read every step (attention, dense layer, embeddings), all ranks.
    dense_bytes: float = 12.2e9
    memory_bandwidth_Bps: float = 1.0e12
    allreduces_per_layer: int = 2
    allreduce_hop_latency_s: float = 4.3e-6
    allreduce_bus_Bps: float = 25e9
    step_fixed_s: float = 0.55e-3
    step_per_seq_s: float = 12e-6
    compute_s_per_token: float = 150e-6
    attention_s_per_ctx_token: float = 2.2e-6
    attention_query_growth: float = 0.15
    # Below this many decoding sequences attention is latency-bound: they cost as much as one.
    attention_parallel_seqs: int = 16
    prefill_s_per_token: float = 40e-6

    def allreduce_s(self, tokens: int) -> float:
        """One all-reduce of ``tokens`` hidden vectors (0 at TP 1)."""
        p = self.tp
        if p <= 1:
            return 0.0
        alpha = 2 * (p - 1) * self.allreduce_hop_latency_s
        size = tokens * self.hidden_size * self.activation_bytes
        return alpha + 2 * (p - 1) / p * size / self.allreduce_bus_Bps

    @property
    def allreduces_per_step(self) -> int:
        return self.allreduces_per_layer * self.layers if self.tp > 1 else 0

    def distinct_experts(self, tokens: int) -> float:
        """Expected distinct routed experts per layer hit by ``tokens`` tokens, plus shared."""
        return self.distinct_experts_f(float(tokens))

    def distinct_experts_f(self, tokens: float) -> float:
        """:meth:`distinct_experts` for a fractional count of independent routings."""
        if tokens <= 0:
            return 0.0
        e = self.routed_experts
        miss = float((1.0 - self.experts_per_token / e) ** tokens)
        return e * (1.0 - miss) + self.shared_experts

    def step(
        self,
        *,
        decode_tokens: int,
        num_seqs: int,
        context_tokens: float,
        query_extra_context: float = 0.0,
        prefill_tokens: int = 0,
        draft_s: float = 0.0,
        expert_tokens: float | None = None,
    ) -> StepCost:
        """Cost of one step.

        ``decode_tokens``: tokens verified by decoding sequences (1 + drafts each);
        ``context_tokens``: sum  context length over decoding sequences;
        ``query_extra_context``: sum  context x (q - 1) (extra query tokens against the context);
        ``prefill_tokens``: prompt tokens processed this step;
        ``expert_tokens``: tokens as independent expert routings (drafts that follow
        their sequence's routing count less than one; default: all tokens).
        """
        tokens = decode_tokens + prefill_tokens
        if tokens <= 0:
            return StepCost(0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0)
        p = self.tp
        fixed = self.step_fixed_s + self.step_per_seq_s * num_seqs
        allreduce = self.allreduces_per_step * self.allreduce_s(tokens)
        experts = (
            self.moe_layers
            * self.distinct_experts_f(tokens if expert_tokens is None else expert_tokens)
            * self.expert_bytes
            / p
            / self.memory_bandwidth_Bps
        )
        dense = self.dense_bytes / p / self.memory_bandwidth_Bps
        weights = experts + dense
        compute = tokens * self.compute_s_per_token / (p / 8)
        parallel = max(1, min(num_seqs, self.attention_parallel_seqs))
        attention = self.attention_s_per_ctx_token * (
            context_tokens + self.attention_query_growth * query_extra_context
        ) / parallel / (p / 8) + self.prefill_s_per_token * prefill_tokens / (p / 8)
        return StepCost(fixed, allreduce, weights, compute, attention, draft_s, experts)

    def with_overrides(self, overrides: dict[str, str]) -> CostModel:
        """A copy with named parameters replaced; unknown names, values that are not
        finite or outside :data:`simulator.limits.COST_BOUNDS` raise UsageError."""
        changed = replace(self, **_coerce(self, overrides, "--cost", COST_BOUNDS))
        if changed.experts_per_token > changed.routed_experts:
            raise UsageError(
                f"--cost experts_per_token={changed.experts_per_token}: must be at most "
                f"routed_experts ({changed.routed_experts})"
            )
        return changed


@dataclass(frozen=True)
class StepCost:
    """The terms of one step, in virtual seconds."""

    fixed_s: float
    allreduce_s: float
    weights_s: float
    compute_s: float
    attention_s: float
    draft_s: float
    experts_s: float  # part of weights_s

    @property
    def total_s(self) -> float:
        return (
            self.fixed_s
            + self.allreduce_s
            + self.weights_s
            + self.compute_s
            + self.attention_s
            + self.draft_s
        )


def _coerce(
    obj: Any, overrides: dict[str, str], flag: str, bounds: Mapping[str, Bound]
) -> dict[str, Any]:
    """Parse ``NAME=VALUE`` overrides of ``obj``'s fields; numbers checked against ``bounds``
    (any number at all must be finite and not negative)."""
    types = {f.name: f.type for f in fields(obj)}
    out: dict[str, Any] = {}
    for name, text in overrides.items():
        if name not in types:
            known = ", ".join(sorted(types))
            raise UsageError(f"{flag} {name}={text}: unknown parameter (known: {known})")
        current = getattr(obj, name)
        try:
            if isinstance(current, bool):
                value: Any = text.lower() in ("1", "true", "yes")
            elif isinstance(current, int):
                value = int(text)
            elif isinstance(current, float):
                value = float(text)
            elif isinstance(current, tuple):
                value = tuple(float(x) for x in text.split(",") if x.strip())
            else:
                value = text
        except ValueError:
            raise UsageError(
                f"{flag} {name}={text}: not a valid {type(current).__name__}"
            ) from None
        if isinstance(value, int | float) and not isinstance(value, bool):
            if name in bounds:
                bounds[name].check(value, f"{flag} {name}={text}")
            elif not math.isfinite(value):
                raise UsageError(f"{flag} {name}={text}: must be a finite number")
            elif value < 0:
                raise UsageError(f"{flag} {name}={text}: must not be negative")
        out[name] = value
    return out


def parse_assignments(items: list[str] | None, flag: str) -> dict[str, str]:
    """``["a=1", "b=2"]`` → ``{"a": "1", "b": "2"}``; bad items raise UsageError."""
    out: dict[str, str] = {}
    for item in items or []:
        name, sep, value = item.partition("=")
        if not sep or not name.strip() or not value.strip():
            raise UsageError(f"{flag} {item!r}: expected NAME=VALUE")
        out[name.strip().replace("-", "_")] = value.strip()
    return out
