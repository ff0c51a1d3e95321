"""The OpenAI-compatible API as vLLM 0.32 serves it, over the simulated engine.

Responses copy vLLM 0.32's shapes (tests/data/vllm-0.32.0/): the role chunk
first, one chunk per engine step carrying every token that step produced,
reasoning in ``delta.reasoning`` (or ``reasoning_content``, or both), the
finish reason on the last token chunk, a ``choices: []`` usage chunk with
``stream_options.include_usage``, cumulative usage on every chunk with
``continuous_usage_stats``, then ``data: [DONE]``. Every simulated token is one
whitespace-separated word (its id's word, :mod:`simulator.text`), so a client can count
tokens in the text too. With ``"return_token_ids": true`` the ids come too, where vLLM
0.32 puts them: chat — ``prompt_token_ids`` at the top level of the first (role) chunk and
of a whole response, ``token_ids`` in each choice; completions — both in the choice
(``prompt_token_ids`` on the first chunk only).

With ``--per-request-spec-decode-metrics`` a request's ``metrics.speculative_decoding``
(:mod:`simulator.spec_metrics`) rides on the final usage chunk of a stream, or at the top level
of a whole response, for ``n`` 1 only, as vLLM 0.32 does. ``POST /reset_prefix_cache`` is
vLLM's dev-mode route (404 with ``--dev-mode off``). With ``--enable-per-request-metrics``
the request's timing (:func:`request_timing`) rides in the same ``metrics`` object, as vLLM
0.32's does.
"""

from __future__ import annotations

import asyncio
import itertools
import random
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Protocol
from urllib.parse import parse_qs

import orjson

from simulator.engine import Sequence
from simulator.faults import STATUS_FAULTS, STATUS_TYPES, FaultConfig
from simulator.http import HttpConnection, Request
from simulator.spec_metrics import RequestSpecDecode, SpecTruth
from simulator.text import WORDS, prompt_token_ids
from simulator.workload import CATEGORY_HEADER, category_of, draw_workload

VLLM_VERSION = "0.32.0"
SYSTEM_FINGERPRINT = f"vllm-{VLLM_VERSION}-sim"
REASONING_FIELDS: tuple[str, ...] = ("reasoning", "reasoning_content", "both")

#: Each token id's text: its word with a leading space.
TOKEN_TEXT: tuple[str, ...] = tuple(" " + w for w in WORDS)


def delta_members(reasoning_field: str, reasoning: str, content: str) -> str:
    """The members of a chunk's ``delta``: reasoning (in the configured field or both), content."""
    parts = []
    if reasoning:
        if reasoning_field in ("reasoning", "both"):
            parts.append(f'"reasoning":"{reasoning}"')
        if reasoning_field in ("reasoning_content", "both"):
            parts.append(f'"reasoning_content":"{reasoning}"')
    if content:
        parts.append(f'"content":"{content}"')
    return ",".join(parts)


def one_token_deltas(reasoning_field: str) -> tuple[tuple[bytes, ...], tuple[bytes, ...]]:
    """The ``delta`` members of a one-token chunk, per token id: (as reasoning, as content),
    looked up by the streaming fast path instead of formatted."""
    reasoning = tuple(delta_members(reasoning_field, w, "").encode() for w in TOKEN_TEXT)
    content = tuple(delta_members(reasoning_field, "", w).encode() for w in TOKEN_TEXT)
    return reasoning, content


# Cumulative usage, as vLLM writes it (the fast path formats the bytes form directly).
_USAGE_JSON = (
    '{"prompt_tokens":%d,"total_tokens":%d,"completion_tokens":%d,'
    '"completion_tokens_details":{"reasoning_tokens":0}}'
)
_USAGE_BYTES = b',"usage":' + _USAGE_JSON.encode()
_TOKEN_TAIL = b'},"logprobs":null,"finish_reason":null,"token_ids":null}]'


class Driver(Protocol):
    def submit(self, seq: Sequence) -> None: ...
    def abort(self, seq: Sequence) -> None: ...


