"""Per-request speculative decoding: the server's object checked, steps placed, channels split."""

from __future__ import annotations

import random
from typing import Any

import orjson
import pytest

from specload.errors import UsageError
from specload.load import meter as meter_mod
from specload.load.chat import cache_busted
from specload.load.options import cache_bust_nonce, check_cache_bust
from specload.records.request import RequestRecord
from specload.records.specdecode import (
    InvalidSpecMetrics,
    accepted_per_position,
    estimate_from_chunks,
    parse_server_spec,
    place_steps,
    record_spec_decode,
)

Step = tuple[int, int] | None  # (drafted, accepted) of a verify step; None: no drafts


def vllm_object(steps: list[Step], k: int, detailed: bool = True) -> dict[str, Any]:
    """What vLLM 0.32's RequestSpecDecodeMetrics.to_dict sends for these steps."""
    verify = [s for s in steps if s is not None]
    hist = [0] * (k + 1)
    for _, a in verify:
        hist[a] += 1
    accepted = sum(a for _, a in verify)
    drafted = sum(d for d, _ in verify)
    out: dict[str, Any] = {
        "mean_acceptance_length": 1 + accepted / len(verify) if verify else 1.0,
        "draft_acceptance_rate": accepted / drafted if drafted else 0.0,
        "acceptance_histogram": hist,
        "num_spec_steps": len(verify),
        "num_accepted_draft_tokens": accepted,
        "num_draft_tokens": drafted,
        "num_spec_tokens": k,
    }
    if detailed and verify:
        out["per_step_accepted"] = [a for _, a in verify]
        out["per_step_drafted"] = [d for d, _ in verify]
    return out


def stream_of(steps: list[Step]) -> list[int]:
    """Tokens per chunk: the prefill's one, then one chunk per step."""
    return [1] + [1 if s is None else s[1] + 1 for s in steps]


def truth(steps: list[Step], content_start: int) -> dict[str, list[int]]:
    """Per channel [verify steps, draft tokens, accepted]: a step's channel is its first token's."""
    out = {"reasoning": [0, 0, 0], "content": [0, 0, 0]}
    position = 1
    for s in steps:
        n = 1 if s is None else s[1] + 1
        if s is not None:
            tally = out["reasoning" if position < content_start else "content"]
            tally[0] += 1
            tally[1] += s[0]
            tally[2] += s[1]
        position += n
    return out


def counts(part: dict[str, Any]) -> list[int]:
    return [part["drafts"], part["draft_tokens"], part["accepted_tokens"]]


def test_the_server_object_is_checked_naming_the_field() -> None:
    good = vllm_object([(3, 2), None, (3, 0)], k=3)
    spec = parse_server_spec(good)
    assert (spec.steps, spec.draft_tokens, spec.accepted, spec.k) == (2, 6, 2, 3)
    for bad, field in [
        ({**good, "num_spec_steps": -1}, "num_spec_steps"),
        ({**good, "num_draft_tokens": "6"}, "num_draft_tokens"),
        ({**good, "num_accepted_draft_tokens": 7}, "num_accepted_draft_tokens"),
        ({**good, "acceptance_histogram": [1, 0, 0, 0]}, "acceptance_histogram"),
        ({**good, "per_step_accepted": [2]}, "per-step"),
        ({**good, "per_step_drafted": [3, 3, 3]}, "per-step"),
        ({**good, "per_step_accepted": [0, 2]}, None),  # sums fine, order swapped: valid
        ([], "not an object"),
    ]:
        if field is None:
            parse_server_spec(bad)
            continue
        with pytest.raises(InvalidSpecMetrics, match=field):
            parse_server_spec(bad)


def test_accepted_per_position_from_the_histogram() -> None:
    # Steps that accepted 0, 1, 2, 3 drafts: 4, 3, 2, 1 of them.
    assert accepted_per_position([4, 3, 2, 1]) == [6, 3, 1]
    assert accepted_per_position([5]) == []


def test_steps_are_placed_at_their_tokens() -> None:
    steps: list[Step] = [(3, 2), None, (3, 0), None, (3, 3), (2, 1)]
    placed = place_steps([2, 0, 3, 1], stream_of(steps))
    assert placed is not None
    early, late = placed
    # Chunks start at tokens 0 (prefill), 1 (3 tokens), 4, 5, 6 (one each), 7 (4), 11:
    # the step that accepted none is at 4, 5 or 6; the others are pinned.
    assert early == [1, 4, 7, 11]
    assert late == [1, 6, 7, 11]
    # A chunk of several tokens that no step explains: the chunks are not steps.
    assert place_steps([2, 0], [1, 3, 2]) is None
    assert place_steps([1], [2, 2]) is None  # the first chunk is the prefill's one token


