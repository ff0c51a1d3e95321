"""The load generator's state in one Locust process, and its wiring.

One :class:`LoadSession` per Locust ``Environment`` (``get_session(env)``).
Its role follows the runner: ``local`` (single process), ``master`` or
``worker``. Users run on ``local`` and ``worker`` processes; records are
*published* (aggregated, exposed on ``/metrics``, handed to subscribers) on
``local`` and ``master`` processes.

The session registers the runner messages of its role (in ``events.init``; their
names and payloads: :mod:`specload.load.messages`): a master handles
``specload:records`` and ``specload:want`` and sends ``specload:step`` and
``specload:budget``; a worker the other way round. Locust's request events and
the CSV are built in :mod:`specload.load.report`, the web UI's tab in
:mod:`specload.load.webui`.

A count-based window of N requests is a pool of N on the master, granted to the
workers whose users ask (twice their waiting users at a time, so most requests
start without waiting for a round trip), so exactly N are sent whatever the users
per worker. Workers report ``budget_left`` and ``seq`` with their records; the
unspent budget of a worker that goes missing, and its requests that will never
report back, return to the pool.
"""

from __future__ import annotations

import contextlib
import errno
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, BinaryIO

import gevent
import gevent.event
import gevent.lock
import orjson

from specload.errors import UsageError
from specload.load.chat import ChatRequester, ChatSettings
from specload.load.connection import Connection
from specload.load.failures import RequestFailed
from specload.load.messages import (
    MSG_BUDGET,
    MSG_RECORDS,
    MSG_STEP,
    MSG_WANT,
    BudgetMessage,
    RecordsMessage,
    StepMessage,
    WantMessage,
)
from specload.load.meter import TokenCounter
from specload.load.metrics import ClientMetrics, parse_address, serve
from specload.load.options import DEFAULT_STEP, cache_bust_nonce, validate
from specload.load.report import fire_locust_events, write_csv
from specload.prompts import Prompt, PromptSampler, load_prompt_set
from specload.records.request import RequestRecord
from specload.records.stats import Aggregator
from specload.slo import Objectives, judge, parse_slo
from specload.urls import ServerURL, parse_server_url

log = logging.getLogger("specload.load")

FLUSH_INTERVAL_S = 0.25
DRAIN_TIMEOUT_S = 10.0

RecordCallback = Callable[[RequestRecord], None]


@dataclass
class _WorkerCount:
    started: int = 0
    received: int = 0
    missing_logged: bool = False
    greeted: bool = False
    budget: int | None = None  # budget granted to it in the current step
    budget_left: int | None = None  # as last reported, for ``budget_seq``
    budget_seq: int = 0
    wanting: int = 0  # users waiting for budget, not yet granted
    redistributed: bool = False
    step_received: int = 0  # records of the current step received from it
    step_started: int | None = None  # requests it started in the current step, as reported
    # Declared lost (it went missing): what it had started and not reported then is booked
    # lost, once; anything it sends afterwards is set aside (``late``), never counted.
    lost: bool = False
    booked: int = 0
    late: int = 0
    late_refused: bool = False


