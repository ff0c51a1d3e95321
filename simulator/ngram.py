"""Replay of vLLM's n-gram (prompt-lookup) proposer over recorded token ids.

Three rules, one per engine path (:data:`RULES`, chosen by ``EnginePath.replay_rule``):

========== ============================================================================
``v1``     the V1 model runner's CPU proposer (``method: ngram``; the numba
           ``NgramProposer``, ``vllm/v1/spec_decode/ngram_proposer.py``): the longest
           suffix n-gram at its **earliest** occurrence, 0..k draft tokens — what the
           rest of this docstring describes
``v2``     Model Runner V2's Triton kernel (``method: ngram`` or ``ngram_gpu`` on the V2
           runner, vLLM 0.32 ``vllm/v1/worker/gpu/spec_decode/ngram/speculator.py``): the
           longest suffix n-gram at its **rightmost** earlier occurrence (the scan packs
           ``n * (L+1) + pos + 1`` and takes the max, l. 82-86); **always k** draft tokens:
           slots past the tokens the context holds after the match, and every slot when
           nothing matched (or the context is shorter than ``prompt_lookup_min``), carry
           the **last sampled token** (``last_sampled_tokens``, the context's last token,
           l. 145-147; set by ``post_update`` in ``vllm/v1/worker/gpu/input_batch.py``
           before ``propose`` runs); they are verified as ordinary drafts, accepted when
           they match, and counted (the scheduler schedules k placeholders per decode
           step, ``DraftTokensHandler.get_draft_tokens`` and
           ``vllm/v1/core/sched/async_scheduler.py``)
``ngram_gpu`` the V1 runner's ``method: ngram_gpu`` (``NgramProposerGPU``,
           ``vllm/v1/spec_decode/ngram_proposer_gpu.py``): the ``v1`` draft (earliest
           occurrence of the longest n-gram, ``argmax`` of the first match per length,
           l. 105-117), unfilled slots -1; the worker trims the step to the valid
           drafts (``update_scheduler_for_invalid_drafts``), but the engine core's own
           copy of the scheduler output keeps k placeholder slots, so the counters count
           **k draft tokens on every decode step** (``Scheduler.update_from_output``:
           ``num_draft_tokens = len(scheduled_spec_token_ids)``) while only the valid
           ones are computed: :attr:`StepSequence.drafted` (rows verified) and
           :attr:`StepSequence.counted` (what ``vllm:spec_decode_num_draft_tokens`` adds)
           differ
========== ============================================================================

An independent implementation of the rules of vLLM's V1 n-gram speculation (read in
``vllm-project/vllm``: ``vllm/v1/spec_decode/ngram_proposer.py``, the scheduler
``vllm/v1/core/sched/scheduler.py`` and the counters ``vllm/v1/spec_decode/metrics.py``;
see docs/predict.md for the commits), so that the counters of a variant can be predicted
from the token ids a baseline generated.

**The proposal** for a context ``S[0:N]`` (prompt + output so far), with
``lo = prompt_lookup_min``, ``hi = prompt_lookup_max`` and ``k = num_speculative_tokens``:

1. no draft when ``N < lo``, or when ``min(k, max_model_len - N) <= 0``;
2. the n-gram is the **longest** suffix ``S[N-L:N]`` with ``lo <= L <= hi`` that also
   occurs earlier in the context (an occurrence starting at ``s <= N - L - 1``; it may
   overlap the suffix);
3. of its earlier occurrences the **earliest** (smallest ``s``) wins — vLLM scans the
   reversed context KMP-style and keeps the last match of the longest length, which is the
   first one in reading order;
4. the draft is the tokens that followed it: ``S[s+L : s+L+d]`` with
   ``d = min(k, max_model_len - N, N - (s+L))`` — fewer than k near the context's end.

**The steps** of one request (greedy, or any temperature: a one-hot draft token is accepted
exactly when it equals the token the target emits there):

* step 0 is the prefill: no draft, it emits the first output token (chunks of a chunked
  prefill emit nothing and get no draft);
* after every step the proposer runs on the whole context; the next step verifies the draft,
  cut by the scheduler to ``max_model_len - N - 1`` tokens (its ``max_model_len - 1 -
  num_computed_tokens`` cap); the draft is **not** cut by the tokens the request still has
  to generate (``max_tokens``);
* accepted = the longest prefix of the draft equal to the next output tokens; the step emits
  ``accepted + 1`` (the bonus token), cut at the output's end (``max_tokens`` or stop).

**The counters** (``vllm:spec_decode_num_drafts`` …, from the scheduler's
``update_from_output``): a step with at least one scheduled draft token counts one draft,
its draft tokens and its accepted tokens, and one at each accepted position (``_per_pos``).
vLLM counts the sampler's acceptance *before* the stop check cuts the output, so in a
request's last step tokens accepted past the output's end count too: they are invisible in
the recorded output, so :attr:`StepSequence.accepted_max` bounds them (every such draft
token accepted) — the replay's accepted count is exact except for those.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from itertools import repeat

import numpy as np

# The largest k the k schedule explores (and the default depth of the agreement lengths).
MAX_K = 8

# The replay rules (module doc): one per proposer vLLM runs.
RULES = ("v1", "v2", "ngram_gpu")


def check_rule(rule: str) -> str:
    if rule not in RULES:
        raise ValueError(f"n-gram replay rule {rule!r}: one of {', '.join(RULES)}")
    return rule


def _check_window(lookup_min: int, lookup_max: int) -> None:
    if lookup_min < 1 or lookup_max < lookup_min:
        raise ValueError(
            f"prompt_lookup_min {lookup_min} / prompt_lookup_max {lookup_max}: need 1 <= min <= max"
        )


class NgramIndex:
    """A growing token sequence with the earliest start of every n-gram of length lo..hi.

    :meth:`append` adds a token and returns where the proposer's draft for the new context
    starts (index just after the earliest occurrence of the longest matching suffix), or -1.
    The index only grows, so the earliest occurrence of an n-gram never changes once seen:
    each append costs ``hi - lo + 1`` dictionary operations.
    """

    __slots__ = ("_first", "hi", "lo", "tokens")

    def __init__(self, lookup_min: int, lookup_max: int, tokens: Iterable[int] = ()) -> None:
        _check_window(lookup_min, lookup_max)
        self.lo = lookup_min
        self.hi = lookup_max
        self.tokens: list[int] = []
        self._first: dict[tuple[int, ...], int] = {}
        for t in tokens:
            self.append(t)

    def __len__(self) -> int:
        return len(self.tokens)

    def append(self, token: int) -> int:
        toks = self.tokens
        toks.append(token)
        n = len(toks)
        first = self._first
        match = -1
        # Longest first: the first length whose n-gram was seen before wins; every length
        # is still recorded (setdefault keeps the earliest start).
        for length in range(min(self.hi, n), self.lo - 1, -1):
            start = n - length
            s = first.setdefault(tuple(toks[start:n]), start)
            if match < 0 and s < start:
                match = s + length
        return match

    def match_start(self) -> int:
        """Where the draft for the current context starts (-1: no match); no insertion."""
        toks = self.tokens
        n = len(toks)
        for length in range(min(self.hi, n - 1), self.lo - 1, -1):
            s = self._first.get(tuple(toks[n - length : n]))
            if s is not None and s < n - length:
                return s + length
        return -1

    def propose(self, k: int, max_model_len: int | None = None) -> list[int]:
        """The proposer's draft for the current context (rule 1-4 of the module doc)."""
        n = len(self.tokens)
        if n < self.lo:
            return []
        if max_model_len is not None:
            k = min(k, max_model_len - n)
        if k <= 0:
            return []
        start = self.match_start()
        if start < 0:
            return []
        return self.tokens[start : start + min(k, n - start)]