@dataclass
class ApiConfig:
    model: str
    max_model_len: int
    reasoning_field: str = "reasoning"
    fixed_workload: tuple[int, int] | None = None  # (reasoning, content) tokens for every request
    time_scale: float = 1.0  # told on /version, so results can say which clock they ran on
    text_seed: int = 0  # the outputs' text: request i of a server gets seed (text_seed, i)
    # --per-request-spec-decode-metrics for this engine ("none" unless it speculates)
    spec_decode_metrics: str = "none"
    num_spec_tokens: int = 0
    # --enable-per-request-metrics: the request's timing in its ``metrics`` (request_timing)
    per_request_metrics: bool = False


def _text(ids: list[int]) -> str:
    text = TOKEN_TEXT
    return "".join([text[i] for i in ids])


def _id_list(ids: list[int]) -> str:
    return "[" + ",".join(map(str, ids)) + "]"


_TRUE = frozenset(("1", "true", "t", "yes", "y", "on"))
_FALSE = frozenset(("0", "false", "f", "no", "n", "off"))


def _query_bool(query: str, name: str) -> bool:
    """A boolean query parameter as FastAPI reads one (absent: false); else a 422."""
    values = parse_qs(query, keep_blank_values=True).get(name)
    if not values:
        return False
    value = values[-1]
    if value.lower() in _TRUE:
        return True
    if value.lower() in _FALSE:
        return False
    detail = {
        "type": "bool_parsing",
        "loc": ["query", name],
        "msg": "Input should be a valid boolean, unable to interpret input",
        "input": value,
    }
    raise BadRequest(orjson.dumps({"detail": [detail]}), 422)


def error_body(message: str, err_type: str, code: int, param: str | None = None) -> bytes:
    return orjson.dumps(
        {"error": {"message": message, "type": err_type, "param": param, "code": code}}
    )


def _validation_error(kind: str, loc: str, msg: str, input_repr: str, ctx: str = "") -> bytes:
    extra = f", 'ctx': {ctx}" if ctx else ""
    detail = f"'type': '{kind}', 'loc': '{loc}', 'msg': '{msg}', 'input': {input_repr}{extra}"
    message = f"1 validation error:\n  {{{detail}}}"
    return error_body(message, "Bad Request", 400, loc)


TIMING_KEYS = (
    "time_to_first_token_ms",
    "generation_time_ms",
    "queue_time_ms",
    "mean_itl_ms",
    "tokens_per_second",
)


def request_timing(seq: Sequence) -> dict[str, float | None]:
    """vLLM 0.32's per-request timing (``--enable-per-request-metrics``;
    ``build_per_request_timing_metrics``) from the sequence's own times (monotonic, real
    seconds): TTFT from its scheduling (the queue is not in it), the queue, first to last
    token, that over the tokens but one, tokens over scheduling to last token; None where a
    time it needs is not there."""
    scheduled, first, last, n = seq.scheduled, seq.first_token, seq.last_token, seq.generated
    out: dict[str, float | None] = dict.fromkeys(TIMING_KEYS)
    if scheduled >= 0 and first >= 0:
        out["time_to_first_token_ms"] = (first - scheduled) * 1000.0
    if first >= 0 and last >= 0:
        out["generation_time_ms"] = (last - first) * 1000.0
        if n > 1:
            out["mean_itl_ms"] = (last - first) / (n - 1) * 1000.0
    if scheduled >= 0:
        out["queue_time_ms"] = (scheduled - seq.arrival) * 1000.0
        if last > scheduled:
            out["tokens_per_second"] = n / (last - scheduled)
    return out


def _single_sequence(body: dict[str, Any], completion: bool) -> bool:
    """One prompt, ``n`` 1: vLLM reports per-request metrics only then."""
    n = body.get("n")
    if n is not None and n != 1:
        return False
    prompt = body.get("prompt")
    if completion and isinstance(prompt, list) and len(prompt) > 1:
        return all(isinstance(p, int) for p in prompt)  # token ids: one prompt; else several
    return True


class BadRequest(Exception):
    def __init__(self, body: bytes, status: int = 400) -> None:
        super().__init__(body)
        self.body = body
        self.status = status


