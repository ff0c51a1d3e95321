"""The n-gram proposer replay: hand-checked sequences, and two independent oracles.

Known truth: the small cases below are worked out by hand from vLLM's rule (longest suffix
n-gram in [min, max] with an earlier occurrence, the earliest occurrence wins, the tokens
after it, at most k and at most what the context holds, the scheduler's max_model_len cap).
The property tests check the incremental index against a brute-force search and against a
KMP scan over the reversed context (vLLM's approach, written here from its description), and
a replay against a step-by-step simulation of generation.
"""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from simulator.ngram import NgramIndex, RequestReplay, Totals, propose, replay


def brute_propose(ctx, *, k, lo, hi, max_model_len=None):
    n = len(ctx)
    if n < lo:
        return []
    if max_model_len is not None:
        k = min(k, max_model_len - n)
    if k <= 0:
        return []
    for length in range(min(hi, n - 1), lo - 1, -1):
        suffix = ctx[n - length :]
        for s in range(n - length):  # earliest first; s + length <= n - 1
            if ctx[s : s + length] == suffix:
                start = s + length
                return ctx[start : start + min(k, n - start)]
    return []


def kmp_propose(ctx, *, k, lo, hi, max_model_len=None):
    """Longest prefix-as-border of the reversed context, capped at hi; last one wins."""
    n = len(ctx)
    if n < lo:
        return []
    if max_model_len is not None:
        k = min(k, max_model_len - n)
    if k <= 0:
        return []
    rev = ctx[::-1]
    fail = [0] * hi
    state = 0
    best_len, best_i = 0, 0
    for i in range(1, n):
        while state and (state == hi or rev[state] != rev[i]):
            state = fail[state - 1]
        if rev[state] == rev[i]:
            state += 1
        if i < hi:
            fail[i] = state
        if state >= best_len:
            best_len, best_i = state, i
    if best_len < lo:
        return []
    start = n - 1 - best_i + best_len
    return ctx[start : start + min(k, n - start)]


def simulate(prompt, output, *, k, lo, hi, max_model_len=None):
    """Generation step by step: (position, drafted, accepted, emitted) and the emitted tokens."""
    m = len(output)
    steps = [(0, 0, 0, 1)] if m else []
    tokens = list(output[:1])
    pos = 1
    while pos < m:
        ctx = list(prompt) + list(output[:pos])
        n = len(ctx)
        draft = brute_propose(ctx, k=k, lo=lo, hi=hi, max_model_len=max_model_len)
        if max_model_len is not None:
            draft = draft[: max(0, max_model_len - n - 1)]
        a = 0
        while a < len(draft) and pos + a < m and draft[a] == output[pos + a]:
            a += 1
        e = min(a + 1, m - pos)
        tokens += draft[:a]
        if pos + a < m and len(tokens) < pos + e:
            tokens.append(output[pos + a])  # the bonus token: the target's own
        steps.append((pos, len(draft), a, e))
        pos += e
    return steps, tokens


def rows(seq):
    return list(
        zip(
            seq.position.tolist(),
            seq.drafted.tolist(),
            seq.accepted.tolist(),
            seq.emitted.tolist(),
            strict=True,
        )
    )


# ----------------------------------------------------------------- hand-built cases


def test_repeated_pattern_is_drafted_and_accepted():
    # prompt 1 2 3 4 5, output 9 1 2 3 4 5 9 (lookup 2..3, k 3): no match until the
    # context ends in "1 2" (seen at 0), then the draft 3 4 5 is accepted whole.
    seq = replay([1, 2, 3, 4, 5], [9, 1, 2, 3, 4, 5, 9], k=3, lookup_min=2, lookup_max=3)
    assert rows(seq) == [(0, 0, 0, 1), (1, 0, 0, 1), (2, 0, 0, 1), (3, 3, 3, 4)]
    assert (seq.drafts, seq.draft_tokens, seq.accepted_tokens) == (1, 3, 3)
    assert seq.accepted_max == 3
    assert seq.accepted_per_position(3) == [1, 1, 1]