class RightmostIndex:
    """A growing token sequence with the latest start of every n-gram of length lo..hi.

    The ``v2`` rule's index: :meth:`append` adds a token and returns where the draft for the
    new context starts — just after the **rightmost** earlier occurrence of the longest
    suffix n-gram that occurs earlier (``start <= N - L - 1``, as the kernel's
    ``max_pos_n = seq_len - n_iter - 1``) — or -1. The start looked up before the suffix's
    own start is stored is exactly the rightmost earlier one: ``hi - lo + 1`` dictionary
    operations per token.
    """

    __slots__ = ("_last", "_match", "hi", "lo", "tokens")

    def __init__(self, lookup_min: int, lookup_max: int, tokens: Iterable[int] = ()) -> None:
        _check_window(lookup_min, lookup_max)
        self.lo = lookup_min
        self.hi = lookup_max
        self.tokens: list[int] = []
        self._last: dict[tuple[int, ...], int] = {}
        self._match = -1
        for t in tokens:
            self.append(t)

    def __len__(self) -> int:
        return len(self.tokens)

    def append(self, token: int) -> int:
        toks = self.tokens
        toks.append(token)
        n = len(toks)
        last = self._last
        match = -1
        for length in range(min(self.hi, n), self.lo - 1, -1):
            start = n - length
            key = tuple(toks[start:n])
            s = last.get(key)
            last[key] = start
            if match < 0 and s is not None:
                match = s + length
        self._match = match
        return match

    def propose(self, k: int) -> list[int]:
        """The kernel's k draft tokens for the current context (the ``v2`` rule): the tokens
        after the match, then the last token as filler (every slot without a match)."""
        toks = self.tokens
        n = len(toks)
        if k <= 0 or not n:
            return []
        start = self._match if n >= self.lo else -1
        content = toks[start : start + min(k, n - start)] if start >= 0 else []
        return content + [toks[-1]] * (k - len(content))


