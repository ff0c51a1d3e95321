"""Synthetic baselines with known truth (tests and ``bench/bench_predict.py``).

:func:`synthetic_text` makes token sequences whose repetition is controlled: each output
segment is, with probability ``copy``, a run copied from earlier in the context (prompt or
output), otherwise fresh tokens. :func:`write_synthetic_baseline` writes a closed-loop
baseline results directory — ``summary.json`` and ``tokens.jsonl`` — whose median TPOTs are
what the batch engine gives under a known step-cost function, so a forecast can be checked
against the truth it was built from.
"""

from __future__ import annotations

import random
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import orjson

from simulator.ngram import RequestReplay
from specload.records.tokens import TokenRecord, write_tokens
from specload.results.model import median

# Copy probability of an output segment per category: reasoning repeats little,
# structured output and code more.
COPY_RATE = {
    "coding": 0.45,
    "math": 0.3,
    "structured": 0.5,
    "explanation": 0.2,
    "long_reasoning": 0.15,
}


def synthetic_text(
    rng: random.Random,
    *,
    prompt_len: int,
    output_len: int,
    copy: float,
    vocab: int = 32000,
    content_share: float = 0.3,
) -> tuple[list[int], list[int], int | None]:
    """(prompt ids, output ids, content_start) with copy-controlled repetition."""

    def fresh() -> int:  # log-uniform ids: frequent small ones make spurious matches
        return int(vocab ** rng.random())

    prompt = [fresh() for _ in range(prompt_len)]
    seq = list(prompt)
    out: list[int] = []
    while len(out) < output_len:
        run = rng.randint(3, 24)
        if rng.random() < copy and len(seq) > run + 1:
            s = rng.randrange(0, len(seq) - run)
            chunk = seq[s : s + run]
        else:
            chunk = [fresh() for _ in range(run)]
        chunk = chunk[: output_len - len(out)]
        out.extend(chunk)
        seq.extend(chunk)
    cs = int(output_len * (1 - content_share)) if content_share > 0 else None
    return prompt, out, cs


@dataclass(frozen=True)
class LinearCost:
    """A known step cost: a + b·n + c·ctx (ms)."""

    fixed_ms: float = 12.0
    per_token_ms: float = 0.6
    per_context_ms: float = 0.0008

    def __call__(self, n: np.ndarray, ctx: np.ndarray) -> np.ndarray:
        return self.fixed_ms + self.per_token_ms * n + self.per_context_ms * ctx


def make_records(
    n: int,
    *,
    levels: Sequence[int],
    seed: int = 0,
    min_tokens: int = 200,
    max_tokens: int = 4000,
    prompt_tokens: tuple[int, int] = (50, 600),
    categories: Sequence[str] = ("coding", "math", "structured", "explanation"),
) -> list[TokenRecord]:
    """``n`` requests spread evenly over ``levels`` (step ``c{level}``)."""
    rng = random.Random(seed)
    out: list[TokenRecord] = []
    for i in range(n):
        level = levels[i % len(levels)]
        cat = categories[i % len(categories)]
        m = rng.randint(min_tokens, max_tokens)
        p = rng.randint(*prompt_tokens)
        prompt, output, cs = synthetic_text(
            rng, prompt_len=p, output_len=m, copy=COPY_RATE.get(cat, 0.3)
        )
        out.append(
            TokenRecord(
                f"c{level}",
                cat,
                tuple(prompt),
                tuple(output),
                cs,
                max_tokens,
                "length" if m == max_tokens else "stop",
            )
        )
    return out


def level_tpots(
    records: Sequence[TokenRecord],
    concurrency: int,
    cost: Callable[[np.ndarray, np.ndarray], np.ndarray],
    *,
    fill: bool = True,
) -> tuple[np.ndarray, float]:
    """Per request TPOT (ms) of a baseline level under ``cost`` (the batch engine, k = 0),
    and its output tokens per second."""
    from specload.predict.closedloop import ClosedLoopReplay  # noqa: PLC0415

    seqs = [
        RequestReplay(r.prompt_ids, r.output_ids, lookup_min=1, lookup_max=1, max_k=0).steps(0)
        for r in records
    ]
    sched = ClosedLoopReplay().schedule(seqs, concurrency, fill=fill)
    t = cost(sched.n_tokens, sched.context)
    span = sched.decode_sums(t)
    keep = sched.output_len > 1
    throughput = float(sched.emitted.sum()) / (float(t.sum()) / 1000.0)
    return np.asarray(span[keep] / (sched.output_len[keep] - 1)), throughput


def write_synthetic_baseline(
    path: str | Path,
    records: Sequence[TokenRecord],
    *,
    levels: Sequence[int],
    cost: Callable[[np.ndarray, np.ndarray], np.ndarray] | None = None,
    requests_mode: bool = False,
    noise: float = 0.0,
    seed: int = 0,
) -> Path:
    """A baseline results directory: summary.json (closed loop) and tokens.jsonl."""
    p = Path(path)
    p.mkdir(parents=True, exist_ok=True)
    cost = cost or LinearCost()
    rng = np.random.default_rng(seed)
    entries: list[dict[str, Any]] = []
    for c in levels:
        recs = [r for r in records if r.step == f"c{c}"]
        tp, throughput = level_tpots(recs, c, cost, fill=not requests_mode)
        if noise:
            tp = tp * (1 + noise * rng.standard_normal(len(tp)))
        cats: dict[str, Any] = {}
        keep = [r for r in recs if len(r.output_ids) > 1]
        for cat in sorted({r.category for r in keep}):
            vals = [t for r, t in zip(keep, tp, strict=True) if r.category == cat]
            cats[cat] = {"completed": len(vals), "median_tpot_ms": median(vals)}
        entries.append(
            {
                "name": f"c{c}",
                "concurrency": c,
                "request_rate": None,
                "complete": True,
                "completed": len(recs),
                "failed": 0,
                "median_tpot_ms": median(tp.tolist()),
                "output_throughput": throughput,
                "planned_requests": len(recs) if requests_mode else None,
                "planned_duration_s": None if requests_mode else 60.0,
                "categories": cats,
                "flags": [],
                "warnings": [],
            }
        )
    summary = {
        "schema_version": 1,
        "status": "complete",
        "variant": "baseline",
        "mode": "closed",
        "levels": entries,
    }
    (p / "summary.json").write_bytes(orjson.dumps(summary, option=orjson.OPT_INDENT_2))
    tokens_file = p / "tokens.jsonl"
    if tokens_file.exists():
        tokens_file.unlink()
    write_tokens(p, records)
    return p
