"""Usage the meter cannot believe, and faults of the meter itself, against known truth.

A bad ``usage`` fails its request as ``malformed_usage`` at the chunk that carries it,
keeping what was counted before, in constant memory per chunk; a fault inside the meter
(a bug) ends its request as ``client_error`` and the user goes on. The fused C reader's
side of the same cases is in test_load_fastpath.py (every case three ways).
"""

from __future__ import annotations

import math
import random
import re
import time
import tracemalloc
from typing import Any

import orjson
import pytest

from specload.histogram import Histogram
from specload.load import meter as meter_mod
from specload.load.chat import ChatRequester, ChatSettings
from specload.load.meter import (
    HARD_CAP_TOKENS,
    MalformedChunk,
    MalformedUsage,
    PyStreamMeter,
    StreamMeter,
    token_limit,
)
from specload.prompts import Prompt
from specload.records.request import ERROR_KINDS, RequestRecord
from specload.urls import parse_server_url
from tests.fixtures.canned import CannedServer

pytestmark = pytest.mark.unit

METERS: list[Any] = [PyStreamMeter]
if StreamMeter is not PyStreamMeter:
    METERS.append(StreamMeter)
elif hasattr(meter_mod, "CStreamMeter"):  # SPECLOAD_FASTPATH=0 with the extension built
    METERS.append(meter_mod.CStreamMeter)


def rec() -> RequestRecord:
    return RequestRecord("math", "s", "v", "m", 0.0, 0.0)


def text(content: str, usage: Any = None, *, reasoning: bool = False) -> bytes:
    delta = {"reasoning" if reasoning else "content": content}
    obj: dict[str, Any] = {"choices": [{"index": 0, "delta": delta, "finish_reason": None}]}
    if usage is not None:
        obj["usage"] = usage
    return orjson.dumps(obj)


def good_start(m: Any, *, continuous: bool = True) -> None:
    """Three reasoning chunks of one token, at 0.1, 0.2, 0.3 s."""
    for i in range(1, 4):
        m.feed(
            text(
                "r",
                {"prompt_tokens": 7, "completion_tokens": i} if continuous else None,
                reasoning=True,
            ),
            0.1 * i,
        )


U = {"prompt_tokens": 7}
# (id, the bad chunk's usage, max_tokens, the field named, continuous usage before)
BAD: list[tuple[str, dict[str, Any], int | None, str, bool]] = [
    (
        "prompt-abc",
        {"prompt_tokens": "abc", "completion_tokens": 4},
        4096,
        "usage.prompt_tokens",
        True,
    ),
    (
        "reasoning-string",
        {**U, "completion_tokens": 4, "completion_tokens_details": {"reasoning_tokens": "2"}},
        4096,
        "usage.completion_tokens_details.reasoning_tokens",
        True,
    ),
    ("jump-1e8", {**U, "completion_tokens": 10**8}, None, "usage.completion_tokens", True),
    (
        "jump-1e8-max-tokens",
        {**U, "completion_tokens": 10**8},
        4096,
        "usage.completion_tokens",
        True,
    ),
    ("jump-1e12", {**U, "completion_tokens": 10**12}, None, "usage.completion_tokens", True),
    ("decreasing", {**U, "completion_tokens": 1}, 4096, "usage.completion_tokens went down", True),
    ("negative", {**U, "completion_tokens": -5}, 4096, "usage.completion_tokens", True),
    ("final-1e12", {**U, "completion_tokens": 10**12}, None, "usage.completion_tokens", False),
    (
        "details-not-dict",
        {**U, "completion_tokens": 4, "completion_tokens_details": [0]},
        4096,
        "usage.completion_tokens_details is not an object",
        True,
    ),
]