def propose(
    context: Sequence[int],
    *,
    k: int,
    lookup_min: int,
    lookup_max: int,
    max_model_len: int | None = None,
    rule: str = "v1",
) -> list[int]:
    """The proposer's draft for one context (builds an index: for a growing sequence use
    :class:`NgramIndex` / :class:`RightmostIndex`).

    ``v1`` and ``ngram_gpu``: the tokens after the earliest occurrence (0..k; ngram_gpu's
    -1 slots left out). ``v2``: exactly k tokens, the filler included (the scheduler's
    ``max_model_len`` cap applies to the step, not here).
    """
    if check_rule(rule) == "v2":
        return RightmostIndex(lookup_min, lookup_max, context).propose(k)
    return NgramIndex(lookup_min, lookup_max, context).propose(k, max_model_len)


@dataclass(frozen=True, eq=False)
class StepSequence:
    """One request's engine steps under a proposer; step 0 is the prefill.

    Per step: ``position`` (index in the output of the first token the step emits; the
    context the step verifies against is ``prompt_len + position``), ``drafted`` (draft
    tokens verified, 0 without a draft: the step computes ``1 + drafted`` rows),
    ``accepted``, ``emitted`` (accepted + 1, cut at the output's end) and ``answer`` (the
    step starts inside the answer: ``position >= content_start``). ``counted``: the draft
    tokens vLLM's counters add per step where that differs from ``drafted`` (the
    ``ngram_gpu`` rule: k per decode step), else None.
    """

    prompt_len: int
    output_len: int
    position: np.ndarray
    drafted: np.ndarray
    accepted: np.ndarray
    emitted: np.ndarray
    answer: np.ndarray
    accepted_max: int = 0
    category: str = "unknown"
    level: str = ""
    counted: np.ndarray | None = None

    @property
    def steps(self) -> int:
        return len(self.position)

    @property
    def counted_tokens(self) -> np.ndarray:
        """Draft tokens per step as vLLM's counters see them."""
        return self.drafted if self.counted is None else self.counted

    @property
    def drafts(self) -> int:
        return int(np.count_nonzero(self.counted_tokens))

    @property
    def draft_tokens(self) -> int:
        return int(self.counted_tokens.sum())

    @property
    def accepted_tokens(self) -> int:
        return int(self.accepted.sum())

    def accepted_per_position(self, k: int) -> list[int]:
        """Steps that accepted at least i+1 draft tokens, for i in 0..k-1 (``_per_pos``)."""
        counts = np.bincount(self.accepted, minlength=k + 1)[: k + 1]
        tail = np.cumsum(counts[::-1])[::-1]  # tail[i] = steps with accepted >= i
        return [int(x) for x in tail[1 : k + 1]]


