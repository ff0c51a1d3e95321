"""The load generator: reasoning-aware Locust users with exact token accounting.

Public API (for sweeps, results and anything that consumes measurements)::

    from specload.load import (
        RequestRecord,   # one request's measures (dataclass; to_dict/from_dict)
        Stats,           # counts + mergeable histograms of a set of records
        Aggregator,      # Stats per (step, category)
        LoadSession,     # per-process state of a Locust environment
        get_session,     # get_session(environment) -> LoadSession
        set_step,        # set_step(environment, "c16"): label requests from now on
        subscribe,       # subscribe(environment, callback): every completed record
        ChatUser,        # the Locust user class (import specload.load.user)
    )

Records. A :class:`RequestRecord` has ``category``, ``step``, ``variant``,
``model``, ``start_s``/``end_s`` (wall clock; E2E ends at the last
token-bearing chunk, as ``vllm bench serve``), ``ok``, ``error_kind``
(``refused``, ``reset``, ``timeout``, ``http_<code>``, ``malformed``,
``malformed_usage``, ``server_error``, ``content_type``, ``content_encoding``,
``no_done``, ``protocol``, ``unfinished``, ``client_error``, ``bad_request``:
:data:`specload.records.request.ERROR_KINDS`), ``ttft_s``, ``ttfct_s``, ``e2e_s``, ``tpot_s``,
``tokens_reasoning``, ``tokens_content``, ``tokens_output``, ``chunks``,
``chunks_coalesced``, ``finish_reason``, ``reasoning_truncated``,
``token_count_source`` (``exact`` | ``usage`` | ``tokenizer`` |
``chunks-estimate``), ``channel_split_source`` and per-request ITL
histograms ``itl_token_hist`` / ``itl_chunk_hist``, and ``arrivals`` (token arrival
times, for window throughput)
(:class:`specload.histogram.Histogram`).

Subscribing. ``subscribe(env, cb)`` calls ``cb(record)`` on the process
where aggregation happens: the single process (LocalRunner) or the master
(MasterRunner), which receives *every* record from its workers through the
``specload:records`` runner message. Register in ``events.init`` (or later).
On a worker, ``subscribe`` is allowed but never called.

Steps. ``set_step(env, name)`` on the master or the single process labels
every request *started* from then on with ``name``; the master sends
``specload:step`` to all workers (and to each worker that connects later).
A request belongs to the step in force on its process when it started, so
every sample has exactly one step. The initial step is ``--step`` (``run``).

In flight. ``get_session(env).in_flight()`` counts requests started and not
yet published (on the master: as its workers last reported, every 0.25 s);
requests that Locust kills when it stops users are not counted.
``get_session(env).lost_requests()`` counts those started on workers that
went missing. ``get_session(env).aggregator`` holds the :class:`Stats` per
``(step, category)`` of everything published.

Open loop / pacing is not built in: users are closed-loop (``wait_time =
constant(0)``); subclass :class:`ChatUser` to change ``wait_time``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from specload.load.session import LoadSession, RecordCallback, get_session
from specload.records.request import RequestRecord
from specload.records.stats import Aggregator, Stats

if TYPE_CHECKING:
    from specload.load.user import ChatUser


def set_step(environment: Any, name: str, budget: int | None = None) -> None:
    """Label requests started from now on with ``name`` (master: on every worker too);
    ``budget``: exactly this many requests start in the step."""
    get_session(environment).set_step(name, budget)


def subscribe(environment: Any, callback: RecordCallback) -> None:
    """Call ``callback(record)`` for each completed request, where records are aggregated."""
    get_session(environment).subscribe(callback)


def __getattr__(name: str) -> Any:
    # ChatUser pulls in Locust's User (and monkey-patching); import it only on use.
    if name == "ChatUser":
        from specload.load.user import ChatUser  # noqa: PLC0415

        return ChatUser
    raise AttributeError(name)


__all__ = [
    "Aggregator",
    "ChatUser",
    "LoadSession",
    "RecordCallback",
    "RequestRecord",
    "Stats",
    "get_session",
    "set_step",
    "subscribe",
]
