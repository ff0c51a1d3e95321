"""The simulated variants' speculation: :class:`~simulator.engine.Speculator` implementations.

* :class:`NgramSpeculator` — vLLM's n-gram (prompt-lookup) proposer, by the same code that
  ``specload predict`` replays (:class:`simulator.ngram.NgramIndex`), over the sequence
  the engine is generating (prompt + output so far); a draft token is accepted exactly when it
  equals the sequence's own next token, so acceptance emerges from the text
  (:mod:`simulator.text`). The draft: the tokens after the earliest occurrence of the longest
  suffix of length ``prompt_lookup_min..max``, at most k, at most what the context holds after
  the match, at most ``max_model_len - N - 1`` (the scheduler's cap). Like vLLM, acceptance is
  counted before the stop check: draft tokens accepted past ``max_tokens`` count.
* :class:`ProbabilisticSpeculator` — EAGLE-3 (and n-gram with ``--spec
  acceptance_model=probabilistic``): a draft in ``proposal_rate`` of the steps, position i
  accepted with ``Variant.position_acceptance`` given the earlier ones were.
"""

from __future__ import annotations

import random
from typing import Protocol

from simulator.ngram import NgramIndex
from simulator.variants import Variant


class Sequence(Protocol):
    """What a speculator reads of a running sequence (:class:`simulator.engine.Sequence` has
    it): declared here so that the engine imports its speculators and not the other way."""

    category: str
    prompt_tokens: int
    generated: int
    replay: object | None

    def prompt_ids(self) -> list[int]: ...

    def token_ids(self, n: int) -> list[int]: ...


class ProbabilisticSpeculator:
    """Drafts and acceptance drawn from the variant's per-category probabilities."""

    def __init__(self, variant: Variant, rng: random.Random) -> None:
        self.variant = variant
        self.rng = rng
        self.k = variant.num_speculative_tokens
        self._probs: dict[str, list[float]] = {}

    def draft(self, seq: Sequence) -> int:
        k = self.k
        return k if k and self.variant.proposes(seq.category, self.rng) else 0

    def accept(self, seq: Sequence, drafts: int) -> int:
        probs = self._probs.get(seq.category)
        if probs is None:
            probs = self._probs[seq.category] = self.variant.position_acceptance(seq.category)
        rng = self.rng
        accepted = 0
        for p in probs[:drafts]:
            if rng.random() >= p:
                break
            accepted += 1
        return accepted


class _NgramState:
    __slots__ = ("index", "start")

    def __init__(self, index: NgramIndex) -> None:
        self.index = index
        self.start = -1  # where the last draft was copied from (index into the context)


class NgramSpeculator:
    """vLLM's n-gram proposer over each sequence's own tokens (see the module doc)."""

    def __init__(
        self, k: int, lookup_min: int, lookup_max: int, max_model_len: int | None = None
    ) -> None:
        self.k = k
        self.lookup_min = lookup_min
        self.lookup_max = lookup_max
        self.max_model_len = max_model_len

    def draft(self, seq: Sequence) -> int:
        st = seq.replay
        if not isinstance(st, _NgramState):
            st = seq.replay = _NgramState(
                NgramIndex(self.lookup_min, self.lookup_max, seq.prompt_ids())
            )
        index = st.index
        tokens = index.tokens
        generated = seq.generated
        have = len(tokens) - seq.prompt_tokens  # output tokens already in the index
        if have < generated:
            ids = seq.token_ids(generated)
            append = index.append
            start = -1
            for t in ids[have:generated]:
                start = append(t)
        else:
            start = index.match_start()
        st.start = start
        n = len(tokens)
        if start < 0 or n < self.lookup_min:
            return 0
        d = min(self.k, n - start)
        mml = self.max_model_len
        if mml is not None and d > mml - n - 1:
            d = max(mml - n - 1, 0)
        return d

    def accept(self, seq: Sequence, drafts: int) -> int:
        st = seq.replay
        assert isinstance(st, _NgramState)
        tokens = st.index.tokens
        s = st.start
        g = seq.generated
        nxt = seq.token_ids(g + drafts)
        a = 0
        while a < drafts and tokens[s + a] == nxt[g + a]:
            a += 1
        return a


def speculator_for(
    variant: Variant, rng: random.Random, *, max_model_len: int | None = None
) -> ProbabilisticSpeculator | NgramSpeculator | None:
    """The variant's own speculation (None without): a
    :class:`simulator.engine.Speculator`."""
    if not variant.speculative:
        return None
    if variant.method == "ngram" and variant.acceptance_model == "text":
        return NgramSpeculator(
            variant.num_speculative_tokens,
            variant.prompt_lookup_min,
            variant.prompt_lookup_max,
            max_model_len,
        )
    return ProbabilisticSpeculator(variant, rng)
