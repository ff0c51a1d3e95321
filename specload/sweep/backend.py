"""Locust as the sweep's load backend: one process, or a master with worker processes.

Importing this module imports Locust, which monkey-patches the process with
gevent; ``specload run`` imports it only when it runs.
"""

from __future__ import annotations

import contextlib
import ctypes
import logging
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import IO, Any

import gevent
from locust import events
from locust.argument_parser import get_parser
from locust.env import Environment
from locust.exception import RPCError
from locust.runners import STATE_MISSING, MasterRunner, Runner

from specload import load as load_api
from specload.errors import UsageError
from specload.load.lag import get_book
from specload.prompts.trace import trace_digest
from specload.records.clientload import ClientLoadFigures
from specload.records.request import RequestRecord
from specload.sweep import locustfile
from specload.sweep.locustfile import MSG_PACE, TRACE_START_LEAD_S, SweepUser, get_pacer
from specload.sweep.plan import Level
from specload.sweep.ports import free_port

log = logging.getLogger("specload.sweep")

WORKER_CONNECT_TIMEOUT_S = 60.0
PR_SET_PDEATHSIG = 1  # <linux/prctl.h>
# What specload's session raises (as SystemExit, for Locust's own command line) on bad input.
_ERROR_PREFIX = "specload: error: "


def die_with_parent() -> Callable[[], None] | None:
    """A ``preexec_fn`` that has the kernel send the child SIGTERM when this process dies
    (even by ``kill -9``): local workers never outlive their master. Linux only (None
    elsewhere; the worker's heartbeat watchdog still quits them within seconds)."""
    if not sys.platform.startswith("linux"):
        return None
    try:
        prctl = ctypes.CDLL(None, use_errno=True).prctl  # resolved here, not in the child
    except (OSError, AttributeError):
        return None
    parent = os.getpid()

    def preexec() -> None:
        prctl(PR_SET_PDEATHSIG, int(signal.SIGTERM), 0, 0, 0)
        if os.getppid() != parent:  # the master died before the line above
            os._exit(1)

    return preexec


