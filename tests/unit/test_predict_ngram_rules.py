"""The replay rules of the engine paths: ``v1``, ``v2`` and ``ngram_gpu`` (ngram.RULES).

Known truth: the small cases are worked out by hand (in the comments) from vLLM 0.32's code:
``v2`` is Model Runner V2's Triton kernel (``vllm/v1/worker/gpu/spec_decode/ngram/
speculator.py``: the longest n-gram at its rightmost earlier occurrence, always k drafts, the
last sampled token as filler), ``ngram_gpu`` the V1 runner's ``NgramProposerGPU`` (the
earliest occurrence like ``v1``; the engine core counts k draft tokens on every decode step
while the worker verifies only the valid ones). The properties check ``v2`` against a
brute-force search and a step-by-step generation written from that description.
"""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from simulator.ngram import RULES, RequestReplay, RightmostIndex, Totals, propose, replay


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


# ----------------------------------------------------------------- proposals, by hand

CTX = [1, 2, 3, 9, 1, 2, 3, 7, 1, 2, 3, 5, 6, 1, 2, 3]


def test_rightmost_against_earliest():
    # The 4-gram suffix (6,1,2,3) never occurred before; the 3-gram (1,2,3) starts at 0, 4
    # and 8 (13 is the suffix itself). v1 takes the earliest (0): the draft starts at 3;
    # v2 the rightmost (8): it starts at 11. (vLLM's kernel, run in Triton's interpreter on
    # this context, returned [5, 6, 1].)
    kw = {"k": 3, "lookup_min": 2, "lookup_max": 4}
    assert propose(CTX, **kw, rule="v1") == [9, 1, 2]
    assert propose(CTX, **kw, rule="ngram_gpu") == [9, 1, 2]
    assert propose(CTX, **kw, rule="v2") == [5, 6, 1]


def test_v2_fills_with_the_last_token():
    # (4,5) occurred at 0: the draft starts at 2 and the context holds 2 tokens after it;
    # v1 drafts those 2, v2 adds the last token (5) to make k = 3.
    assert propose([4, 5, 4, 5], k=3, lookup_min=2, lookup_max=2, rule="v1") == [4, 5]
    assert propose([4, 5, 4, 5], k=3, lookup_min=2, lookup_max=2, rule="v2") == [4, 5, 5]
    # (7,7) occurred at 0 and 1 (2 is the suffix): v1 starts at 2 ([7,7], 2 left), v2 at 3
    # ([7], then the filler 7 twice).
    assert propose([7, 7, 7, 7], k=3, lookup_min=2, lookup_max=2, rule="v1") == [7, 7]
    assert propose([7, 7, 7, 7], k=3, lookup_min=2, lookup_max=2, rule="v2") == [7, 7, 7]


def test_v2_without_a_match_drafts_k_fillers():
    # (2,3) never occurred before: v1 drafts nothing, v2 drafts the last token k times.
    assert propose([1, 2, 3], k=2, lookup_min=2, lookup_max=3, rule="v1") == []
    assert propose([1, 2, 3], k=2, lookup_min=2, lookup_max=3, rule="v2") == [3, 3]
    # A context shorter than prompt_lookup_min: the kernel's row is not eligible, fillers.
    assert propose([5], k=2, lookup_min=2, lookup_max=3, rule="v2") == [5, 5]


def test_unknown_rule():
    with pytest.raises(ValueError, match="replay rule 'v3'"):
        propose([1], k=1, lookup_min=1, lookup_max=1, rule="v3")
    with pytest.raises(ValueError, match="replay rule"):
        RequestReplay([1], [2], lookup_min=1, lookup_max=1, rule="")


# ----------------------------------------------------------------- steps, by hand

