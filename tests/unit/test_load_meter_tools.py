"""Tool calls are their own channel: counted, timed, never reasoning.

The streams are vLLM's chat-completion chunks as they come over the wire: a role chunk,
``delta.reasoning`` chunks, then ``delta.tool_calls`` chunks (the first with the call's
id and function name, the rest with ``function.arguments`` fragments), a finishing chunk,
the usage chunk and ``[DONE]``. Each stream is metered on the pure-Python core and, where
the extension is built, on the C core through its full path (the fused reader is compared
with both in test_load_fastpath.py).
"""

from __future__ import annotations

from typing import Any

import orjson
import pytest

from specload.load.meter import MalformedChunk, PyStreamMeter, StreamMeter, meter_message
from specload.records.request import RequestRecord

pytestmark = pytest.mark.unit

METERS = [PyStreamMeter] + ([StreamMeter] if StreamMeter is not PyStreamMeter else [])

# Recorded from a vLLM server (reasoning parser and the hermes tool parser, continuous
# usage stats): the role chunk, one reasoning chunk, the call's head, an argument
# fragment, the finishing chunk, the usage chunk.
RECORDED = [
    b'{"id":"chatcmpl-9f","object":"chat.completion.chunk","created":1761,"model":"m",'
    b'"choices":[{"index":0,"delta":{"role":"assistant","content":""},"logprobs":null,'
    b'"finish_reason":null}],"usage":{"prompt_tokens":42,"total_tokens":42,'
    b'"completion_tokens":0}}',
    b'{"id":"chatcmpl-9f","object":"chat.completion.chunk","created":1761,"model":"m",'
    b'"choices":[{"index":0,"delta":{"reasoning":"The user wants"},"logprobs":null,'
    b'"finish_reason":null}],"usage":{"prompt_tokens":42,"total_tokens":45,'
    b'"completion_tokens":3}}',
    b'{"id":"chatcmpl-9f","object":"chat.completion.chunk","created":1761,"model":"m",'
    b'"choices":[{"index":0,"delta":{"tool_calls":[{"id":"chatcmpl-tool-7c","type":'
    b'"function","index":0,"function":{"name":"get_weather"}}]},"logprobs":null,'
    b'"finish_reason":null}],"usage":{"prompt_tokens":42,"total_tokens":51,'
    b'"completion_tokens":9}}',
    b'{"id":"chatcmpl-9f","object":"chat.completion.chunk","created":1761,"model":"m",'
    b'"choices":[{"index":0,"delta":{"tool_calls":[{"index":0,"function":{"arguments":'
    b'"{\\"city\\": \\"Paris\\"}"}}]},"logprobs":null,"finish_reason":null}],'
    b'"usage":{"prompt_tokens":42,"total_tokens":58,"completion_tokens":16}}',
    b'{"id":"chatcmpl-9f","object":"chat.completion.chunk","created":1761,"model":"m",'
    b'"choices":[{"index":0,"delta":{"content":""},"logprobs":null,'
    b'"finish_reason":"tool_calls","stop_reason":null}],"usage":{"prompt_tokens":42,'
    b'"total_tokens":59,"completion_tokens":17}}',
    b'{"id":"chatcmpl-9f","object":"chat.completion.chunk","created":1761,"model":"m",'
    b'"choices":[],"usage":{"prompt_tokens":42,"total_tokens":59,"completion_tokens":17}}',
    b"[DONE]",
]


def rec() -> RequestRecord:
    return RequestRecord("agent", "s", "v", "m", 0.0, 0.0)