def test_a_cut_last_step_is_placed() -> None:
    # The last verify step accepted 3 but max_tokens let only 2 of its tokens out.
    placed = place_steps([1, 3], [1, 2, 1, 2])
    assert placed == ([1, 4], [1, 4])


@pytest.mark.parametrize("seed", range(40))
def test_random_requests_split_as_the_truth(seed: int) -> None:
    rng = random.Random(seed)
    k = rng.choice([1, 3, 5])
    steps: list[Step] = []
    for _ in range(rng.randint(5, 80)):
        if rng.random() < 0.3:
            steps.append(None)
        else:
            steps.append((k, rng.choice([0, 0, rng.randint(0, k)])))
    sizes = stream_of(steps)
    total = sum(sizes)
    content_start = rng.randint(1, total - 1)
    out = record_spec_decode(
        vllm_object(steps, k), content_start=content_start, tokens_output=total, sizes=sizes
    )
    want = truth(steps, content_start)
    assert out["split"] in ("exact", "estimated")
    for c in ("reasoning", "content"):
        # Accepted tokens are always placed exactly (only steps that accepted none move).
        assert out[c]["accepted_tokens"] == want[c][2]
    if out["split"] == "exact":
        assert counts(out["reasoning"]) == want["reasoning"]
        assert counts(out["content"]) == want["content"]
    total_counts = [out["drafts"], out["draft_tokens"], out["accepted_tokens"]]
    summed = [a + b for a, b in zip(counts(out["reasoning"]), counts(out["content"]), strict=True)]
    assert summed == total_counts


def test_the_split_is_estimated_only_where_the_boundary_is_ambiguous() -> None:
    # Chunks of one token at 1, 2, 3, then 3 tokens at 4: the two steps that accepted none
    # are at (1, 2) or (1, 3) or (2, 3). Content from token 3: the second one may be either.
    steps: list[Step] = [(3, 0), None, (3, 0), (3, 2)]
    sizes = stream_of(steps)
    out = record_spec_decode(
        vllm_object(steps, 3), content_start=3, tokens_output=sum(sizes), sizes=sizes
    )
    assert out["split"] == "estimated"
    # With the boundary past the ambiguity, exact.
    out = record_spec_decode(
        vllm_object(steps, 3), content_start=4, tokens_output=sum(sizes), sizes=sizes
    )
    assert out["split"] == "exact"
    assert counts(out["reasoning"]) == [2, 6, 0]
    assert counts(out["content"]) == [1, 3, 2]


def test_one_channel_needs_no_placement_and_merged_chunks_give_no_split() -> None:
    steps: list[Step] = [(3, 2), None, (3, 1)]
    obj = vllm_object(steps, 3, detailed=False)
    out = record_spec_decode(obj, content_start=7, tokens_output=7, sizes=None)
    assert out["split"] == "exact"
    assert counts(out["reasoning"]) == [2, 6, 3]
    assert counts(out["content"]) == [0, 0, 0]
    assert out["mean_acceptance_length"] == pytest.approx(2.5)
    assert out["acceptance_rate"] == pytest.approx(0.5)
    assert out["accepted_per_position"] == [2, 1, 0]
    # Two channels, chunks merged by the server (a chunk of 4 no step explains): no split.
    detailed = vllm_object(steps, 3)
    out = record_spec_decode(detailed, content_start=4, tokens_output=7, sizes=[1, 3, 3])
    assert out["split"] is None
    assert "reasoning" not in out
    # A bad object is kept as an error, not a crash.
    out = record_spec_decode({"num_spec_steps": 1}, content_start=1, tokens_output=2, sizes=None)
    assert "num_draft_tokens" in out["error"]


def test_estimate_from_chunks_alone() -> None:
    out = estimate_from_chunks([1, 3, 1, 2, 1], content_start=5)
    assert out is not None
    assert out["source"] == "estimated"
    assert out["accepted_tokens"] == 3
    assert out["drafts"] is None and out["acceptance_rate"] is None
    assert out["mean_acceptance_length"] == pytest.approx(1 + 3 / 4)
    assert out["reasoning"]["accepted_tokens"] == 2  # chunks at tokens 1 and 4
    assert out["content"]["accepted_tokens"] == 1  # chunks at 5 and 7


def _chunk(
    *, reasoning: str | None = None, content: str | None = None, cum: int | None = None
) -> bytes:
    delta: dict[str, Any] = {}
    if reasoning is not None:
        delta["reasoning"] = reasoning
    if content is not None:
        delta["content"] = content
    obj: dict[str, Any] = {"choices": [{"index": 0, "delta": delta, "finish_reason": None}]}
    if cum is not None:
        obj["usage"] = {"prompt_tokens": 5, "completion_tokens": cum, "total_tokens": 5 + cum}
    return orjson.dumps(obj)


