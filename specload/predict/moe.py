"""MoE: what a verification step's expert reads cost when its tokens share a sequence.

The baseline's step-cost curve was measured with c sequences of one token each: every token
in its steps routed independently. A variant's step verifies m_1..m_c tokens per sequence
(1 + its drafts), and consecutive tokens of one sequence share experts (the issue's figure:
four tokens of one sequence wake about 2.5x one token's experts, not 4x). On a memory-bound
MoE the per-token part of a step is mostly the weights of the experts it wakes, so charging
the variant's step the curve at its token count over-charges verification. This module says
**how many independent tokens** would wake the same experts, and what the step should be
charged on the curve.

The model (docs/predict.md, "MoE: verification that shares a sequence"):

- Independent tokens, E routed experts, top-k each, uniform routing (per layer)::

      U(n) = E * (1 - (1 - k/E) ** n)            # expected unique experts

- One sequence's m tokens: each token after the first keeps a share ``overlap`` (rho) of its
  predecessor's experts and draws the rest like an independent token, so it brings 1 - rho
  of a token's fresh experts: m tokens wake U(1 + (m - 1)(1 - rho)). Sequences route
  independently of each other, so a step's unique experts are U(n_eq) with::

      n_eq = sum_i [1 + (m_i - 1)(1 - rho)] = N - rho * D

  N = tokens the step verifies, D = its draft tokens (sum of m_i - 1; prefills are left as
  the baseline counted them, so k = 0 is the identity).
- ``rho`` by default from the issue's figure: U(1 + 3(1 - rho)) = 2.5 * k (4 tokens; rho =
  0.5 for large E, 0.479 at E = 256, k = 8), range from ratios 3.0..2.0 (a judgement: no
  measurement of a real router's overlap was at hand; see the docs for the sources that
  report such locality). Random weights cannot measure it; a real model's router can.
- A row's own cost (activations, the row's share of the GEMMs) beside its experts:
  ``row_cost`` lambda, in units of one token's expert reads (k experts). Default 0 (memory-
  bound decode: a row costs nothing beside what it wakes); from a ``bench/gpu/moe_step.py``
  JSON it is the fit ``time = a + b * rows + e * U`` over the file's grid, lambda = b / (e k)
  (0.0016 on the H200 run in bench/results/gpu_moe.md).
- The step is charged the curve at the ``x`` independent tokens that cost the same::

      lambda k x + U(x) = lambda k N + U(N - rho D)        (x in [N - rho D, N])

  (x = n_eq for lambda = 0; x = N for a dense model, for rho = 0 or for top_k = E.)

Interface for the forecast (``specload.predict.terms`` calls this; nothing here imports the
forecast). Arrays are per placed step, as :class:`specload.predict.closedloop.Schedule` holds
them; pass the *padded* token count (padding rows are independent rows)::

    model = MoeModel.default(MoeShape(experts=256, top_k=8, shared=1))   # or
    model = MoeModel.from_json("moe_step.json")        # bad file: UsageError naming it
    x  = model.charged_tokens(n_tokens, drafted)       # tokens to evaluate the curve at
    ms = model.correction_ms(n_tokens, drafted, curve) # curve(x) - curve(n_tokens), <= 0
    charged_tokens(None, n_tokens, drafted)            # a dense model: n_tokens unchanged

As a term linear in one coefficient (``Term``: value x unit_ms), take value = ``overlap``,
low/high = ``overlap_low``/``overlap_high``, unit "share of a token's experts its successor
keeps", unit_ms = ``correction_ms(...) / overlap`` (exact for lambda = 0 on a linear curve;
within the curve's curvature otherwise), source = ``source``.

``MOE_STEP_FORMAT`` is duplicated in ``bench/gpu/moe_step.py`` (``FORMAT``), which imports
nothing from specload; a unit test checks that both agree.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import numpy as np

from specload.errors import UsageError

MOE_STEP_FORMAT = "specload-moe-step/1"

# The figure (#24): 4 tokens of one sequence wake ~2.5x one token's unique experts.
DEFAULT_TOKENS = 4
DEFAULT_RATIO = 2.5
# The range the forecast draws from: 3.0x (little sharing) .. 2.0x (much). A judgement.
RATIO_RANGE = (3.0, 2.0)
DEFAULT_SOURCE = (
    "prior (issue #24: 4 tokens of one sequence wake ~2.5x one token's experts; "
    "range 3.0x..2.0x a judgement)"
)

# The grid subsets a fit prefers, in order: a grouped GEMM (as vLLM's fused MoE kernel reads
# only the experts that have rows) under a full CUDA graph (the decode path) first.
FIT_PREFERENCE = (("grouped", "full"), ("loop", "full"), ("grouped", "eager"), ("loop", "eager"))


@dataclass(frozen=True)
class MoeShape:
    """Routed experts per layer, experts each token picks, and always-on shared experts."""

    experts: int
    top_k: int
    shared: int = 0

    def __post_init__(self) -> None:
        if not (self.experts >= 1 and 1 <= self.top_k <= self.experts and self.shared >= 0):
            raise UsageError(
                f"MoE shape: experts {self.experts}, top_k {self.top_k}, shared {self.shared} "
                "(need 1 <= top_k <= experts, shared >= 0)"
            )

    @property
    def saturated(self) -> bool:
        """Every token reads every routed expert: sharing cannot save any."""
        return self.top_k >= self.experts

    def unique_experts(self, n: np.ndarray | float) -> np.ndarray:
        """Expected routed experts woken per layer by ``n`` independent tokens."""
        q = 1.0 - self.top_k / self.experts
        return np.asarray(self.experts * (1.0 - q ** np.asarray(n, dtype=float)), dtype=float)

    def tokens_for_unique(self, unique: float) -> float:
        """The independent-token count that wakes ``unique`` experts (inverse of U)."""
        if self.saturated or not 0.0 <= unique < self.experts:
            raise ValueError(f"{unique} unique experts has no token count ({self})")
        return math.log(1.0 - unique / self.experts) / math.log(1.0 - self.top_k / self.experts)


@dataclass(frozen=True)
class MoeStepFit:
    """``time = fixed + per_row * rows + per_expert * U`` over a moe_step.py grid (ms)."""

    path: str
    device: str
    impl: str
    mode: str
    points: int
    layers: int  # the stack's layers: time is the whole stack's, U is per layer
    fixed_ms: float
    per_row_ms: float
    per_expert_ms: float
    r2: float
    notes: tuple[str, ...] = ()


@dataclass(frozen=True)
class MoeModel:
    """The equivalent independent tokens of a step whose tokens share sequences."""

    shape: MoeShape
    overlap: float  # rho: the share of a token's experts its successor keeps
    overlap_low: float
    overlap_high: float
    source: str  # where ``overlap`` came from
    row_cost: float = 0.0  # lambda: a row's own cost, in one token's expert reads
    row_cost_source: str = "default (memory-bound decode: a row costs its experts alone)"
    measured: MoeStepFit | None = field(default=None, compare=False)

    def __post_init__(self) -> None:
        for name in ("overlap", "overlap_low", "overlap_high"):
            v = getattr(self, name)
            if not (math.isfinite(v) and 0.0 <= v <= 1.0):
                raise UsageError(f"MoE {name.replace('_', ' ')}: {v} (need 0..1)")
        if not self.overlap_low <= self.overlap <= self.overlap_high:
            raise UsageError(
                f"MoE overlap {self.overlap} outside its range "
                f"{self.overlap_low}..{self.overlap_high}"
            )
        if not (math.isfinite(self.row_cost) and self.row_cost >= 0.0):
            raise UsageError(f"MoE row cost: {self.row_cost} (need >= 0)")

    # --- construction -------------------------------------------------------------------

    @staticmethod
    def overlap_for_ratio(shape: MoeShape, tokens: int, ratio: float) -> float:
        """The overlap at which ``tokens`` tokens of one sequence wake ``ratio`` times one
        token's unique experts: U(1 + (tokens - 1)(1 - rho)) = ratio * k."""
        if tokens < 2 or not 1.0 <= ratio <= tokens:
            raise UsageError(f"MoE ratio {ratio} at {tokens} tokens (need 1..{tokens})")
        if shape.saturated:
            return 0.0  # nothing to share: every token reads every expert
        unique = min(ratio * shape.top_k, shape.unique_experts(tokens).item())
        n_eff = shape.tokens_for_unique(unique)
        return min(1.0, max(0.0, 1.0 - (n_eff - 1.0) / (tokens - 1)))

    @classmethod
    def default(
        cls,
        shape: MoeShape,
        row_cost: float = 0.0,
        row_cost_source: str | None = None,
        measured: MoeStepFit | None = None,
    ) -> MoeModel:
        """The model from the issue's figure (:data:`DEFAULT_RATIO` at 4 tokens)."""
        at = cls.overlap_for_ratio
        return cls(
            shape=shape,
            overlap=at(shape, DEFAULT_TOKENS, DEFAULT_RATIO),
            overlap_low=at(shape, DEFAULT_TOKENS, RATIO_RANGE[0]),
            overlap_high=at(shape, DEFAULT_TOKENS, RATIO_RANGE[1]),
            source=DEFAULT_SOURCE,
            row_cost=row_cost,
            row_cost_source=row_cost_source or cls.row_cost_source,
            measured=measured,
        )

    def with_overlap(self, overlap: float, source: str) -> MoeModel:
        """The same model at another overlap (a flag, a measured router); no range."""
        return replace(
            self, overlap=overlap, overlap_low=overlap, overlap_high=overlap, source=source
        )

    @classmethod
    def from_json(cls, path: str | Path) -> MoeModel:
        """The default overlap with the row cost measured by ``bench/gpu/moe_step.py``.

        The overlap stays the prior: the script's routing is constructed (random weights
        have no router worth the name), so its file measures what an expert and a row cost,
        not how much a real model's tokens share."""
        fit, shape = read_moe_step(path)
        row_cost = fit.per_row_ms / (fit.per_expert_ms * shape.top_k)
        src = (
            f"{fit.path}: per row {fit.per_row_ms:.4g} ms / per expert {fit.per_expert_ms:.4g} "
            f"ms x top_k {shape.top_k} ({fit.impl}, {fit.mode}, {fit.device})"
        )
        return cls.default(shape, row_cost=row_cost, row_cost_source=src, measured=fit)

    # --- the model ------------------------------------------------------------------------

    def sequence_unique_experts(self, tokens: np.ndarray | float) -> np.ndarray:
        """Expected unique experts per layer woken by ``tokens`` tokens of one sequence."""
        m = np.asarray(tokens, dtype=float)
        return np.where(
            m > 0, self.shape.unique_experts(1.0 + (m - 1.0) * (1.0 - self.overlap)), 0.0
        )

    def equivalent_tokens(self, tokens_per_seq: Sequence[int] | np.ndarray) -> float:
        """One step: the independent tokens that wake the experts its decode sequences,
        verifying ``tokens_per_seq`` tokens each (1 + drafts), wake."""
        m = np.asarray(tokens_per_seq, dtype=float)
        if m.size and m.min() < 0:
            raise ValueError("tokens per sequence must not be negative")
        m = m[m > 0]
        return float(np.sum(1.0 + (m - 1.0) * (1.0 - self.overlap)))

    def equivalent_tokens_steps(self, n_tokens: np.ndarray, drafted: np.ndarray) -> np.ndarray:
        """Per step: N - rho * D (N tokens verified, D of them drafts)."""
        n, d = _steps(n_tokens, drafted)
        return n - self.overlap * d

    def charged_tokens(self, n_tokens: np.ndarray, drafted: np.ndarray) -> np.ndarray:
        """Per step: the independent-token count whose rows and experts cost what the
        step's do (the count to evaluate the baseline's curve at)."""
        n, d = _steps(n_tokens, drafted)
        n_eq = n - self.overlap * d
        if self.shape.saturated:
            return n
        if self.row_cost == 0.0:
            return n_eq
        a = self.row_cost * self.shape.top_k  # a row's cost, in expert reads

        def cost(x: np.ndarray) -> np.ndarray:
            return np.asarray(a * x + self.shape.unique_experts(x), dtype=float)

        target = a * n + self.shape.unique_experts(n_eq)
        lo, hi = n_eq.copy(), n.copy()
        for _ in range(64):  # bisection: cost is increasing in x; 2^-64 of the bracket
            mid = 0.5 * (lo + hi)
            low_side = cost(mid) < target
            lo = np.where(low_side, mid, lo)
            hi = np.where(low_side, hi, mid)
        return np.asarray(0.5 * (lo + hi), dtype=float)

    def correction_ms(
        self,
        n_tokens: np.ndarray,
        drafted: np.ndarray,
        curve: Callable[[np.ndarray], np.ndarray],
    ) -> np.ndarray:
        """Per step: curve(charged tokens) - curve(tokens), ms (<= 0 on a rising curve)."""
        n = np.asarray(n_tokens, dtype=float)
        return np.asarray(curve(self.charged_tokens(n, drafted)) - curve(n), dtype=float)

    def summary(self) -> list[str]:
        """Lines for a report: the shape, the overlap with its source, the row cost."""
        s = self.shape
        lines = [
            f"MoE: {s.experts} routed experts (top-{s.top_k}), {s.shared} shared",
            f"overlap {self.overlap:.3f} ({self.overlap_low:.3f}..{self.overlap_high:.3f}): "
            f"4 tokens of one sequence wake {self.sequence_unique_experts(4).item():.1f} "
            f"experts per layer, 4 sequences {s.unique_experts(4).item():.1f}; {self.source}",
            f"row cost {self.row_cost:.4g} token-expert-reads: {self.row_cost_source}",
        ]
        if self.measured is not None:
            f = self.measured
            lines.append(
                f"measured ({f.device}, {f.impl}/{f.mode}, {f.points} points, R² {f.r2:.4f}): "
                f"{f.fixed_ms:.4g} ms + {f.per_row_ms:.4g} ms/row + "
                f"{f.per_expert_ms:.4g} ms/unique expert per layer over {f.layers} layers "
                f"({f.per_expert_ms / max(f.layers, 1) * 1e3:.1f} µs per expert per layer)"
            )
            lines += [f"note: {n}" for n in f.notes]
        return lines