class Stream:
    """What one request sends back as the engine hands it tokens (stream or whole body)."""

    __slots__ = (
        "api",
        "buffered",
        "completion",
        "conn",
        "continuous",
        "created",
        "fast_len",
        "fast_pre",
        "fault",
        "fault_at",
        "fault_done",
        "head",
        "include_usage",
        "model",
        "prompt_ids",
        "prompt_tokens",
        "return_ids",
        "rid_text",
        "seq",
        "stalled",
        "streaming",
        "text_content",
        "text_reasoning",
        "timing",
        "tokens",
    )

    def __init__(
        self,
        api: SimApi,
        conn: HttpConnection,
        *,
        completion: bool,
        streaming: bool,
        include_usage: bool,
        continuous: bool,
        prompt_tokens: int,
        fault: str | None,
        fault_at: int,
        prompt_ids: list[int] | None = None,
        return_ids: bool = False,
    ) -> None:
        self.api = api
        self.conn = conn
        self.completion = completion
        self.streaming = streaming
        self.include_usage = include_usage
        self.continuous = continuous
        self.prompt_tokens = prompt_tokens
        self.prompt_ids = prompt_ids
        self.return_ids = return_ids and prompt_ids is not None
        self.fault = fault
        self.fault_at = fault_at
        self.fault_done = False
        self.stalled = False
        self.buffered: list[bytes] = []
        self.tokens = 0
        self.created = int(time.time())
        self.model = api.config.model
        rid = next(api.ids)
        self.rid_text = f"{'cmpl' if completion else 'chatcmpl'}-{rid:016x}"
        obj = "text_completion" if completion else "chat.completion.chunk"
        self.head = (
            f'data: {{"id":"{self.rid_text}","object":"{obj}","created":{self.created},'
            f'"model":"{self.model}","choices":['
        )
        self.text_reasoning: list[str] = []
        self.text_content: list[str] = []
        self.seq: Sequence | None = None
        self.timing = False  # --enable-per-request-metrics, one sequence: timing in metrics
        # The fast path (see emit) serves streamed chat chunks that carry no role, no
        # finish reason, no fault and no token ids; None where it never applies.
        self.fast_pre: bytes | None = (
            (self.head + '{"index":0,"delta":{').encode()
            if streaming and not completion and not self.return_ids
            else None
        )
        self.fast_len = len(self.fast_pre or b"") + len(_TOKEN_TAIL) + 3

    # -- formatting --------------------------------------------------------------------------
    def _usage(self) -> str:
        p, c = self.prompt_tokens, self.tokens
        return _USAGE_JSON % (p, p + c, c)

    def _delta(self, reasoning: str, content: str) -> str:
        return delta_members(self.api.config.reasoning_field, reasoning, content)

    def role_chunk(self) -> bytes:
        usage = f',"usage":{self._usage()}' if self.continuous else ""
        if self.completion:
            return b""
        prompt_ids = (
            _id_list(self.prompt_ids) if self.return_ids and self.prompt_ids is not None else "null"
        )
        return (
            self.head
            + '{"index":0,"delta":{"role":"assistant","content":""},'
            + '"logprobs":null,"finish_reason":null}]'
            + usage
            + f',"prompt_token_ids":{prompt_ids},"prompt_text":null}}\n\n'
        ).encode()

    def token_chunk(
        self,
        reasoning: str,
        content: str,
        finish: str | None,
        ids: list[int] | None = None,
        first: bool = False,
    ) -> bytes:
        end = f'"finish_reason":"{finish}","stop_reason":null' if finish else '"finish_reason":null'
        usage = f',"usage":{self._usage()}' if self.continuous else ""
        token_ids = _id_list(ids) if self.return_ids and ids is not None else "null"
        if self.completion:
            text = reasoning + content
            prompt = ""
            if self.return_ids:  # vLLM: the prompt's ids on the first chunk only
                ids_ = self.prompt_ids if first else None
                prompt = f'"prompt_token_ids":{_id_list(ids_) if ids_ is not None else "null"},'
            body = (
                f'{{"index":0,"text":"{text}","logprobs":null,{end},{prompt}'
                f'"token_ids":{token_ids}}}]'
            )
        else:
            delta = self._delta(reasoning, content)
            body = (
                f'{{"index":0,"delta":{{{delta}}},"logprobs":null,{end},"token_ids":{token_ids}}}]'
            )
        return (self.head + body + usage + "}\n\n").encode()

    def stream_metrics(self) -> dict[str, Any] | None:
        """``metrics`` of the final usage chunk: vLLM dumps it with ``exclude_none``, so the
        timing fields it has (``--enable-per-request-metrics``), then ``speculative_decoding``
        (``--per-request-spec-decode-metrics``); None: neither."""
        seq = self.seq
        if seq is None:
            return None
        out: dict[str, Any] = {}
        if self.timing:
            out.update((k, v) for k, v in request_timing(seq).items() if v is not None)
        if seq.spec is not None:
            out.update(seq.spec.stream_metrics())
        return out or None

    def usage_chunk(self) -> bytes:
        found = self.stream_metrics()
        metrics = "" if found is None else ',"metrics":' + orjson.dumps(found).decode()
        return (
            self.head
            + f'],"usage":{self._usage()},"system_fingerprint":"{SYSTEM_FINGERPRINT}"'
            + metrics
            + "}\n\n"
        ).encode()

    # -- engine callback ---------------------------------------------------------------------
    def emit(self, seq: Sequence, r: int, c: int, finish: str | None, now: float) -> None:
        pre = self.fast_pre
        if (
            pre is not None
            and finish is None
            and self.tokens
            and not self.stalled
            and (self.fault is None or self.fault_done)
        ):
            # Fast path: one streamed token chunk, formatted in one go (byte-identical to
            # token_chunk; tested). At 512 streams this is most of the simulator's work.
            n = r + c
            self.tokens += n
            self.api.tokens_sent += n
            end = seq.generated
            text = seq.text
            ids = text.ids if text is not None and len(text.ids) >= end else seq.token_ids(end)
            if n == 1:
                if r:
                    delta = self.api.reasoning_deltas[ids[end - 1]]
                else:
                    delta = self.api.content_deltas[ids[end - 1]]
            else:
                start = end - n
                reasoning = _text(ids[start : start + r]) if r else ""
                content = _text(ids[start + r : end]) if c else ""
                delta = self._delta(reasoning, content).encode()
            if self.continuous:
                p, t = self.prompt_tokens, self.tokens
                usage = _USAGE_BYTES % (p, p + t, t)
            else:
                usage = b""
            conn = self.conn
            transport = conn.transport
            if conn.closed or transport is None:
                return
            size = self.fast_len + len(delta) + len(usage)
            transport.write(b"%x\r\n%s%s%s%s}\n\n\r\n" % (size, pre, delta, _TOKEN_TAIL, usage))
            return
        end = seq.generated
        start = end - r - c
        ids = seq.token_ids(end)[start:end]
        reasoning = _text(ids[:r]) if r else ""
        content = _text(ids[r:]) if c else ""
        first = self.tokens == 0
        role = self.role_chunk() if first and self.streaming else b""
        self.tokens += r + c
        api = self.api
        api.tokens_sent += r + c
        if finish is not None and seq.spec is not None and api.spec_truth is not None:
            api.spec_truth.add(
                seq.spec.truth(
                    self.rid_text,
                    seq.category,
                    seq.generated,
                    min(seq.generated, seq.reasoning_target),
                )
            )
        if not self.streaming:
            self.text_reasoning.append(reasoning)
            self.text_content.append(content)
            if finish is not None:
                self._finish_whole(seq, finish)
            return
        fault = self.fault
        if fault is not None and not self.fault_done and self.tokens >= self.fault_at:
            self.fault_done = True
            if fault == "reset":
                self.conn.reset()
                return
            if fault == "malformed":
                self._send(self.head.encode() + b'{"index":0,"delta":{"content":"\n\n')
            elif fault == "stall":
                self.stalled = True
                asyncio.get_running_loop().call_later(api.faults.stall_seconds, self._unstall)
        out = []
        if role:
            out.append(role)
        out.append(self.token_chunk(reasoning, content, finish, ids, first))
        if finish is not None:
            if self.include_usage:
                out.append(self.usage_chunk())
            if fault != "no-done":
                out.append(b"data: [DONE]\n\n")
        self._send(b"".join(out))
        if finish is not None:
            self._end()

    def _send(self, data: bytes) -> None:
        if self.stalled:
            self.buffered.append(data)
        else:
            self.conn.send(data)

    def _end(self) -> None:
        if self.stalled:
            self.buffered.append(b"")
            return
        self.conn.on_close = None
        self.conn.end_stream()

    def _unstall(self) -> None:
        self.stalled = False
        for data in self.buffered:
            if data:
                self.conn.send(data)
            else:
                self.conn.on_close = None
                self.conn.end_stream()
        self.buffered.clear()

    def _finish_whole(self, seq: Sequence, finish: str) -> None:
        reasoning = "".join(self.text_reasoning) or None
        content = "".join(self.text_content) or None
        out_ids = seq.token_ids(seq.generated)[: seq.generated] if self.return_ids else None
        prompt_ids = self.prompt_ids if self.return_ids else None
        usage = orjson.loads(self._usage())
        usage["prompt_tokens_details"] = None
        # vLLM's PerRequestMetrics.model_dump(): every field, null where it has none; null
        # without per-request metrics
        metrics = seq.spec.response_metrics() if seq.spec is not None else None
        if self.timing:
            spec = (metrics or {}).get("speculative_decoding")
            metrics = {**request_timing(seq), "speculative_decoding": spec}
        if self.completion:
            body: dict[str, Any] = {
                "id": self.rid_text,
                "object": "text_completion",
                "created": self.created,
                "model": self.model,
                "choices": [
                    {
                        "index": 0,
                        "text": (reasoning or "") + (content or ""),
                        "logprobs": None,
                        "finish_reason": finish,
                        "stop_reason": None,
                        "token_ids": out_ids,
                        "prompt_logprobs": None,
                        "prompt_token_ids": prompt_ids,
                        "routed_experts": None,
                    }
                ],
                "service_tier": None,
                "system_fingerprint": SYSTEM_FINGERPRINT,
                "usage": usage,
                "kv_transfer_params": None,
                "ec_transfer_params": None,
                "metrics": metrics,
            }
        else:
            message: dict[str, Any] = {
                "role": "assistant",
                "content": content,
                "refusal": None,
                "annotations": None,
                "audio": None,
                "function_call": None,
                "tool_calls": [],
            }
            field = self.api.config.reasoning_field
            if field in ("reasoning", "both"):
                message["reasoning"] = reasoning
            if field in ("reasoning_content", "both"):
                message["reasoning_content"] = reasoning
            body = {
                "id": self.rid_text,
                "object": "chat.completion",
                "created": self.created,
                "model": self.model,
                "choices": [
                    {
                        "index": 0,
                        "message": message,
                        "logprobs": None,
                        "finish_reason": finish,
                        "stop_reason": None,
                        "token_ids": out_ids,
                        "routed_experts": None,
                    }
                ],
                "service_tier": None,
                "system_fingerprint": SYSTEM_FINGERPRINT,
                "usage": usage,
                "prompt_logprobs": None,
                "prompt_token_ids": prompt_ids,
                "prompt_text": None,
                "kv_transfer_params": None,
                "ec_transfer_params": None,
                "metrics": metrics,
            }
        data = orjson.dumps(body)
        fault = self.fault
        self.conn.on_close = None
        if fault == "reset":
            self.conn.reset()
        elif fault == "malformed":
            self.conn.respond(200, data[: len(data) // 2])
        elif fault == "stall":
            asyncio.get_running_loop().call_later(
                self.api.faults.stall_seconds, self.conn.respond, 200, data
            )
        else:
            self.conn.respond(200, data)


class SimApi:
    """Routes of the API port."""

    def __init__(
        self,
        config: ApiConfig,
        *,
        driver: Driver,
        metrics_text: Callable[[], bytes],
        faults: FaultConfig,
        rng: random.Random,
        profiler: Any = None,
        spec_truth: SpecTruth | None = None,
        reset_prefix_cache: Callable[[bool], bool] | None = None,
    ) -> None:
        self.config = config
        self.driver = driver
        self.metrics_text = metrics_text
        self.faults = faults
        self.rng = rng
        self.profiler = profiler
        self.spec_truth = spec_truth
        # POST /reset_prefix_cache (vLLM: only with VLLM_SERVER_DEV_MODE=1); None: 404
        self.reset_prefix_cache = reset_prefix_cache
        self.ids = itertools.count(int.from_bytes(rng.randbytes(4), "big") << 24)
        self.seq_ids = itertools.count(1)
        self.requests_served = 0
        self.chat_requests = 0  # chat completions asked for, for --fault-every
        self.tokens_sent = 0
        self.created = int(time.time())
        self.reasoning_deltas, self.content_deltas = one_token_deltas(config.reasoning_field)

    def handle(self, req: Request, conn: HttpConnection) -> None:
        try:
            self._route(req, conn)
        except BadRequest as exc:
            conn.respond(exc.status, exc.body)
        except Exception as exc:  # a bug must not take the server down
            conn.respond(
                500, error_body(f"internal simulator error: {exc!r}", "InternalServerError", 500)
            )

    def _route(self, req: Request, conn: HttpConnection) -> None:
        path, method = req.path, req.method
        if path in {"/v1/chat/completions", "/v1/completions"}:
            if method != "POST":
                conn.respond(405, b'{"detail":"Method Not Allowed"}')
                return
            self._generate(req, conn, completion=path == "/v1/completions")
        elif path == "/health":
            conn.respond(200, b"", b"application/json") if method == "GET" else self._405(conn)
        elif path == "/metrics":
            conn.respond(200, self.metrics_text(), b"text/plain; version=0.0.4; charset=utf-8")
        elif path == "/v1/models":
            conn.respond(200, self._models())
        elif path == "/version":
            # vLLM's answer, plus what only the simulator knows (clients ignore extra keys)
            conn.respond(
                200,
                orjson.dumps(
                    {
                        "version": VLLM_VERSION,
                        "specload_simulator": {"time_scale": self.config.time_scale},
                    }
                ),
            )
        elif path == "/reset_prefix_cache" and self.reset_prefix_cache is not None:
            if method != "POST":
                self._405(conn)
                return
            reset_running = _query_bool(req.query, "reset_running_requests")
            ok = self.reset_prefix_cache(reset_running)
            conn.respond(200, orjson.dumps({"success": ok}))
        elif path in ("/start_profile", "/stop_profile") and self.profiler is not None:
            if method != "POST":
                self._405(conn)
            elif path == "/start_profile":
                self.profiler.start()
                conn.respond(200, b"")
            else:
                task = asyncio.get_running_loop().create_task(self.profiler.stop())
                task.add_done_callback(lambda _t: conn.respond(200, b""))
        else:
            conn.respond(404, b'{"detail":"Not Found"}')

    @staticmethod
    def _405(conn: HttpConnection) -> None:
        conn.respond(405, b'{"detail":"Method Not Allowed"}')

    def _models(self) -> bytes:
        name = self.config.model
        return orjson.dumps(
            {
                "object": "list",
                "data": [
                    {
                        "id": name,
                        "object": "model",
                        "created": self.created,
                        "owned_by": "vllm",
                        "root": name,
                        "parent": None,
                        "max_model_len": self.config.max_model_len,
                        "permission": [
                            {
                                "id": f"modelperm-{self.created:016x}",
                                "object": "model_permission",
                                "created": self.created,
                                "allow_create_engine": False,
                                "allow_sampling": True,
                                "allow_logprobs": True,
                                "allow_search_indices": False,
                                "allow_view": True,
                                "allow_fine_tuning": False,
                                "organization": "*",
                                "group": None,
                                "is_blocking": False,
                            }
                        ],
                    }
                ],
            }
        )

    # -- generation --------------------------------------------------------------------------
    def _parse(self, req: Request, completion: bool) -> tuple[dict[str, Any], str]:
        try:
            body = orjson.loads(req.body)
        except orjson.JSONDecodeError as exc:
            pos = getattr(exc, "pos", 0) or len(req.body)
            raise BadRequest(
                _validation_error(
                    "json_invalid",
                    f"body.{pos}",
                    "JSON decode error",
                    "'<dict of 0 items>'",
                    "{'error': 'Expecting value'}",
                )
            ) from None
        if not isinstance(body, dict):
            raise BadRequest(
                _validation_error(
                    "model_attributes_type",
                    "body",
                    "Input should be a valid dictionary",
                    repr(body)[:50],
                )
            )
        items = f"'<dict of {len(body)} items>'"
        field = "prompt" if completion else "messages"
        if field not in body:
            raise BadRequest(_validation_error("missing", f"body.{field}", "Field required", items))
        model = body.get("model")
        if model is not None and model != self.config.model:
            raise BadRequest(
                error_body(
                    f"The model `{model}` does not exist. Valid aliases: {self.config.model}.",
                    "NotFoundError",
                    404,
                    "model",
                ),
                404,
            )
        if completion:
            prompt = body["prompt"]
            if isinstance(prompt, list):
                prompt = " ".join(str(p) for p in prompt)
            if not isinstance(prompt, str):
                raise BadRequest(
                    _validation_error(
                        "string_type", "body.prompt", "Input should be a valid string", items
                    )
                )
            return body, prompt
        messages = body["messages"]
        if not isinstance(messages, list) or not messages:
            raise BadRequest(
                _validation_error(
                    "list_type", "body.messages", "Input should be a valid list", items
                )
            )
        texts: list[str] = []
        for message in messages:
            if not isinstance(message, dict) or "role" not in message:
                raise BadRequest(
                    _validation_error("missing", "body.messages.0.role", "Field required", items)
                )
            content = message.get("content")
            if isinstance(content, list):
                texts.extend(
                    str(part.get("text", "")) for part in content if isinstance(part, dict)
                )
            elif content is not None:
                texts.append(str(content))
        return body, "\n".join(texts)

    def _max_tokens(self, body: dict[str, Any], prompt_tokens: int) -> int:
        limit = self.config.max_model_len - prompt_tokens
        if limit < 1:
            raise BadRequest(
                error_body(
                    f"This model's maximum context length is {self.config.max_model_len} tokens. "
                    f"However, your request has {prompt_tokens} input tokens.",
                    "BadRequestError",
                    400,
                )
            )
        for key in ("max_completion_tokens", "max_tokens"):
            value = body.get(key)
            if value is None:
                continue
            if not isinstance(value, int) or isinstance(value, bool):
                raise BadRequest(
                    _validation_error(
                        "int_type", f"body.{key}", "Input should be a valid integer", repr(value)
                    )
                )
            if value < 1:
                raise BadRequest(
                    error_body(
                        f"{key} must be at least 1, got {value}.", "BadRequestError", 400, key
                    )
                )
            return min(value, limit)
        return limit

    def _generate(self, req: Request, conn: HttpConnection, *, completion: bool) -> None:
        body, prompt_text = self._parse(req, completion)
        prompt_ids = prompt_token_ids(prompt_text)
        prompt_tokens = len(prompt_ids)
        max_tokens = self._max_tokens(body, prompt_tokens)
        return_ids = body.get("return_token_ids")
        if return_ids is not None and not isinstance(return_ids, bool):
            raise BadRequest(
                _validation_error(
                    "bool_type",
                    "body.return_token_ids",
                    "Input should be a valid boolean",
                    repr(return_ids)[:50],
                )
            )
        streaming = bool(body.get("stream", False))
        options = body.get("stream_options") or {}
        if not isinstance(options, dict):
            options = {}
        self.chat_requests += 1
        fault = self.faults.pick(self.rng, self.chat_requests)
        if fault in STATUS_FAULTS:
            status = STATUS_FAULTS[fault]
            conn.respond(
                status, error_body(f"simulated fault {fault}", STATUS_TYPES[status], status)
            )
            return
        category = category_of(req.headers.get(CATEGORY_HEADER), prompt_text)
        if self.config.fixed_workload is not None:
            reasoning, content = self.config.fixed_workload
        else:
            work = draw_workload(category, self.rng)
            reasoning, content = work.reasoning_tokens, work.content_tokens
        target = max(1, min(reasoning + content, max_tokens))
        stream = Stream(
            self,
            conn,
            completion=completion,
            streaming=streaming,
            include_usage=bool(options.get("include_usage", False)),
            continuous=bool(options.get("continuous_usage_stats", False)),
            prompt_tokens=prompt_tokens,
            fault=fault,
            fault_at=1 + int(self.rng.random() * max(1, target - 1)),
            prompt_ids=prompt_ids,
            return_ids=bool(return_ids),
        )
        rid = next(self.seq_ids)
        seq = Sequence(
            rid,
            category=category,
            prompt_tokens=prompt_tokens,
            reasoning_tokens=reasoning,
            content_tokens=content,
            max_tokens=max_tokens,
            arrival=time.monotonic(),
            emit=stream.emit,
            prompt_ids=prompt_ids,
            text_seed=self.config.text_seed * 1_000_003 + rid,
        )
        level = self.config.spec_decode_metrics
        if level != "none" and _single_sequence(body, completion):
            seq.spec = RequestSpecDecode(self.config.num_spec_tokens, detailed=level == "detailed")
        stream.seq = seq
        stream.timing = self.config.per_request_metrics and _single_sequence(body, completion)
        self.requests_served += 1
        driver = self.driver
        conn.on_close = lambda: driver.abort(seq)
        if streaming:
            conn.start_stream()
        driver.submit(seq)