# prompt [1,2,9,1,2,8], output [1,2,8,7], n-gram 2..2, k = 2:
#   step 0  prefill, emits 1                                        pos 1
#   pos 1   context ..8,1: (8,1) never before
#           v1 / ngram_gpu: no draft, emits 2;  v2: [1,1] vs [2,8], 0 accepted, emits 2
#   pos 2   context ..1,2: (1,2) at 0 and 3
#           v1: earliest 0 -> [9,1] vs [8,7], 0 accepted, emits 8             pos 3
#           v2: rightmost 3 -> [8,1] vs [8,7], 1 accepted, emits 8 and 7       pos 4: done
#   pos 3   (v1) context ..2,8: (2,8) at 4 -> [1,2] vs [7], 0 accepted, emits 7
PROMPT, OUTPUT = [1, 2, 9, 1, 2, 8], [1, 2, 8, 7]


def test_steps_per_rule():
    kw = {"k": 2, "lookup_min": 2, "lookup_max": 2}
    v1 = replay(PROMPT, OUTPUT, **kw, rule="v1")
    assert rows(v1) == [(0, 0, 0, 1), (1, 0, 0, 1), (2, 2, 0, 1), (3, 2, 0, 1)]
    assert v1.counted is None
    v2 = replay(PROMPT, OUTPUT, **kw, rule="v2")
    assert rows(v2) == [(0, 0, 0, 1), (1, 2, 0, 1), (2, 2, 1, 2)]
    assert (v2.drafts, v2.draft_tokens, v2.accepted_tokens) == (2, 4, 1)
    gpu = replay(PROMPT, OUTPUT, **kw, rule="ngram_gpu")
    # ngram_gpu verifies what v1 drafts, and the counters count k per decode step.
    assert rows(gpu) == rows(v1)
    assert gpu.counted is not None and gpu.counted.tolist() == [0, 2, 2, 2]
    assert (gpu.drafts, gpu.draft_tokens, gpu.accepted_tokens) == (3, 6, 0)
    t = Totals(2)
    t.add(gpu)
    assert (t.drafts, t.draft_tokens, t.accepted_tokens, t.steps) == (3, 6, 0, 4)


# prompt [1,2,3,4], output [1,2,3,4,4,4], n-gram 2..2, k = 2, rule v2:
#   step 0  prefill, emits 1                                                      pos 1
#   pos 1   (4,1) never before: fillers [1,1] vs [2,3]: 0 accepted, emits 2        pos 2
#   pos 2   (1,2) at 0 -> [3,4] vs [3,4]: 2 accepted, emits 3,4 and the bonus 4    pos 5
#   pos 5   (4,4) never before: fillers [4,4] vs [4] (the output's last token): 1 accepted,
#           emits 4 and ends; the second filler is checked against a token past the
#           output's end: maybe accepted too (accepted_max + 1)
def test_v2_filler_is_accepted_when_the_output_repeats():
    seq = replay([1, 2, 3, 4], [1, 2, 3, 4, 4, 4], k=2, lookup_min=2, lookup_max=2, rule="v2")
    assert rows(seq) == [(0, 0, 0, 1), (1, 2, 0, 1), (2, 2, 2, 3), (5, 2, 1, 1)]
    assert (seq.drafts, seq.draft_tokens, seq.accepted_tokens, seq.accepted_max) == (3, 6, 3, 4)
    # max_model_len 9: the scheduler's cap is 9 - N - 1 draft tokens (N = 4 + pos): 2 at
    # pos 1 and 2 (N 5, 6: caps 3, 2), 0 at pos 5 (N 9): that step is a plain one.
    capped = replay(
        [1, 2, 3, 4], [1, 2, 3, 4, 4, 4], k=2, lookup_min=2, lookup_max=2, rule="v2",
        max_model_len=9,
    )  # fmt: skip
    assert rows(capped) == [(0, 0, 0, 1), (1, 2, 0, 1), (2, 2, 2, 3), (5, 0, 0, 1)]


