"""Accuracy against exact known timing: the simulator's fixed profile.

Each request streams R reasoning then C content tokens, K tokens per chunk:
the first chunk at TTFT, then one chunk every ITL. Truth:
TTFCT = TTFT + (index of the first chunk holding content) * ITL and
TPOT = (chunks - 1) * ITL / (tokens - 1). Medians within 1%, counts exact,
at concurrency 1 and 64.

Timings are medians of the requests started after the first request ended: the
first round is warm-up (Locust starts all users in the same instant, and the
simulator needs tens of ms to take 64 simultaneous requests in — the server's
lateness, not the client's). Users pause 0-0.3 s between requests so they do
not stay in lockstep (tests/fixtures/load_jitter_locustfile.py). Token counts
are checked on every request.
"""

from __future__ import annotations

import math
import statistics
from dataclasses import dataclass

import pytest

from tests.fixtures.load import JITTER_LOCUSTFILE

# Medians within 1% of exact timing: alone under pytest -n (tests/fixtures/parallel.py).
pytestmark = [pytest.mark.integration, pytest.mark.slow, pytest.mark.serial]


@dataclass(frozen=True)
class Case:
    name: str
    reasoning: int
    content: int
    per_chunk: int
    itl_s: float
    max_tokens: int = 1000
    ttft_s: float = 1.0

    @property
    def tokens(self) -> int:
        return min(self.reasoning + self.content, self.max_tokens)

    @property
    def chunks(self) -> int:
        return math.ceil(self.tokens / self.per_chunk)

    @property
    def reasoning_out(self) -> int:
        return min(self.reasoning, self.tokens)

    @property
    def content_out(self) -> int:
        return self.tokens - self.reasoning_out

    @property
    def tpot_s(self) -> float:
        return (self.chunks - 1) * self.itl_s / (self.tokens - 1)

    @property
    def ttfct_s(self) -> float | None:
        if self.content_out == 0:
            return None
        return self.ttft_s + (self.reasoning // self.per_chunk) * self.itl_s

    def sim_args(self) -> list[str]:
        return [
            "--timing",
            "fixed",
            "--fixed-ttft",
            str(self.ttft_s),
            "--fixed-itl",
            str(self.itl_s),
            "--fixed-tokens-per-chunk",
            str(self.per_chunk),
            "--fixed-reasoning-tokens",
            str(self.reasoning),
            "--fixed-content-tokens",
            str(self.content),
        ]


# Reasoning counts are multiples of the tokens per chunk: no chunk holds both channels
# (such a chunk's split is an estimate, marked text-estimate, tested in the unit tests).
CASES = [
    Case("1-token-chunks", 10, 10, 1, 0.05),
    Case("3-token-chunks", 24, 12, 3, 0.05),
    Case("80-reasoning-20-content", 80, 20, 4, 0.04),
    Case("truncated-in-reasoning", 80, 20, 3, 0.05, max_tokens=30),
]


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_medians_within_1pct_and_counts_exact(load_sim, run_locust, case: Case) -> None:
    sim = load_sim(case.sim_args())
    for users, seconds in ((1, 6), (64, 6)):
        run = run_locust(
            sim.url,
            users=users,
            seconds=seconds,
            args=["--max-tokens", str(case.max_tokens)],
            locustfile=JITTER_LOCUSTFILE,
        )
        assert run.returncode == 0, run.stderr[-2000:]
        ok = run.ok()
        assert len(ok) == len(run.records), [r["error_kind"] for r in run.records]
        assert len(ok) >= (2 if users == 1 else 64)
        for r in ok:
            assert (r["tokens_reasoning"], r["tokens_content"]) == (
                case.reasoning_out,
                case.content_out,
            ), r
            assert r["tokens_output"] == case.tokens
            assert r["chunks"] == case.chunks
            assert r["token_count_source"] == "exact"
            assert r["reasoning_truncated"] == (case.content_out == 0)
            assert r["finish_reason"] == ("length" if case.max_tokens < 100 else "stop")
            assert r["channel_split_source"] == "exact"
        where = f"{case.name} at concurrency {users}"
        first_end = min(r["end_s"] for r in ok)
        ok = [r for r in ok if r["start_s"] >= first_end]
        assert len(ok) >= (1 if users == 1 else 64), where
        ttft = statistics.median(r["ttft_s"] for r in ok)
        assert ttft == pytest.approx(case.ttft_s, rel=0.01), where
        tpot = statistics.median(r["tpot_s"] for r in ok)
        assert tpot == pytest.approx(case.tpot_s, rel=0.01), where
        if case.ttfct_s is None:
            assert all(r["ttfct_s"] is None for r in ok)
        else:
            ttfct = statistics.median(r["ttfct_s"] for r in ok)
            assert ttfct == pytest.approx(case.ttfct_s, rel=0.01), where