class RequestReplay:
    """The k-independent part of one request's replay under one rule (:data:`RULES`).

    For each context the proposer sees (after the j-th output token, j = 1..M-1): how many
    tokens the context holds after the match (the longest draft possible; 0: no match) and
    how many tokens from there agree with the real continuation (capped at ``max_k``; for
    ``v2`` the draft continues with the filler token, so that agreement counts it too:
    the k-token draft is a prefix of the ``max_k`` one). :meth:`steps` then walks the
    request for any k <= ``max_k`` in O(steps with a draft).
    """

    __slots__ = (
        "_agree",
        "_next",
        "_room",
        "category",
        "content_start",
        "level",
        "lookup_max",
        "lookup_min",
        "max_k",
        "output_len",
        "prompt_len",
        "rule",
    )

    def __init__(
        self,
        prompt_ids: Sequence[int],
        output_ids: Sequence[int],
        *,
        lookup_min: int,
        lookup_max: int,
        max_k: int = MAX_K,
        content_start: int | None = None,
        category: str = "unknown",
        level: str = "",
        rule: str = "v1",
    ) -> None:
        self.prompt_len = p = len(prompt_ids)
        self.output_len = m = len(output_ids)
        self.lookup_min = lookup_min
        self.lookup_max = lookup_max
        self.max_k = max_k
        self.content_start = content_start
        self.category = category
        self.level = level
        self.rule = check_rule(rule)
        seq = [*prompt_ids, *output_ids]
        total = len(seq)
        room = [0] * m  # tokens the context holds after the match (0: no match)
        agree = [0] * m
        if rule == "v2":
            self._agree_v2(seq, p, m, room, agree)
        else:
            index = NgramIndex(lookup_min, lookup_max)
            append = index.append
            for t in seq[:p]:
                append(t)
            for j in range(1, m):
                n = p + j
                s = append(seq[n - 1])
                if s < 0:
                    continue
                room[j] = n - s
                cap = min(max_k, n - s, total - n)
                a = 0
                while a < cap and seq[s + a] == seq[n + a]:
                    a += 1
                agree[j] = a
        # The next context with a match: runs without one are walked in one go.
        nxt = [m] * (m + 1)
        for j in range(m - 1, 0, -1):
            nxt[j] = j if room[j] else nxt[j + 1]
        self._room = room
        self._agree = agree
        self._next = nxt

    def _agree_v2(self, seq: list[int], p: int, m: int, room: list[int], agree: list[int]) -> None:
        """``room`` and ``agree`` under the ``v2`` rule: the rightmost match; the draft is the
        tokens after it, then the filler (the context's last token) up to ``max_k``."""
        lo, max_k, total = self.lookup_min, self.max_k, len(seq)
        index = RightmostIndex(lo, self.lookup_max)
        append = index.append
        for t in seq[:p]:
            append(t)
        for j in range(1, m):
            n = p + j
            s = append(seq[n - 1])
            if n < lo:  # the kernel's eligible_row: every slot is the filler
                s = -1
            cap = min(max_k, total - n)
            a = 0
            if s >= 0:
                room[j] = r = n - s
                c = r if r < cap else cap
                while a < c and seq[s + a] == seq[n + a]:
                    a += 1
                if a < c:
                    agree[j] = a
                    continue
            filler = seq[n - 1]
            while a < cap and seq[n + a] == filler:
                a += 1
            agree[j] = a

    def steps(self, k: int, max_model_len: int | None = None) -> StepSequence:
        """The request's steps with ``num_speculative_tokens = k`` (0: no speculation)."""
        if k > self.max_k:
            raise ValueError(f"k {k} > max_k {self.max_k} of this replay")
        if self.rule != "v1" and k:
            return self._steps_every(k, max_model_len)
        p, m = self.prompt_len, self.output_len
        pos_l: list[int] = []
        draft_l: list[int] = []
        acc_l: list[int] = []
        emit_l: list[int] = []
        accepted_max = 0
        if m:
            pos_l.append(0)
            draft_l.append(0)
            acc_l.append(0)
            emit_l.append(1)
        room, agree, nxt = self._room, self._agree, self._next
        # The scheduler's cap: at most max_model_len - N - 1 draft tokens (N = p + pos).
        cap_base = None if max_model_len is None else max_model_len - p - 1
        pos = 1
        while pos < m:
            r = room[pos] if k else 0
            if not r:
                j = nxt[pos] if k else m
                pos_l.extend(range(pos, j))
                draft_l.extend(repeat(0, j - pos))
                acc_l.extend(repeat(0, j - pos))
                emit_l.extend(repeat(1, j - pos))
                pos = j
                continue
            d = k if r > k else r
            if cap_base is not None and d > cap_base - pos:
                d = max(cap_base - pos, 0)
            a = agree[pos]
            if a > d:  # noqa: PLR1730 (a comparison is cheaper than min() in this loop)
                a = d
            left = m - pos
            e = a + 1 if a < left else left
            if d and a == left and a < d:
                accepted_max += d - a  # draft past the output's end: maybe accepted
            pos_l.append(pos)
            draft_l.append(d)
            acc_l.append(a)
            emit_l.append(e)
            pos += e
        position = np.asarray(pos_l, dtype=np.int64)
        accepted = np.asarray(acc_l, dtype=np.int64)
        cs = self.content_start
        answer = np.zeros(len(pos_l), dtype=bool) if cs is None else position >= cs
        return StepSequence(
            prompt_len=p,
            output_len=m,
            position=position,
            drafted=np.asarray(draft_l, dtype=np.int64),
            accepted=accepted,
            emitted=np.asarray(emit_l, dtype=np.int64),
            answer=answer,
            accepted_max=int(accepted.sum()) + accepted_max,
            category=self.category,
            level=self.level,
        )

    def _steps_every(self, k: int, max_model_len: int | None) -> StepSequence:
        """``v2`` and ``ngram_gpu``: every decode step carries k draft slots (cut by the
        scheduler's ``max_model_len`` cap); ``v2`` verifies all of them, ``ngram_gpu`` only
        the valid ones (the ``v1`` draft) and counts all of them."""
        p, m = self.prompt_len, self.output_len
        v2 = self.rule == "v2"
        room, agree = self._room, self._agree
        cap_base = None if max_model_len is None else max_model_len - p - 1
        pos_l: list[int] = [0] if m else []
        draft_l: list[int] = [0] if m else []
        count_l: list[int] = [0] if m else []
        acc_l: list[int] = [0] if m else []
        emit_l: list[int] = [1] if m else []
        accepted_max = 0
        pos = 1
        while pos < m:
            slots = k
            if cap_base is not None and slots > cap_base - pos:
                slots = max(cap_base - pos, 0)
            if v2:
                d = slots
            else:
                r = room[pos]
                d = r if r < slots else slots
            a = agree[pos]
            if a > d:  # noqa: PLR1730 (as in steps())
                a = d
            left = m - pos
            e = a + 1 if a < left else left
            if d and a == left and a < d:
                accepted_max += d - a
            pos_l.append(pos)
            draft_l.append(d)
            count_l.append(slots)
            acc_l.append(a)
            emit_l.append(e)
            pos += e
        position = np.asarray(pos_l, dtype=np.int64)
        accepted = np.asarray(acc_l, dtype=np.int64)
        drafted = np.asarray(draft_l, dtype=np.int64)
        cs = self.content_start
        answer = np.zeros(len(pos_l), dtype=bool) if cs is None else position >= cs
        return StepSequence(
            prompt_len=p,
            output_len=m,
            position=position,
            drafted=drafted,
            accepted=accepted,
            emitted=np.asarray(emit_l, dtype=np.int64),
            answer=answer,
            accepted_max=int(accepted.sum()) + accepted_max,
            category=self.category,
            level=self.level,
            counted=None if v2 else np.asarray(count_l, dtype=np.int64),
        )


