"""Token accounting and timing of one chat completion, chunk by chunk.

A :class:`StreamMeter` is fed the SSE ``data`` payloads of a streamed
response with the time each was read, and fills a :class:`RequestRecord`.
Token counts, best source first:

1. ``exact``: the server honours ``continuous_usage_stats`` — every chunk
   carries cumulative ``usage.completion_tokens``, so each chunk's tokens and
   its channel (reasoning, content or tool calls) are known exactly;
2. ``usage``: the final usage (``completion_tokens``, and
   ``completion_tokens_details.reasoning_tokens`` for the split when non-zero);
3. ``tokenizer``: the text of each channel tokenized locally (``--tokenizer``);
4. ``chunks-estimate``: chunks counted, one token each — an estimate, marked.

Usage the meter cannot believe fails the request (:class:`MalformedUsage`,
``error_kind="malformed_usage"``) at the chunk that carries it, keeping what was
counted before: ``prompt_tokens``, ``completion_tokens`` or
``completion_tokens_details.reasoning_tokens`` that is not a non-negative integer,
details that are not an object, a cumulative ``completion_tokens`` that goes down,
or any count beyond what the request allowed (:func:`token_limit`).

Reasoning text is read from ``delta.reasoning`` (vLLM >= 0.16) or
``delta.reasoning_content`` (older), never both for one chunk. Tool calls
(``delta.tool_calls``: a list of calls whose ``function`` carries the ``name`` and
``arguments`` fragments) are a channel of their own: counted and timed like the
others (the request ends at its last token of any channel), never reasoning.

A server's own error event inside the stream (vLLM: ``{"error": {"message": ...,
"type": ..., "code": ...}}``, older versions ``{"object": "error", "message": ...}``)
raises :class:`ServerErrorEvent` (``error_kind="server_error"``), its message (one
line, cut) the detail.
"""

from __future__ import annotations

from bisect import bisect_left
from itertools import accumulate
from typing import TYPE_CHECKING, Any, Protocol

import orjson

from specload.histogram import Histogram
from specload.load.switches import SWITCHES, extension
from specload.records.request import ARRIVAL_SAMPLE_S, RequestRecord
from specload.records.servertiming import server_timing
from specload.records.specdecode import estimate_from_chunks, record_spec_decode

_loads = orjson.loads
# Channel splits that give the exact index of the first content token.
ONE_SPLIT = frozenset({"exact", "single-channel"})
ReadBuffer = bytes | bytearray | memoryview

# Completion tokens believed when the request set no max_tokens (the server's own
# limit is unknown): more than any context window of today.
HARD_CAP_TOKENS = 10**7
# prompt_tokens beyond this are not a count (the C fast path has the same constant).
MAX_PROMPT_TOKENS = 10**9
_MAX_LIMIT = 10**18 - 1  # a limit fits the C core's long long and its 18-digit numbers


