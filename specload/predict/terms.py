"""The variant's step, priced term by term: what its engine path adds to the baseline's curve.

A step of the variant costs the baseline's curve at its **padded** token count (CUDA graphs
run the smallest captured size that holds the step) plus each **term** its engine path adds
and the baseline never ran. A term is linear in one coefficient: per step it costs
``value x unit_ms(step)`` — ``unit_ms`` the step's count of the term's unit (steps, context
tokens, sequences) in milliseconds per unit of ``value`` — with ``low..high`` the range the
forecast draws ``value`` from (triangular, its mode at ``value``) and ``source`` where the
figure came from: a flag, the baseline's profile, the server's log, or a prior (:data:`PRIORS`,
each with its own source). A term a path does not imply is absent, not zero.

=====================  ==================================  ===============================
term                   applies when                        per step
=====================  ==================================  ===============================
padding (not a term:   graph mode not ``none``, the step   curve(padded n) - curve(n)
the curve at the       fits the largest capture size
padded size)
host work (sync)       baseline async, variant not         ms per step
engine-worker call     V1 runner, variant synchronous      ms per step
                       (``take_draft_token_ids`` after
                       every step, vllm/v1/engine/core.py)
proposer               every n-gram path                   ns per context token + ms per
                                                           sequence (CPU numba); ms per
                                                           step (GPU kernels)
graph mode             graph mode ``full`` or              ms per decode step that is not
                       ``full_and_piecewise``              uniform (every sequence 1 + k
                                                           tokens): piecewise (or eager)
                                                           instead of a full graph
rejection sampler      every speculative path              ms per step with a draft
override               ``--step-overhead-ms X``: replaces  X ms per step
                       every term above but padding
=====================  ==================================  ===============================

The MoE correction (verification of one sequence's k+1 tokens wakes fewer experts than
k+1 sequences, :mod:`specload.predict.moe`) is :func:`moe_term`, a term <= 0: absent for
dense models (the default).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Protocol

import numpy as np

from specload.predict.engine_path import EnginePath
from specload.predict.moe import MoeModel


class StepArrays(Protocol):
    """Per placed step (:class:`specload.predict.closedloop.Schedule`): tokens verified, sequences,
    mean context per sequence, draft tokens, the fewest and most tokens one sequence brings
    (a prefill brings its prompt), and the prefills in the step."""

    @property
    def n_tokens(self) -> np.ndarray: ...
    @property
    def n_seqs(self) -> np.ndarray: ...
    @property
    def context(self) -> np.ndarray: ...
    @property
    def drafted(self) -> np.ndarray | None: ...
    @property
    def q_min(self) -> np.ndarray | None: ...
    @property
    def q_max(self) -> np.ndarray | None: ...
    @property
    def prefills(self) -> np.ndarray | None: ...


@dataclass(frozen=True)
class Term:
    """One extra cost of the variant's step: ``value`` x ``unit_ms(steps)`` ms per step."""

    name: str
    value: float  # the estimate, in ``unit``
    low: float
    high: float
    unit: str  # e.g. "ms per step", "ns per context token"
    source: str  # "flag --host-step-ms", "baseline profile", "prior (…)", …
    why: str  # one line: what the variant does that the baseline did not
    unit_ms: Callable[[StepArrays], np.ndarray]  # per step: ms per unit of value

    def per_step_ms(self, steps: StepArrays, value: float | None = None) -> np.ndarray:
        v = self.value if value is None else value
        return np.asarray(v * self.unit_ms(steps), dtype=float)

    def to_dict(self) -> dict[str, object]:
        return {
            "name": self.name,
            "value": self.value,
            "low": self.low,
            "high": self.high,
            "unit": self.unit,
            "source": self.source,
            "why": self.why,
        }


@dataclass(frozen=True)
class Prior:
    value: float
    low: float
    high: float
    source: str


_PLACEHOLDER = "placeholder until measured on this build"

