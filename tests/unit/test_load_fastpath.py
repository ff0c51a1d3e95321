"""The C fast path (specload/load/_fastpath.c) against the full parsers, case by case.

Every stream is metered three ways: the fused reader on the C core (whole socket
reads, declining what it cannot read with certainty), the full path on the C core
(ChunkedDecoder, SSEDecoder, orjson), and the full path on the pure-Python core
(what runs without a C compiler). The records, the meter state and any error must
be identical; and the fused reader must really take the usual reads, so the
comparison cannot pass by always declining.
"""

from __future__ import annotations

import os
import random
import select
import socket
import time
import types
from collections.abc import Callable
from typing import Any

import orjson
import pytest

from specload.load.meter import (
    MAX_PROMPT_TOKENS,
    CoreState,
    MalformedChunk,
    PyMeterCore,
    PyStreamMeter,
    StreamMeter,
    token_limit,
)
from specload.load.response import ResponseParser
from specload.records.request import RequestRecord
from specload.sse import SSEDecoder

pytestmark = pytest.mark.unit

if os.environ.get("SPECLOAD_REQUIRE_FASTPATH") == "1":
    # scripts/test sets this: there the extension must have been built, not skipped.
    from specload.load import _fastpath as fastpath
else:
    fastpath = pytest.importorskip("specload.load._fastpath")
CStreamMeter: Any = StreamMeter if StreamMeter is not PyStreamMeter else None
if CStreamMeter is None:  # SPECLOAD_FASTPATH=0: the C meter class still exists
    from specload.load import meter as _meter

    CStreamMeter = _meter.CStreamMeter  # type: ignore[attr-defined]

HEAD = b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ntransfer-encoding: chunked\r\n\r\n"
# Every field of the meter's state (the one list, CoreState), the usage as read.
STATE = tuple("final_usage" if name == "_usage" else name for name in CoreState.__annotations__)


def event(payload: bytes | dict[str, Any]) -> bytes:
    if isinstance(payload, dict):
        payload = orjson.dumps(payload)
    return b"data: " + payload + b"\n\n"


def chunk(data: bytes) -> bytes:
    return b"%x\r\n%s\r\n" % (len(data), data)