def test_k_zero_is_the_baseline_under_every_rule():
    for rule in RULES:
        seq = replay(PROMPT, OUTPUT, k=0, lookup_min=2, lookup_max=2, rule=rule)
        assert seq.draft_tokens == 0 and seq.steps == len(OUTPUT)


# ----------------------------------------------------------------- v2, properties


def brute_v2(ctx, *, k, lo, hi):
    """The kernel's rule written out: the max of n * (L+1) + pos + 1 over matches."""
    n = len(ctx)
    if not n or k <= 0:
        return []
    best = None
    if n >= lo:
        for length in range(lo, hi + 1):
            for pos in range(n - length):  # pos <= n - length - 1
                if ctx[pos : pos + length] == ctx[n - length :]:
                    best = max(best or (0, 0), (length, pos))
    out = []
    if best is not None:
        start = best[0] + best[1]
        out = ctx[start : start + min(k, n - start)]
    return out + [ctx[-1]] * (k - len(out))


def simulate_v2(prompt, output, *, k, lo, hi, max_model_len=None):
    m = len(output)
    steps = [(0, 0, 0, 1)] if m else []
    pos = 1
    while pos < m:
        ctx = list(prompt) + list(output[:pos])
        draft = brute_v2(ctx, k=k, lo=lo, hi=hi)
        if max_model_len is not None:
            draft = draft[: max(0, max_model_len - len(ctx) - 1)]
        a = 0
        while a < len(draft) and pos + a < m and draft[a] == output[pos + a]:
            a += 1
        e = min(a + 1, m - pos)
        steps.append((pos, len(draft), a, e))
        pos += e
    return steps


tokens = st.lists(st.integers(0, 3), max_size=40)
windows = st.tuples(st.integers(1, 3), st.integers(0, 3)).map(lambda t: (t[0], t[0] + t[1]))


@settings(max_examples=300, deadline=None)
@given(ctx=tokens, window=windows, k=st.integers(1, 6))
def test_rightmost_index_matches_brute_force(ctx, window, k):
    lo, hi = window
    index = RightmostIndex(lo, hi)
    for i, t in enumerate(ctx):
        index.append(t)
        assert index.propose(k) == brute_v2(ctx[: i + 1], k=k, lo=lo, hi=hi)


@settings(max_examples=300, deadline=None)
@given(
    prompt=st.lists(st.integers(0, 3), min_size=1, max_size=30),
    output=st.lists(st.integers(0, 3), max_size=50),
    window=windows,
    k=st.integers(1, 8),
    mml=st.none() | st.integers(2, 120),
)
def test_v2_replay_matches_generation(prompt, output, window, k, mml):
    lo, hi = window
    r = RequestReplay(prompt, output, lookup_min=lo, lookup_max=hi, max_k=8, rule="v2")
    seq = r.steps(k, mml)
    assert rows(seq) == simulate_v2(prompt, output, k=k, lo=lo, hi=hi, max_model_len=mml)
    assert int(seq.emitted.sum()) == len(output)
    assert seq.accepted_tokens <= seq.accepted_max <= seq.draft_tokens


@settings(max_examples=200, deadline=None)
@given(
    prompt=st.lists(st.integers(0, 3), min_size=1, max_size=30),
    output=st.lists(st.integers(0, 3), max_size=50),
    window=windows,
    k=st.integers(1, 8),
)
def test_ngram_gpu_verifies_v1_and_counts_k(prompt, output, window, k):
    lo, hi = window
    v1 = replay(prompt, output, k=k, lookup_min=lo, lookup_max=hi, rule="v1")
    gpu = replay(prompt, output, k=k, lookup_min=lo, lookup_max=hi, rule="ngram_gpu")
    assert rows(gpu) == rows(v1)
    assert gpu.counted is not None
    assert gpu.counted.tolist() == ([0] + [k] * (gpu.steps - 1) if gpu.steps else [])
    assert np.all(gpu.counted >= gpu.drafted)