# Every prior in one table: (path kind, term) -> value, range, source. The CPU figures are
# placeholders until the decomposition on vLLM 0.32's CPU build (docs/predict.md) fills them.
PRIORS: dict[str, Prior] = {
    # GPU servers' host work per step that async scheduling hides (third-party figures).
    "host_sync_ms": Prior(1.05, 0.6, 1.5, "prior (third-party GPU figures, not measured here)"),
    # take_draft_token_ids: a function call in one process (UniProcExecutor), a message-queue
    # round trip with several workers (MultiprocExecutor).
    "engine_call_ms": Prior(0.05, 0.01, 0.3, f"prior (vLLM 0.32 CPU, {_PLACEHOLDER})"),
    # The numba proposer scans each sequence's whole context every step (issue #24: ~1 ns
    # per context token per rank).
    "proposer_ctx_ns": Prior(1.0, 0.5, 2.0, "prior (issue #24: ~1 ns per context token)"),
    # Its per-sequence part (batch bookkeeping, the numba call); ~60 µs per sequence on the
    # reference, context scan included.
    "proposer_seq_ms": Prior(0.01, 0.0, 0.06, f"prior (reference ~60 µs/sequence, {_PLACEHOLDER})"),
    # A GPU n-gram kernel (ngram_gpu, the V2 Triton kernel): its launches per step.
    "proposer_gpu_ms": Prior(0.05, 0.01, 0.2, f"prior (GPU kernel launches, {_PLACEHOLDER})"),
    # A decode step run piecewise (or eager) instead of as one full graph.
    "graph_mode_ms": Prior(0.3, 0.1, 1.0, f"prior (GPU graph replay, {_PLACEHOLDER})"),
    # The rejection sampler and spec metadata of a step with a draft.
    "rejection_ms": Prior(0.05, 0.01, 0.3, f"prior (vLLM 0.32 GPU, {_PLACEHOLDER})"),
}

_CPU_DECOMPOSED = (
    "prior (vLLM 0.32 CPU build, measured here: bench/cpu_ngram_decompose.py, "
    "x the baseline's one-sequence decode step)"
)
# vLLM 0.32's CPU build: the n-gram server's per-step work beyond a plain step, as fractions
# of the plain one-sequence decode step T1 (on a CPU server the extra work is host compute on
# the same cores as the forward, so it scales with the host). Measured in process on this
# 2-vCPU VM with the tiny model (bench/results/cpu_ngram_decompose.md): T1 = 1.43-1.56 ms;
# a no-draft n-gram step 0.81-2.28 ms dearer; the ranges cover both runs and c4.
CPU_PRIORS: dict[str, Prior] = {
    # post_step -> take_draft_token_ids: 0.014-0.022 ms in process; a message-queue round
    # trip to the worker process in a server.
    "cpu_engine_call": Prior(0.01, 0.005, 0.1, _CPU_DECOMPOSED),
    # propose_draft_token_ids (the numba batch propose and its Python glue): 0.08-0.13 ms
    # per step at c1 and c4 alike.
    "cpu_proposer": Prior(0.055, 0.04, 0.1, _CPU_DECOMPOSED),
    # _sample: the rejection sampler path runs on every step of a speculative server, with a
    # draft or not (0.175-0.27 ms against 0.03 for the plain sampler).
    "cpu_rejection": Prior(0.09, 0.05, 0.2, _CPU_DECOMPOSED),
    # _prepare_inputs with spec-decode metadata (+0.15-0.35 ms), the forward on spec-decode
    # attention metadata (+0.2-0.8 ms for the same one token), bookkeeping and scheduling.
    "cpu_spec_inputs": Prior(0.31, 0.15, 1.0, _CPU_DECOMPOSED),
    # numba's thread pool (NUMBA_NUM_THREADS defaults to the core count; vLLM runs the
    # proposer on one thread): the pool's threads spin on the server's cores. A/B of the
    # n-gram server against itself with NUMBA_NUM_THREADS=1: worker 1.44 -> 0.93 cores,
    # 24 requests 10.2 s -> 7.3-8.8 s.
    "cpu_thread_pool": Prior(
        0.3,
        0.0,
        0.7,
        "prior (vLLM 0.32 CPU build, measured here: the n-gram server with and without "
        "NUMBA_NUM_THREADS=1, x the baseline's one-sequence decode step)",
    ),
}


