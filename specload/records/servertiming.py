"""The server's own timing of a request, and the client's time beyond it.

vLLM 0.32 started with ``--enable-per-request-metrics`` sends, for a request with ``n`` 1, a
``metrics`` object (``PerRequestMetrics``, ``vllm/entrypoints/generate/base/protocol.py``; built
by ``build_per_request_timing_metrics`` in ``vllm/entrypoints/generate/base/serving.py``) on
the final usage chunk of a stream (so only with ``stream_options.include_usage``: specload's
``--usage-stats true``, the default; null fields left out) or at the top level of a whole
response (every field, null where unknown). From the engine core's own timestamps of the
request (monotonic): *queued* (the engine core took it), *scheduled* (first scheduled; a
preemption does not move it), *first token*, *last token*:

============================  ======================================  =====================
vLLM field                    what it is                              record field (s)
============================  ======================================  =====================
``time_to_first_token_ms``    first token - scheduled (prefill; the   ``server_ttft_s``
                              queue is not in it)
``queue_time_ms``             scheduled - queued                      ``server_queue_s``
``generation_time_ms``        last token - first token                ``server_generation_s``
``mean_itl_ms``               generation / (completion tokens - 1)    ``server_itl_s``
``tokens_per_second``         completion tokens / (last - scheduled)  (not kept: it follows
                                                                      from the others)
============================  ======================================  =====================

A field the server did not send, or sent as something other than a finite non-negative
number, is None: never guessed. ``metrics.speculative_decoding`` is
:mod:`specload.records.specdecode`'s.

**Client minus server** — the one definition of each (the level's figures are
:class:`specload.records.stats.Stats`'): for a completed request with the server's timing,

- TTFT: ``ttft_s - (server_queue_s + server_ttft_s)``: what the request spent outside the
  engine core before its first token reached the client — the network both ways, the
  server's HTTP front end (parsing, the chat template and tokenizing, detokenizing, the
  stream's writes) and the client's own lateness (a first token read late and stamped with a
  later packet's arrival, a send that left late);
- ITL: ``tpot_s - server_itl_s``: both are (last token - first token) / (tokens - 1), the
  client's on its own arrival stamps, so the difference is how much later the last token
  reached the client than the first did, spread over the request's tokens.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from specload.records.request import RequestRecord

#: (record field, vLLM's field in ms), in the order vLLM writes them.
SERVER_TIMING_FIELDS: tuple[tuple[str, str], ...] = (
    ("server_ttft_s", "time_to_first_token_ms"),
    ("server_generation_s", "generation_time_ms"),
    ("server_queue_s", "queue_time_ms"),
    ("server_itl_s", "mean_itl_ms"),
)


def server_timing(metrics: Any) -> dict[str, float | None] | None:
    """The record's ``server_*_s`` fields from the server's ``metrics`` object (None: not an
    object, or no timing field in it — a server without ``--enable-per-request-metrics``
    sends only ``speculative_decoding``, or nothing)."""
    if type(metrics) is not dict:
        return None
    out: dict[str, float | None] = {}
    seen = False
    for name, key in SERVER_TIMING_FIELDS:
        value = metrics.get(key)
        out[name] = None
        if isinstance(value, bool) or not isinstance(value, int | float):
            continue
        if math.isfinite(value) and value >= 0:
            out[name] = float(value) / 1000.0
            seen = True
    return out if seen else None


def ttft_minus_server_s(record: RequestRecord) -> float | None:
    """Client TTFT minus the server's queue and TTFT (seconds; None: not a completed
    request, or a part missing)."""
    if not record.ok or record.ttft_s is None:
        return None
    if record.server_ttft_s is None or record.server_queue_s is None:
        return None
    return record.ttft_s - (record.server_queue_s + record.server_ttft_s)


def itl_minus_server_s(record: RequestRecord) -> float | None:
    """Client TPOT minus the server's mean ITL (seconds; None: not a completed request, or
    a part missing — a one-token answer has neither)."""
    if not record.ok or record.tpot_s is None or record.server_itl_s is None:
        return None
    return record.tpot_s - record.server_itl_s