def test_no_match_no_draft():
    seq = replay(list(range(10)), list(range(10, 30)), k=5, lookup_min=1, lookup_max=4)
    assert seq.steps == 20
    assert seq.drafts == 0 and seq.draft_tokens == 0
    assert seq.emitted.tolist() == [1] * 20


def test_match_at_the_very_end_drafts_what_the_context_holds():
    # context 1 2 1 2: "1 2" seen at 0, the draft is what follows up to the end: 1 2 (< k 5).
    seq = replay([1, 2], [1, 2, 1, 2, 1], k=5, lookup_min=2, lookup_max=2)
    assert rows(seq) == [(0, 0, 0, 1), (1, 0, 0, 1), (2, 2, 2, 3)]
    assert propose([1, 2, 1, 2], k=5, lookup_min=2, lookup_max=2) == [1, 2]


def test_overlapping_occurrence_earliest_wins():
    # 1 1 1 1 1: the suffix "1 1 1" occurs at 0 and 1 (2 is itself): 0 wins, draft from 3.
    assert propose([1, 1, 1, 1, 1], k=4, lookup_min=3, lookup_max=3) == [1, 1]


CTX = [10, 11, 12, 13, 90, 5, 10, 11, 12, 13, 91, 5, 10, 11, 12, 13]


def test_longest_then_earliest_occurrence():
    # max 4: "10 11 12 13" occurs at 0 and 6: the earliest (0) wins -> 90 5 10.
    assert propose(CTX, k=3, lookup_min=2, lookup_max=4) == [90, 5, 10]
    # max 5: "5 10 11 12 13" (at 5) is longer and wins -> 91 5 10.
    assert propose(CTX, k=3, lookup_min=2, lookup_max=5) == [91, 5, 10]
    # min 6: no suffix of 6 repeats -> no draft.
    assert propose(CTX, k=3, lookup_min=6, lookup_max=8) == []


def test_min_lookup_boundary():
    ctx = [7, 1, 8, 2, 9, 1]  # only the 1-gram "1" repeats
    assert propose(ctx, k=2, lookup_min=2, lookup_max=3) == []
    assert propose(ctx, k=2, lookup_min=1, lookup_max=3) == [8, 2]
    assert propose([3], k=2, lookup_min=2, lookup_max=2) == []  # shorter than min


def test_k_larger_than_what_remains_is_drafted_in_full():
    # The last step drafts 5 (the scheduler does not cut drafts by max_tokens); 2 are
    # visible and accepted, the other 3 lie past the output's end: maybe accepted.
    seq = replay([1, 2, 3, 4, 5, 6], [1, 2, 3], k=5, lookup_min=1, lookup_max=3)
    assert rows(seq) == [(0, 0, 0, 1), (1, 5, 2, 2)]
    assert seq.accepted_tokens == 2
    assert seq.accepted_max == 5


def test_max_model_len_caps_drafts():
    prompt, out = [1, 2], [1, 2, 1, 2]
    free = replay(prompt, out, k=5, lookup_min=2, lookup_max=2)
    assert rows(free) == [(0, 0, 0, 1), (1, 0, 0, 1), (2, 2, 2, 2)]
    # max_model_len 6, context 4: the scheduler schedules at most 6 - 1 - 3 = 2 tokens,
    # i.e. one draft token (the proposer's own cap, 6 - 4 = 2, is looser).
    capped = replay(prompt, out, k=5, lookup_min=2, lookup_max=2, max_model_len=6)
    assert rows(capped) == [(0, 0, 0, 1), (1, 0, 0, 1), (2, 1, 1, 2)]
    assert propose([1, 2, 1, 2], k=5, lookup_min=2, lookup_max=2, max_model_len=5) == [1]
    assert propose([1, 2, 1, 2], k=5, lookup_min=2, lookup_max=2, max_model_len=4) == []