@pytest.mark.parametrize("meter_cls", METERS, ids=lambda c: c.__name__)
@pytest.mark.parametrize(
    ("usage", "max_tokens", "field", "continuous"), [b[1:] for b in BAD], ids=[b[0] for b in BAD]
)
def test_bad_usage_fails_at_its_chunk_and_keeps_what_came_before(
    meter_cls: Any, usage: dict[str, Any], max_tokens: int | None, field: str, continuous: bool
) -> None:
    m = meter_cls(0.0, max_tokens=max_tokens)
    good_start(m, continuous=continuous)
    before = (m._prev_cum, m.tokens_reasoning_exact, m.final_usage, m.finish_reason)
    bad = orjson.dumps(
        {
            "choices": [{"index": 0, "delta": {"content": "c"}, "finish_reason": "stop"}],
            "usage": usage,
        }
    )
    with pytest.raises(MalformedUsage, match=re.escape(field)) as info:
        m.feed(bad, 0.4)
    assert isinstance(info.value, MalformedChunk)  # a kind of malformed chunk
    # the bad chunk changed nothing: not its tokens, its usage or its finish_reason
    assert (m._prev_cum, m.tokens_reasoning_exact, m.final_usage, m.finish_reason) == before
    assert m.chunks_content == 0
    r = rec()
    m.finish(r, 0.45)  # never raises on what feed let in
    assert r.tokens_output == 3 and r.tokens_reasoning == 3  # nothing lost
    assert r.token_count_source == ("exact" if continuous else "chunks-estimate")
    assert r.e2e_s == 0.45  # not done: until the failure
    if continuous:
        assert r.arrivals == [[0.1, 1], [0.3, 3]]
    else:
        assert r.arrivals == [[0.1, 1.0], [0.3, 3]]  # chunk index scaled to the 3 tokens


def test_the_error_kind_is_known() -> None:
    assert {"malformed_usage", "client_error"} <= set(ERROR_KINDS)


def test_limits() -> None:
    assert token_limit(None) == HARD_CAP_TOKENS == 10**7
    assert token_limit(0) == 8 and token_limit(100) == 108 and token_limit(800) == 808
    assert token_limit(1000) == 1010 and token_limit(4096) == 4137  # max(8, 1% rounded up)
    m = StreamMeter(0.0, max_tokens=100)
    m.feed(text("x", {"completion_tokens": 108}), 0.1)  # at the limit: believed
    with pytest.raises(MalformedUsage, match="109 is beyond the request's limit 108"):
        m.feed(text("x", {"completion_tokens": 109}), 0.2)


def test_a_believed_final_usage_is_used_as_is() -> None:
    m = StreamMeter(0.0, max_tokens=100)
    good_start(m, continuous=False)
    m.feed(
        orjson.dumps(
            {
                "choices": [],
                "usage": {
                    "prompt_tokens": 7,
                    "completion_tokens": 50,
                    "completion_tokens_details": {"reasoning_tokens": 50},
                },
            }
        ),
        0.3,
    )
    m.feed(b"[DONE]", 0.3)
    r = rec()
    m.finish(r, 0.3)
    assert (r.prompt_tokens, r.tokens_reasoning, r.tokens_content) == (7, 50, 0)
    assert r.token_count_source == "usage"


@pytest.mark.parametrize("meter_cls", METERS, ids=lambda c: c.__name__)
def test_a_jump_to_1e8_tokens_fails_at_once_without_allocating(meter_cls: Any) -> None:
    m = meter_cls(0.0)  # no max_tokens: the hard cap
    good_start(m)
    tracemalloc.start()
    try:
        start = time.perf_counter()
        with pytest.raises(MalformedUsage):
            m.feed(text("c", {"completion_tokens": 10**8}), 0.4)
        r = rec()
        m.finish(r, 0.5)
        took = time.perf_counter() - start
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < 1 << 20  # under 1 MB (the per-token list alone would be 800 MB)
    assert took < 0.5
    assert r.tokens_output == 3


@pytest.mark.parametrize("meter_cls", METERS, ids=lambda c: c.__name__)
def test_a_believed_big_chunk_costs_memory_per_chunk_not_per_token(meter_cls: Any) -> None:
    m = meter_cls(0.0, max_tokens=2 * 10**7)
    good_start(m)
    tracemalloc.start()
    try:
        m.feed(text("c", {"completion_tokens": 10**7}), 0.5)  # 10^7 - 3 tokens in one chunk
        m.feed(text("c", {"completion_tokens": 10**7 + 2}), 0.6)
        m.feed(b"[DONE]", 0.6)
        r = rec()
        m.finish(r, 0.6)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < 2 << 20  # repeating each chunk's value per token: > 80 MB
    assert r.tokens_output == 10**7 + 2 and r.token_count_source == "exact"
    h = r.itl_token_hist
    assert h is not None
    # the gaps after the first chunk: 0.1, 0.1, 0.2 / (10^7 - 3), 0.1 / 2 per token
    assert h.count == 1 + 1 + (10**7 - 3) + 2
    assert h.sum == pytest.approx(0.1 + 0.1 + 0.2 + 0.1)
    assert h.max == pytest.approx(0.1) and h.min == pytest.approx(0.2 / (10**7 - 3))


