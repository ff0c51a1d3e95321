"""Bounds on every number the simulator takes (flags, ``--cost``/``--spec``, the control port).

A value outside them is a one-line :class:`~specload.errors.UsageError` (exit 2 on
the command line, HTTP 400 on the control port) that names the limit, e.g.
``--cost step_fixed_s=inf: must be a number in [0, 10] (seconds)``. The limits are
far beyond any deployment worth simulating; they keep ``inf``, ``nan`` and absurd
sizes (``num_speculative_tokens=100000``, ``load_time: 1e308``) out of the engine,
whose sleeps, lists and divisions would otherwise overflow, blow up or hang.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Final

from specload.errors import UsageError

#: Longest load window (``--load-time``, ``POST /reload``'s ``load_time``): one day.
MAX_LOAD_TIME_S: Final = 86400.0
#: Longest other duration (``--stall-seconds``, ``--degrade-after``, ``--fixed-*``,
#: ``POST /degrade``'s ``after``): one day.
MAX_DURATION_S: Final = 86400.0
MAX_TIME_SCALE: Final = 10000.0
MAX_DEGRADE_FACTOR: Final = 1000.0
#: Draft tokens per step (k); real deployments use 1-10.
MAX_SPECULATIVE_TOKENS: Final = 32
MAX_TP: Final = 1024
#: ``--fixed-itl-jitter``: each request's ITL factor lies in [1 - J, 1 + J], J below this.
MAX_FIXED_ITL_JITTER: Final = 0.9
#: Seconds any one cost-model or drafting time parameter may be.
MAX_TERM_S: Final = 10.0


@dataclass(frozen=True)
class Bound:
    """A closed range (``lo`` excluded when ``lo_open``, ``hi`` when ``hi_open``); ``unit``
    is said in errors."""

    lo: float
    hi: float
    lo_open: bool = False
    unit: str = ""
    integer: bool = False
    hi_open: bool = False

    def contains(self, value: float) -> bool:
        if not math.isfinite(value):
            return False
        above = value > self.lo if self.lo_open else value >= self.lo
        below = value < self.hi if self.hi_open else value <= self.hi
        return above and below

    def describe(self) -> str:
        kind = "an integer" if self.integer else "a number"
        left = "(" if self.lo_open else "["
        right = ")" if self.hi_open else "]"
        unit = f" ({self.unit})" if self.unit else ""
        lo, hi = _fmt(self.lo, self.integer), _fmt(self.hi, self.integer)
        return f"{kind} in {left}{lo}, {hi}{right}{unit}"

    def check(self, value: float, what: str) -> float:
        """``value`` if inside; else a UsageError ``WHAT: must be a number in [lo, hi]``."""
        if isinstance(value, bool) or not self.contains(value):
            raise UsageError(f"{what}: must be {self.describe()}")
        return value


def _fmt(v: float, integer: bool) -> str:
    if integer or (v == int(v) and abs(v) < 1e6):
        return str(int(v))
    return f"{v:g}"


def _s(hi: float = MAX_TERM_S) -> Bound:
    return Bound(0.0, hi, unit="seconds")


def _n(lo: float, hi: float) -> Bound:
    return Bound(lo, hi, integer=True)


#: ``--cost NAME=VALUE``: every :class:`simulator.costmodel.CostModel` parameter.
COST_BOUNDS: Final[Mapping[str, Bound]] = {
    "tp": _n(1, MAX_TP),
    "layers": _n(0, 1000),
    "moe_layers": _n(0, 1000),
    "hidden_size": _n(1, 1 << 20),
    "activation_bytes": _n(1, 16),
    "routed_experts": _n(1, 100_000),
    "experts_per_token": _n(0, 100_000),  # and at most routed_experts
    "shared_experts": _n(0, 1000),
    "expert_bytes": Bound(0.0, 1e12, unit="bytes"),
    "dense_bytes": Bound(0.0, 1e15, unit="bytes"),
    "memory_bandwidth_Bps": Bound(0.0, 1e16, lo_open=True, unit="bytes/s"),
    "allreduces_per_layer": _n(0, 100),
    "allreduce_hop_latency_s": _s(),
    "allreduce_bus_Bps": Bound(0.0, 1e16, lo_open=True, unit="bytes/s"),
    "step_fixed_s": _s(),
    "step_per_seq_s": _s(),
    "compute_s_per_token": _s(),
    "attention_s_per_ctx_token": _s(),
    "attention_query_growth": Bound(0.0, 100.0),
    "attention_parallel_seqs": _n(1, 1_000_000),
    "prefill_s_per_token": _s(),
}

#: ``--spec NAME=VALUE``: the numeric :class:`simulator.variants.Variant` parameters.
SPEC_BOUNDS: Final[Mapping[str, Bound]] = {
    "num_speculative_tokens": _n(0, MAX_SPECULATIVE_TOKENS),
    "acceptance_scale": Bound(0.0, 100.0),
    "acceptance_decay": Bound(0.0, 1.0),
    "draft_s_per_seq": _s(),
    "draft_step_s": _s(),
    "draft_s_per_token": _s(),
    "prompt_lookup_max": _n(1, 64),  # and at least prompt_lookup_min
    "prompt_lookup_min": _n(1, 64),
    "draft_expert_novelty": Bound(0.0, 1.0),
}
#: ``--spec acceptance=…`` and ``proposal_rate=…``, per category: probabilities.
PROBABILITY: Final = Bound(0.0, 1.0)
#: ``--spec method=…``.
SPEC_METHODS: Final = ("ngram", "eagle3")
#: ``--spec acceptance_model=…``.
ACCEPTANCE_MODELS: Final = ("text", "probabilistic")

#: Command-line flags (``--name``: bound).
FLAG_BOUNDS: Final[Mapping[str, Bound]] = {
    "--time-scale": Bound(0.0, MAX_TIME_SCALE, lo_open=True),
    "--load-time": _s(MAX_LOAD_TIME_S),
    "--stall-seconds": _s(MAX_DURATION_S),
    "--degrade-after": _s(MAX_DURATION_S),
    "--degrade-factor": Bound(0.0, MAX_DEGRADE_FACTOR, lo_open=True),
    "--fixed-ttft": _s(MAX_DURATION_S),
    "--fixed-itl": _s(MAX_DURATION_S),
    "--fixed-itl-jitter": Bound(0.0, MAX_FIXED_ITL_JITTER, hi_open=True),
    "--tp": _n(1, MAX_TP),
    "--num-speculative-tokens": _n(0, MAX_SPECULATIVE_TOKENS),
    "--max-model-len": _n(1, 1 << 24),
    "--max-num-seqs": _n(1, 65536),
    "--max-num-batched-tokens": _n(1, 1 << 24),
    "--kv-cache-tokens": _n(1, 1 << 32),
    "--profiler-max-steps": _n(1, 1_000_000),
    "--fixed-tokens-per-chunk": _n(1, 1_000_000),
    "--fixed-reasoning-tokens": _n(0, 10_000_000),
    "--fixed-content-tokens": _n(0, 10_000_000),
}

#: The control port's JSON fields.
RELOAD_LOAD_TIME: Final = _s(MAX_LOAD_TIME_S)
DEGRADE_FACTOR: Final = Bound(0.0, MAX_DEGRADE_FACTOR, lo_open=True)
DEGRADE_AFTER: Final = _s(MAX_DURATION_S)


def check_flag(flag: str, value: float, *, shown: str | None = None) -> float:
    """``value`` if within ``FLAG_BOUNDS[flag]``; else ``FLAG VALUE: must be …``
    (``shown``: the value as the user wrote it)."""
    if shown is None:
        shown = f"{value:g}" if isinstance(value, float) else str(value)
    return FLAG_BOUNDS[flag].check(value, f"{flag} {shown}")
