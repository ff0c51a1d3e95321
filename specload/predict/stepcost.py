"""The step-cost curve, measured from the baseline's own sweep.

In a closed-loop level of concurrency c every engine step decodes about c sequences of one
token each, so the level's median TPOT is the cost of such a step at the context the level
saw. Fitted over the levels (docs/predict.md)::

    T(n, ctx) = a + b * n + c * ctx          (milliseconds)

n = tokens the step verifies (Σ 1 + drafted over its sequences), ctx = the mean context
length of its sequences (tokens). ``a`` is the fixed part (weights read, all-reduce
latency, launch), ``b`` the per-token part (expert weights woken, all-reduce bytes,
compute), ``c`` the context part (attention). Least squares with numpy, every term
non-negative (a term that comes out negative is dropped and the rest refitted); the context
term is tried only when the points can tell it apart from the token term (at least four
points, contexts spread by 5% or more). A level much cheaper than one with fewer tokens per
step is named in the notes (its tokens arrived in bursts).

``interp`` (the default curve) adds the fit's residual at the measured levels, linearly
interpolated in n and held beyond the ends, so the curve passes through every measured
level (the curve of an MoE is concave: a line through 1..64 tokens misses 4 tokens by
several percent); ``linear`` uses the line alone.

:func:`plan_levels` says which baseline levels would measure the token counts a variant
puts in a step (c·(1+k)) beyond the measured range.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np

CURVES = ("interp", "linear")
# A level this much cheaper than one with fewer tokens per step is not a step cost.
FALL_RATIO = 0.25
TERMS = ("fixed_ms", "per_token_ms", "per_context_token_ms")


@dataclass(frozen=True)
class CostPoint:
    """One measured step cost: a level (or, at concurrency 1, one category of it)."""

    label: str
    concurrency: int
    n_tokens: float  # mean tokens per step over the requests' decode steps
    context: float  # mean context length per sequence over those steps
    tpot_ms: float  # the measured median TPOT
    requests: int
    level: bool = True  # a whole level (a knot of the interp curve), or a category
    weight: float = 1.0


@dataclass(frozen=True, eq=False)
class StepCostFit:
    """The fitted curve: coefficients, their covariance, residuals per point, R²."""

    coef: np.ndarray  # (a, b, c): ms, ms per token, ms per context token
    cov: np.ndarray | None  # 3x3, None when the fit has no degrees of freedom left
    residual_sd: float | None
    r2: float | None
    points: tuple[CostPoint, ...]
    residuals: np.ndarray  # measured - line, per point (ms)
    uses_context: bool
    curve: str = "interp"
    knots_n: np.ndarray = field(default_factory=lambda: np.zeros(0))
    knots_r: np.ndarray = field(default_factory=lambda: np.zeros(0))
    notes: tuple[str, ...] = ()

    @property
    def measured_range(self) -> tuple[float, float]:
        ns = [p.n_tokens for p in self.points if p.level]
        return (min(ns), max(ns))

    def line_ms(self, n: np.ndarray | float, ctx: np.ndarray | float) -> np.ndarray:
        a, b, c = self.coef
        return np.asarray(a + b * np.asarray(n, dtype=float) + c * np.asarray(ctx, dtype=float))

    def correction_ms(self, n: np.ndarray | float) -> np.ndarray:
        """The interp curve's residual term at n (0 for the linear curve)."""
        x = np.asarray(n, dtype=float)
        if self.curve != "interp" or len(self.knots_n) == 0:
            return np.zeros_like(x)
        return np.asarray(np.interp(x, self.knots_n, self.knots_r))

    def step_ms(self, n: np.ndarray | float, ctx: np.ndarray | float) -> np.ndarray:
        """T(n, ctx) in milliseconds (never below 1% of the fixed part, nor below 0)."""
        t = self.line_ms(n, ctx) + self.correction_ms(n)
        floor = max(0.01 * float(self.coef[0]), 1e-6)
        return np.asarray(np.maximum(t, floor))

    def sample_coefs(self, rng: np.random.Generator, size: int) -> np.ndarray:
        """``size`` coefficient vectors drawn from the fit's error (the estimate when unknown)."""
        if self.cov is None:
            return np.tile(self.coef, (size, 1))
        return rng.multivariate_normal(self.coef, self.cov, size=size, method="eigh")

    def to_dict(self) -> dict[str, object]:
        return {
            "model": "T(n, ctx) = a + b*n + c*ctx (ms; n tokens in the step, "
            "ctx mean context per sequence)",
            "curve": self.curve,
            "coefficients": {
                "fixed_ms": float(self.coef[0]),
                "per_token_ms": float(self.coef[1]),
                "per_1k_context_ms": float(self.coef[2]) * 1000.0,
            },
            "uses_context": self.uses_context,
            "r2": self.r2,
            "residual_sd_ms": self.residual_sd,
            "points": [
                {
                    "label": p.label,
                    "concurrency": p.concurrency,
                    "n_tokens": p.n_tokens,
                    "mean_context": p.context,
                    "measured_ms": p.tpot_ms,
                    "fitted_ms": p.tpot_ms - float(r),
                    "residual_ms": float(r),
                    "requests": p.requests,
                    "level": p.level,
                }
                for p, r in zip(self.points, self.residuals, strict=True)
            ],
            "notes": list(self.notes),
        }