class LocustBackend:
    """Implements :class:`specload.sweep.driver.LoadBackend` with Locust runners."""

    def __init__(
        self,
        *,
        host: str,
        load_options: Mapping[str, Any],
        worker_argv: Sequence[str],
        worker_env: Mapping[str, str],
        workers: int = 0,
        expect_workers: int | None = None,
        master_bind_host: str = "127.0.0.1",
        master_bind_port: int | None = None,
        log_dir: Path | None = None,
    ) -> None:
        self.host = host
        self.workers = workers
        self.expect_workers = expect_workers if expect_workers is not None else workers
        self.distributed = self.expect_workers > 0
        self.master_bind_host = master_bind_host
        self.master_bind_port = master_bind_port or (free_port() if self.distributed else 0)
        self.log_dir = log_dir
        self._procs: list[subprocess.Popen[bytes]] = []
        self._logs: list[IO[bytes]] = []
        self._pace_seq = 0
        parser = get_parser()
        opts = parser.parse_args(["--headless", "--host", host])
        for dest, value in load_options.items():
            setattr(opts, dest, value)
        # A worker that goes missing: Locust starts its users again on the others.
        opts.enable_rebalancing = True
        self.options = opts
        self.env = Environment(
            user_classes=[SweepUser],
            events=events,
            host=host,
            parsed_options=opts,
            locustfile=locustfile.__file__,
        )
        self.runner: Runner
        if self.distributed:
            try:
                self.runner = self.env.create_master_runner(master_bind_host, self.master_bind_port)
            except RPCError as exc:  # the port is taken, or the host is not this machine's
                cause = " ".join(str(exc.__cause__ or exc).split())
                raise UsageError(
                    f"--master-bind-host/--master-bind-port {master_bind_host}:"
                    f"{self.master_bind_port}: cannot listen for workers ({cause}); choose "
                    "another port (or leave --master-bind-port out for a free one)"
                ) from None
        else:
            self.runner = self.env.create_local_runner()
        try:
            self.env.events.init.fire(environment=self.env, runner=self.runner, web_ui=None)  # type: ignore[no-untyped-call]
        except SystemExit as exc:
            # The session's one-line errors (a taken --metrics-address, a bad prompt file)
            # are bad input of `specload run`: exit 2, like every other option.
            if isinstance(exc.code, str) and exc.code.startswith(_ERROR_PREFIX):
                with contextlib.suppress(Exception):
                    self.runner.quit()
                raise UsageError(exc.code[len(_ERROR_PREFIX) :]) from None
            raise
        self._worker_argv = list(worker_argv)
        self._worker_env = dict(worker_env)

    # -- set-up -----------------------------------------------------------------
    def subscribe(self, callback: load_api.RecordCallback) -> None:
        load_api.subscribe(self.env, callback)

    def subscribe_late(self, callback: Callable[[dict[str, Any]], None]) -> None:
        """Records of workers declared lost that came back (never counted)."""
        load_api.get_session(self.env).subscribe_late(callback)

    def workers_left(self) -> int | None:
        """Workers still taking part (None: no workers, a single process)."""
        if not self.distributed:
            return None
        left: int | None = load_api.get_session(self.env).workers_left()
        return left

    def show_precision(self, variant: str, step: str, metric: str, half_width: float) -> None:
        """A level's half-width on the client metrics (``--precision``)."""
        load_api.get_session(self.env).metrics.set_precision(variant, step, metric, half_width)

    @property
    def metrics_port(self) -> int | None:
        port: int | None = load_api.get_session(self.env).metrics_port
        return port

    def start_workers(self) -> None:
        """Start the local worker processes and wait for every expected worker to connect."""
        if not self.distributed:
            return
        for i in range(self.workers):
            cmd = [
                sys.executable,
                "-m",
                "locust",
                "-f",
                locustfile.__file__,
                "--worker",
                "--master-host",
                "127.0.0.1",
                "--master-port",
                str(self.master_bind_port),
                *self._worker_argv,
            ]
            env = {**os.environ, **self._worker_env}
            out: IO[bytes] | int = subprocess.DEVNULL
            if self.log_dir is not None:
                fh = (self.log_dir / f"worker-{i}.log").open("ab")
                self._logs.append(fh)
                out = fh
            self._procs.append(
                subprocess.Popen(
                    cmd,
                    stdout=out,
                    stderr=subprocess.STDOUT,
                    env=env,
                    preexec_fn=die_with_parent(),  # noqa: PLW1509 (only prctl, no locks)
                )
            )
        assert isinstance(self.runner, MasterRunner)
        deadline = time.monotonic() + WORKER_CONNECT_TIMEOUT_S
        while len(self.runner.clients.ready) < self.expect_workers:
            dead = [p for p in self._procs if p.poll() is not None]
            if dead:
                raise UsageError(
                    f"--workers: a worker process exited with status {dead[0].returncode} "
                    f"(see {self.log_dir or 'its output'})"
                )
            if time.monotonic() > deadline:
                raise UsageError(
                    f"--workers: {len(self.runner.clients.ready)} of {self.expect_workers} "
                    f"workers connected to port {self.master_bind_port} after "
                    f"{WORKER_CONNECT_TIMEOUT_S:g}s"
                )
            gevent.sleep(0.1)

    # -- LoadBackend --------------------------------------------------------------
    def set_step(self, step: str, budget: int | None = None) -> None:
        load_api.set_step(self.env, step, budget)

    def _pace(self, rate: float | None, *, hold: bool = False, trace: bool = False) -> None:
        self._pace_seq += 1
        if isinstance(self.runner, MasterRunner):
            # Every worker that runs users now or will (Locust's "ready" is only the idle
            # ones: from a second level on they are all "running").
            ready = [c for c in self.runner.clients.values() if c.state != STATE_MISSING]
            n = max(1, len(ready))
            per_worker = None if rate is None or trace else rate / n
            data: dict[str, object] = {"rate": per_worker, "seq": self._pace_seq, "hold": hold}
            if trace:  # each worker sends every n-th entry, by its place in this list
                data["trace_workers"] = sorted(str(c.id) for c in ready)
                data["trace_start"] = time.time() + TRACE_START_LEAD_S
                opts = self.env.parsed_options
                data["trace_digest"] = trace_digest(
                    str(getattr(opts, "trace", "") or ""),
                    float(getattr(opts, "trace_speedup", 1.0) or 1.0),
                )
            self.runner.send_message(MSG_PACE, data)
        else:
            get_pacer(self.env).set_rate(
                None if trace else rate, self._pace_seq, hold=hold, trace=(0, 1) if trace else None
            )

    def hold(self) -> None:
        """Users finish the request they are in and start no other (the final drain)."""
        self._pace(None, hold=True)

    def in_flight(self) -> int:
        """Requests started and not yet published here (workers: as last reported)."""
        session = load_api.get_session(self.env)
        if isinstance(self.runner, MasterRunner):
            # workers declared lost are not waited for: their requests are booked lost
            return int(session.in_flight())
        return max(0, int(session.started) - int(session.published))

    def start(self, level: Level) -> None:
        self._pace(level.request_rate, trace=level.trace > 0)
        users = level.users
        # --ramp-up: the users start over that long (Locust's spawn rate); else in a second.
        rate = (
            float(max(users, 1)) / level.ramp_up_s if level.ramp_up_s > 0 else float(max(users, 1))
        )
        if isinstance(self.runner, MasterRunner):
            # The master's start() waits a second for worker reports after the ramp-up:
            # in its own greenlet, so the level's clock does not wait with it.
            gevent.spawn(self.runner.start, users, rate)
        else:
            self.runner.start(users, spawn_rate=rate)

    def pause(self) -> None:
        self.runner.stop()
        self._pace(None)

    def stop(self) -> None:
        self.runner.stop()
        self._pace(None)

    def user_count(self) -> int:
        return int(self.runner.user_count)

    def lost(self) -> int:
        """Requests started on workers that went missing and never reported back."""
        return int(load_api.get_session(self.env).lost_requests())

    def client_load(self, step: str) -> ClientLoadFigures | None:
        """The client's own lag and busy share in ``step`` (its load processes merged;
        specload.load.lag), None when nothing was measured."""
        book = get_book(self.env)
        return None if book is None else book.figures(step)

    def close(self) -> None:
        """Quit the runner (workers too) and reap the worker processes."""
        try:
            self.runner.quit()
        except Exception:
            log.exception("specload: stopping Locust failed")
        self.env.events.quitting.fire(environment=self.env, reverse=True)  # type: ignore[no-untyped-call]
        deadline = time.monotonic() + 10.0
        for proc in self._procs:
            while proc.poll() is None and time.monotonic() < deadline:
                gevent.sleep(0.05)
            if proc.poll() is None:
                proc.terminate()
                try:
                    proc.wait(5)
                except subprocess.TimeoutExpired:
                    proc.kill()
                    proc.wait()
        for fh in self._logs:
            fh.close()


def record_dict(record: RequestRecord) -> dict[str, Any]:
    return record.to_dict(include_histograms=True, include_token_ids=True)