METERS = [meter_mod.PyStreamMeter]
if meter_mod.FAST_PATH:
    METERS.append(meter_mod.StreamMeter)


@pytest.mark.parametrize("meter_cls", METERS, ids=lambda c: c.__name__)
def test_the_meter_carries_the_split_from_a_stream(meter_cls: Any) -> None:
    # Reasoning: prefill token, a step of 3 (accepted 2), a no-draft step; content: a
    # step of 2, a step that accepted none, then the stop token in a chunk without text.
    steps: list[Step] = [(3, 2), None, (3, 1), (3, 0), None]
    spec = vllm_object(steps, 3)
    m = meter_cls(0.0, max_tokens=100)
    cum = 0
    payloads = []
    for n, channel in [(1, "r"), (3, "r"), (1, "r"), (2, "c"), (1, "c")]:
        cum += n
        text = "x" * n
        payloads.append(
            _chunk(reasoning=text, cum=cum) if channel == "r" else _chunk(content=text, cum=cum)
        )
    cum += 1
    payloads.append(_chunk(cum=cum))  # the stop token: no text
    final = {
        "choices": [],
        "usage": {"prompt_tokens": 5, "completion_tokens": cum, "total_tokens": 5 + cum},
        "metrics": {"speculative_decoding": spec},
    }
    payloads.append(orjson.dumps(final))
    payloads.append(b"[DONE]")
    for i, p in enumerate(payloads):
        m.feed(p, 0.01 * (i + 1))
    record = RequestRecord("coding", "c1", "v", "m", 0.0, 1.0)
    m.finish(record, 1.0)
    assert (record.tokens_reasoning, record.tokens_content) == (5, 4)
    sd = record.spec_decode
    assert sd is not None
    assert (sd["drafts"], sd["draft_tokens"], sd["accepted_tokens"]) == (3, 9, 3)
    assert sd["split"] == "exact"
    assert counts(sd["reasoning"]) == [1, 3, 2]
    assert counts(sd["content"]) == [2, 6, 1]
    assert m.chunk_sizes() == [1, 3, 1, 2, 1, 1]


@pytest.mark.parametrize("meter_cls", METERS, ids=lambda c: c.__name__)
def test_an_estimate_only_from_exact_chunks_read_apart(meter_cls: Any) -> None:
    def metered(times: list[float]) -> tuple[Any, RequestRecord]:
        m = meter_cls(0.0, max_tokens=100)
        cum = 0
        for t, (n, channel) in zip(times, [(1, "r"), (3, "r"), (1, "c"), (2, "c")], strict=True):
            cum += n
            text = "x" * n
            m.feed(
                _chunk(reasoning=text, cum=cum)
                if channel == "r"
                else _chunk(content=text, cum=cum),
                t,
            )
        m.feed(b"[DONE]", times[-1])
        record = RequestRecord("coding", "c1", "v", "m", 0.0, 1.0, ok=True)
        m.finish(record, 1.0)
        return m, record

    m, record = metered([0.1, 0.2, 0.3, 0.4])
    m.estimate_spec_decode(record)
    sd = record.spec_decode
    assert sd is not None and sd["source"] == "estimated"
    assert sd["accepted_tokens"] == 3  # chunks of 3 and 2 tokens: 2 + 1 accepted
    assert sd["reasoning"]["accepted_tokens"] == 2 and sd["content"]["accepted_tokens"] == 1
    assert sd["drafts"] is None
    # Two chunks read together: the estimate would count two steps as one.
    m, record = metered([0.1, 0.2, 0.2, 0.4])
    m.estimate_spec_decode(record)
    assert record.spec_decode is None


def test_cache_bust_prefixes_the_first_message_per_level() -> None:
    messages = ({"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hi"})
    warm = cache_busted(messages, "n1", "c4-warmup")
    measured = cache_busted(messages, "n1", "c4")
    assert warm == measured  # a level's warm-up shares its level's prefix
    assert measured[0]["content"] == "[run n1 c4] Be brief." and measured[1] == messages[1]
    assert cache_busted(messages, "n1", "c16")[0] != measured[0]
    assert messages[0]["content"] == "Be brief."  # the prompt set is not changed
    assert cache_bust_nonce("off") is None and cache_bust_nonce("abc") == "abc"
    on = cache_bust_nonce("on")
    assert on is not None and len(on) == 8
    with pytest.raises(UsageError, match="--cache-bust"):
        check_cache_bust("no spaces allowed")