def test_phases_and_totals():
    seq = RequestReplay(
        [1, 2, 3], [1, 2, 3, 1, 2, 3, 1, 2, 3], lookup_min=1, lookup_max=3, content_start=4
    ).steps(2)
    assert seq.emitted.sum() == 9
    assert seq.answer.tolist() == (seq.position >= 4).tolist()
    t, r, a = Totals(2), Totals(2), Totals(2)
    t.add(seq)
    r.add(seq, ~seq.answer)
    a.add(seq, seq.answer)
    assert t.drafts == r.drafts + a.drafts
    assert t.accepted_tokens == r.accepted_tokens + a.accepted_tokens
    assert t.per_position == seq.accepted_per_position(2)
    assert t.mean_acceptance_length == pytest.approx(1 + t.accepted_tokens / t.drafts)


def test_no_content_start_is_all_reasoning():
    seq = RequestReplay([1], [1, 1, 1], lookup_min=1, lookup_max=1).steps(1)
    assert not seq.answer.any()


def test_k_zero_is_the_baseline():
    seq = RequestReplay([1, 2], [1, 2, 1, 2, 1], lookup_min=1, lookup_max=2).steps(0)
    assert seq.drafted.tolist() == [0] * 5 and seq.emitted.tolist() == [1] * 5


def test_one_replay_serves_every_k():
    prompt, out = [4, 5, 6, 4, 5], [6, 4, 5, 6, 7, 4, 5, 6, 4, 5, 6, 4]
    rr = RequestReplay(prompt, out, lookup_min=1, lookup_max=3, max_k=8)
    for k in range(0, 9):
        assert rows(rr.steps(k)) == rows(replay(prompt, out, k=k, lookup_min=1, lookup_max=3))
    with pytest.raises(ValueError):
        rr.steps(9)


def test_bad_window():
    with pytest.raises(ValueError):
        NgramIndex(3, 2)
    with pytest.raises(ValueError):
        NgramIndex(0, 2)


# ----------------------------------------------------------------- properties

tokens = st.lists(st.integers(0, 3), max_size=40)
windows = st.tuples(st.integers(1, 3), st.integers(0, 3)).map(lambda t: (t[0], t[0] + t[1]))


@settings(max_examples=300, deadline=None)
@given(ctx=tokens, window=windows, k=st.integers(1, 6), mml=st.none() | st.integers(1, 50))
def test_index_matches_brute_force_and_kmp(ctx, window, k, mml):
    lo, hi = window
    index = NgramIndex(lo, hi)
    for i, t in enumerate(ctx):
        index.append(t)
        prefix = ctx[: i + 1]
        want = brute_propose(prefix, k=k, lo=lo, hi=hi, max_model_len=mml)
        assert index.propose(k, mml) == want
        assert kmp_propose(prefix, k=k, lo=lo, hi=hi, max_model_len=mml) == want


@settings(max_examples=300, deadline=None)
@given(
    prompt=tokens,
    output=st.lists(st.integers(0, 3), min_size=0, max_size=50),
    window=windows,
    k=st.integers(0, 8),
    mml=st.none() | st.integers(2, 120),
)
def test_replay_matches_generation(prompt, output, window, k, mml):
    lo, hi = window
    seq = replay(prompt, output, k=k, lookup_min=lo, lookup_max=hi, max_model_len=mml)
    steps, emitted = simulate(prompt, output, k=k, lo=lo, hi=hi, max_model_len=mml)
    assert rows(seq) == steps
    # The emitted tokens of all steps (accepted drafts + bonus) are the output, exactly.
    assert emitted == list(output)
    assert int(seq.emitted.sum()) == len(output)
    assert np.all(seq.accepted <= seq.drafted)
    assert np.all(seq.drafted <= k)
    assert np.all(seq.emitted <= seq.accepted + 1)
    assert np.all(np.diff(seq.position) == seq.emitted[:-1])
    assert seq.accepted_tokens <= seq.accepted_max <= seq.draft_tokens
    if len(output):
        assert seq.drafted[0] == 0  # no draft in the prefill step
