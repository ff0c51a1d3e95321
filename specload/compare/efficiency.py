"""Speculation efficiency: the speedup measured against the speedup the acceptance promises.

Per level of a speculative variant, against the reference (the first run):

- **measured speedup** = reference median TPOT / variant median TPOT, with the TPOT row's
  bootstrap interval: the row's interval is a percentile interval of ``B*/A* - 1``, and
  ``1 / (1 + x)`` is monotone, so ``[1/(1 + ci_high), 1/(1 + ci_low)]`` is exactly the
  percentile interval of the speedup ``A*/B*`` over the same replicates;
- **ideal speedup** = the speedup if a verification step cost what a plain decode step
  costs: each step of a sequence emits 1 + its accepted tokens, so steps = decode tokens -
  accepted tokens and ideal = decode tokens / (decode tokens - accepted tokens). Read from
  the level's ``spec_decode.ideal_speedup`` (the client's aggregate over the level's
  completed requests) when present, else from its ``server`` block (vLLM ``/metrics``
  deltas): decode = ``generation_tokens`` - ``requests_success`` (one prefill token per
  request), accepted = ``spec_decode_num_accepted_tokens``. A level without either has no
  row. When the reference speculates too, the ideal is relative: variant's / reference's;
- **efficiency** = measured / ideal (its interval: the speedup's, over the same ideal — the
  ideal is a counter ratio over the whole level, not resampled).

:data:`HIGH_IDEAL` and :data:`NO_SPEEDUP` name the case *high acceptance, no speedup*: the
drafts are accepted, yet the decode is not faster — verification steps cost more than
plain ones (verification cost, expert weight reads multiplied by the extra tokens on a
MoE, all-reduce-bound steps whose communication grows with the tokens).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from specload.compare.stats import Difference
from specload.results.model import Level

# "High acceptance, no speedup": ideal speedup at least HIGH_IDEAL, measured at most NO_SPEEDUP.
HIGH_IDEAL = 1.3
NO_SPEEDUP = 1.05
HIGH_ACCEPTANCE_NO_SPEEDUP = "high acceptance, no speedup"

SOURCE_CLIENT = "spec_decode"  # level["spec_decode"]["ideal_speedup"]
SOURCE_SERVER = "server"  # level["server"] counters


@dataclass(frozen=True)
class Ideal:
    speedup: float
    source: str  # SOURCE_CLIENT or SOURCE_SERVER


def ideal_speedup(level: Level | Mapping[str, Any]) -> Ideal | None:
    """The level's ideal speedup over plain decoding (None: no speculation data)."""
    lv = level if isinstance(level, Level) else Level.from_dict(level)
    client = lv.figures.spec_decode
    if client is not None and client.ideal_speedup is not None and client.ideal_speedup > 0:
        return Ideal(client.ideal_speedup, SOURCE_CLIENT)
    server = lv.server
    if server is None:
        return None
    generated, requests = server.generation_tokens, server.requests_success
    accepted = server.spec_decode_num_accepted_tokens
    if generated is None or requests is None or accepted is None:
        return None
    decode = generated - requests
    if decode <= 0 or accepted < 0 or decode - accepted <= 0:
        return None
    return Ideal(decode / (decode - accepted), SOURCE_SERVER)


@dataclass(frozen=True)
class Efficiency:
    """One level of one variant against the reference."""

    ideal: float  # relative to the reference (the reference's own ideal divided out)
    source: str
    reference_ideal: float  # 1.0 when the reference does not speculate
    measured: float | None  # reference median TPOT / variant median TPOT
    measured_ci: tuple[float, float] | None
    allreduce_share: tuple[float | None, float | None]  # reference, variant (profiles)

    @property
    def efficiency(self) -> float | None:
        return None if self.measured is None else self.measured / self.ideal

    @property
    def efficiency_ci(self) -> tuple[float, float] | None:
        if self.measured_ci is None:
            return None
        return self.measured_ci[0] / self.ideal, self.measured_ci[1] / self.ideal

    @property
    def no_speedup(self) -> bool:
        """High acceptance, no speedup (:data:`HIGH_IDEAL`, :data:`NO_SPEEDUP`)."""
        return (
            self.measured is not None and self.ideal >= HIGH_IDEAL and self.measured <= NO_SPEEDUP
        )


def speedup(diff: Difference | None) -> tuple[float | None, tuple[float, float] | None]:
    """The TPOT row's relative difference as a speedup ``A/B``, and its interval."""
    if diff is None or diff.rel <= -1.0:
        return None, None
    point = 1.0 / (1.0 + diff.rel)
    if diff.ci_low is None or diff.ci_high is None or diff.ci_low <= -1.0:
        return point, None
    return point, (1.0 / (1.0 + diff.ci_high), 1.0 / (1.0 + diff.ci_low))


def level_efficiency(
    reference: Level | Mapping[str, Any],
    variant: Level | Mapping[str, Any],
    tpot: Difference | None,
    allreduce_share: tuple[float | None, float | None] = (None, None),
) -> Efficiency | None:
    """The efficiency row of a variant's level (None: the variant has no speculation data)."""
    ideal = ideal_speedup(variant)
    if ideal is None:
        return None
    ref = ideal_speedup(reference)
    ref_ideal = ref.speedup if ref is not None else 1.0
    measured, ci = speedup(tpot)
    return Efficiency(
        ideal.speedup / ref_ideal, ideal.source, ref_ideal, measured, ci, allreduce_share
    )