def fit_step_cost(points: Sequence[CostPoint], *, curve: str = "interp") -> StepCostFit:
    """Least-squares fit of T(n, ctx) = a + b·n + c·ctx over ``points``.

    Raises ValueError when fewer than two levels at distinct token counts are given.
    """
    if curve not in CURVES:
        raise ValueError(f"curve {curve!r}: one of {', '.join(CURVES)}")
    pts = tuple(points)
    levels = [p for p in pts if p.level]
    if len({round(p.n_tokens, 6) for p in levels}) < 2:
        raise ValueError("the step-cost fit needs at least two levels of different concurrency")
    fit_pts = [p for p in pts if p.weight > 0]
    n = np.array([p.n_tokens for p in fit_pts])
    ctx = np.array([p.context for p in fit_pts])
    y = np.array([p.tpot_ms for p in fit_pts])
    w = np.sqrt(np.array([p.weight for p in fit_pts]))
    notes: list[str] = []
    spread = (float(ctx.max() - ctx.min()) / float(ctx.mean())) if ctx.mean() > 0 else 0.0
    terms = [0, 1]
    if len(fit_pts) >= 4 and spread >= 0.05:
        terms.append(2)
    elif len(fit_pts) < 4:
        notes.append(f"context term dropped: {len(fit_pts)} points (4 needed)")
    else:
        notes.append(f"context term dropped: contexts spread by {spread:.1%} only (5% needed)")
    columns = np.column_stack([np.ones_like(n), n, ctx])
    # Every term is a cost: none may be negative. A fit that makes one negative (noise, or
    # a level that measured something else) is refitted without it (an active set of at most
    # three terms).
    while True:
        sub, sub_cov, sd = _wls(columns[:, terms], y, w)
        if sub is None:  # the context cannot be told from the tokens
            assert 2 in terms
            terms.remove(2)
            notes.append("context term dropped: it cannot be told from the token term")
            continue
        worst = int(np.argmin(sub))
        if sub[worst] >= 0 or len(terms) == 1:
            break
        dropped = terms.pop(worst)
        notes.append(
            f"{('fixed part', 'per-token part', 'context term')[dropped]} dropped: it came out "
            f"negative ({sub[worst]:.4g} {('ms', 'ms per token', 'ms per context token')[dropped]})"
        )
    coef = np.zeros(3)
    coef[terms] = np.maximum(sub, 0.0)
    cov: np.ndarray | None = None
    if sub_cov is not None:
        cov = np.zeros((3, 3))
        cov[np.ix_(terms, terms)] = sub_cov
    uses_context = 2 in terms
    if cov is None:
        notes.append("no degrees of freedom left: the fit's error is unknown (add a level)")
    notes.extend(_falling_levels(levels))
    all_n = np.array([p.n_tokens for p in pts])
    all_ctx = np.array([p.context for p in pts])
    all_y = np.array([p.tpot_ms for p in pts])
    residuals = all_y - (coef[0] + coef[1] * all_n + coef[2] * all_ctx)
    r_fit = y - (coef[0] + coef[1] * n + coef[2] * ctx)
    tss = float(np.sum(w**2 * (y - np.average(y, weights=w**2)) ** 2))
    r2 = 1.0 - float(np.sum(w**2 * r_fit**2)) / tss if tss > 0 else None
    order = sorted((p.n_tokens, float(r)) for p, r in zip(pts, residuals, strict=True) if p.level)
    kn: list[float] = []
    kr: list[list[float]] = []
    for x, r in order:
        if kn and math.isclose(kn[-1], x, rel_tol=1e-9):
            kr[-1].append(r)
        else:
            kn.append(x)
            kr.append([r])
    return StepCostFit(
        coef=coef,
        cov=cov,
        residual_sd=sd,
        r2=r2,
        points=pts,
        residuals=residuals,
        uses_context=uses_context,
        curve=curve,
        knots_n=np.array(kn),
        knots_r=np.array([sum(r) / len(r) for r in kr]),
        notes=tuple(notes),
    )


def _falling_levels(levels: Sequence[CostPoint]) -> list[str]:
    """A step of more tokens never costs much less: a level whose median TPOT falls by more
    than :data:`FALL_RATIO` below one with fewer tokens per step measured something else."""
    out: list[str] = []
    ordered = sorted(levels, key=lambda p: p.n_tokens)
    for i, p in enumerate(ordered):
        before = [q for q in ordered[:i] if q.n_tokens < p.n_tokens]
        if not before:
            continue
        top = max(before, key=lambda q: q.tpot_ms)
        if p.tpot_ms < (1.0 - FALL_RATIO) * top.tpot_ms:
            out.append(
                f"level {p.label}'s median TPOT ({p.tpot_ms:.3g} ms) is below {top.label}'s "
                f"({top.tpot_ms:.3g} ms) though its steps hold more tokens: its tokens arrived in "
                "bursts (a client or a server's front end that fell behind?); rerun it or "
                "leave it out"
            )
    return out


