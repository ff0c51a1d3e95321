"""Token accounting and timing of one response, against known truth."""

from __future__ import annotations

import itertools
from typing import Any

import orjson
import pytest

from specload.load.meter import MalformedChunk, StreamMeter, meter_message
from specload.records.request import ARRIVAL_SAMPLE_S, RequestRecord

pytestmark = pytest.mark.unit


def rec() -> RequestRecord:
    return RequestRecord("math", "s", "v", "m", 0.0, 0.0)


def chunk(
    reasoning: str | None = None,
    content: str | None = None,
    *,
    cum: int | None = None,
    finish: str | None = None,
    field: str = "reasoning",
    role: bool = False,
) -> bytes:
    delta: dict[str, Any] = {}
    if role:
        delta["role"] = "assistant"
        delta["content"] = ""
    if reasoning is not None:
        if field in ("reasoning", "both"):
            delta["reasoning"] = reasoning
        if field in ("reasoning_content", "both"):
            delta["reasoning_content"] = reasoning
    if content is not None:
        delta["content"] = content
    obj: dict[str, Any] = {
        "object": "chat.completion.chunk",
        "choices": [{"index": 0, "delta": delta, "finish_reason": finish}],
    }
    if cum is not None:
        obj["usage"] = {"prompt_tokens": 7, "completion_tokens": cum}
    return orjson.dumps(obj)


def usage_chunk(total: int, reasoning: int | None = None) -> bytes:
    usage: dict[str, Any] = {"prompt_tokens": 7, "completion_tokens": total}
    if reasoning is not None:
        usage["completion_tokens_details"] = {"reasoning_tokens": reasoning}
    return orjson.dumps({"choices": [], "usage": usage})


def feed_stream(
    m: StreamMeter,
    n_reason: int,
    n_content: int,
    per_chunk: int,
    *,
    t0: float,
    ttft: float,
    itl: float,
    continuous: bool = True,
    field: str = "reasoning",
    finish: str = "stop",
) -> float:
    """A stream of n_reason then n_content tokens; returns the time of the last chunk."""
    now = t0
    m.feed(chunk(role=True, cum=0 if continuous else None), now)
    sent = 0
    total = n_reason + n_content
    k = 0
    while sent < total:
        n = min(per_chunk, total - sent)
        r_n = max(0, min(n, n_reason - sent))
        c_n = n - r_n
        sent += n
        now = t0 + ttft + k * itl
        k += 1
        m.feed(
            chunk(
                "r" * r_n if r_n else None,
                "c" * c_n if c_n else None,
                cum=sent if continuous else None,
                field=field,
                finish=finish if sent == total else None,
            ),
            now,
        )
    m.feed(usage_chunk(total), now)
    m.feed(b"[DONE]", now)
    return now