def replay(
    prompt_ids: Sequence[int],
    output_ids: Sequence[int],
    *,
    k: int,
    lookup_min: int,
    lookup_max: int,
    max_model_len: int | None = None,
    content_start: int | None = None,
    rule: str = "v1",
) -> StepSequence:
    """One request's steps under vLLM's n-gram proposer (see the module doc)."""
    return RequestReplay(
        prompt_ids,
        output_ids,
        lookup_min=lookup_min,
        lookup_max=lookup_max,
        max_k=max(k, 0),
        content_start=content_start,
        rule=rule,
    ).steps(k, max_model_len)


@dataclass
class Totals:
    """What the variant's counters would read for a set of requests."""

    k: int
    requests: int = 0
    steps: int = 0
    drafts: int = 0
    draft_tokens: int = 0
    accepted_tokens: int = 0
    accepted_tokens_max: int = 0
    output_tokens: int = 0

    def __post_init__(self) -> None:
        self.per_position = [0] * self.k

    def add(self, seq: StepSequence, mask: np.ndarray | None = None) -> None:
        """Count ``seq``'s steps (only those where ``mask`` is true, when given)."""
        drafted, accepted, emitted = seq.counted_tokens, seq.accepted, seq.emitted
        if mask is not None:
            drafted, accepted, emitted = drafted[mask], accepted[mask], emitted[mask]
        else:
            self.accepted_tokens_max += seq.accepted_max - seq.accepted_tokens
        self.requests += 1
        self.steps += len(drafted)
        self.drafts += int(np.count_nonzero(drafted))
        self.draft_tokens += int(drafted.sum())
        acc = int(accepted.sum())
        self.accepted_tokens += acc
        self.accepted_tokens_max += acc
        self.output_tokens += int(emitted.sum())
        if self.k:
            counts = np.bincount(accepted, minlength=self.k + 1)[: self.k + 1]
            tail = np.cumsum(counts[::-1])[::-1]
            for i in range(self.k):
                self.per_position[i] += int(tail[i + 1])

    @property
    def acceptance_rate(self) -> float | None:
        return self.accepted_tokens / self.draft_tokens if self.draft_tokens else None

    @property
    def mean_acceptance_length(self) -> float | None:
        return 1.0 + self.accepted_tokens / self.drafts if self.drafts else None

    @property
    def position_acceptance(self) -> list[float] | None:
        if not self.drafts:
            return None
        return [x / self.drafts for x in self.per_position]

    def to_dict(self) -> dict[str, object]:
        return {
            "requests": self.requests,
            "drafts": self.drafts,
            "draft_tokens": self.draft_tokens,
            "accepted_tokens": self.accepted_tokens,
            "accepted_tokens_max": self.accepted_tokens_max,
            "accepted_per_position": list(self.per_position),
            "acceptance_rate": self.acceptance_rate,
            "mean_acceptance_length": self.mean_acceptance_length,
            "position_acceptance": self.position_acceptance,
            "steps": self.steps,
            "output_tokens": self.output_tokens,
        }