@pytest.mark.parametrize("seed", range(6))
def test_per_token_weights_give_the_histogram_of_repeated_values(seed: int) -> None:
    rng = random.Random(seed)
    n = rng.randint(1, 300)
    gaps = [
        rng.choice([0.0, abs(rng.gauss(0.02, 0.004)), rng.uniform(0.001, 0.5)]) for _ in range(n)
    ]
    tokens = [rng.choice([0, 1, 1, 2, 3, 3, 4, 17, 40, 1000]) for _ in range(n)]
    got = Histogram()
    meter_mod._add_per_token(got, gaps, tokens)
    want = Histogram()
    want.extend([g / k for g, k in zip(gaps, tokens, strict=True) for _ in range(k)])
    assert got.buckets() == want.buckets()
    assert (got.count, got.zero_count) == (want.count, want.zero_count)
    if want.count:
        assert (got.min, got.max) == (want.min, want.max)
        assert math.isclose(got.sum, want.sum, rel_tol=1e-9, abs_tol=1e-12)
        qs = [0.0, 0.1, 0.5, 0.9, 0.99, 1.0]
        assert got.quantiles(qs) == want.quantiles(qs)


def test_non_streamed_bad_usage_and_bad_shapes() -> None:
    m = StreamMeter(0.0, want_text=True, max_tokens=10)
    with pytest.raises(MalformedUsage, match=r"usage\.prompt_tokens"):
        meter_mod.meter_message(
            {
                "choices": [{"message": {"content": "x"}}],
                "usage": {"prompt_tokens": "abc", "completion_tokens": 1},
            },
            m,
            1.0,
        )
    for bad in ({"choices": "abc"}, {"choices": [1]}, {"choices": [{"message": [1]}]}):
        with pytest.raises(MalformedChunk):
            meter_mod.meter_message(bad, StreamMeter(0.0, want_text=True), 1.0)


# -- through ChatRequester.send: the record, the connection, the next request --------------

HEAD = b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ntransfer-encoding: chunked\r\n\r\n"


def sse_response(payloads: list[bytes]) -> bytes:
    body = b"".join(
        b"%x\r\n%s\r\n" % (len(e), e) for e in (b"data: " + p + b"\n\n" for p in payloads)
    )
    return HEAD + body + b"0\r\n\r\n"


def good_stream(n: int = 4) -> list[bytes]:
    out = [text("t", {"prompt_tokens": 7, "completion_tokens": i}) for i in range(1, n + 1)]
    return [*out, b"[DONE]"]


PROMPT = Prompt("p1", "math", ({"role": "user", "content": "hi"},), 100)
SECRET = "sk-very-secret-key"


def requester(server: CannedServer, **kwargs: Any) -> ChatRequester:
    settings = ChatSettings(model="m", api_key=SECRET, **kwargs)
    return ChatRequester(parse_server_url(f"http://127.0.0.1:{server.port}"), settings)


def test_malformed_usage_is_a_failed_record_and_the_user_goes_on(canned: Any) -> None:
    bad = [
        *good_stream(3)[:-1],
        text("t", {"prompt_tokens": "abc", "completion_tokens": 4}),
        *good_stream(6)[4:],
    ]
    server = canned([sse_response(bad), sse_response(good_stream())])
    chat = requester(server)
    try:
        r = chat.send(PROMPT, "s")
        assert not r.ok and r.error_kind == "malformed_usage"
        assert r.error_detail is not None and "usage.prompt_tokens" in r.error_detail
        assert r.tokens_output == 3 and r.token_count_source == "exact"  # kept
        assert r.arrivals is not None and r.arrivals[-1][1] == 3
        assert r.e2e_s is not None and r.end_s >= r.start_s
        assert server.wait_closed(1)  # the rest of that stream is never read
        again = chat.send(PROMPT, "s")
        assert again.ok and again.tokens_output == 4
        assert server.connections == 2
        assert b'"max_tokens":100' in server.requests[0]
    finally:
        chat.close()