@pytest.mark.parametrize("per_chunk", [1, 3])
def test_exact_counts_and_timings_with_continuous_usage(per_chunk: int) -> None:
    m = StreamMeter(100.0)
    end = feed_stream(m, 80, 20, per_chunk, t0=100.0, ttft=0.05, itl=0.005)
    r = rec()
    m.finish(r, end)
    assert m.done
    assert (r.tokens_reasoning, r.tokens_content, r.tokens_output) == (80, 20, 100)
    assert r.token_count_source == "exact"
    n_chunks = -(-100 // per_chunk)
    assert r.chunks == n_chunks
    assert r.ttft_s == pytest.approx(0.05)
    first_content_chunk = 80 // per_chunk  # 0-based index of the chunk holding token 81
    assert r.ttfct_s == pytest.approx(0.05 + first_content_chunk * 0.005)
    assert r.tpot_s == pytest.approx((n_chunks - 1) * 0.005 / 99)
    assert r.e2e_s == pytest.approx(0.05 + (n_chunks - 1) * 0.005)
    assert r.itl_chunk_hist is not None and r.itl_token_hist is not None
    assert r.itl_chunk_hist.quantile(0.5) == pytest.approx(0.005, rel=0.01)
    assert r.itl_token_hist.quantile(0.5) == pytest.approx(0.005 / per_chunk, rel=0.01)
    assert r.finish_reason == "stop" and not r.reasoning_truncated


def test_chunk_counting_alone_would_report_a_third() -> None:
    m = StreamMeter(0.0)
    end = feed_stream(m, 90, 0, 3, t0=0.0, ttft=0.1, itl=0.01, continuous=False)
    r = rec()
    m.finish(r, end)
    assert r.chunks == 30
    assert r.tokens_output == 90  # from the final usage, not the 30 chunks
    assert r.token_count_source == "usage"


def test_final_usage_split_by_details_when_present() -> None:
    m = StreamMeter(0.0)
    m.feed(chunk("think"), 0.1)
    m.feed(chunk(None, "answer", finish="stop"), 0.2)
    m.feed(usage_chunk(50, reasoning=30), 0.2)
    m.feed(b"[DONE]", 0.2)
    r = rec()
    m.finish(r, 0.2)
    assert (r.tokens_reasoning, r.tokens_content) == (30, 20)
    assert (r.token_count_source, r.channel_split_source) == ("usage", "usage-details")


def test_final_usage_with_zero_reasoning_details_uses_single_channel() -> None:
    # vLLM reports reasoning_tokens 0 when <think> sits in the prompt: not a truth.
    m = StreamMeter(0.0)
    for i in range(5):
        m.feed(chunk("think"), 0.1 + i)
    m.feed(chunk("more", finish="length"), 6.0)
    m.feed(usage_chunk(12, reasoning=0), 6.0)
    r = rec()
    m.finish(r, 6.0)
    assert (r.tokens_reasoning, r.tokens_content) == (12, 0)
    assert r.channel_split_source == "single-channel"
    assert r.reasoning_truncated


class WordCounter:
    def count(self, text: str) -> int:
        return len(text.split())


def test_no_usage_counts_with_tokenizer_or_marks_an_estimate() -> None:
    def stream(m: StreamMeter) -> None:
        m.feed(chunk("one two three"), 0.1)
        m.feed(chunk(None, "four five"), 0.2)
        m.feed(b"[DONE]", 0.2)

    m = StreamMeter(0.0, want_text=True)
    stream(m)
    r = rec()
    m.finish(r, 0.2, tokenizer=WordCounter())
    assert (r.tokens_reasoning, r.tokens_content, r.token_count_source) == (3, 2, "tokenizer")
    m = StreamMeter(0.0)
    stream(m)
    r = rec()
    m.finish(r, 0.2)
    assert (r.tokens_reasoning, r.tokens_content) == (1, 1)
    assert r.token_count_source == "chunks-estimate"


@pytest.mark.parametrize("field", ["reasoning", "reasoning_content", "both"])
def test_reasoning_field_of_every_vllm_version_counted_once(field: str) -> None:
    m = StreamMeter(0.0, want_text=True)
    end = feed_stream(m, 10, 5, 1, t0=0.0, ttft=0.01, itl=0.01, field=field)
    r = rec()
    m.finish(r, end)
    assert (r.tokens_reasoning, r.tokens_content) == (10, 5)
    assert "".join(m._text_reasoning) == "r" * 10


def test_truncated_inside_reasoning() -> None:
    m = StreamMeter(0.0)
    end = feed_stream(m, 50, 0, 3, t0=0.0, ttft=0.05, itl=0.005, finish="length")
    r = rec()
    m.finish(r, end)
    assert r.reasoning_truncated and r.tokens_content == 0 and r.tokens_reasoning == 50
    assert r.ttfct_s is None


def test_tokens_announced_before_text_go_to_the_first_text_chunk() -> None:
    # The simulator's role chunk already counts the first chunk's tokens.
    m = StreamMeter(0.0)
    m.feed(chunk(role=True, cum=3), 0.05)
    m.feed(chunk(None, "abc", cum=3), 0.05)
    m.feed(chunk(None, "def", cum=6, finish="stop"), 0.06)
    m.feed(b"[DONE]", 0.06)
    r = rec()
    m.finish(r, 0.06)
    assert (r.tokens_reasoning, r.tokens_content) == (0, 6)
    assert r.itl_token_hist is not None
    assert r.itl_token_hist.quantile(0.5) == pytest.approx(0.01 / 3, rel=0.01)


def test_chunk_with_both_channels_split_by_text() -> None:
    m = StreamMeter(0.0)
    m.feed(chunk("aaaa", cum=2), 0.1)
    m.feed(chunk("aaaa", "bb", cum=5), 0.2)
    m.feed(chunk(None, "bbbb", cum=7, finish="stop"), 0.3)
    r = rec()
    m.finish(r, 0.3)
    assert (r.tokens_reasoning, r.tokens_content) == (4, 3)
    assert r.channel_split_source == "text-estimate"


@pytest.mark.parametrize("payload", [b"{not json", b"[1, 2]", b'{"object": "x"}'])
def test_malformed_chunks_raise(payload: bytes) -> None:
    with pytest.raises(MalformedChunk):
        StreamMeter(0.0).feed(payload, 0.0)


def test_non_streamed_message() -> None:
    m = StreamMeter(0.0, want_text=True)
    meter_message(
        {
            "choices": [
                {
                    "message": {"reasoning_content": "x" * 30, "content": "y" * 10},
                    "finish_reason": "stop",
                }
            ],
            "usage": {"prompt_tokens": 3, "completion_tokens": 40},
        },
        m,
        1.5,
    )
    r = rec()
    m.finish(r, 1.5)
    assert (r.tokens_reasoning, r.tokens_content) == (30, 10)
    assert r.e2e_s == 1.5 and r.prompt_tokens == 3 and m.done


# -- token arrivals: known chunk times, known pairs -------------------------------------


def test_arrivals_sample_exact_counts_every_half_second() -> None:
    # Chunks of 2 tokens every 0.125 s from 0.25 s after the send (binary-exact times).
    m = StreamMeter(100.0)
    m.feed(chunk(role=True, cum=0), 100.1)
    for k in range(16):
        m.feed(
            chunk("rr" if k < 8 else None, "cc" if k >= 8 else None, cum=2 * (k + 1)),
            100.25 + 0.125 * k,
        )
    m.feed(usage_chunk(32), 102.2)
    m.feed(b"[DONE]", 102.2)
    r = RequestRecord("math", "s", "v", "m", 1000.0, 0.0)  # start_s: wall clock at t0
    m.finish(r, 102.3)
    assert ARRIVAL_SAMPLE_S == 0.5
    # first chunk, then the first chunk >= 0.5 s after the last kept one, then the last
    assert r.arrivals == [[0.25, 2], [0.75, 10], [1.25, 18], [1.75, 26], [2.125, 32]]
    assert r.arrivals[-1][0] == r.e2e_s and r.arrivals[0][0] == r.ttft_s
    assert r.tokens_between(990.0, 1010.0) == 32 == r.tokens_output
    assert r.tokens_between(1000.0, 1000.25) == 2  # the first chunk, at 0.25 s
    assert r.tokens_between(1000.0, 1000.2) == 0
    assert r.tokens_between(1000.0, 1000.75) == 10
    assert r.tokens_between(1000.75, 1001.0) == pytest.approx(4)  # linear from 10 to 18
    assert r.tokens_between(1001.0, 1002.0) == pytest.approx(30 - 14)  # 26 + 6 * 0.25 / 0.375
    assert r.tokens_between(1002.125, 1003.0) == 0
    # windows that tile the request add up to every token
    edges = [1000.0 + 0.1 * i for i in range(30)]
    tiles = [r.tokens_between(a, b) for a, b in itertools.pairwise(edges)]
    assert sum(tiles) == pytest.approx(32)


def test_arrivals_count_tokens_announced_before_text_with_the_first_chunk() -> None:
    m = StreamMeter(0.0)
    m.feed(chunk(role=True, cum=3), 0.5)  # the simulator's role chunk: tokens, no text
    m.feed(chunk(None, "abc", cum=3), 0.5)
    m.feed(chunk(None, "de", cum=5), 1.0)
    m.feed(chunk(None, "f", cum=6, finish="stop"), 1.25)
    m.feed(b"[DONE]", 1.25)
    r = rec()
    m.finish(r, 1.5)
    assert r.arrivals == [[0.5, 3], [1.0, 5], [1.25, 6]]


def test_arrivals_scale_the_chunk_index_without_per_chunk_counts() -> None:
    m = StreamMeter(0.0)
    end = feed_stream(m, 90, 0, 3, t0=0.0, ttft=0.25, itl=0.25, continuous=False)
    r = rec()
    m.finish(r, end)
    assert r.token_count_source == "usage" and r.chunks == 30
    # chunk i (1-based) at 0.25 * i: kept every other chunk, i * 90 / 30 tokens
    assert r.arrivals is not None
    assert r.arrivals == [[0.25 * i, 3.0 * i] for i in range(1, 30, 2)] + [[7.5, 90]]
    assert r.arrivals[-1][1] == r.tokens_output


def test_arrivals_offsets_are_rounded_to_the_microsecond() -> None:
    m = StreamMeter(0.1)
    times = [0.1 + 1 / 3, 0.1 + 1 / 3 + 0.5 + 1 / 7, 2.0 + 1e-9]
    for i, t in enumerate(times):
        m.feed(chunk(None, "x", cum=i + 1), t)
    r = rec()
    m.finish(r, 3.0)
    assert r.arrivals == [[0.333333, 1], [0.97619, 2], [1.9, 3]]


def test_arrivals_of_a_failed_stream_end_at_its_last_chunk() -> None:
    m = StreamMeter(0.0)
    m.feed(chunk("a", cum=1), 0.25)
    m.feed(chunk("b", cum=4), 0.5)  # the connection is lost after this
    r = rec()
    m.finish(r, 9.0)
    assert r.e2e_s == 9.0
    assert r.arrivals == [[0.25, 1], [0.5, 4]]


def test_arrivals_of_a_non_streamed_response_are_one_pair_at_e2e() -> None:
    m = StreamMeter(0.0, want_text=True)
    meter_message(
        {
            "choices": [{"message": {"content": "y" * 10}, "finish_reason": "stop"}],
            "usage": {"prompt_tokens": 3, "completion_tokens": 40},
        },
        m,
        1.5,
    )
    r = rec()
    m.finish(r, 1.5)
    assert r.arrivals == [[1.5, 40]]


def test_no_arrivals_without_tokens() -> None:
    m = StreamMeter(0.0)
    m.feed(b"[DONE]", 0.5)
    r = rec()
    m.finish(r, 0.5)
    assert r.arrivals is None