def charged_tokens(model: MoeModel | None, n_tokens: np.ndarray, drafted: np.ndarray) -> np.ndarray:
    """The model's charged tokens; a dense model (``None``) is charged its tokens."""
    if model is None:
        n, _ = _steps(n_tokens, drafted)
        return n
    return model.charged_tokens(n_tokens, drafted)


def _steps(n_tokens: np.ndarray, drafted: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    n = np.asarray(n_tokens, dtype=float)
    d = np.broadcast_to(np.asarray(drafted, dtype=float), n.shape)
    if np.any(d < 0) or np.any(d > n):
        raise ValueError("draft tokens per step must lie in 0..tokens")
    return n, d


# --- the moe_step.py file ------------------------------------------------------------------


def read_moe_step(path: str | Path) -> tuple[MoeStepFit, MoeShape]:
    """The shape and the grid's fit of a ``bench/gpu/moe_step.py`` JSON; a file that is not
    one, or whose grid cannot price an expert, is a UsageError naming the file."""
    p = Path(path)
    try:
        doc = json.loads(p.read_text())
    except OSError as err:
        raise UsageError(f"{p}: cannot read the MoE step file ({err.strerror or err})") from err
    except (UnicodeDecodeError, json.JSONDecodeError) as err:
        raise UsageError(f"{p}: not a JSON file ({err})") from err
    if not isinstance(doc, dict) or doc.get("format") != MOE_STEP_FORMAT:
        got = doc.get("format") if isinstance(doc, dict) else type(doc).__name__
        raise UsageError(
            f"{p}: format {got!r}, expected {MOE_STEP_FORMAT!r} (bench/gpu/moe_step.py writes it)"
        )
    raw: Any = doc.get("shape")
    try:
        shape = MoeShape(
            experts=_int(raw["experts"]), top_k=_int(raw["top_k"]), shared=_int(raw["shared"])
        )
        layers = _int(raw["layers"])
        grid = doc["measurements"]["grid"]
        if not isinstance(grid, list):
            raise TypeError("grid is not a list")
        points = [
            (
                str(r["impl"]),
                str(r["mode"]),
                _num(r["rows"]),
                _num(r["unique_experts"]),
                _num(r["time_ms"]),
            )
            for r in grid
        ]
    except (KeyError, TypeError, ValueError) as err:
        raise UsageError(
            f"{p}: not a complete MoE step file ({type(err).__name__}: {err})"
        ) from err
    except UsageError as err:
        raise UsageError(f"{p}: {err}") from err
    notes: list[str] = []
    if not doc.get("complete", False):
        notes.append("the run stopped before its end (deadline or error): see its 'skipped'")
    if doc.get("device_type") != "cuda":
        notes.append(f"measured on {doc.get('device', 'an unknown device')}: not a GPU's costs")
    for impl, mode in FIT_PREFERENCE:
        sel = [(n, u, t) for i, m, n, u, t in points if (i, m) == (impl, mode)]
        if len({n for n, _, _ in sel}) >= 2 and len({u for _, u, _ in sel}) >= 2 and len(sel) >= 4:
            break
    else:
        raise UsageError(
            f"{p}: its grid has no (impl, mode) with rows and unique experts both varied "
            "(at least 4 points): nothing to fit"
        )
    rows, unique, ms = (np.array(col, dtype=float) for col in zip(*sel, strict=True))
    design = np.column_stack([np.ones_like(rows), rows, unique])
    coef = np.linalg.lstsq(design, ms, rcond=None)[0]
    if coef[1] < 0:  # a row cannot save time: drop the term, refit
        notes.append(f"per-row slope {coef[1]:.3g} ms came out negative: dropped")
        two = np.linalg.lstsq(design[:, [0, 2]], ms, rcond=None)[0]
        coef = np.array([two[0], 0.0, two[1]])
    # The expert term must matter: over the grid's span of U, at least 0.1% of a step.
    if not coef[2] * (unique.max() - unique.min()) > 1e-3 * float(np.median(ms)):
        raise UsageError(
            f"{p}: its grid shows no time per unique expert ({coef[2]:.3g} ms): "
            "it cannot price expert reads"
        )
    resid = ms - design @ coef
    ss = float(np.sum((ms - ms.mean()) ** 2))
    fit = MoeStepFit(
        path=str(p),
        device=str(doc.get("device", "unknown")),
        impl=impl,
        mode=mode,
        points=len(sel),
        layers=layers,
        fixed_ms=float(coef[0]),
        per_row_ms=float(coef[1]),
        per_expert_ms=float(coef[2]),
        r2=1.0 - float(np.sum(resid**2)) / ss if ss > 0 else 1.0,
        notes=tuple(notes),
    )
    return fit, shape


def _int(v: Any) -> int:
    if isinstance(v, bool) or not isinstance(v, int):
        raise TypeError(f"{v!r} is not an integer")
    return v


def _num(v: Any) -> float:
    if isinstance(v, bool) or not isinstance(v, int | float) or not math.isfinite(v) or v < 0:
        raise ValueError(f"{v!r} is not a non-negative number")
    return float(v)