def test_a_request_beyond_its_max_tokens_is_malformed_usage(canned: Any) -> None:
    stream = [
        text("t", {"completion_tokens": 5}),
        text("t", {"completion_tokens": 10**12}),
        b"[DONE]",
    ]
    server = canned([sse_response(stream)])
    chat = requester(server)
    try:
        r = chat.send(PROMPT, "s")
        assert r.error_kind == "malformed_usage" and r.tokens_output == 5
        assert r.error_detail == (
            "usage.completion_tokens 1000000000000 is beyond the request's limit 108"
        )
    finally:
        chat.close()


def test_a_fault_in_the_meter_is_a_client_error_and_the_user_goes_on(
    canned: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    server = canned([sse_response(good_stream()), sse_response(good_stream())])
    chat = requester(server)
    calls = []

    def broken_feed(self: Any, payload: bytes, now: float) -> None:
        calls.append(payload)
        raise ZeroDivisionError(f"bug near {SECRET} " + "x" * 500)

    try:
        with monkeypatch.context() as mp:
            mp.setattr(meter_mod._MeterLogic, "feed", broken_feed)
            r = chat.send(PROMPT, "s")
        assert calls
        assert not r.ok and r.error_kind == "client_error"
        assert r.error_detail is not None
        assert r.error_detail.startswith("ZeroDivisionError: bug near <api key> xxx")
        assert len(r.error_detail) == 200 and SECRET not in r.error_detail
        assert r.e2e_s is not None
        assert server.wait_closed(1)  # the connection is closed
        again = chat.send(PROMPT, "s")  # and the next request works
        assert again.ok and again.tokens_output == 4
    finally:
        chat.close()


@pytest.mark.parametrize("stream", [True, False])
def test_a_fault_in_finish_is_a_client_error(
    canned: Any, monkeypatch: pytest.MonkeyPatch, stream: bool
) -> None:
    message = orjson.dumps(
        {
            "choices": [{"message": {"content": "hi"}, "finish_reason": "stop"}],
            "usage": {"prompt_tokens": 7, "completion_tokens": 2},
        }
    )
    plain = b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: %d\r\n\r\n%s" % (
        len(message),
        message,
    )
    answer = sse_response(good_stream()) if stream else plain
    server = canned([answer, answer])
    chat = requester(server, stream=stream)

    def broken(*args: Any, **kwargs: Any) -> Any:
        raise KeyError("prompt_tokens")

    try:
        with monkeypatch.context() as mp:
            mp.setattr(meter_mod._MeterLogic, "_tokens", broken)  # finish always fails
            r = chat.send(PROMPT, "s")
        assert (r.ok, r.error_kind, r.error_detail) == (
            False,
            "client_error",
            "KeyError: 'prompt_tokens'",
        )
        assert r.e2e_s is not None and r.e2e_s >= 0
        assert server.wait_closed(1)
        again = chat.send(PROMPT, "s")
        assert again.ok and again.tokens_output == (4 if stream else 2)
    finally:
        chat.close()


def test_a_non_streamed_answer_of_the_wrong_shape_is_malformed(canned: Any) -> None:
    message = orjson.dumps({"choices": "abc"})
    answer = (
        b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\n"
        b"content-length: %d\r\n\r\n%s" % (len(message), message)
    )
    server = canned([answer])
    chat = requester(server, stream=False)
    try:
        r = chat.send(PROMPT, "s")
        assert r.error_kind == "malformed"
    finally:
        chat.close()


def test_an_event_beyond_the_sse_cap_is_malformed_and_the_user_goes_on(canned: Any) -> None:
    from specload.sse import MAX_EVENT_BYTES  # noqa: PLC0415

    # One event of 17 MiB (no blank line until its end), then a good stream.
    huge = text("x" * (MAX_EVENT_BYTES + (1 << 20)), {"prompt_tokens": 7, "completion_tokens": 1})
    server = canned([sse_response([*good_stream(2)[:-1], huge]), sse_response(good_stream())])
    chat = requester(server)
    try:
        r = chat.send(PROMPT, "s")
        assert not r.ok and r.error_kind == "malformed", (r.error_kind, r.error_detail)
        assert r.tokens_output == 2  # what came before is kept
        again = chat.send(PROMPT, "s")
        assert again.ok and again.tokens_output == 4
    finally:
        chat.close()