class LoadSession:
    """Per-process state: options, prompts, the current step, aggregates, subscribers."""

    def __init__(self, environment: Any) -> None:
        self.environment = environment
        self.role = "local"
        opts = getattr(environment, "parsed_options", None)
        self.options = opts
        self.step: str = getattr(opts, "step", DEFAULT_STEP) or DEFAULT_STEP
        self.step_seq = 0
        # Requests this process may still start in the current step (None: no limit).
        self.budget: int | None = None
        self._pool = 0  # master: budget of the step not yet granted
        self._waiting = 0  # users waiting for budget here
        self._asked = False  # worker: a want is out for this step
        self._step_changed = gevent.event.Event()
        self.aggregator = Aggregator()
        self.metrics = ClientMetrics(
            users=self._user_count,
            lost_requests=self.lost_requests,
            objectives=lambda: tuple(self.objectives.as_dict()),
        )
        self.metrics_port: int | None = None
        # The client metrics are fed only where they are served (--metrics-address): with
        # no one to read them they cost a master 9-13% of its CPU per record
        # (bench/results/master.md, "After").
        self.metrics_served = False
        self._metrics_server: Any = None
        self._subscribers: list[RecordCallback] = []
        self._pending: list[dict[str, Any]] = []
        self.started = 0
        self.step_started = 0  # worker: requests started in the current step
        self.published = 0
        self._workers: dict[str, _WorkerCount] = {}
        self.late_records: list[dict[str, Any]] = []  # master: sent by workers declared lost
        self._backoffs: list[list[Any]] = []  # worker: waits not yet sent to the master
        self._late_subscribers: list[Callable[[dict[str, Any]], None]] = []
        self._prompts: list[Prompt] | None = None
        self._sampler: PromptSampler | None = None
        self._tokenizer: TokenCounter | None = None
        self._prompts_spec: str | None = None
        self._tokenizer_path = ""
        self._settings: ChatSettings | None = None
        self._settings_lock = gevent.lock.Semaphore()
        self._greenlets: list[gevent.Greenlet] = []
        self._records_out: BinaryIO | None = None
        self._said_hello = False
        self._objectives: Objectives | None = None

    @property
    def objectives(self) -> Objectives:
        """``--slo``: every published record is judged against them (checked by validate)."""
        if self._objectives is None:
            self._objectives = parse_slo(getattr(self.options, "slo", "") or "")
        return self._objectives

    # -- public API ---------------------------------------------------------
    def subscribe(self, callback: RecordCallback) -> None:
        """Call ``callback(record)`` for every completed request (on local/master)."""
        self._subscribers.append(callback)

    def set_step(self, name: str, budget: int | None = None) -> None:
        """Label requests started from now on with ``name``; propagated to all workers.

        ``budget``: exactly this many requests start in the step (split among the
        workers); users that find it spent wait for the next step.
        """
        if not name or not isinstance(name, str):
            raise ValueError("a step name must be a non-empty string")
        if budget is not None and budget < 0:
            raise ValueError("a step budget must be >= 0")
        self.step_seq += 1
        self.step = name
        runner = self.environment.runner
        self.budget = budget
        self._asked = False
        if self.role == "master" and runner is not None:
            self._pool = budget or 0
            for count in self._workers.values():
                count.budget = None if budget is None else 0
                count.budget_left = None
                count.wanting = 0
                count.redistributed = count.lost
                count.step_received = 0
                count.step_started = None
            step = StepMessage(name, self.step_seq, None if budget is None else 0)
            runner.send_message(MSG_STEP, step.payload())
        self._wake()

    def _wake(self) -> None:
        event, self._step_changed = self._step_changed, gevent.event.Event()
        event.set()

    def in_flight(self) -> int:
        """Requests started and not yet published here (master: as workers last reported;
        workers that went missing are not counted — see :meth:`lost_requests`)."""
        if self.role != "master":
            return max(0, self.started - self.published)
        runner = self.environment.runner
        total = 0
        for node_id, count in self._workers.items():
            client = runner.clients.get(node_id) if runner is not None else None
            if client is not None and client.state != "missing" and not count.lost:
                total += max(0, count.started - count.received)
        return total

    def lost_requests(self) -> int:
        """Requests started on workers declared lost (they went missing) that had not
        reported back then: booked once, whatever the worker sends afterwards."""
        if self.role != "master":
            return 0
        return sum(count.booked for count in self._workers.values() if count.lost)

    def workers_left(self) -> int | None:
        """Master: workers connected and not declared lost (None: not a master)."""
        runner = self.environment.runner
        if self.role != "master" or runner is None:
            return None
        return sum(
            1
            for node_id, count in self._workers.items()
            if not count.lost
            and (client := runner.clients.get(node_id)) is not None
            and client.state != "missing"
        )

    def subscribe_late(self, callback: Callable[[dict[str, Any]], None]) -> None:
        """Call ``callback(record dict)`` for each record a worker sent after it was
        declared lost (counted in ``late_records``, never in the results)."""
        self._late_subscribers.append(callback)

    # -- wiring (events.init) ---------------------------------------------
    def attach(self, runner: Any) -> None:
        # Locust monkey-patches on import: only when a runner exists.
        from locust.runners import MasterRunner, WorkerRunner  # noqa: PLC0415

        opts = self.options
        if opts is not None:
            try:
                validate(opts)
                self._load_prompts()
                if not isinstance(runner, MasterRunner):
                    self._load_tokenizer()
            except UsageError as exc:
                raise SystemExit(f"specload: error: {exc}") from None
        if isinstance(runner, MasterRunner):
            self.role = "master"
            runner.register_message(MSG_RECORDS, self._on_records)
            runner.register_message(MSG_WANT, self._on_want)
            self._drain_before_quit(runner)
            self.environment.events.worker_connect.add_listener(self._on_worker_connect)
            self._greenlets.append(gevent.spawn(self._watch_workers))
        elif isinstance(runner, WorkerRunner):
            self.role = "worker"
            runner.register_message(MSG_STEP, self._on_step)
            runner.register_message(MSG_BUDGET, self._on_budget)
            self.environment.events.report_to_master.add_listener(
                lambda client_id, data: self.flush()
            )
            self.environment.events.test_stop.add_listener(lambda **kw: self.flush())
            self._greenlets.append(gevent.spawn(self._flush_loop))
        else:
            self.role = "local"
        if self.role != "worker" and opts is not None:
            try:
                _ = self.url
            except UsageError as exc:
                raise SystemExit(f"specload: error: {exc}") from None
        if self.role == "worker":
            self._open_worker_records(runner)
        if self.role != "worker":
            records_file = getattr(opts, "records_file", "") if opts is not None else ""
            if records_file:
                try:
                    self._records_out = open(records_file, "ab")  # noqa: SIM115
                except OSError as exc:
                    raise SystemExit(
                        f"specload: error: --records-file: cannot write {records_file!r} "
                        f"({exc.strerror})"
                    ) from None
            self._start_metrics()
            self.environment.events.quitting.add_listener(self._on_quitting)

    def _open_worker_records(self, runner: Any) -> None:
        """``--worker-records-file``: this worker's own copy of its records, on its host."""
        path = str(getattr(self.options, "worker_records_file", "") or "")
        if not path:
            return
        path = path.replace("{worker}", str(getattr(runner, "client_id", "") or "worker"))
        try:
            self._records_out = open(path, "ab")  # noqa: SIM115
        except OSError as exc:
            raise SystemExit(
                f"specload: error: --worker-records-file: cannot write {path!r} ({exc.strerror})"
            ) from None
        self.environment.events.quitting.add_listener(lambda **kw: self._close_records())

    def _close_records(self) -> None:
        if self._records_out is not None:
            self._records_out.close()
            self._records_out = None

    def attach_web_ui(self, web_ui: Any) -> None:
        """Add the specload tab (per step and category TTFT, TPOT, tok/s), ``/specload``
        and ``/specload/csv`` to Locust's web UI (:mod:`specload.load.webui`)."""
        if web_ui is None or self.role == "worker":
            return
        from specload.load.webui import install  # noqa: PLC0415 (only with a web UI)

        install(web_ui, self.aggregator)

    def _start_metrics(self) -> None:
        text = getattr(self.options, "metrics_address", "off") if self.options else "off"
        try:
            address = parse_address(text)
        except UsageError as exc:
            raise SystemExit(f"specload: error: {exc}") from None
        if address is None:
            return
        try:
            self._metrics_server, self.metrics_port = serve(self.metrics, address)
            self.metrics_served = True
        except OSError as exc:
            # Fail, not another port: Prometheus scrapes the address it was given, and a
            # run serving nothing there (or another run's numbers) would go unnoticed.
            busy = exc.errno == errno.EADDRINUSE
            raise SystemExit(
                f"specload: error: --metrics-address {text}: "
                + (
                    f"port {address[1]} is in use (another run?)"
                    if busy
                    else f"cannot listen ({exc.strerror or exc})"
                )
                + "; choose another with --metrics-address HOST:PORT "
                "(env SPECLOAD_METRICS_ADDRESS; 127.0.0.1:0 for any free port) or off"
            ) from None
        log.info("specload: client metrics on http://%s:%d/metrics", address[0], self.metrics_port)

    def _user_count(self) -> int:
        runner = self.environment.runner
        return int(getattr(runner, "user_count", 0) or 0) if runner is not None else 0

    # -- users (local and worker processes) --------------------------------
    def _load_prompts(self) -> list[Prompt]:
        # Workers get the master's options with the first spawn message (Locust updates
        # parsed_options in place): reload when the prompt set named there changed.
        spec = getattr(self.options, "prompts", "builtin") if self.options else "builtin"
        if self._prompts is None or spec != self._prompts_spec:
            self._prompts = load_prompt_set(spec)
            self._prompts_spec = spec
            self._sampler = None
        return self._prompts

    def _load_tokenizer(self) -> None:
        path = getattr(self.options, "tokenizer", "") if self.options else ""
        if path != self._tokenizer_path:
            self._tokenizer_path = path
            self._tokenizer = None
            if path:
                from specload.load.tokenizer import LocalTokenizer  # noqa: PLC0415

                self._tokenizer = LocalTokenizer(path)

    def next_prompt(self) -> Prompt:
        self._load_prompts()
        if self._sampler is None:
            seed = getattr(self.options, "prompt_seed", 0) if self.options else 0
            index = getattr(self.environment.runner, "worker_index", 0) or 0
            self._sampler = PromptSampler(self._load_prompts(), seed, index)
        return next(self._sampler)

    @property
    def url(self) -> ServerURL:
        host = self.environment.host or ""
        if not host:
            raise UsageError("--host: no target URL given")
        return parse_server_url(host)

    def settings(self) -> ChatSettings:
        """The load options, with the model detected from /v1/models when not given."""
        if self._settings is not None:
            return self._settings
        with self._settings_lock:
            if self._settings is None:
                o = self.options
                model = (getattr(o, "model", "") if o else "") or detect_model(
                    self.url, getattr(o, "api_key", "") if o else ""
                )
                self._settings = ChatSettings(
                    model=model,
                    variant=(getattr(o, "variant", "") if o else "") or "default",
                    max_tokens=getattr(o, "max_tokens", None) if o else None,
                    temperature=getattr(o, "temperature", None) if o else None,
                    stream=getattr(o, "stream", True) if o else True,
                    api_key=(getattr(o, "api_key", "") if o else "") or None,
                    timeout_s=getattr(o, "request_timeout", 600.0) if o else 600.0,
                    usage_stats=getattr(o, "usage_stats", True) if o else True,
                    return_token_ids=bool(getattr(o, "record_token_ids", False)) if o else False,
                    cache_bust=cache_bust_nonce(getattr(o, "cache_bust", "") if o else ""),
                    spec_estimate=bool(getattr(o, "spec_estimate", False)) if o else False,
                )
        return self._settings

    def new_requester(self) -> ChatRequester:
        self._load_tokenizer()
        runner = self.environment.runner
        worker = str(getattr(runner, "client_id", "") or "") if self.role == "worker" else ""
        return ChatRequester(self.url, self.settings(), tokenizer=self._tokenizer, worker=worker)

    def failed_record(self, prompt: Prompt, step: str, exc: RequestFailed) -> RequestRecord:
        """A record for a request that could not even be built (model detection failed)."""
        now = time.time()
        o = self.options
        return RequestRecord(
            category=prompt.category,
            step=step,
            variant=(getattr(o, "variant", "") if o else "") or "default",
            model=(getattr(o, "model", "") if o else "") or "unknown",
            start_s=now,
            end_s=now,
            error_kind=exc.kind,
            error_detail=exc.detail[:200],
            http_status=exc.status,
            e2e_s=0.0,
        )

    def request_started(self) -> str:
        """Count a request and return the step it belongs to.

        In a step with a budget, a user that finds it spent waits here for the next step.
        """
        while self.budget is not None and self.budget <= 0:
            self._waiting += 1
            try:
                if self.role == "worker":
                    self._ask_budget()
                self._step_changed.wait()
            finally:
                self._waiting -= 1
        if self.budget is not None:
            self.budget -= 1
        self.started += 1
        self.step_started += 1
        return self.step

    def backoff(self, record: RequestRecord, seconds: float) -> None:
        """A user waits ``seconds`` after the failed request ``record``: counted in the
        client metrics where they are served (a worker sends it to its master)."""
        if self.role == "worker":
            self._backoffs.append(
                [record.variant, record.model, record.category, record.step, seconds]
            )
        elif self.metrics_served:
            self.metrics.observe_backoff(record, seconds)

    def request_abandoned(self) -> None:
        """A request killed mid-way (Locust stopped its user): it will never be published."""
        self.started -= 1
        self.step_started = max(0, self.step_started - 1)

    def complete(self, record: RequestRecord) -> None:
        """A user finished a request: Locust stats here, publish locally or queue for master."""
        if self.role == "worker":
            self._pending.append(record.to_dict(include_histograms=True, include_token_ids=True))
            if self._records_out is not None:  # --worker-records-file: kept on this host
                self._records_out.write(orjson.dumps(record.to_dict()) + b"\n")
                self._records_out.flush()
        else:
            self._publish(record)
        fire_locust_events(self.environment, record)

    # -- publishing (local and master) --------------------------------------
    def _publish(self, record: RequestRecord) -> None:
        self.published += 1
        judge(record, self.objectives)
        self.aggregator.add(record)
        if self.metrics_served:
            self.metrics.observe(record)
        if self._records_out is not None:
            # One line per record, flushed at once: a killed run keeps what it measured.
            self._records_out.write(orjson.dumps(record.to_dict()) + b"\n")
            self._records_out.flush()
        for callback in self._subscribers:
            try:
                callback(record)
            except Exception:
                log.exception("specload: a record subscriber failed")

    # -- worker side ---------------------------------------------------------
    def flush(self) -> None:
        runner = self.environment.runner
        if runner is None or (not self._pending and self.started == 0 and self._said_hello):
            return
        self._said_hello = True  # the first message tells the master to send the step
        batch, self._pending = self._pending, []
        waits, self._backoffs = self._backoffs, []
        try:
            report = RecordsMessage(
                batch, self.started, self.step_seq, self.budget, self.step_started, waits
            )
            runner.send_message(MSG_RECORDS, report.payload())
        except Exception as exc:  # the master is gone: keep the records for the next try
            self._pending[:0] = batch
            self._backoffs[:0] = waits
            log.debug("specload: could not send records: %s", exc)

    def _flush_loop(self) -> None:
        sent: tuple[int, int] = (-1, -1)
        while True:
            gevent.sleep(FLUSH_INTERVAL_S)
            if self._pending or self._backoffs or sent != (self.started, self.step_seq):
                sent = (self.started, self.step_seq)
                self.flush()

    def _on_step(self, environment: Any, msg: Any, **kw: Any) -> None:
        step = StepMessage.parse(msg.data)
        if step.seq > self.step_seq:
            self.step_started = 0
            self.step_seq = step.seq
            self.step = step.name
            self.budget = step.budget
            self._asked = False  # a want of the step before is not answered
            self._wake()
        elif step.seq == self.step_seq:
            # The step again (a greeting, a reconnect): its name, and whether it has a
            # budget, but never the budget granted since (that would be lost: the level's
            # last requests then wait for grants nobody can give).
            self.step = step.name
            if (self.budget is None) != (step.budget is None):
                self.budget = step.budget
            self._wake()

    def _on_budget(self, environment: Any, msg: Any, **kw: Any) -> None:
        grant = BudgetMessage.parse(msg.data)
        if grant.seq == self.step_seq and self.budget is not None:
            self.budget += grant.add
            self._asked = False
            self._wake()

    def _ask_budget(self) -> None:
        """Tell the master how many users wait for budget (once until it answers)."""
        runner = self.environment.runner
        if self._asked or runner is None:
            return
        self._asked = True
        try:
            runner.send_message(MSG_WANT, WantMessage(self.step_seq, self._waiting).payload())
        except Exception as exc:  # the master is gone
            self._asked = False
            log.debug("specload: could not ask for budget: %s", exc)

    def _on_want(self, environment: Any, msg: Any, **kw: Any) -> None:
        want = WantMessage.parse(msg.data)
        if want.seq != self.step_seq or self.budget is None:
            return
        count = self._workers.setdefault(msg.node_id, _WorkerCount())
        if count.lost:
            return  # refused: it is told to quit (_refuse)
        count.wanting = max(1, want.waiting)
        self._grant(msg.node_id, count)

    def _grant(self, node_id: str, count: _WorkerCount) -> None:
        runner = self.environment.runner
        if runner is None or not count.wanting or self._pool <= 0:
            return
        add = min(self._pool, 2 * count.wanting)
        self._pool -= add
        count.wanting = 0
        count.budget = (count.budget or 0) + add
        grant = BudgetMessage(self.step_seq, add)
        runner.send_message(MSG_BUDGET, grant.payload(), client_id=node_id)

    # -- master side ---------------------------------------------------------
    def _on_records(self, environment: Any, msg: Any, **kw: Any) -> None:
        report = RecordsMessage.parse(msg.data)
        count = self._workers.setdefault(msg.node_id, _WorkerCount())
        if count.lost:
            self._refuse(msg.node_id, count, report.records)
            return
        if report.started is not None:
            count.started = report.started
        if report.seq is not None:
            count.budget_seq = report.seq
            count.budget_left = report.budget_left
            if report.seq == self.step_seq and report.step_started is not None:
                count.step_started = report.step_started
        for variant, model, category, step, seconds in (
            report.backoffs if self.metrics_served else ()
        ):
            with contextlib.suppress(TypeError, ValueError):
                labels = (str(variant), str(model), str(category), str(step))
                self.metrics.observe_backoff_at(labels, float(seconds))
        if not count.greeted:
            # A worker's first message: now it can take the step (see _on_worker_connect).
            count.greeted = True
            self._send_step(msg.node_id, count)
        for d in report.records:
            count.received += 1
            if isinstance(d, dict) and d.get("step") == self.step:
                count.step_received += 1
            try:
                record = RequestRecord.from_dict(d)
            except (TypeError, KeyError, ValueError) as exc:
                log.warning("specload: dropped a bad record from %s: %s", msg.node_id, exc)
                continue
            self._publish(record)
        # Locust's listener (zmq.green) takes the next message without yielding while one
        # waits: past the master's ceiling a backlog held every other greenlet — the sweep's
        # step changes and window ends, /metrics, Ctrl-C (bench/results/master.md). One
        # yield per message lets them run between two.
        gevent.sleep(0)

    def _drain_before_quit(self, runner: Any) -> None:
        """Make ``quit`` stop the workers first and wait for their last records.

        A headless distributed run ends with the master's ``quit()``, which tells the
        workers to quit and exits 0.5 s later: requests that finish during the
        workers' ``--stop-timeout`` (and their records) would be lost. Stopping first
        (workers finish their requests, as with the web UI's stop) keeps them.
        """
        original_quit = runner.quit

        def quit_after_drain() -> None:
            try:
                if runner.state not in ("ready", "stopped") and runner.clients.all:
                    runner.stop()
                deadline = time.monotonic() + DRAIN_TIMEOUT_S
                while self.in_flight() > 0 and time.monotonic() < deadline:
                    gevent.sleep(0.05)
            finally:
                original_quit()

        runner.quit = quit_after_drain

    def _on_worker_connect(self, client_id: str, **kw: Any) -> None:
        # A new worker connects before its handlers are registered (Locust fires ``init``
        # after the worker's runner has connected): a step sent now would only be logged
        # there as an unknown message. Its first records message, 0.25 s later, asks for
        # the step (``_on_records``); a worker seen before (it reconnected) gets it now.
        count = self._workers.setdefault(client_id, _WorkerCount())
        if count.greeted:
            self._send_step(client_id, count)

    def _send_step(self, client_id: str, count: _WorkerCount) -> None:
        runner = self.environment.runner
        if runner is not None:
            step = StepMessage(self.step, self.step_seq, None if self.budget is None else 0)
            runner.send_message(MSG_STEP, step.payload(), client_id=client_id)

    def _redistribute(self, node_id: str, count: _WorkerCount) -> None:
        """Return a vanished worker's unspent budget, and its requests that will never
        report back, to the pool: the level still gets its N requests."""
        runner = self.environment.runner
        if runner is None or self.budget is None or count.redistributed:
            return
        count.redistributed = True
        # What was granted to it in this step and not started by its last report (grants
        # after that report included: its counts cannot know them). Its requests started
        # and not reported are booked lost (_declare_lost), not replaced: the level's
        # completed + failed + unfinished + lost stays its budget, exactly.
        started = count.step_started if count.step_started is not None else count.step_received
        started = max(started, count.step_received)
        extra = max(0, (count.budget or 0) - started)
        count.budget = started
        if not extra:
            return
        self._pool += extra
        log.warning(
            "specload: %d requests of step %s moved from missing worker %s to the others",
            extra,
            self.step,
            node_id,
        )
        for other_id, other in self._workers.items():
            client = runner.clients.get(other_id)
            if other_id != node_id and client is not None and client.state != "missing":
                self._grant(other_id, other)

    def _watch_workers(self) -> None:
        while True:
            gevent.sleep(1.0)
            self.check_workers()

    def check_workers(self) -> None:
        """Master: declare the workers Locust marked missing (or removed) lost, once."""
        runner = self.environment.runner
        if runner is None:
            return
        for node_id, count in list(self._workers.items()):
            client = runner.clients.get(node_id)
            gone = client is None or client.state == "missing"
            if gone and not count.lost:
                self._declare_lost(node_id, count)
            if gone and not count.redistributed:
                self._redistribute(node_id, count)

    def _declare_lost(self, node_id: str, count: _WorkerCount) -> None:
        """A worker went missing: what it started and did not report is booked lost now,
        once; if it comes back it is refused (:meth:`_refuse`)."""
        count.lost = True
        count.booked = max(0, count.started - count.received)
        if not count.missing_logged:
            count.missing_logged = True
            log.warning(
                "specload: worker %s went missing: %d requests started there were never "
                "reported (counted lost: specload_client_requests_lost_total); it is not "
                "taken back in this run",
                node_id,
                count.booked,
            )

    def _refuse(self, node_id: str, count: _WorkerCount, records: Any) -> None:
        """A worker declared lost sent again (its link came back): its records are set
        aside (``late_records``; their requests are already counted lost or were never
        counted) and it is told to quit, once. Restarted, it joins as a new worker."""
        for d in records:
            if not isinstance(d, dict):
                continue
            count.late += 1
            self.late_records.append(d)
            for callback in self._late_subscribers:
                try:
                    callback(d)
                except Exception:
                    log.exception("specload: a late-record subscriber failed")
        if count.late_refused:
            return
        count.late_refused = True
        log.warning(
            "specload: worker %s came back after it was declared lost: told to quit; its "
            "records since are set aside, not counted (restart it to join again)",
            node_id,
        )
        runner = self.environment.runner
        if runner is not None:
            try:
                runner.send_message("quit", None, client_id=node_id)
            except Exception as exc:
                log.debug("specload: could not tell worker %s to quit: %s", node_id, exc)

    def _on_quitting(self, environment: Any, **kw: Any) -> None:
        prefix = getattr(self.options, "csv_prefix", None) if self.options else None
        if prefix:
            write_csv(Path(f"{prefix}_specload.csv"), self.aggregator)
        if self._records_out is not None:
            self._records_out.close()
            self._records_out = None
        if self._metrics_server is not None:
            self._metrics_server.shutdown()
            self._metrics_server = None


def detect_model(url: ServerURL, api_key: str = "") -> str:
    """The first model id from ``/v1/models``; raises :class:`RequestFailed`."""
    host, port = url.host_port
    conn = Connection(host, port, tls=url.root.startswith("https:"))
    path = url.models.split("://", 1)[1]
    path = path[path.index("/") :]
    auth = f"Authorization: Bearer {api_key}\r\n" if api_key else ""
    parts: list[bytes] = []
    try:
        conn.request(
            "GET",
            path,
            None,
            f"Accept: application/json\r\n{auth}".encode(),
            lambda data, now: parts.append(data),
            timeout_s=30.0,
        )
    finally:
        conn.close()
    try:
        models = orjson.loads(b"".join(parts))
        return str(models["data"][0]["id"])
    except (orjson.JSONDecodeError, KeyError, IndexError, TypeError):
        raise RequestFailed("malformed", "GET /v1/models: no model id in the answer") from None


def get_session(environment: Any) -> LoadSession:
    """The :class:`LoadSession` of a Locust environment (created on first use)."""
    session: LoadSession | None = getattr(environment, "_specload_session", None)
    if session is None:
        session = LoadSession(environment)
        environment._specload_session = session
    return session