def token_limit(max_tokens: int | None) -> int:
    """The most completion tokens a request may report: ``max_tokens`` plus a slack of
    max(8, 1%) (servers count a stop token or two beyond the budget), or
    :data:`HARD_CAP_TOKENS` without ``max_tokens``."""
    if max_tokens is None:
        return HARD_CAP_TOKENS
    max_tokens = max(int(max_tokens), 0)
    return min(max_tokens + max(8, -(-max_tokens // 100)), _MAX_LIMIT)


class TokenCounter(Protocol):
    """Counts the tokens of a text (a local tokenizer)."""

    def count(self, text: str) -> int: ...


class MalformedChunk(Exception):
    """A chunk that is not the JSON of a chat completion chunk."""

    kind = "malformed"  # the record's error_kind


class MalformedUsage(MalformedChunk):
    """A usage object or token count the meter cannot believe (the detail names the field)."""

    kind = "malformed_usage"


class ServerErrorEvent(MalformedChunk):
    """The server's own error event in the stream (or a 2xx error object): the detail
    is its type, code and message, one line, cut."""

    kind = "server_error"


# Characters of a server's error message kept in the detail (the record cuts at 200).
_SERVER_MESSAGE_CHARS = 160


def _server_error(obj: dict[str, Any]) -> ServerErrorEvent | None:
    """The error event ``obj`` is (``{"error": ...}`` not null, or ``"object": "error"``),
    else None."""
    err = obj.get("error")
    if err is not None:
        body = err if type(err) is dict else {"message": err}
    elif obj.get("object") == "error":
        body = obj
    else:
        return None
    message = body.get("message")
    text = message if type(message) is str and message.strip() else "(no message)"
    head = " ".join(
        str(v)
        for v in (body.get("type"), body.get("code"))
        if type(v) in (str, int) and str(v).strip()
    )
    detail = f"{head}: {text}" if head else text
    # One line of printable text: a message may hold newlines or terminal escapes.
    detail = " ".join("".join(c if c.isprintable() else " " for c in detail).split())
    if len(detail) > _SERVER_MESSAGE_CHARS:
        detail = detail[: _SERVER_MESSAGE_CHARS - 3] + "..."
    return ServerErrorEvent(f"the server's error event: {detail}")


def _tool_text(calls: list[Any], payload: bytes) -> str:
    """The text of ``delta.tool_calls`` (each call's function name and arguments fragment);
    a call that is not an object, a ``function`` that is not an object or null, a name or
    arguments that is not a string or null: malformed."""
    parts: list[str] = []
    for call in calls:
        if type(call) is not dict:
            raise MalformedChunk(payload[:80].decode("utf-8", "replace"))
        function = call.get("function")
        if function is None:
            continue
        if type(function) is not dict:
            raise MalformedChunk(payload[:80].decode("utf-8", "replace"))
        for key in ("name", "arguments"):
            value = function.get(key)
            if value is None:
                continue
            if type(value) is not str:
                raise MalformedChunk(payload[:80].decode("utf-8", "replace"))
            parts.append(value)
    return "".join(parts)


def _show(value: Any) -> str:
    """A short, safe rendering of a bad value for an error detail."""
    if type(value) is int and value.bit_length() > 64:
        return f"an integer of {value.bit_length()} bits"
    text = repr(value)
    return text if len(text) <= 40 else text[:37] + "..."


def _not_count(field: str, value: Any) -> MalformedUsage:
    return MalformedUsage(f"{field} is not a non-negative integer: {_show(value)}")


class CoreState:
    """The state a meter core holds, one annotation per field: the one list of them.

    :class:`PyMeterCore`'s slots are built from it; the C ``MeterCore`` declares the
    same fields as members (its stub derives from this class) and a unit test
    compares them, name by name and kind by kind (float, int, bool, else an object).
    Never instantiated: for the slots, type checking and that test.
    """

    t0: float
    token_limit: int
    want_text: bool
    done: bool
    first_t: float | None
    last_event_t: float | None
    first_content_t: float | None
    _last_t: float
    _gaps: list[float]
    _chunk_tokens: list[int]
    chunks_reasoning: int
    chunks_content: int
    chunks_tool: int
    continuous: bool
    _prev_cum: int
    tokens_reasoning_exact: int
    tokens_content_exact: int
    tokens_tool_exact: int
    unattributed: int
    _pending_tokens: int
    tokens_textless: int
    _mixed: list[tuple[int, str, str, str]]
    last_channel: int
    _usage: dict[str, Any] | bytes | None
    finish_reason: str | None
    has_content_text: bool
    sse_pending: bool
    _text_reasoning: list[str]
    _text_content: list[str]
    _text_tool: list[str]
    _spec: Any


class PyMeterCore:
    """The state of one streamed response, in plain Python (no C extension).

    :class:`StreamMeter` runs on this or on the C ``MeterCore`` of
    ``specload.load._fastpath`` (same fields); only the C one has a fast
    :meth:`feed_read`, here it always declines and every read goes through
    the full parsers — same results, more CPU.
    """

    __slots__ = tuple(CoreState.__annotations__)

    def feed_read(self, buf: ReadBuffer, n: int, now: float) -> int:
        """Account one socket read of a chunked SSE body if certain: never, here."""
        return 0


if TYPE_CHECKING:
    _StateBase = CoreState
else:
    _StateBase = object


class _MeterLogic(_StateBase):
    """Accumulates one streamed response; call :meth:`finish` to fill the record.

    Fed either SSE ``data`` payloads (:meth:`feed`, the full path) or whole
    socket reads of the chunked body (``feed_read``: the fast path of the C
    core, which declines — returns 0, nothing changed — whatever it cannot
    read with certainty). The state lives in the core base class
    (:class:`PyMeterCore` or the C ``MeterCore``); ``FAST_PATH`` says which.
    """

    if not TYPE_CHECKING:  # the slots are the core's (mypy: CoreState's attributes)
        __slots__ = ()

    if TYPE_CHECKING:

        def feed_read(self, buf: ReadBuffer, n: int, now: float) -> int: ...

    def __init__(
        self, t0: float, *, want_text: bool = False, max_tokens: int | None = None
    ) -> None:
        self.t0 = t0
        self.token_limit = token_limit(max_tokens)  # completion tokens beyond: malformed
        self.want_text = want_text
        self.done = False
        self.first_t = None
        self.last_event_t = None
        self.first_content_t = None
        self._last_t = 0.0
        self._gaps = []
        self._chunk_tokens = []
        self.chunks_reasoning = 0
        self.chunks_content = 0
        self.chunks_tool = 0
        self.continuous = True  # until a token-bearing chunk arrives without usage
        self._prev_cum = 0
        self.tokens_reasoning_exact = 0
        self.tokens_content_exact = 0
        self.tokens_tool_exact = 0
        self.unattributed = 0
        self._pending_tokens = 0  # tokens announced before any text (a role chunk)
        self.tokens_textless = 0  # tokens in chunks without text after the first text
        self._mixed = []  # chunks with several channels: (tokens, reasoning, content, tool)
        self.last_channel = 0  # 0 reasoning, 1 content, 2 tool calls
        self._usage = None  # the last usage: a dict, or its raw JSON (from the fast path)
        self.finish_reason = None
        self.has_content_text = False
        self.sse_pending = False  # the SSE decoder holds part of an event: no fast path
        self._text_reasoning = []
        self._text_content = []
        self._text_tool = []
        self._spec = None  # the server's per-request ``metrics`` object (the last chunk's)

    @property
    def final_usage(self) -> dict[str, Any] | None:
        """The last non-empty ``usage`` object seen."""
        usage = self._usage
        if isinstance(usage, bytes):
            usage = self._usage = _loads(usage)
        return usage

    # -- the hot path -----------------------------------------------------
    def feed(self, payload: bytes, now: float, obj: Any = None) -> None:
        """One SSE ``data`` payload; ``obj``: the payload already parsed (a subclass that
        reads more of the chunk parses it once)."""
        self.last_event_t = now
        if payload == b"[DONE]":
            self.done = True
            return
        if obj is None:
            try:
                obj = _loads(payload)
            except orjson.JSONDecodeError:
                raise MalformedChunk(payload[:80].decode("utf-8", "replace")) from None
        if type(obj) is not dict:
            raise MalformedChunk(payload[:80].decode("utf-8", "replace"))
        if "error" in obj or obj.get("object") == "error":
            server_error = _server_error(obj)
            if server_error is not None:
                raise server_error
        usage = obj.get("usage")
        choices = obj.get("choices")
        reasoning = content = fr = None
        tool: str | None = None  # the tool calls' text ("" for calls without any)
        if choices:
            if type(choices) is not list or type(choices[0]) is not dict:
                raise MalformedChunk(payload[:80].decode("utf-8", "replace"))
            choice = choices[0]
            delta = choice.get("delta")
            if delta:
                if type(delta) is not dict:
                    raise MalformedChunk(payload[:80].decode("utf-8", "replace"))
                reasoning = delta.get("reasoning")
                if reasoning is None:
                    reasoning = delta.get("reasoning_content")
                content = delta.get("content")
                if not (reasoning is None or type(reasoning) is str) or not (
                    content is None or type(content) is str
                ):
                    raise MalformedChunk(payload[:80].decode("utf-8", "replace"))
                calls = delta.get("tool_calls")
                if calls is not None:
                    if type(calls) is not list:
                        raise MalformedChunk(payload[:80].decode("utf-8", "replace"))
                    if calls:
                        tool = _tool_text(calls, payload)
            fr = choice.get("finish_reason")
            if fr is not None and type(fr) is not str:
                raise MalformedChunk(payload[:80].decode("utf-8", "replace"))
        elif choices is None and usage is None:
            raise MalformedChunk(payload[:80].decode("utf-8", "replace"))
        ntok = -1
        if usage:
            # Checked before anything of this chunk is kept: a chunk with usage the meter
            # cannot believe changes nothing (what came before stays counted).
            if type(usage) is not dict:
                raise MalformedUsage(f"usage is not an object: {_show(usage)}")
            cum = usage.get("completion_tokens")
            # Counts: non-negative integers (not a bool, a float or a string), cumulative
            # ones never going down, none beyond what the request allowed.
            if cum is not None and (
                type(cum) is not int or not self._prev_cum <= cum <= self.token_limit
            ):
                raise self._bad_completion_tokens(cum)
            prompt = usage.get("prompt_tokens")
            if prompt is not None and (
                type(prompt) is not int or not 0 <= prompt <= MAX_PROMPT_TOKENS
            ):
                if type(prompt) is int and prompt > 0:
                    raise MalformedUsage(
                        f"usage.prompt_tokens {_show(prompt)} is beyond {MAX_PROMPT_TOKENS}"
                    )
                raise _not_count("usage.prompt_tokens", prompt)
            details = usage.get("completion_tokens_details")
            if details is not None:
                self._check_details(details, cum)
            self._usage = usage
            if cum is not None:
                ntok = cum - self._prev_cum
                self._prev_cum = cum
        metrics = obj.get("metrics")
        if metrics is not None:
            # vLLM's per-request metrics (--per-request-spec-decode-metrics, its timing with
            # --enable-per-request-metrics): on the final usage chunk, or the response. The
            # whole object is kept (in _spec: the C core's one member for it) and read when
            # the record is made, never here.
            self._spec = metrics
        if fr is not None:
            self.finish_reason = fr
        if not (reasoning or content or tool is not None):
            if ntok > 0 and self.continuous:
                # Tokens without text: before any text they belong to the first text chunk;
                # after (a stop token, a final chunk), to the channel before.
                if self.first_t is None:
                    self._pending_tokens += ntok
                else:
                    self.tokens_textless += ntok
                    last = self.last_channel
                    if last == 1:
                        self.tokens_content_exact += ntok
                    elif last == 2:
                        self.tokens_tool_exact += ntok
                    else:
                        self.tokens_reasoning_exact += ntok
            return
        if ntok < 0:
            self.continuous = False
        elif self._pending_tokens:
            ntok += self._pending_tokens
            self._pending_tokens = 0
        channel = -1  # several channels in one chunk: split later
        if reasoning:
            channel = 0
            self.chunks_reasoning += 1
        if content:
            channel = 1 if channel < 0 else 3
            self.chunks_content += 1
            self.has_content_text = True
            if self.first_content_t is None:
                self.first_content_t = now
        if tool is not None:
            channel = 2 if channel < 0 else 3
            self.chunks_tool += 1
        # the chunk's last channel (reasoning comes before the answer, the answer's text
        # before its calls): where the tokens of chunks without text after it go
        self.last_channel = 2 if tool is not None else 1 if content else 0
        if self.want_text:
            if reasoning:
                self._text_reasoning.append(reasoning)
            if content:
                self._text_content.append(content)
            if tool:
                self._text_tool.append(tool)
        if ntok >= 0:
            if channel == 1:
                self.tokens_content_exact += ntok
            elif channel == 0:
                self.tokens_reasoning_exact += ntok
            elif channel == 2:
                self.tokens_tool_exact += ntok
            else:
                self.unattributed += ntok
                self._mixed.append((ntok, reasoning or "", content or "", tool or ""))
        if self.first_t is None:
            self.first_t = now
        else:
            self._gaps.append(now - self._last_t)
            self._chunk_tokens.append(ntok)
        self._last_t = now

    def _bad_completion_tokens(self, cum: Any) -> MalformedUsage:
        if type(cum) is not int or cum < 0:
            return _not_count("usage.completion_tokens", cum)
        if cum < self._prev_cum:
            return MalformedUsage(
                f"usage.completion_tokens went down, from {self._prev_cum} to {cum}"
            )
        return MalformedUsage(
            f"usage.completion_tokens {_show(cum)} is beyond the request's limit {self.token_limit}"
        )

    def _check_details(self, details: Any, cum: int | None) -> None:
        if type(details) is not dict:
            raise MalformedUsage(
                f"usage.completion_tokens_details is not an object: {_show(details)}"
            )
        r = details.get("reasoning_tokens")
        if r is None:
            return
        field = "usage.completion_tokens_details.reasoning_tokens"
        if type(r) is not int or r < 0:
            raise _not_count(field, r)
        most = cum if cum is not None else self.token_limit
        if r > most:
            what = "completion_tokens" if cum is not None else "the request's limit"
            raise MalformedUsage(f"{field} {_show(r)} is beyond {what} {most}")

    # -- the end ----------------------------------------------------------
    def finish(
        self,
        record: RequestRecord,
        end: float,
        tokenizer: TokenCounter | None = None,
    ) -> None:
        """Fill ``record``'s timings, tokens and ITL histograms.

        E2E of a complete stream ends at its last token-bearing chunk of any channel
        (reasoning, content or tool calls), as vLLM's benchmark does (the usage chunk
        and ``[DONE]`` that follow carry no token); of anything else, at ``end``
        (perf_counter).
        """
        t0 = self.t0
        if self.done and self.first_t is not None:
            last = self._last_t
        elif self.done and self.last_event_t is not None:
            last = self.last_event_t
        else:
            last = end
        record.e2e_s = last - t0
        if self.first_t is not None:
            record.ttft_s = self.first_t - t0
        if self.first_content_t is not None:
            record.ttfct_s = self.first_content_t - t0
        chunks = len(self._gaps) + (1 if self.first_t is not None else 0)
        record.chunks = chunks
        record.finish_reason = self.finish_reason
        usage = self.final_usage
        if usage is not None and usage.get("prompt_tokens") is not None:
            record.prompt_tokens = int(usage["prompt_tokens"])  # checked by feed
        reasoning, content, tool, source, split = self._tokens(usage, tokenizer)
        record.tokens_reasoning = reasoning
        record.tokens_content = content
        record.tokens_tool = tool
        record.tokens_output = reasoning + content + tool
        record.token_count_source = source
        record.channel_split_source = split
        # cut at max_tokens before any answer token (text or call)
        record.reasoning_truncated = self.finish_reason == "length" and content + tool == 0
        if record.ttft_s is not None and record.tokens_output > 1:
            record.tpot_s = (record.e2e_s - record.ttft_s) / (record.tokens_output - 1)
        gaps = self._gaps
        ordered = True  # chunk times never go back (gaps >= 0): sampling by bisection
        if gaps:
            per_chunk = Histogram()
            per_chunk.extend(gaps)
            ordered = per_chunk.min >= 0.0
            record.chunks_coalesced = gaps.count(0.0)
            record.itl_chunk_hist = per_chunk
            tokens = self._chunk_tokens
            per_token = Histogram()
            if source == "exact":
                if tokens.count(1) == len(tokens):
                    # One token per chunk: the same distribution (shared, read-only).
                    per_token = per_chunk
                else:
                    _add_per_token(per_token, gaps, tokens)
            elif record.tokens_output > 1:
                avg_tokens = (record.tokens_output - 1) / len(gaps)
                per_token.extend([gap / avg_tokens for gap in gaps])
            record.itl_token_hist = per_token if per_token.count else None
        if record.tokens_output > 0 and self.first_t is not None:
            record.arrivals = self._arrivals(record.tokens_output, source == "exact", ordered)
        metrics = self._spec
        spec = metrics.get("speculative_decoding") if type(metrics) is dict else metrics
        timing = server_timing(metrics)
        if timing is not None:
            for name, value in timing.items():
                setattr(record, name, value)
        if spec is not None:
            record.spec_decode = record_spec_decode(
                spec,
                content_start=self._step_content_start(record, split, source),
                tokens_output=record.tokens_output,
                sizes=self.chunk_sizes() if source == "exact" else None,
            )

    def estimate_spec_decode(self, record: RequestRecord) -> None:
        """``record.spec_decode`` estimated from tokens per chunk (the server sent no
        per-request counts): only with exact counts per chunk and no two chunks read at
        once (chunks that may hold several steps say nothing about one step)."""
        if record.spec_decode is not None or record.chunks_coalesced or not record.ok:
            return
        source = record.token_count_source
        sizes = self.chunk_sizes() if source == "exact" else None
        if sizes is None:
            return
        start = self._step_content_start(record, record.channel_split_source, source)
        record.spec_decode = estimate_from_chunks(sizes, start)

    def _step_content_start(self, record: RequestRecord, split: str, source: str) -> int | None:
        """Where the first step whose first token is content starts (output tokens before
        it): the first content token with an exact split; with one chunk of both channels
        (reasoning first: a step that ended the reasoning), the chunk after it. Tool calls
        count as content here: the channels of speculation are the reasoning and what
        follows it."""
        if split in ONE_SPLIT:
            return record.tokens_reasoning
        if source == "exact" and len(self._mixed) == 1:
            if not self._mixed[0][1]:  # no reasoning in it: the answer's text and a call
                return self.tokens_reasoning_exact
            return self.tokens_reasoning_exact + self.unattributed
        return None

    def chunk_sizes(self) -> list[int] | None:
        """Tokens per token-bearing chunk, in order (exact counts only; None otherwise):
        the first chunk's (with any sent before the first text), then each one's, then the
        tokens of chunks without text after the first text, as one last chunk."""
        if not (self.continuous and self._prev_cum > 0) or self.first_t is None:
            return None
        rest = self._chunk_tokens
        tail = self.tokens_textless
        first = self._prev_cum - sum(rest) - tail
        if first < 1:
            return None
        return [first, *rest, tail] if tail else [first, *rest]

    def _arrivals(self, total: int, exact: bool, ordered: bool) -> list[list[float]]:
        """``[offset_s, cumulative_tokens]`` samples (see ``RequestRecord.arrivals``).

        The first token-bearing chunk, then the first chunk at least ARRIVAL_SAMPLE_S
        after the last kept one, and so on, then the last chunk (with ``total``).
        Exact counts: each chunk's own tokens (any sent in chunks without text, a
        role chunk or a stop token, count with the first chunk); else the chunk index
        scaled to ``total``. ``ordered``: no gap is negative, so the next sample is
        found by bisection (a few per request) instead of a pass per chunk.
        """
        t0 = self.t0
        first = self.first_t
        assert first is not None
        gaps = self._gaps
        n = len(gaps) + 1
        if n == 1:
            return [[round(self._last_t - t0, 6), total]]
        step = ARRIVAL_SAMPLE_S
        tokens = self._chunk_tokens
        # times[i]: chunk i (0 .. n-2; the last chunk is added after, at _last_t)
        times = list(accumulate(gaps[:-1], initial=first))
        kept: list[int] = [0]
        if ordered:
            i = 0
            end = len(times)
            while True:
                i = bisect_left(times, times[i] + step, i + 1, end)
                if i >= end:
                    break
                kept.append(i)
        else:
            due = first + step
            for i, t in enumerate(times):
                if t >= due:
                    kept.append(i)
                    due = t + step
        out: list[list[float]] = []
        if exact:
            cum = max(total - sum(tokens), 0)  # the first chunk's tokens
            prev = 0
            for i in kept:
                if i:
                    cum += sum(tokens[prev:i])
                    prev = i
                out.append([round(times[i] - t0, 6), cum])
        else:
            out = [[round(times[i] - t0, 6), round((i + 1) * total / n, 3)] for i in kept]
        out.append([round(self._last_t - t0, 6), total])
        return out

    def _tokens(
        self, usage: dict[str, Any] | None, tokenizer: TokenCounter | None
    ) -> tuple[int, int, int, str, str]:
        """(reasoning, content, tool) tokens, their source and how they were split."""
        if self.continuous and self._prev_cum > 0:
            reasoning = self.tokens_reasoning_exact
            content = self.tokens_content_exact
            tool = self.tokens_tool_exact
            if self._pending_tokens:  # tokens but never any text
                reasoning += self._pending_tokens
            if self._mixed:
                for ntok, *texts in self._mixed:
                    if tokenizer is not None:
                        weights = [tokenizer.count(t) for t in texts]
                    else:
                        weights = [len(t) for t in texts]
                    if not sum(weights):
                        weights = [1 if t else 0 for t in texts]  # calls without text
                    r, c, t = _split(ntok, weights)
                    reasoning += r
                    content += c
                    tool += t
                split = "tokenizer" if tokenizer else "text-estimate"
                return reasoning, content, tool, "exact", split
            return reasoning, content, tool, "exact", "exact"
        total = None
        if usage is not None and usage.get("completion_tokens") is not None:
            total = int(usage["completion_tokens"])
        if total is not None:
            details = usage.get("completion_tokens_details") if usage else None
            r_details = (details or {}).get("reasoning_tokens") or 0
            if r_details > 0:
                # The reasoning is counted; the rest is the answer's text and its calls.
                r_details = min(int(r_details), total)
                rest = total - r_details
                if not (self.chunks_content and self.chunks_tool):
                    if self.chunks_tool:
                        return r_details, 0, rest, "usage", "usage-details"
                    return r_details, rest, 0, "usage", "usage-details"
                _, content, tool = _split(rest, [0, *self._weights(tokenizer)[1:]])
                return r_details, content, tool, "usage", self._estimate_name(tokenizer)
            present = [self.chunks_reasoning, self.chunks_content, self.chunks_tool]
            if sum(1 for n in present if n) <= 1:
                # one channel (none: reasoning, as a stream of tokens without text)
                only = present.index(max(present)) if any(present) else 0
                counts = [0, 0, 0]
                counts[only] = total
                return counts[0], counts[1], counts[2], "usage", "single-channel"
            r, c, t = _split(total, self._weights(tokenizer))
            return r, c, t, "usage", self._estimate_name(tokenizer)
        if tokenizer is not None and self.want_text:
            r, c, t = (
                tokenizer.count("".join(texts))
                for texts in (self._text_reasoning, self._text_content, self._text_tool)
            )
            return r, c, t, "tokenizer", "tokenizer"
        return (
            self.chunks_reasoning,
            self.chunks_content,
            self.chunks_tool,
            "chunks-estimate",
            "chunks-estimate",
        )

    def _estimate_name(self, tokenizer: TokenCounter | None) -> str:
        if tokenizer is not None:
            return "tokenizer"
        return "text-estimate" if self.want_text else "chunks-estimate"

    def _weights(self, tokenizer: TokenCounter | None) -> list[int]:
        """Each channel's share of the tokens, as best known: its text's tokens, its text's
        characters, else its chunks."""
        texts = (self._text_reasoning, self._text_content, self._text_tool)
        if tokenizer is not None and self.want_text:
            return [tokenizer.count("".join(t)) for t in texts]
        if self.want_text:
            return [sum(len(x) for x in t) for t in texts]
        return [self.chunks_reasoning, self.chunks_content, self.chunks_tool]


def _split(total: int, weights: list[int]) -> tuple[int, int, int]:
    """``total`` split over three channels in proportion to ``weights`` (rounded so that
    the parts add up to ``total``: each boundary rounded once); no weight: all reasoning."""
    w = sum(weights)
    if not w:
        return total, 0, 0
    first = round(total * (weights[0] / w))
    second = round(total * ((weights[0] + weights[1]) / w))
    return first, second - first, total - second


def _add_per_token(hist: Histogram, gaps: list[float], tokens: list[int]) -> None:
    """Add each chunk's gap / tokens once per token it carried: weights, not repeated
    values (memory per chunk, not per token, whatever a chunk claims)."""
    groups: dict[int, list[float]] = {}
    for gap, ntok in zip(gaps, tokens, strict=True):
        if ntok > 0:
            values = groups.get(ntok)
            if values is None:
                groups[ntok] = [gap / ntok]
            else:
                values.append(gap / ntok)
    for ntok, values in groups.items():
        if ntok == 1:
            hist.extend(values)
        elif ntok <= 16 and len(values) > 4:
            # Many chunks of a few tokens (speculative decoding): bucket them once,
            # then count the buckets ntok times (merging adds counts exactly).
            once = Histogram(hist.relative_accuracy)
            once.extend(values)
            for _ in range(ntok):
                hist.merge(once)
        else:
            for value in values:
                hist.add(value, ntok)


class PyStreamMeter(_MeterLogic, PyMeterCore):
    """A :class:`StreamMeter` on the pure-Python core."""

    __slots__ = ()


def _id_list(value: Any, payload: bytes) -> list[int]:
    if type(value) is not list or not all(type(v) is int and v >= 0 for v in value):
        raise MalformedChunk(payload[:80].decode("utf-8", "replace"))
    return value


class TokenIdMeter(PyStreamMeter):
    """A :class:`PyStreamMeter` that also keeps the token ids (``return_token_ids``).

    Every chunk goes through :meth:`feed` (no fused reader): ``prompt_token_ids`` at the
    top level of a chunk (the first, streamed), ``token_ids`` in its ``choices[0]``.
    ``content_start``: output ids before the first chunk of the answer (content or tool
    calls); a chunk with both (a non-streamed answer) is split in proportion to their text.
    """

    __slots__ = ("content_start", "output_ids", "prompt_ids")

    prompt_ids: list[int] | None
    output_ids: list[int] | None
    content_start: int | None

    def __init__(
        self, t0: float, *, want_text: bool = False, max_tokens: int | None = None
    ) -> None:
        super().__init__(t0, want_text=want_text, max_tokens=max_tokens)
        self.prompt_ids = None
        self.output_ids = None
        self.content_start = None

    def feed(self, payload: bytes, now: float, obj: Any = None) -> None:
        if payload == b"[DONE]":
            super().feed(payload, now)
            return
        if obj is None:
            try:
                obj = _loads(payload)
            except orjson.JSONDecodeError:
                obj = None  # the base raises MalformedChunk for it
        super().feed(payload, now, obj)  # checks the chunk; a malformed one raises here
        prompt = obj.get("prompt_token_ids")
        if prompt is not None and self.prompt_ids is None:
            self.prompt_ids = _id_list(prompt, payload)
        choices = obj.get("choices")
        if not choices:
            return
        choice = choices[0]
        ids = choice.get("token_ids")
        if ids is None:
            return
        ids = _id_list(ids, payload)
        out = self.output_ids
        if out is None:
            out = self.output_ids = []
        if self.content_start is None:
            delta = choice.get("delta") or {}
            answer = delta.get("content") or ""
            calls = delta.get("tool_calls")
            if calls:  # checked by the base: a call starts the answer too, text or none
                answer += _tool_text(calls, payload) or " "
            if answer:
                reasoning = delta.get("reasoning") or delta.get("reasoning_content") or ""
                before = round(len(ids) * len(reasoning) / (len(reasoning) + len(answer)))
                self.content_start = len(out) + before
        out.extend(ids)

    def finish(
        self,
        record: RequestRecord,
        end: float,
        tokenizer: TokenCounter | None = None,
    ) -> None:
        super().finish(record, end, tokenizer)
        record.prompt_ids = self.prompt_ids
        record.output_ids = self.output_ids
        record.content_start = self.content_start


if TYPE_CHECKING:
    StreamMeter = PyStreamMeter
    FAST_PATH = False
else:
    _CMeterCore = None if extension is None else extension.MeterCore  # None: no C compiler

    if _CMeterCore is not None:

        class CStreamMeter(_MeterLogic, _CMeterCore):
            """A :class:`StreamMeter` on the C core, with the fast :meth:`feed_read`."""

            __slots__ = ()

    # SPECLOAD_FASTPATH=0: the pure-Python path even when the extension is built.
    FAST_PATH = _CMeterCore is not None and SWITCHES.fastpath
    StreamMeter = CStreamMeter if FAST_PATH else PyStreamMeter


def meter_message(message: dict[str, Any], meter: StreamMeter, now: float) -> None:
    """Account a non-streamed response (``choices[0].message``) as one chunk; an error
    object (a 2xx that is the server's error) raises :class:`ServerErrorEvent`."""
    server_error = _server_error(message)
    if server_error is not None:
        raise server_error
    choices = message.get("choices") or [{}]
    if type(choices) is not list or type(choices[0]) is not dict:
        raise MalformedChunk("response choices are not a list of objects")
    msg = choices[0].get("message") or {}
    if type(msg) is not dict:
        raise MalformedChunk("response choices[0].message is not an object")
    reasoning = msg.get("reasoning")
    if reasoning is None:
        reasoning = msg.get("reasoning_content")
    delta = {"reasoning": reasoning, "content": msg.get("content")}
    if msg.get("tool_calls") is not None:
        delta["tool_calls"] = msg["tool_calls"]
    chunk: dict[str, Any] = {
        "choices": [{"delta": delta, "finish_reason": choices[0].get("finish_reason")}]
    }
    if message.get("usage") is not None:
        chunk["usage"] = message["usage"]
    if message.get("metrics") is not None:
        chunk["metrics"] = message["metrics"]
    if isinstance(meter, TokenIdMeter):
        chunk["prompt_token_ids"] = message.get("prompt_token_ids")
        chunk["choices"][0]["token_ids"] = choices[0].get("token_ids")
    meter.feed(orjson.dumps(chunk), now)
    meter.continuous = False  # one chunk: the usage is final usage, not per-chunk
    meter.done = True