def delta_chunk(
    delta: dict[str, Any], cum: int | None, finish: str | None = None, *, details: Any = "absent"
) -> bytes:
    obj: dict[str, Any] = {
        "id": "chatcmpl-1",
        "object": "chat.completion.chunk",
        "created": 1,
        "model": "m",
        "choices": [{"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish}],
    }
    if cum is not None:
        obj["usage"] = {"prompt_tokens": 9, "completion_tokens": cum, "total_tokens": 9 + cum}
        if details != "absent":  # vLLM 0.32: {"reasoning_tokens": 0} on every chunk
            obj["usage"]["completion_tokens_details"] = details
    return event(obj)


def vllm_stream(
    n_reason: int,
    n_content: int,
    per_chunk: int = 1,
    *,
    field: str = "reasoning",
    usage: bool = True,
    text: str = "tok",
    details: Any = "absent",
) -> list[bytes]:
    """SSE events as vLLM sends them: role chunk, reasoning, content, usage chunk, [DONE]."""
    events = [
        delta_chunk({"role": "assistant", "content": ""}, 0 if usage else None, details=details)
    ]
    sent = 0
    total = n_reason + n_content
    while sent < total:
        n = min(per_chunk, total - sent)
        r = max(0, min(n, n_reason - sent))
        delta: dict[str, Any] = {}
        if r:
            delta[field] = text * r
        if n - r:
            delta["content"] = text * (n - r)
        sent += n
        events.append(
            delta_chunk(
                delta, sent if usage else None, "length" if sent == total else None, details=details
            )
        )
    if usage:
        events.append(
            event(
                {
                    "id": "chatcmpl-1",
                    "choices": [],
                    "usage": {
                        "prompt_tokens": 9,
                        "completion_tokens": total,
                        "completion_tokens_details": None,
                    },
                }
            )
        )
    events.append(event(b"[DONE]"))
    return events


def wire(events: list[bytes], per_chunk_events: int = 1) -> bytes:
    body = b"".join(
        chunk(b"".join(events[i : i + per_chunk_events]))
        for i in range(0, len(events), per_chunk_events)
    )
    return HEAD + body + b"0\r\n\r\n"


def one_read_per_chunk(data: bytes) -> list[bytes]:
    """Split the wire as a server writing one chunk per write is read: head, then chunks."""
    reads = [data[: len(HEAD)]]
    pos = len(HEAD)
    while pos < len(data):
        eol = data.index(b"\r\n", pos)
        size = int(data[pos:eol].split(b";")[0], 16)
        end = eol + 2 + size + 2 if size else len(data)
        reads.append(data[pos:end])
        pos = end
    return reads


def drive(
    meter_cls: Any, reads: list[bytes], *, fused: bool, max_tokens: int | None = None
) -> tuple[Any, int, str]:
    """Meter ``reads`` as the reactor does; returns (meter, fused reads, error)."""
    meter = meter_cls(0.5, max_tokens=max_tokens)
    decoder = SSEDecoder()

    def on_body(data: bytes, now: float) -> None:
        for payload in decoder.feed(data):
            meter.feed(payload, now)
        meter.sse_pending = bool(decoder.pending)

    parser = ResponseParser(on_body, "POST", meter if fused else None)
    taken = 0
    error = ""
    try:
        for i, data in enumerate(reads):
            now = 1.0 + i * 0.005
            fast = parser.fast
            if fast is not None:
                buf = bytearray(data) + bytearray(b"\0" * 7)  # the buffer is larger than n
                rc = fast.feed_read(buf, len(data), now)
                if rc:
                    taken += 1
                    if rc == 2:
                        parser.fast_ended()
                        break
                    continue
            if parser.feed(data, now):
                break
    except MalformedChunk as exc:  # MalformedUsage too: the class is part of the result
        error = f"{type(exc).__name__}: {exc}"
    return meter, taken, error


def snapshot(meter: Any) -> dict[str, Any]:
    state = {name: getattr(meter, name) for name in STATE}
    record = RequestRecord("c", "s", "v", "m", 0.0, 0.0)
    meter.finish(record, 9.0)
    state["record"] = record.to_dict(include_histograms=True)
    return state


def check_same(
    reads: list[bytes], *, expect_fused: bool, max_tokens: int | None = None
) -> tuple[dict[str, Any], str]:
    fast_meter, taken, fast_err = drive(CStreamMeter, reads, fused=True, max_tokens=max_tokens)
    full_meter, none, full_err = drive(CStreamMeter, reads, fused=False, max_tokens=max_tokens)
    py_meter, _, py_err = drive(PyStreamMeter, reads, fused=False, max_tokens=max_tokens)
    assert none == 0
    assert fast_err == full_err == py_err
    fast_state = snapshot(fast_meter)
    assert fast_state == snapshot(full_meter)
    assert fast_state == snapshot(py_meter)
    if expect_fused:
        assert taken >= len(reads) - 2, "the fused reader declined ordinary reads"
    return fast_state, fast_err


@pytest.mark.parametrize("field", ["reasoning", "reasoning_content"])
@pytest.mark.parametrize("per_chunk", [1, 3])
def test_vllm_stream_one_chunk_per_read_is_fused_and_exact(field: str, per_chunk: int) -> None:
    reads = one_read_per_chunk(wire(vllm_stream(12, 9, per_chunk, field=field)))
    state, err = check_same(reads, expect_fused=True)
    assert not err
    rec = state["record"]
    assert (rec["tokens_reasoning"], rec["tokens_content"]) == (12, 9)
    assert rec["token_count_source"] == rec["channel_split_source"] == "exact"
    assert rec["finish_reason"] == "length"
    assert state["done"] and state["final_usage"]["completion_tokens"] == 21


@pytest.mark.parametrize("seed", range(12))
def test_any_split_of_the_wire_gives_the_same_record(seed: int) -> None:
    rng = random.Random(seed)
    events = vllm_stream(
        rng.randint(0, 20),
        rng.randint(1, 20),
        rng.choice([1, 2, 3]),
        field=rng.choice(["reasoning", "reasoning_content"]),
        usage=rng.random() < 0.8,
        text=rng.choice(["tok", "é", '\n"x"']),
    )
    data = wire(events, per_chunk_events=rng.choice([1, 1, 2, 3]))
    cuts = sorted(rng.sample(range(1, len(data)), rng.randint(1, 25)))
    if seed % 2:  # whole chunks, several per read: the usual shape under load
        reads = one_read_per_chunk(data)
        merged = [reads[0]]
        for r in reads[1:]:
            if rng.random() < 0.4:
                merged[-1] += r
            else:
                merged.append(r)
        reads = merged
    else:
        reads = [data[a:b] for a, b in zip([0, *cuts], [*cuts, len(data)], strict=True)]
    check_same(reads, expect_fused=False)


WEIRD: list[bytes] = [
    b'{"choices":[{"delta":{"reasoning":"a","content":"b"}}],"usage":{"completion_tokens":5}}',
    b'{"choices":[{"delta":{"reasoning":"","reasoning_content":"x"}}],'
    b'"usage":{"completion_tokens":5}}',
    b'{"choices":[{"delta":{"reasoning":null,"reasoning_content":"x"}}],'
    b'"usage":{"completion_tokens":5}}',
    b'{"choices":[{"delta":{"content":"\\u00e9\\n"}}],"usage":{"completion_tokens":5}}',
    b'{"choices":[{"delta":{"content":"\\ud83d\\ude00"}}],"usage":{"completion_tokens":5}}',
    b'{"choices":[{"delta":{"content":"\\ud83d"}}],"usage":{"completion_tokens":5}}',
    b'{"choices":[{"delta":{"content":"\xff"}}],"usage":{"completion_tokens":5}}',
    b'{"choices":[{"delta":{"content":"\xed\xa0\x80"}}],"usage":{"completion_tokens":5}}',
    b'{"choices":[{"delta":{"content":"\xf0\x9f\x98\x80"}}],"usage":{"completion_tokens":5}}',
    b'{"choices":[{"delta":{"content":"a\tb"}}],"usage":{"completion_tokens":5}}',
    b'{"choices":[{"delta":{"content":"x"},"finish_reason":"st\\u006fp"}],'
    b'"usage":{"completion_tokens":5}}',
    b'{"choices":[{"delta":{"content":"x"},"finish_reason":7}],"usage":{"completion_tokens":5}}',
    b'{"choices":[{"delta":{"content":"x"}}],"usage":{"completion_tokens":5.0}}',
    b'{"choices":[{"delta":{"content":"x"}}],"usage":{"completion_tokens":-1}}',
    b'{"choices":[{"delta":{"content":"x"}}],"usage":{"completion_tokens":"5"}}',
    b'{"choices":[{"delta":{"content":"x"}}],"usage":{"completion_tokens":99999999999999999999}}',
    b'{"choices":[{"delta":{"content":"x"}}],"usage":{"completion_tokens":007}}',
    b'{"choices":[{"delta":{"content":"x"}}],"usage":{"completion_tokens":5,"completion_tokens":6}}',
    b'{"choices":[{"delta":{"content":"x"}}],"\\u0075sage":{"completion_tokens":5}}',
    b'{"choices":[{"delta":{"content":"x"}}],"usage":{}}',
    b'{"choices":[{"delta":{"content":"x"}}],"usage":null}',
    b'{"choices":[{"delta":{"content":"x"}}],"usage":[1]}',
    b'{"choices":[{"delta":{"content":"x"}}]}',
    b'{"choices":[],"usage":{"completion_tokens":5}}',
    b'{"choices":null,"usage":null}',
    b'{"object":"x"}',
    b'{"choices":[1],"usage":{"completion_tokens":5}}',
    b'{"choices":[{"delta":[1]}],"usage":{"completion_tokens":5}}',
    b'{"choices":[{"delta":{"content":5}}],"usage":{"completion_tokens":5}}',
    b'{"choices":[{"delta":{"content":"x"}},{"delta":{"content":"y"}}],'
    b'"usage":{"completion_tokens":5}}',
    b'{"choices":{"0":1},"usage":{"completion_tokens":5}}',
    b'{"choices":[{"delta":{}}],"usage":{"completion_tokens":5}}',
    b'{"choices":[{"delta":{"content":"x"}}],"usage":{"completion_tokens":5}} trailing',
    b'{"choices":[{"delta":{"content":"x"}}],"usage":{"completion_tokens":5},}',
    b'{"choices":[{"delta":{"content":"x"}}],"usage":{"completion_tokens":5}',
    b' {"choices" : [ {"delta" : {"content" : "x"} } ] , "usage" : {"completion_tokens" : 5} } ',
    b'{"a":[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[1]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]],'
    b'"choices":[{"delta":{"content":"x"}}],"usage":{"completion_tokens":5}}',
    b'{"x":1e5,"y":-0.5,"z":true,"w":false,"choices":[{"delta":{"content":"x"}}],'
    b'"usage":{"completion_tokens":5}}',
    b'{"x":01}',
    b"[1,2]",
    b'"str"',
    b"",
    b"[DONE] ",
    b"[DONE]",
    # tool calls: their own channel, or malformed, as the full path says
    b'{"choices":[{"delta":{"tool_calls":[{"index":0,"function":{"arguments":"{\\"a\\""}}]}}],'
    b'"usage":{"completion_tokens":5}}',
    b'{"choices":[{"delta":{"tool_calls":[{"id":"c","type":"function","index":0,'
    b'"function":{"name":"f","arguments":""}}]}}],"usage":{"completion_tokens":5}}',
    b'{"choices":[{"delta":{"tool_calls":null}}],"usage":{"completion_tokens":5}}',
    b'{"choices":[{"delta":{"tool_calls":[]}}],"usage":{"completion_tokens":5}}',
    b'{"choices":[{"delta":{"tool_calls":[{}]}}],"usage":{"completion_tokens":5}}',
    b'{"choices":[{"delta":{"tool_calls":[{"function":null}]}}],"usage":{"completion_tokens":5}}',
    b'{"choices":[{"delta":{"tool_calls":[{"function":{"name":null,"arguments":null}}]}}],'
    b'"usage":{"completion_tokens":5}}',
    b'{"choices":[{"delta":{"tool_calls":"x"}}],"usage":{"completion_tokens":5}}',
    b'{"choices":[{"delta":{"tool_calls":{}}}],"usage":{"completion_tokens":5}}',
    b'{"choices":[{"delta":{"tool_calls":[1]}}],"usage":{"completion_tokens":5}}',
    b'{"choices":[{"delta":{"tool_calls":[{"function":"f"}]}}],"usage":{"completion_tokens":5}}',
    b'{"choices":[{"delta":{"tool_calls":[{"function":{"arguments":5}}]}}],'
    b'"usage":{"completion_tokens":5}}',
    b'{"choices":[{"delta":{"tool_calls":[{"function":{"arguments":"a","arguments":5}}]}}],'
    b'"usage":{"completion_tokens":5}}',
    b'{"choices":[{"delta":{"tool_calls":[{"function":{"\\u0061rguments":5}}]}}],'
    b'"usage":{"completion_tokens":5}}',
    b'{"choices":[{"delta":{"tool_calls":[{"\\u0066unction":"f"}]}}],'
    b'"usage":{"completion_tokens":5}}',
    b'{"choices":[{"delta":{"tool_calls":[{"function":{"arguments":"a"}},{"function":7}]}}],'
    b'"usage":{"completion_tokens":5}}',
    b'{"choices":[{"delta":{"tool_calls":[],"tool_calls":[{}]}}],"usage":{"completion_tokens":5}}',
    b'{"choices":[{"delta":{"content":"x","tool_calls":[{"function":{"arguments":"a"}}]}}],'
    b'"usage":{"completion_tokens":5}}',
    b'{"choices":[{"delta":{"reasoning":"x","tool_calls":[{"function":{"arguments":"a"}}]}}],'
    b'"usage":{"completion_tokens":5}}',
    b'{"choices":[{"delta":{"content":"","tool_calls":[{"function":{"arguments":"a"}}]}}],'
    b'"usage":{"completion_tokens":5}}',
    # a server's own error event: server_error on every path
    b'{"error":{"message":"boom","type":"InternalServerError","param":null,"code":500}}',
    b'{"object":"error","message":"boom","type":"BadRequestError","code":400}',
    b'{"object":"err\\u006fr","message":"boom","choices":[],"usage":{"completion_tokens":5}}',
    b'{"error":null,"choices":[{"delta":{"content":"x"}}],"usage":{"completion_tokens":5}}',
    b'{"choices":[{"delta":{"content":"x"}}],"usage":{"completion_tokens":5},"error":{}}',
    b'{"object":"chat.completion.chunk","choices":[{"delta":{"content":"x"}}],'
    b'"usage":{"completion_tokens":5}}',
]


@pytest.mark.parametrize("payload", WEIRD, ids=[f"w{i}" for i in range(len(WEIRD))])
def test_odd_chunks_give_what_the_full_path_gives(payload: bytes) -> None:
    events = vllm_stream(3, 2)
    events.insert(3, event(payload))
    check_same(one_read_per_chunk(wire(events)), expect_fused=False)


def tool_stream(n_reason: int, n_tool: int) -> list[bytes]:
    """vLLM's events for reasoning, then one tool call (its head, then argument fragments),
    then nothing else: a finishing chunk without a token, the usage chunk, [DONE]."""
    events = [delta_chunk({"role": "assistant", "content": ""}, 0)]
    for i in range(n_reason + n_tool):
        if i < n_reason:
            delta: dict[str, Any] = {"reasoning": "tok"}
        elif i == n_reason:
            call = {"id": "call-1", "type": "function", "index": 0, "function": {"name": "f"}}
            delta = {"tool_calls": [call]}
        else:
            delta = {"tool_calls": [{"index": 0, "function": {"arguments": '{"a": "b"'}}]}
        events.append(delta_chunk(delta, i + 1))
    total = n_reason + n_tool
    events.append(delta_chunk({"content": ""}, total, "tool_calls"))
    events.append(event({"choices": [], "usage": {"prompt_tokens": 9, "completion_tokens": total}}))
    events.append(event(b"[DONE]"))
    return events


@pytest.mark.parametrize("per_chunk_events", [1, 3])
def test_tool_call_stream_is_fused_and_exact(per_chunk_events: int) -> None:
    reads = one_read_per_chunk(wire(tool_stream(6, 9), per_chunk_events))
    state, err = check_same(reads, expect_fused=True)
    assert not err
    rec = state["record"]
    assert (rec["tokens_reasoning"], rec["tokens_content"], rec["tokens_tool"]) == (6, 0, 9)
    assert rec["token_count_source"] == rec["channel_split_source"] == "exact"
    assert rec["finish_reason"] == "tool_calls" and not rec["reasoning_truncated"]
    assert state["chunks_tool"] == 9 and state["chunks_reasoning"] == 6
    # the request ends at the call's last fragment, not at the last reasoning chunk
    last_token_read = 1 + 15 // per_chunk_events  # the head, then events 0..15 (role first)
    assert rec["e2e_s"] == pytest.approx(1.0 + last_token_read * 0.005 - 0.5)


FRAMES: list[bytes] = [
    b"data:" + b'{"choices":[{"delta":{"content":"x"}}],"usage":{"completion_tokens":4}}\n\n',
    b'data: {"choices":[{"delta":{"content":"x"}}],"usage":{"completion_tokens":4}}\r\n\r\n',
    b': keep-alive\n\ndata: {"choices":[{"delta":{"content":"x"}}],'
    b'"usage":{"completion_tokens":4}}\n\n',
    b'event: message\ndata: {"choices":[{"delta":{"content":"x"}}],'
    b'"usage":{"completion_tokens":4}}\n\n',
    b'data: {"choices":[{"delta":\ndata: {"content":"x"}}],"usage":{"completion_tokens":4}}\n\n',
    b'data: {"choices":[{"delta":{"content":"x"}}],"usage":{"completion_tokens":4}}\n',
    b'data: {"choices":[{"delta":{"content":"x"}}],"usage":{"completion_tokens":4}}',
]


@pytest.mark.parametrize("frame", FRAMES, ids=[f"f{i}" for i in range(len(FRAMES))])
def test_other_sse_framings_give_what_the_full_path_gives(frame: bytes) -> None:
    events = vllm_stream(3, 2)
    events.insert(3, frame)
    check_same(one_read_per_chunk(wire(events)), expect_fused=False)


@pytest.mark.parametrize("size_line", [b"%X", b"%08x", b"%x;ext=1", b"%x "])
def test_other_chunk_size_lines_give_what_the_full_path_gives(size_line: bytes) -> None:
    events = vllm_stream(2, 2)
    body = b"".join((size_line % len(e)) + b"\r\n" + e + b"\r\n" for e in events)
    check_same(one_read_per_chunk(HEAD + body + b"0\r\n\r\n"), expect_fused=False)


def test_the_fused_reader_declines_without_changing_anything() -> None:
    meter = CStreamMeter(0.0)
    before = snapshot(CStreamMeter(0.0))
    for data in [b"5\r\nhello\r\n", b"zz\r\n", b"1f\r\ndata: {", b"\r\n", b""]:
        assert meter.feed_read(bytearray(data), len(data), 1.0) == 0
    assert snapshot(meter) == before
    text = CStreamMeter(0.0, want_text=True)
    data = one_read_per_chunk(wire(vllm_stream(1, 1)))[1]
    assert text.feed_read(bytearray(data), len(data), 1.0) == 0  # text wanted: full path
    with pytest.raises(ValueError, match="larger"):
        meter.feed_read(bytearray(data), len(data) + 1, 1.0)


def test_pure_python_core_never_takes_a_read() -> None:
    data = one_read_per_chunk(wire(vllm_stream(1, 1)))[1]
    assert PyStreamMeter(0.0).feed_read(bytearray(data), len(data), 1.0) == 0


def tcp_pair() -> tuple[socket.socket, socket.socket]:
    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen()
        client = socket.create_connection(listener.getsockname())
        server, _ = listener.accept()
    return client, server


def stamping_on(client: socket.socket, server: socket.socket) -> None:
    """Enable arrival stamps on ``client`` and wait until the kernel stamps packets.

    The first socket on a machine to ask for stamps turns stamping on from a kernel
    work queue (net_enable_timestamp): packets that arrive before it ran carry none.
    """
    assert fastpath.enable_rx_timestamps(client.fileno())
    deadline = time.monotonic() + 5
    while time.monotonic() < deadline:
        server.sendall(b"p")
        select.select([client], [], [], 1.0)  # each probe is read before the next is sent
        try:
            _, t = fastpath.recv_stamped(client.fileno(), bytearray(16), time.perf_counter())
        except BlockingIOError:
            continue
        if t is not None:
            return
    raise AssertionError("the kernel never stamped a packet")


def test_reads_carry_the_kernel_arrival_time_on_perf_counter_clock() -> None:
    client, server = tcp_pair()
    with client, server:
        stamping_on(client, server)
        sent = time.perf_counter()
        server.sendall(b"x" * 100)
        time.sleep(0.25)
        now = time.perf_counter()
        n, t = fastpath.recv_stamped(client.fileno(), bytearray(1000), now)
        assert n == 100
        assert t is not None
        # stamped on arrival (right after the send), not when read 250 ms later (bounds
        # wide enough for a loaded machine, where delivery itself can take a while)
        assert sent - 0.001 <= t <= sent + 0.1 < now - 0.1
        with pytest.raises(BlockingIOError):
            fastpath.recv_stamped(client.fileno(), bytearray(1000), now)


def _original_epoll() -> Any:
    from gevent import monkey  # noqa: PLC0415

    if monkey.is_module_patched("select"):
        return monkey.get_original("select", "epoll")()
    return select.epoll()


def test_read_ready_takes_fused_reads_and_returns_the_rest() -> None:
    client, server = tcp_pair()
    other_client, other_server = tcp_pair()
    # the real epoll, whatever an earlier test imported (gevent's patching removes it)
    ep = _original_epoll()
    with client, server, other_client, other_server, ep:
        for sock, peer in ((client, server), (other_client, other_server)):
            stamping_on(sock, peer)
            sock.setblocking(False)
            ep.register(sock.fileno(), select.EPOLLIN)
        meter = CStreamMeter(0.0)
        fused = ResponseParser(lambda data, now: None, "POST", meter)
        fused.feed(HEAD, 0.0)  # head read: the fused reader is armed
        assert fused.fast is meter

        class Plain:
            fast: Any = None

        parsers: list[Any] = [None] * 4096
        parsers[client.fileno()] = fused
        parsers[other_client.fileno()] = Plain()
        events = vllm_stream(0, 2)
        sent = time.perf_counter()
        server.sendall(chunk(events[0]) + chunk(events[1]))
        other_server.sendall(b"hello")
        time.sleep(0.25)
        buf = bytearray(65536)
        ready, left, now, unstamped = fastpath.read_ready(ep.fileno(), 1.0, buf, parsers, -1)
        assert (ready, unstamped) == (2, 0)
        assert now <= time.perf_counter() < now + 0.1  # perf_counter's clock
        assert [(fd, kind, payload) for fd, kind, payload, _ in left] == [
            (other_client.fileno(), 0, b"hello")
        ]
        assert left[0][3] < now - 0.1  # the arrival time, not the read time
        assert meter.chunks_content == 1 and meter.first_t is not None
        assert sent <= meter.first_t < now - 0.1
        rest = b"".join(chunk(e) for e in events[2:]) + b"0\r\n\r\n"
        server.sendall(rest)
        other_server.close()
        time.sleep(0.01)
        ready, left, now, _ = fastpath.read_ready(ep.fileno(), 1.0, buf, parsers, -1)
        kinds = sorted((fd, kind) for fd, kind, _, _ in left)
        assert kinds == sorted([(client.fileno(), 2), (other_client.fileno(), 1)])  # ended, EOF
        assert meter.done and meter.tokens_content_exact == 2
        ep.unregister(other_client.fileno())  # at EOF it stays ready, as the reactor knows
        ready, left, _, _ = fastpath.read_ready(ep.fileno(), 0.0, buf, parsers, -1)
        assert ready == 0 and left == []


def test_same_results_as_pure_python_on_real_reads() -> None:
    # The same stream read from a socket by both cores, through ResponseParser.
    def run(meter_cls: Callable[..., Any], fused: bool) -> dict[str, Any]:
        meter, _, err = drive(
            meter_cls, one_read_per_chunk(wire(vllm_stream(5, 5, 2))), fused=fused
        )
        assert not err
        return snapshot(meter)

    assert run(CStreamMeter, True) == run(PyStreamMeter, False)


# -- usage the meter cannot believe: the same failure, at the same chunk, three ways ---------


def text_chunk(usage: Any, content: str = "tok") -> bytes:
    return event(
        {
            "id": "chatcmpl-1",
            "object": "chat.completion.chunk",
            "choices": [
                {"index": 0, "delta": {"content": content}, "logprobs": None, "finish_reason": None}
            ],
            "usage": usage,
        }
    )


def bad_at_4(usage: Any) -> list[bytes]:
    """role, 3 reasoning chunks (cum 1..3), then a content chunk with ``usage`` in place of
    cum 4, 2 more content chunks, the usage chunk, [DONE]."""
    events = vllm_stream(3, 3)
    events[4] = usage if isinstance(usage, bytes) else text_chunk(usage)
    return events


def final_usage(usage: Any, *, continuous: bool) -> list[bytes]:
    events = vllm_stream(3, 3, usage=continuous)
    obj = event({"id": "chatcmpl-1", "choices": [], "usage": usage})
    if continuous:
        events[-2] = obj
    else:
        events.insert(-1, obj)
    return events


U = {"prompt_tokens": 9}
# (id, events, max_tokens, a fragment of the error ("" accepted), tokens in the record)
USAGE_CASES: list[tuple[str, list[bytes], int | None, str, int]] = [
    (
        "prompt-abc",
        bad_at_4({"prompt_tokens": "abc", "completion_tokens": 4}),
        4096,
        "usage.prompt_tokens is not a non-negative integer: 'abc'",
        3,
    ),
    (
        "prompt-float",
        bad_at_4({"prompt_tokens": 9.0, "completion_tokens": 4}),
        4096,
        "usage.prompt_tokens",
        3,
    ),
    (
        "prompt-bool",
        bad_at_4({"prompt_tokens": True, "completion_tokens": 4}),
        4096,
        "usage.prompt_tokens",
        3,
    ),
    (
        "prompt-negative",
        bad_at_4({"prompt_tokens": -9, "completion_tokens": 4}),
        4096,
        "usage.prompt_tokens",
        3,
    ),
    (
        "prompt-huge",
        bad_at_4({"prompt_tokens": MAX_PROMPT_TOKENS + 1, "completion_tokens": 4}),
        4096,
        "usage.prompt_tokens",
        3,
    ),
    (
        "prompt-max",
        bad_at_4({"prompt_tokens": MAX_PROMPT_TOKENS, "completion_tokens": 4}),
        4096,
        "",
        6,
    ),
    (
        "reasoning-string-final",
        final_usage(
            {**U, "completion_tokens": 6, "completion_tokens_details": {"reasoning_tokens": "3"}},
            continuous=True,
        ),
        4096,
        "usage.completion_tokens_details.reasoning_tokens is not a non-negative integer: '3'",
        6,
    ),
    (
        "reasoning-string",
        bad_at_4(
            {**U, "completion_tokens": 4, "completion_tokens_details": {"reasoning_tokens": "3"}}
        ),
        4096,
        "usage.completion_tokens_details.reasoning_tokens",
        3,
    ),
    (
        "reasoning-negative",
        bad_at_4(
            {**U, "completion_tokens": 4, "completion_tokens_details": {"reasoning_tokens": -1}}
        ),
        4096,
        "usage.completion_tokens_details.reasoning_tokens",
        3,
    ),
    (
        "reasoning-beyond-completion",
        bad_at_4(
            {**U, "completion_tokens": 4, "completion_tokens_details": {"reasoning_tokens": 5}}
        ),
        4096,
        "usage.completion_tokens_details.reasoning_tokens 5 is beyond completion_tokens 4",
        3,
    ),
    (
        "reasoning-beyond-limit",
        final_usage(
            {**U, "completion_tokens_details": {"reasoning_tokens": 10**12}}, continuous=False
        ),
        100,
        "usage.completion_tokens_details.reasoning_tokens",
        6,
    ),
    (
        "details-list",
        bad_at_4({**U, "completion_tokens": 4, "completion_tokens_details": [1]}),
        4096,
        "usage.completion_tokens_details is not an object",
        3,
    ),
    (
        "details-string",
        bad_at_4({**U, "completion_tokens": 4, "completion_tokens_details": "x"}),
        4096,
        "usage.completion_tokens_details is not an object",
        3,
    ),
    (
        "details-number",
        bad_at_4({**U, "completion_tokens": 4, "completion_tokens_details": 0}),
        4096,
        "usage.completion_tokens_details is not an object",
        3,
    ),
    (
        "usage-string",
        bad_at_4(event(b'{"choices":[{"delta":{"content":"x"}}],"usage":"x"}')),
        4096,
        "usage is not an object: 'x'",
        3,
    ),
    (
        "jump-1e8",
        bad_at_4({**U, "completion_tokens": 10**8}),
        4096,
        "usage.completion_tokens 100000000 is beyond the request's limit 4137",
        3,
    ),
    (
        "jump-1e8-no-max-tokens",
        bad_at_4({**U, "completion_tokens": 10**8}),
        None,
        "usage.completion_tokens 100000000 is beyond the request's limit 10000000",
        3,
    ),
    (
        "jump-1e12",
        bad_at_4({**U, "completion_tokens": 10**12}),
        None,
        "usage.completion_tokens 1000000000000 is beyond",
        3,
    ),
    (
        "jump-1e30",
        bad_at_4(
            event(
                b'{"choices":[{"delta":{"content":"x"}}],'
                b'"usage":{"completion_tokens":' + b"1" + b"0" * 30 + b"}}"
            )
        ),
        None,
        "usage.completion_tokens is not a non-negative integer: 1e+30",
        3,
    ),
    (
        "completion-string",
        bad_at_4({**U, "completion_tokens": "4"}),
        4096,
        "usage.completion_tokens is not a non-negative integer: '4'",
        3,
    ),
    (
        "decreasing",
        bad_at_4({**U, "completion_tokens": 2}),
        4096,
        "usage.completion_tokens went down, from 3 to 2",
        3,
    ),
    (
        "negative",
        bad_at_4({**U, "completion_tokens": -1}),
        4096,
        "usage.completion_tokens is not a non-negative integer: -1",
        3,
    ),
    (
        "final-1e12",
        final_usage({**U, "completion_tokens": 10**12}, continuous=False),
        None,
        "usage.completion_tokens 1000000000000 is beyond",
        6,
    ),
    (
        "final-decreasing",
        final_usage({**U, "completion_tokens": 5}, continuous=True),
        4096,
        "usage.completion_tokens went down, from 6 to 5",
        6,
    ),
    # at the limit (max_tokens 4 + the slack of 8) it is believed; one more is not
    ("at-limit", vllm_stream(6, 6), 4, "", 12),
    ("beyond-limit", vllm_stream(6, 7), 4, "usage.completion_tokens 13 is beyond", 12),
    ("details-null", vllm_stream(3, 3, details=None), 4096, "", 6),
    ("details-empty", vllm_stream(3, 3, details={}), 4096, "", 6),
    ("details-reasoning-null", vllm_stream(3, 3, details={"reasoning_tokens": None}), 4096, "", 6),
    (
        "details-vllm-0.32",
        vllm_stream(3, 3, details={"reasoning_tokens": 0, "x": [1]}),
        4096,
        "",
        6,
    ),
]


@pytest.mark.parametrize("per_read", [1, 3])
@pytest.mark.parametrize(
    ("events", "max_tokens", "error", "tokens"),
    [c[1:] for c in USAGE_CASES],
    ids=[c[0] for c in USAGE_CASES],
)
def test_usage_the_meter_cannot_believe_fails_the_same_three_ways(
    events: list[bytes], max_tokens: int | None, error: str, tokens: int, per_read: int
) -> None:
    reads = one_read_per_chunk(wire(events, per_chunk_events=per_read))
    state, err = check_same(reads, expect_fused=not error and per_read == 1, max_tokens=max_tokens)
    rec = state["record"]
    if error:
        assert err.startswith("MalformedUsage: ") and error in err
    else:
        assert not err and state["done"]
    assert rec["tokens_output"] == tokens  # what was counted before the bad chunk is kept
    assert rec["arrivals"][-1][1] == tokens


def test_the_fused_reader_takes_vllm_032_usage_with_details() -> None:
    reads = one_read_per_chunk(wire(vllm_stream(5, 5, details={"reasoning_tokens": 0})))
    meter = CStreamMeter(0.0, max_tokens=100)
    parser = ResponseParser(lambda data, now: None, "POST", meter)
    parser.feed(reads[0], 0.5)
    assert all(meter.feed_read(bytearray(r), len(r), 1.0) for r in reads[1:])
    assert meter.done and meter.tokens_content_exact == 5


def test_the_fused_reader_declines_a_bad_count_without_changing_anything() -> None:
    meter = CStreamMeter(0.0, max_tokens=10)
    before = snapshot(CStreamMeter(0.0, max_tokens=10))
    for usage in (
        {"completion_tokens": 10**12},
        {"completion_tokens": 19},
        {"completion_tokens": 4, "completion_tokens_details": {"reasoning_tokens": 5}},
        {"completion_tokens": 4, "prompt_tokens": MAX_PROMPT_TOKENS + 1},
    ):
        data = chunk(text_chunk(usage))
        assert meter.feed_read(bytearray(data), len(data), 1.0) == 0
    assert snapshot(meter) == before
    data = chunk(text_chunk({"completion_tokens": 18}))  # 10 + the slack of 8
    assert meter.feed_read(bytearray(data), len(data), 1.0) == 1
    assert meter.tokens_content_exact == 18


def test_limits_are_the_same_in_c_and_python() -> None:
    assert fastpath.MAX_PROMPT_TOKENS == MAX_PROMPT_TOKENS
    assert (token_limit(4), token_limit(4096), token_limit(None)) == (12, 4137, 10**7)
    assert CStreamMeter(0.0, max_tokens=4096).token_limit == 4137
    assert CStreamMeter(0.0, max_tokens=10**30).token_limit == 10**18 - 1


@pytest.mark.parametrize("seed", range(10))
def test_bad_usage_on_any_split_of_the_wire_gives_the_same_record(seed: int) -> None:
    rng = random.Random(1000 + seed)
    _, events, max_tokens, error, tokens = rng.choice(USAGE_CASES)
    data = wire(events, per_chunk_events=rng.choice([1, 2, 3]))
    cuts = sorted(rng.sample(range(1, len(data)), rng.randint(1, 12)))
    reads = [data[a:b] for a, b in zip([0, *cuts], [*cuts, len(data)], strict=True)]
    state, err = check_same(reads, expect_fused=False, max_tokens=max_tokens)
    assert (error in err) if error else not err
    assert state["record"]["tokens_output"] == tokens


# -- the meter's fields: one list (CoreState), the C members derived by hand ----------

_KINDS = {"float": "float", "int": "int", "bool": "bool"}  # other annotations: an object


def member_kind(core: Any, name: str) -> str:
    """What a C member stores, told by what it accepts (T_OBJECT takes None; T_BOOL
    only bools; T_INT/T_LONGLONG ints, not floats; T_DOUBLE floats)."""

    def takes(value: Any) -> bool:
        try:
            setattr(core, name, value)
        except TypeError:
            return False
        return True

    if takes(None):
        return "object"
    if takes(True) and not takes(1):
        return "bool"
    if takes(1) and not takes(1.5):
        return "int"
    assert takes(1.5), name
    return "float"


def test_the_c_members_are_the_core_state_fields() -> None:
    members = {
        name
        for name, attr in vars(fastpath.MeterCore).items()
        if isinstance(attr, types.MemberDescriptorType)
    }
    assert members == set(CoreState.__annotations__)
    core = fastpath.MeterCore()
    for name, annotation in CoreState.__annotations__.items():
        assert member_kind(core, name) == _KINDS.get(annotation, "object"), name


def test_the_python_slots_are_the_core_state_fields() -> None:
    assert PyMeterCore.__slots__ == tuple(CoreState.__annotations__)


@pytest.mark.parametrize("meter_cls", [PyStreamMeter, CStreamMeter], ids=["py", "c"])
def test_a_meter_sets_every_field_and_holds_nothing_else(meter_cls: Any) -> None:
    meter = meter_cls(0.0, want_text=True, max_tokens=10)
    for name in CoreState.__annotations__:
        getattr(meter, name)  # a slot never set raises AttributeError
    assert not hasattr(meter, "__dict__")
    with pytest.raises(AttributeError):
        meter.not_a_field = 1