def chunk(delta: dict[str, Any], cum: int | None = None, finish: str | None = None) -> bytes:
    obj: dict[str, Any] = {
        "id": "chatcmpl-1",
        "object": "chat.completion.chunk",
        "created": 1,
        "model": "m",
        "choices": [{"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish}],
    }
    if cum is not None:
        obj["usage"] = {"prompt_tokens": 9, "completion_tokens": cum, "total_tokens": 9 + cum}
    return orjson.dumps(obj)


def tool_head(name: str = "get_weather") -> dict[str, Any]:
    return {
        "tool_calls": [{"id": "call-1", "type": "function", "index": 0, "function": {"name": name}}]
    }


def tool_args(fragment: str) -> dict[str, Any]:
    return {"tool_calls": [{"index": 0, "function": {"arguments": fragment}}]}


def reasoning_then_tools(
    m: Any, n_reason: int, n_tool: int, *, itl: float, ttft: float, usage: str
) -> float:
    """``n_reason`` reasoning chunks, then ``n_tool`` tool-call chunks (the call's head,
    then argument fragments), one token each, one every ``itl`` s; then nothing but the
    finishing chunk (no token), the usage chunk and [DONE]. ``usage``: ``continuous``
    (every chunk), ``final`` (the usage chunk only, with the reasoning count) or
    ``none``. Returns the time of the last token."""
    cont = usage == "continuous"
    m.feed(chunk({"role": "assistant", "content": ""}, 0 if cont else None), 0.0)
    now = 0.0
    for i in range(n_reason + n_tool):
        now = ttft + i * itl
        if i < n_reason:
            delta: dict[str, Any] = {"reasoning": "think "}
        elif i == n_reason:
            delta = tool_head()
        else:
            delta = tool_args('{"x": 1' if i == n_reason + 1 else ", 1")
        m.feed(chunk(delta, i + 1 if cont else None), now)
    total = n_reason + n_tool
    m.feed(chunk({"content": ""}, total if cont else None, "tool_calls"), now + 0.0001)
    if usage != "none":
        final: dict[str, Any] = {"prompt_tokens": 9, "completion_tokens": total}
        if usage == "final":
            final["completion_tokens_details"] = {"reasoning_tokens": n_reason}
        m.feed(orjson.dumps({"choices": [], "usage": final}), now + 0.0002)
    m.feed(b"[DONE]", now + 0.0003)
    return now


@pytest.mark.parametrize("meter", METERS)
def test_reasoning_then_tool_calls_then_nothing_else_counts_and_times_every_token(
    meter: Any,
) -> None:
    # 10 reasoning tokens, then a tool call of 20 tokens, one every 5.4 ms: TPOT is 5.4 ms
    # over all 30 tokens, and the request ends at the call's last fragment.
    m = meter(0.0)
    last = reasoning_then_tools(m, 10, 20, itl=0.0054, ttft=0.1, usage="continuous")
    r = rec()
    m.finish(r, last + 0.001)
    assert (r.tokens_reasoning, r.tokens_content, r.tokens_tool) == (10, 0, 20)
    assert r.tokens_output == 30 and r.token_count_source == "exact"
    assert r.channel_split_source == "exact"
    assert r.chunks == 30
    assert r.ttft_s == pytest.approx(0.1)
    assert r.e2e_s == pytest.approx(last) == pytest.approx(0.1 + 29 * 0.0054)
    assert r.tpot_s == pytest.approx(0.0054)
    assert r.ttfct_s is None  # no content token: the answer is the call
    assert r.finish_reason == "tool_calls" and not r.reasoning_truncated
    assert r.arrivals is not None and r.arrivals[-1] == [pytest.approx(last), 30]
    assert r.itl_token_hist is not None
    assert r.itl_token_hist.quantile(0.5) == pytest.approx(0.0054, rel=0.01)


@pytest.mark.parametrize("meter", METERS)
def test_recorded_vllm_tool_call_stream(meter: Any) -> None:
    m = meter(0.0)
    times = [0.05, 0.08, 0.11, 0.14, 0.15, 0.15, 0.15]
    for payload, t in zip(RECORDED, times, strict=True):
        m.feed(payload, t)
    r = rec()
    m.finish(r, 0.2)
    # 3 reasoning tokens; the call's head (6 tokens) and arguments (7) and the finishing
    # chunk's token (after the call: the call's) are the tool channel's
    assert (r.tokens_reasoning, r.tokens_content, r.tokens_tool) == (3, 0, 14)
    assert r.e2e_s == pytest.approx(0.14) and r.ttft_s == pytest.approx(0.08)
    assert r.tpot_s == pytest.approx((0.14 - 0.08) / 16)
    assert r.prompt_tokens == 42 and r.finish_reason == "tool_calls"


@pytest.mark.parametrize("meter", METERS)
def test_tool_calls_with_final_usage_take_what_the_reasoning_count_leaves(meter: Any) -> None:
    m = meter(0.0)
    last = reasoning_then_tools(m, 12, 8, itl=0.01, ttft=0.2, usage="final")
    r = rec()
    m.finish(r, last + 0.001)
    assert (r.tokens_reasoning, r.tokens_content, r.tokens_tool) == (12, 0, 8)
    assert (r.token_count_source, r.channel_split_source) == ("usage", "usage-details")
    assert r.e2e_s == pytest.approx(0.2 + 19 * 0.01)
    assert r.tpot_s == pytest.approx(0.01)


@pytest.mark.parametrize("meter", METERS)
def test_tool_calls_without_usage_are_counted_as_chunks_of_their_own(meter: Any) -> None:
    m = meter(0.0)
    last = reasoning_then_tools(m, 6, 4, itl=0.01, ttft=0.2, usage="none")
    r = rec()
    m.finish(r, last + 0.001)
    assert (r.tokens_reasoning, r.tokens_content, r.tokens_tool) == (6, 0, 4)
    assert r.token_count_source == "chunks-estimate"
    assert r.e2e_s == pytest.approx(0.2 + 9 * 0.01)


class WordCounter:
    def count(self, text: str) -> int:
        return len(text.split())


@pytest.mark.parametrize("meter", METERS)
def test_tool_call_text_is_tokenized_as_its_own_channel(meter: Any) -> None:
    m = meter(0.0, want_text=True)
    m.feed(chunk({"reasoning": "one two three"}), 0.1)
    m.feed(chunk({"content": "let me look"}), 0.2)
    m.feed(chunk(tool_head("lookup")), 0.3)
    m.feed(chunk(tool_args('{"q": "a b"}')), 0.4)
    m.feed(b"[DONE]", 0.4)
    r = rec()
    m.finish(r, 0.5, tokenizer=WordCounter())
    # the call's text: the function's name and its arguments, 'lookup{"q": "a b"}'
    assert (r.tokens_reasoning, r.tokens_content, r.tokens_tool) == (3, 3, 3)
    assert r.token_count_source == "tokenizer"
    assert r.ttfct_s == pytest.approx(0.2) and r.e2e_s == pytest.approx(0.4)


@pytest.mark.parametrize("meter", METERS)
def test_content_then_a_tool_call_split_by_chunks_with_final_usage(meter: Any) -> None:
    m = meter(0.0)
    for i in range(4):
        m.feed(chunk({"content": "x"}), 0.1 + 0.01 * i)
    m.feed(chunk(tool_head()), 0.14)
    for i in range(3):
        m.feed(chunk(tool_args("y")), 0.15 + 0.01 * i)
    m.feed(chunk({}, None, "tool_calls"), 0.17)
    m.feed(orjson.dumps({"choices": [], "usage": {"completion_tokens": 16}}), 0.17)
    m.feed(b"[DONE]", 0.17)
    r = rec()
    m.finish(r, 0.2)
    assert (r.tokens_reasoning, r.tokens_content, r.tokens_tool) == (0, 8, 8)
    assert r.channel_split_source == "chunks-estimate"
    assert r.e2e_s == pytest.approx(0.17)


@pytest.mark.parametrize("meter", METERS)
def test_cut_inside_a_tool_call_is_not_cut_inside_reasoning(meter: Any) -> None:
    m = meter(0.0)
    m.feed(chunk({"reasoning": "r"}, 1), 0.1)
    m.feed(chunk(tool_head(), 2), 0.2)
    m.feed(chunk(tool_args('{"a'), 3, "length"), 0.3)
    m.feed(b"[DONE]", 0.3)
    r = rec()
    m.finish(r, 0.3)
    assert (r.tokens_reasoning, r.tokens_tool) == (1, 2)
    assert r.finish_reason == "length" and not r.reasoning_truncated


@pytest.mark.parametrize("meter", METERS)
def test_a_chunk_with_reasoning_and_a_tool_call_is_split_by_text(meter: Any) -> None:
    m = meter(0.0)
    m.feed(chunk({"reasoning": "aaaa"}, 2), 0.1)
    both = {"reasoning": "aaaa", **tool_args("bbbb")}
    m.feed(chunk(both, 6), 0.2)
    m.feed(chunk(tool_args("bbbb"), 8, "tool_calls"), 0.3)
    r = rec()
    m.finish(r, 0.3)
    assert (r.tokens_reasoning, r.tokens_content, r.tokens_tool) == (4, 0, 4)
    assert r.channel_split_source == "text-estimate"


@pytest.mark.parametrize(
    "tool_calls",
    ["call", {"index": 0}, 5, [1], [{"function": "f"}], [{"function": {"arguments": 5}}]],
)
@pytest.mark.parametrize("meter", METERS)
def test_tool_calls_that_are_not_a_list_of_calls_are_malformed(meter: Any, tool_calls: Any) -> None:
    with pytest.raises(MalformedChunk):
        meter(0.0).feed(chunk({"tool_calls": tool_calls}, 1), 0.1)


@pytest.mark.parametrize("meter", METERS)
def test_empty_or_null_tool_calls_are_no_tool_call(meter: Any) -> None:
    m = meter(0.0)
    m.feed(chunk({"content": "a", "tool_calls": []}, 1), 0.1)
    m.feed(chunk({"content": "b", "tool_calls": None}, 2, "stop"), 0.2)
    r = rec()
    m.finish(r, 0.2)
    assert (r.tokens_content, r.tokens_tool) == (2, 0)


def test_non_streamed_answer_with_reasoning_and_a_tool_call() -> None:
    m = StreamMeter(0.0, want_text=True)
    meter_message(
        {
            "choices": [
                {
                    "message": {
                        "reasoning": "r" * 30,
                        "content": None,
                        "tool_calls": [
                            {
                                "id": "call-1",
                                "type": "function",
                                "function": {"name": "f" * 4, "arguments": "a" * 6},
                            }
                        ],
                    },
                    "finish_reason": "tool_calls",
                }
            ],
            "usage": {"prompt_tokens": 3, "completion_tokens": 40},
        },
        m,
        1.5,
    )
    r = rec()
    m.finish(r, 1.5)
    assert (r.tokens_reasoning, r.tokens_content, r.tokens_tool) == (30, 0, 10)
    assert r.e2e_s == 1.5 and not r.reasoning_truncated


def test_client_metrics_count_tool_tokens_as_their_own_channel() -> None:
    from specload.load.metrics import ClientMetrics  # noqa: PLC0415

    r = RequestRecord("agent", "s", "v", "m", 0.0, 1.0, ok=True)
    r.tokens_reasoning, r.tokens_tool, r.tokens_output = 10, 20, 30
    metrics = ClientMetrics()
    metrics.observe(r)
    tokens = {
        s.labels["channel"]: s.value
        for fam in metrics.collect()
        if fam.name == "specload_client_output_tokens"
        for s in fam.samples
    }
    assert tokens == {"reasoning": 10, "content": 0, "tool": 20}


def test_a_tool_call_stream_through_the_client_is_recorded_per_channel(canned: Any) -> None:
    # Through the real client (the C fused reader where built): the same counts.
    from specload.load.chat import ChatRequester, ChatSettings  # noqa: PLC0415
    from specload.prompts import Prompt  # noqa: PLC0415
    from specload.urls import parse_server_url  # noqa: PLC0415

    events = [chunk({"role": "assistant", "content": ""}, 0)]
    events += [chunk({"reasoning": "r"}, i + 1) for i in range(5)]
    events += [chunk(tool_head(), 6)] + [chunk(tool_args("a"), 7 + i) for i in range(3)]
    events += [chunk({"content": ""}, 9, "tool_calls"), b"[DONE]"]
    head = (
        b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ntransfer-encoding: chunked\r\n\r\n"
    )
    body = b"".join(b"%x\r\n%s\r\n" % (len(e) + 8, b"data: " + e + b"\n\n") for e in events)
    server = canned([head + body + b"0\r\n\r\n"])
    chat = ChatRequester(parse_server_url(server.url), ChatSettings(model="m", timeout_s=10.0))
    try:
        r = chat.send(Prompt("p", "agent", ({"role": "user", "content": "hi"},), 100), "s")
    finally:
        chat.close()
    assert r.ok, (r.error_kind, r.error_detail)
    assert (r.tokens_reasoning, r.tokens_content, r.tokens_tool, r.tokens_output) == (5, 0, 4, 9)
    assert r.finish_reason == "tool_calls" and r.chunks == 9 and not r.reasoning_truncated