def _wls(
    x: np.ndarray, y: np.ndarray, w: np.ndarray
) -> tuple[np.ndarray | None, np.ndarray | None, float | None]:
    """Weighted least squares: coefficients, their covariance (None at 0 d.o.f.), residual SD."""
    xw = x * w[:, None]
    yw = y * w
    coef, _, rank, _ = np.linalg.lstsq(xw, yw, rcond=None)
    if rank < x.shape[1]:
        return None, None, None
    resid = yw - xw @ coef
    dof = len(y) - x.shape[1]
    if dof <= 0:
        return coef, None, None
    s2 = float(resid @ resid) / dof
    cov = s2 * np.linalg.pinv(xw.T @ xw)
    return coef, cov, math.sqrt(s2)


@dataclass(frozen=True)
class Need:
    concurrency: int
    k: int
    tokens: int  # c·(1+k): the most tokens a step of this level can verify
    status: str  # "measured", "interpolated" or "extrapolated"


@dataclass(frozen=True)
class Plan:
    """Which baseline levels would measure the step sizes a variant needs."""

    measured: tuple[int, ...]
    needs: tuple[Need, ...]
    extra_levels: tuple[int, ...]
    max_num_seqs: int
    notes: tuple[str, ...] = ()

    @property
    def levels(self) -> tuple[int, ...]:
        return tuple(sorted(set(self.measured) | set(self.extra_levels)))

    def need(self, concurrency: int, k: int) -> Need | None:
        """How the measured levels cover this (concurrency, k)'s steps (None: not planned)."""
        for n in self.needs:
            if n.concurrency == concurrency and n.k == k:
                return n
        return None

    def command(self) -> str:
        levels = ",".join(str(c) for c in self.levels)
        return f"specload run --record-token-ids --concurrency {levels} …"

    def summary(self) -> str:
        """One sentence: what the plan adds (for error messages)."""
        if not self.extra_levels:
            return "the measured levels already cover every step size needed"
        extra = ",".join(str(c) for c in self.extra_levels)
        return f"--plan would add levels {extra} (`{self.command()}`)"

    def to_dict(self) -> dict[str, object]:
        return {
            "measured": list(self.measured),
            "extra_levels": list(self.extra_levels),
            "levels": list(self.levels),
            "command": self.command() if self.extra_levels else None,
            "max_num_seqs": self.max_num_seqs,
            "needs": [
                {"concurrency": n.concurrency, "k": n.k, "tokens": n.tokens, "status": n.status}
                for n in self.needs
            ],
            "notes": list(self.notes),
        }


def plan_levels(
    measured: Sequence[int],
    concurrencies: Sequence[int],
    ks: Sequence[int],
    *,
    max_num_seqs: int = 256,
) -> Plan:
    """The extra closed-loop levels whose steps hold the c·(1+k) tokens a variant verifies.

    A level of concurrency m measures a step of m tokens (m sequences of one). Levels are
    added on a doubling ladder above the highest measured one up to the largest step needed
    (capped at ``max_num_seqs``: a larger level only queues); with fewer than two measured
    levels the ladder starts at 1 and the wanted concurrencies are added too.
    """
    have = sorted({int(c) for c in measured if c >= 1})
    wanted = sorted({int(c) for c in concurrencies if c >= 1}) or have or [1]
    ks = sorted({int(k) for k in ks if k >= 0}) or [0]
    lo, hi = (have[0], have[-1]) if have else (0, 0)
    needs: list[Need] = []
    for c in wanted:
        for k in ks:
            tokens = c * (1 + k)
            if tokens in have:
                status = "measured"
            elif len(have) >= 2 and lo <= tokens <= hi:
                status = "interpolated"
            else:
                status = "extrapolated"
            needs.append(Need(c, k, tokens, status))
    need_max = max(n.tokens for n in needs)
    extra: set[int] = set()
    notes: list[str] = []
    cap = max(1, max_num_seqs)
    if len(have) < 2:
        extra.update(c for c in wanted if c <= cap)
        x = 1
        while x < max(need_max, 2) and x <= cap:
            extra.add(x)
            x *= 2
        extra.add(min(max(need_max, 2), cap))
    elif need_max > hi:
        x = hi * 2
        while x < need_max and x <= cap:
            extra.add(x)
            x *= 2
        extra.add(min(need_max, cap))
    if need_max > cap:
        notes.append(
            f"steps of up to {need_max} tokens are needed, but a level above max_num_seqs "
            f"({cap}) only queues: beyond {cap} tokens the curve is extrapolated"
        )
    extra.difference_update(have)
    return Plan(tuple(have), tuple(needs), tuple(sorted(extra)), cap, tuple(notes))
