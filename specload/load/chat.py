"""One chat completion request, measured: prompt in, :class:`RequestRecord` out.

Faults in the target never escape: every failure becomes a record with
``ok=False`` and an ``error_kind`` (``refused``, ``reset``, ``timeout``,
``http_<code>``, ``content_type``, ``content_encoding``, ``malformed``, ``malformed_usage``,
``server_error``, ``no_done``, ``protocol``, ``bad_request``). A 2xx answer must be
``text/event-stream`` (streamed) or JSON (not streamed), else it fails as
``content_type`` (detail: the type received, then the start of the body).
:attr:`ChatRequester.retry_after_s` is the wait the last failed answer asked for
(``Retry-After``), for the user's pacing.
Nor do faults of specload's own meter and parsers (a bug): such a request ends
as ``client_error`` (the exception's type and message), its connection closed,
and the user goes on. A request whose body cannot be built (a prompt that is not
UTF-8 text, a number JSON cannot hold: the loaders refuse such prompts, so only a
bug or a model name from the server gets here) is never sent: it ends at once as
``bad_request``, the connection untouched.

Nothing of a prompt reaches an HTTP header: the ``X-Specload-Category`` header (the
simulator's hint) is sent only for the built-in categories, from a fixed table.
"""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import orjson

from specload.load.connection import Connection
from specload.load.failures import RequestFailed
from specload.load.meter import (
    FAST_PATH,
    MalformedChunk,
    StreamMeter,
    TokenCounter,
    TokenIdMeter,
    meter_message,
)
from specload.load.options import WARMUP_SUFFIX
from specload.load.response import FastReader
from specload.prompts import CATEGORIES, Prompt
from specload.records.request import RequestRecord
from specload.sse import EventTooLarge, SSEDecoder
from specload.urls import ServerURL

DEFAULT_TIMEOUT_S = 600.0
_DETAIL_CHARS = 200
# A non-streamed answer longer than this fails as ``malformed`` (no chat answer is near it).
MAX_JSON_BODY_BYTES = 64 << 20
# The category hint for the simulator (simulator.workload.CATEGORY_HEADER), a fixed
# header line per built-in category: a category from a file never becomes header bytes.
_CATEGORY_HEADERS: dict[str, bytes] = {
    c: f"X-Specload-Category: {c}\r\n".encode("ascii") for c in CATEGORIES
}