@dataclass(frozen=True)
class Given:
    """A term's figure from something better than a prior: a flag, the baseline's profile,
    the server's log (``low``/``high`` default to ``value``: no range)."""

    value: float
    source: str
    low: float | None = None
    high: float | None = None


# --------------------------------------------------------------------------- padding


def round_up(x: int, y: int) -> int:
    """vLLM's ``round_up`` (vllm/utils/math_utils.py): x up to a multiple of y."""
    return ((x + y - 1) // y) * y


def spec_capture_sizes(sizes: Sequence[int], k: int) -> tuple[int, ...]:
    """The capture sizes of a speculative server on the V1 runner with full decode graphs:
    vLLM 0.32's ``CompilationConfig.adjust_cudagraph_sizes_for_spec_decode`` with
    ``uniform_decode_query_len = 1 + k`` — every size rounded up to a multiple of 1 + k,
    those above the largest size dropped, the set sorted; none left but 1 + k fits: [1 + k].
    Raises ValueError where vLLM does (no size left)."""
    q = 1 + k
    if not sizes or q <= 1:
        return tuple(sorted(sizes))
    top = max(sizes)
    rounded = sorted({round_up(s, q) for s in sizes if round_up(s, q) <= top})
    if not rounded and q <= top:
        rounded = [q]
    if not rounded:
        raise ValueError(
            f"no CUDA-graph capture size left after rounding {sorted(sizes)} to multiples of "
            f"{q} (num_speculative_tokens + 1): vLLM refuses this k"
        )
    return tuple(rounded)


def padded_tokens(n_tokens: np.ndarray, sizes: Sequence[int]) -> np.ndarray:
    """Each step's token count padded to the smallest capture size >= it; a step above the
    largest size runs eager, unpadded (vLLM's dispatcher)."""
    n = np.asarray(n_tokens, dtype=float)
    if not len(sizes):
        return n.copy()
    s = np.asarray(sorted(sizes), dtype=float)
    i = np.searchsorted(s, n, side="left")
    fits = i < len(s)
    out = n.copy()
    out[fits] = s[i[fits]]
    return out


def uniform_steps(steps: StepArrays, k: int) -> np.ndarray:
    """Steps vLLM's V1 runner dispatches as uniform decode: every sequence brings exactly
    1 + k tokens (``max_query_len == uniform_decode_query_len`` and ``num_tokens ==
    max_query_len x num_reqs``)."""
    if steps.q_min is None or steps.q_max is None:
        raise ValueError("the placement carries no per-sequence token counts (q_min/q_max)")
    return np.asarray((steps.q_min == 1 + k) & (steps.q_max == 1 + k))


@dataclass(frozen=True)
class Padding:
    """How a path pads its steps: uniform decode steps to ``uniform``, the others to
    ``mixed`` (None: they run eager, unpadded)."""

    uniform: tuple[int, ...]
    mixed: tuple[int, ...] | None
    source: str

    def padded(self, steps: StepArrays, k: int) -> np.ndarray:
        n = np.asarray(steps.n_tokens, dtype=float)
        uni = uniform_steps(steps, k)
        out = n.copy()
        out[uni] = padded_tokens(n[uni], self.uniform)
        if self.mixed is not None:
            out[~uni] = padded_tokens(n[~uni], self.mixed)
        return out


def padding_for(path: EnginePath, k: int) -> Padding | None:
    """The variant's padding, or None (no CUDA graphs, no capture sizes known)."""
    if path.graph_mode == "none" or not path.capture_sizes:
        return None
    base = tuple(sorted(path.capture_sizes))
    src = f"capture sizes {list(base)} ({path.source('capture_sizes')})"
    full_decode = path.graph_mode in ("full", "full_and_piecewise")
    if path.runner == "v1" and full_decode:
        # vLLM 0.32 (vllm/config/compilation.py): MRV1 with FULL decode graphs rounds every
        # capture size to a multiple of 1 + k; mixed steps replay piecewise graphs of the same
        # sizes (FULL alone: no piecewise graphs, they run eager).
        sizes = spec_capture_sizes(base, k)
        rounded = f"{src} rounded to multiples of {k + 1}: {list(sizes)}"
        return Padding(sizes, sizes if path.graph_mode == "full_and_piecewise" else None, rounded)
    if full_decode:
        # Model Runner V2 (vllm/v1/worker/gpu/cudagraph_utils.py): uniform decode graphs at
        # each size rounded up to 1 + k, mixed steps at the sizes themselves.
        mixed = base if path.graph_mode == "full_and_piecewise" else None
        return Padding(spec_capture_sizes(base, k), mixed, src + " (V2: decode rounded to 1 + k)")
    return Padding(base, base, src)  # piecewise: every step at the sizes themselves


# --------------------------------------------------------------------------- terms


def _ones(s: StepArrays) -> np.ndarray:
    return np.ones(len(s.n_tokens))


def _need(a: np.ndarray | None, name: str) -> np.ndarray:
    if a is None:
        raise ValueError(f"the placement carries no per-step {name}")
    return a


def _with_draft(s: StepArrays) -> np.ndarray:
    return (_need(s.drafted, "draft tokens") > 0).astype(float)


def _context_ns(s: StepArrays) -> np.ndarray:
    # Σ context over the step's sequences, in ms per ns-per-token
    return np.asarray(s.context * s.n_seqs * 1e-6)


def _sequences(s: StepArrays) -> np.ndarray:
    return np.asarray(s.n_seqs, dtype=float)


def _piecewise(k: int) -> Callable[[StepArrays], np.ndarray]:
    def unit(s: StepArrays) -> np.ndarray:
        decode_only = _need(s.prefills, "prefills") == 0
        return np.asarray((decode_only & ~uniform_steps(s, k)).astype(float))

    return unit


def _term(
    name: str,
    prior: str,
    *,
    given: Mapping[str, Given],
    unit: str,
    why: str,
    unit_ms: Callable[[StepArrays], np.ndarray],
) -> Term:
    g = given.get(name)
    if g is not None:
        lo = g.value if g.low is None else g.low
        hi = g.value if g.high is None else g.high
        return Term(name, g.value, min(lo, g.value), max(hi, g.value), unit, g.source, why, unit_ms)
    p = PRIORS[prior] if prior in PRIORS else CPU_PRIORS[prior]
    return Term(name, p.value, p.low, p.high, unit, p.source, why, unit_ms)


HOST = "host work (sync)"
CALL = "engine-worker call"
PROPOSER_CTX = "proposer: context scan"
PROPOSER_SEQ = "proposer: per sequence"
PROPOSER_GPU = "proposer: kernel"
GRAPH = "graph mode"
REJECTION = "rejection sampler"
PROPOSER_STEP = "proposer: per step"
SPEC_INPUTS = "spec-path inputs and forward"
THREAD_POOL = "numba thread pool"
OVERRIDE = "override"
TERM_NAMES = (
    HOST,
    CALL,
    PROPOSER_CTX,
    PROPOSER_SEQ,
    PROPOSER_STEP,
    PROPOSER_GPU,
    SPEC_INPUTS,
    THREAD_POOL,
    GRAPH,
    REJECTION,
    OVERRIDE,
)
# The baseline's one-sequence decode step where none is known (the in-process T1 measured
# with the tiny model on this VM): the CPU terms' unit.
DEFAULT_ONE_STEP_MS = 1.5


def override_term(ms: float) -> Term:
    """``--step-overhead-ms X``: one flat term in place of every estimated one."""
    return Term(
        OVERRIDE,
        ms,
        ms,
        ms,
        "ms per step",
        "flag --step-overhead-ms",
        "the variant's own cost per step, given (replaces every estimated term)",
        _ones,
    )


def terms_for(
    path: EnginePath | None,
    k: int,
    *,
    given: Mapping[str, Given] | None = None,
    override_ms: float | None = None,
    moe: MoeModel | None = None,
    curve: Callable[[np.ndarray], np.ndarray] | None = None,
    one_step_ms: float | None = None,
) -> tuple[Term, ...]:
    """The extra terms of ``path``'s variant at ``k`` (see the module's table); ``given``:
    figures by term name that replace the priors (a flag, the baseline's profile, the log).
    No path: no terms (the baseline's curve alone). ``moe`` (None: a dense model) adds the
    MoE correction (:func:`moe_term`, on ``curve``), which an override does not replace.
    ``one_step_ms``: the baseline's one-sequence decode step, the unit of the CPU build's
    terms (:func:`cpu_terms`)."""
    padding = padding_for(path, k) if path is not None else None
    moe_t = moe_term(moe, padding, k, curve)
    extra = (moe_t,) if moe_t is not None else ()
    if override_ms is not None:
        return (override_term(override_ms), *extra)
    if path is None:
        return extra
    given = given or {}
    if path.device == "cpu" and path.proposer == "ngram-numba":
        cpu = [*cpu_terms(given, one_step_ms), *extra]
        _check_given(given, cpu)
        return tuple(cpu)
    out: list[Term] = []
    if path.baseline_async is True and path.variant_async is False:
        out.append(
            _term(
                HOST,
                "host_sync_ms",
                given=given,
                unit="ms per step",
                why="the variant schedules synchronously: the host's per-step work the baseline "
                "overlapped with the forward pass is on the critical path",
                unit_ms=_ones,
            )
        )
    if path.runner == "v1" and path.variant_async is not True:
        out.append(
            _term(
                CALL,
                "engine_call_ms",
                given=given,
                unit="ms per step",
                why="a third engine-worker call per step (take_draft_token_ids, synchronous "
                "scheduling)",
                unit_ms=_ones,
            )
        )
    if path.proposer == "ngram-numba":
        out.append(
            _term(
                PROPOSER_CTX,
                "proposer_ctx_ns",
                given=given,
                unit="ns per context token",
                why="the CPU n-gram proposer scans each sequence's whole context after every step",
                unit_ms=_context_ns,
            )
        )
        out.append(
            _term(
                PROPOSER_SEQ,
                "proposer_seq_ms",
                given=given,
                unit="ms per sequence",
                why="the CPU n-gram proposer's per-sequence work after every step",
                unit_ms=_sequences,
            )
        )
    else:
        out.append(
            _term(
                PROPOSER_GPU,
                "proposer_gpu_ms",
                given=given,
                unit="ms per step",
                why=f"the n-gram kernel ({path.proposer}) runs after every step",
                unit_ms=_ones,
            )
        )
    if path.graph_mode in ("full", "full_and_piecewise"):
        instead = "eager" if path.graph_mode == "full" else "piecewise"
        out.append(
            _term(
                GRAPH,
                "graph_mode_ms",
                given=given,
                unit="ms per non-uniform decode step",
                why=f"a decode step where not every sequence drafted exactly k runs {instead} "
                "instead of one full graph (the baseline's decode steps ran full)",
                unit_ms=_piecewise(k),
            )
        )
    out.append(
        _term(
            REJECTION,
            "rejection_ms",
            given=given,
            unit="ms per step with a draft",
            why="a step with draft tokens runs the rejection sampler and builds spec metadata",
            unit_ms=_with_draft,
        )
    )
    out.extend(extra)
    _check_given(given, out)
    return tuple(out)


def _check_given(given: Mapping[str, Given], terms: Sequence[Term]) -> None:
    unknown = set(given) - {t.name for t in terms}
    if unknown:
        raise ValueError(
            f"figures given for terms this engine path does not have: {', '.join(sorted(unknown))}"
        )


def cpu_terms(given: Mapping[str, Given], one_step_ms: float | None) -> list[Term]:
    """vLLM 0.32's CPU build (both sides synchronous, no graphs, the numba proposer): the
    n-gram server's per-step work beyond a plain step, each a fraction of the baseline's
    one-sequence decode step (:data:`CPU_PRIORS`, measured here by
    ``bench/cpu_ngram_decompose.py``), plus the proposer's context scan."""
    t1 = one_step_ms if one_step_ms is not None and one_step_ms > 0 else DEFAULT_ONE_STEP_MS
    unit = "x one-sequence decode step"

    def per_step(s: StepArrays) -> np.ndarray:
        return np.full(len(s.n_tokens), t1)

    def rel(name: str, prior: str, why: str) -> Term:
        return _term(name, prior, given=given, unit=unit, why=why, unit_ms=per_step)

    return [
        rel(
            CALL,
            "cpu_engine_call",
            "a third engine-worker call per step (take_draft_token_ids, synchronous scheduling)",
        ),
        rel(PROPOSER_STEP, "cpu_proposer", "the numba n-gram proposer's call after every step"),
        _term(
            PROPOSER_CTX,
            "proposer_ctx_ns",
            given=given,
            unit="ns per context token",
            why="the CPU n-gram proposer scans each sequence's whole context after every step",
            unit_ms=_context_ns,
        ),
        rel(
            REJECTION,
            "cpu_rejection",
            "every step of a speculative server samples through the rejection sampler",
        ),
        rel(
            SPEC_INPUTS,
            "cpu_spec_inputs",
            "spec-decode metadata in the step's inputs and the forward on spec-decode "
            "attention metadata, bookkeeping",
        ),
        rel(
            THREAD_POOL,
            "cpu_thread_pool",
            "numba's thread pool spins on the server's cores (NUMBA_NUM_THREADS=1 removes it)",
        ),
    ]


MOE = "MoE expert reads"


def moe_term(
    moe: MoeModel | None,
    padding: Padding | None,
    k: int,
    curve: Callable[[np.ndarray], np.ndarray] | None,
) -> Term | None:
    """The MoE correction (:mod:`specload.predict.moe`): verifying one sequence's 1 + k
    tokens wakes fewer experts than 1 + k sequences, so the step is charged the curve at
    fewer, equivalent independent tokens — a term <= 0, linear in the overlap (exact for a
    row cost of 0 on a linear curve). ``curve``: the baseline's curve as a function of the
    step's tokens (its context part cancels). Absent for dense models (``moe`` None)."""
    if moe is None or curve is None:
        return None
    ref = moe.overlap if moe.overlap > 0 else moe.overlap_high
    if ref <= 0:
        return None
    model = moe if moe.overlap > 0 else moe.with_overlap(ref, moe.source)

    def unit(s: StepArrays) -> np.ndarray:
        # padding rows are independent rows: the correction is taken at the padded count
        n = padding.padded(s, k) if padding is not None else np.asarray(s.n_tokens, dtype=float)
        drafted = _need(s.drafted, "draft tokens")
        return np.asarray(model.correction_ms(n, drafted, curve) / ref)

    return Term(
        MOE,
        moe.overlap,
        moe.overlap_low,
        moe.overlap_high,
        "share of a token's experts its successor keeps",
        moe.source,
        "a sequence's verified tokens share experts: fewer expert reads than as many "
        "sequences of one token (the curve's tokens)",
        unit,
    )


def draw(term: Term, rng: np.random.Generator, n: int) -> np.ndarray:
    """``n`` draws of the term's value: triangular over low..high with its mode at the
    estimate (the estimate itself when the range is empty)."""
    if not (term.high > term.low) or not all(
        math.isfinite(x) for x in (term.low, term.value, term.high)
    ):
        return np.full(n, term.value)
    return rng.triangular(term.low, term.value, term.high, size=n)