def _writable(text: str) -> str:
    """``text`` as UTF-8 can hold it: a lone surrogate written as its escape."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return text.encode("utf-8", "backslashreplace").decode("utf-8")
    return text


@dataclass(frozen=True)
class ChatSettings:
    """What every request of a run shares (the load options)."""

    model: str
    variant: str = "default"
    max_tokens: int | None = None  # None: the prompt's own budget
    temperature: float | None = None
    stream: bool = True
    api_key: str | None = None
    timeout_s: float = DEFAULT_TIMEOUT_S
    usage_stats: bool = True  # ask for include_usage + continuous_usage_stats
    return_token_ids: bool = False  # ask for the ids; the record keeps them
    cache_bust: str | None = None  # the nonce that prefixes every prompt (--cache-bust)
    spec_estimate: bool = False  # estimate spec_decode from chunks when the server sends none

    def __repr__(self) -> str:  # never show the API key
        return (
            f"ChatSettings(model={self.model!r}, variant={self.variant!r}, "
            f"max_tokens={self.max_tokens}, stream={self.stream})"
        )


def cache_busted(
    messages: Sequence[Mapping[str, Any]], nonce: str, step: str
) -> Sequence[Mapping[str, Any]]:
    """``messages`` with the first one's text prefixed by the nonce and the level (a
    level's warm-up shares its level's prefix): the server's prefix cache holds nothing of
    them from another level or run, while prompts repeated inside a level still share."""
    if not messages:
        return messages
    level = step.removesuffix(WARMUP_SUFFIX)
    first = dict(messages[0])
    content = first.get("content")
    tag = f"[run {nonce} {level}] "
    if isinstance(content, str):
        first["content"] = tag + content
    elif isinstance(content, list):  # content parts: a text part first
        first["content"] = [{"type": "text", "text": tag}, *content]
    else:
        return messages
    return [first, *messages[1:]]


class ChatRequester:
    """Sends chat completions over one kept-alive connection (one per user)."""

    def __init__(
        self,
        url: ServerURL,
        settings: ChatSettings,
        *,
        tokenizer: TokenCounter | None = None,
        worker: str = "",
    ) -> None:
        self.url = url
        self.settings = settings
        self.tokenizer = tokenizer
        self.worker = worker
        self._current: tuple[RequestRecord, StreamMeter] | None = None
        # Seconds the last answer asked to wait (Retry-After of an error), else None.
        self.retry_after_s: float | None = None
        host, port = url.host_port
        self.connection = Connection(host, port, tls=url.root.startswith("https:"))
        self._path = url.chat_completions.split("://", 1)[1]
        self._path = self._path[self._path.index("/") :]
        auth = f"Authorization: Bearer {settings.api_key}\r\n" if settings.api_key else ""
        accept = "text/event-stream" if settings.stream else "application/json"
        self._expect = accept.encode()
        self._headers = (f"Content-Type: application/json\r\nAccept: {accept}\r\n{auth}").encode()

    def close(self) -> None:
        self.connection.close()

    def body(self, prompt: Prompt, step: str = "") -> bytes:
        s = self.settings
        messages: Sequence[Mapping[str, Any]] = prompt.messages
        if s.cache_bust:
            messages = cache_busted(messages, s.cache_bust, step)
        body: dict[str, Any] = {
            "model": s.model,
            "messages": messages,
            "max_tokens": s.max_tokens if s.max_tokens is not None else prompt.max_tokens,
            "stream": s.stream,
        }
        if s.temperature is not None:
            body["temperature"] = s.temperature
        if s.stream and s.usage_stats:
            body["stream_options"] = {"include_usage": True, "continuous_usage_stats": True}
        if s.return_token_ids:
            body["return_token_ids"] = True
        return orjson.dumps(body)

    def send(self, prompt: Prompt, step: str) -> RequestRecord:
        s = self.settings
        record = RequestRecord(
            category=prompt.category,
            step=step,
            variant=s.variant,
            model=s.model,
            start_s=time.time(),
            end_s=0.0,
            stream=s.stream,
            max_tokens=s.max_tokens if s.max_tokens is not None else prompt.max_tokens,
            worker=self.worker,
        )
        self.retry_after_s = None
        try:
            body = self.body(prompt, step)
        except Exception as exc:  # never sent: not the target's fault, nor a crash of the user
            return self._unsendable(record, exc)
        headers = self._headers + _CATEGORY_HEADERS.get(prompt.category, b"")
        want_text = self.tokenizer is not None or not s.stream
        t0 = time.perf_counter()
        meter_class = TokenIdMeter if s.return_token_ids else StreamMeter
        meter = meter_class(t0, want_text=want_text, max_tokens=record.max_tokens)
        self._current = (record, meter)
        body_parts: list[bytes] = []
        # The fused reader (C) takes whole reads of the chunked body; what it declines
        # comes to on_body below (and sets sse_pending while an event is incomplete).
        # With token ids every chunk goes through meter.feed (the ids are read there).
        fast: FastReader | None = (
            meter if FAST_PATH and s.stream and not want_text and not s.return_token_ids else None
        )
        if s.stream:
            decoder = SSEDecoder()
            dec_feed = decoder.feed
            meter_feed = meter.feed

            def on_body(data: bytes, now: float) -> None:
                # Fast path: the read holds exactly one single-line event (the usual case).
                if data[-2:] == b"\n\n" and data[:6] == b"data: " and not decoder.pending_size:
                    inner = data[6:-2]
                    if b"\n" not in inner and b"\r" not in inner:
                        meter_feed(inner, now)
                        return
                for payload in dec_feed(data):
                    meter_feed(payload, now)
                    if meter.done:  # a stream ends at [DONE], whatever follows
                        break
                meter.sse_pending = decoder.pending_size > 0

        else:
            body_size = [0]

            def on_body(data: bytes, now: float) -> None:
                body_size[0] += len(data)
                if body_size[0] > MAX_JSON_BODY_BYTES:  # an endless answer: not held in memory
                    raise MalformedChunk(f"non-streamed answer over {MAX_JSON_BODY_BYTES} bytes")
                body_parts.append(data)

        try:
            status = self.connection.request(
                "POST",
                self._path,
                body,
                headers,
                on_body,
                timeout_s=s.timeout_s,
                fast=fast,
                expect=self._expect,
                ends=meter if s.stream else None,
            )
            record.http_status = status
            end = time.perf_counter()
            if not s.stream:
                try:
                    message = orjson.loads(b"".join(body_parts))
                except orjson.JSONDecodeError:
                    raise MalformedChunk("response is not JSON") from None
                if not isinstance(message, dict):
                    raise MalformedChunk("response is not a JSON object")
                meter_message(message, meter, end)
            meter.finish(record, end, self.tokenizer)
            if not s.stream:
                # One response at the end: no first token, no per-token time to speak of.
                record.ttft_s = record.ttfct_s = record.tpot_s = None
                record.itl_chunk_hist = record.itl_token_hist = None
            if s.stream and not meter.done:
                record.error_kind = "no_done"
                record.error_detail = "stream ended without [DONE]"
            else:
                record.ok = True
                if s.spec_estimate and s.stream:
                    meter.estimate_spec_decode(record)
        except RequestFailed as exc:
            record.error_kind = exc.kind
            record.error_detail = self._masked(exc.detail)[:_DETAIL_CHARS]
            record.http_status = exc.status
            self.retry_after_s = exc.retry_after_s
            self._finish_failed(meter, record)
        except (MalformedChunk, EventTooLarge) as exc:
            # The rest of the stream is unread: the connection cannot be reused.
            self.connection.close()
            # malformed, malformed_usage, or server_error (the server's own error event)
            record.error_kind = getattr(exc, "kind", "malformed")
            record.error_detail = self._masked(str(exc))[:_DETAIL_CHARS]
            self._finish_failed(meter, record)
        except Exception as exc:  # a fault of specload's own code: never the user's end
            self._client_error(record, exc)
            self._finish_failed(meter, record)
        self._current = None
        record.end_s = record.start_s + (record.e2e_s or 0.0)
        return record

    def interrupted(self) -> RequestRecord | None:
        """The request in flight, ended now as ``unfinished`` with what it received
        (its user is being stopped); None when no request is in flight."""
        current, self._current = self._current, None
        if current is None:
            return None
        record, meter = current
        self.connection.close()  # mid-response: the connection cannot be reused
        self._finish_failed(meter, record)
        if record.error_kind != "client_error":
            record.error_kind = "unfinished"
            record.error_detail = "still in flight when the run stopped its user"
        record.end_s = record.start_s + (record.e2e_s or 0.0)
        return record

    def _unsendable(self, record: RequestRecord, exc: Exception) -> RequestRecord:
        """``record`` ended as ``bad_request``: its body could not be built, nothing sent."""
        record.ok = False
        record.error_kind = "bad_request"
        try:
            text = f"request body cannot be built: {type(exc).__name__}: {exc}"
        except Exception:  # an exception that cannot even be printed
            text = f"request body cannot be built: {type(exc).__name__}"
        record.error_detail = _writable(self._masked(text))[:_DETAIL_CHARS]
        # The record itself must be writable (requests.jsonl, workers' messages): what
        # made the body unsendable may be in it too.
        record.category = _writable(record.category)
        record.model = _writable(record.model)
        if record.max_tokens is not None and not 0 <= record.max_tokens < 2**63:
            record.max_tokens = None
        record.e2e_s = 0.0
        record.end_s = record.start_s
        return record

    def _finish_failed(self, meter: StreamMeter, record: RequestRecord) -> None:
        """Fill a failed record with what was measured; a fault in that too ends as
        ``client_error`` with the time until now."""
        record.ok = False
        try:
            meter.finish(record, time.perf_counter(), self.tokenizer)
        except Exception as exc:
            self._client_error(record, exc)
            if record.e2e_s is None:
                record.e2e_s = time.perf_counter() - meter.t0

    def _client_error(self, record: RequestRecord, exc: BaseException) -> None:
        self.connection.close()  # in an unknown state
        record.ok = False
        record.error_kind = "client_error"
        try:
            text = f"{type(exc).__name__}: {exc}"
        except Exception:  # an exception that cannot even be printed
            text = type(exc).__name__
        record.error_detail = self._masked(text)[:_DETAIL_CHARS]

    def _masked(self, text: str) -> str:
        """``text`` with the API key blanked (an error page may quote it back)."""
        key = self.settings.api_key
        return text.replace(key, "<api key>") if key and key in text else text
