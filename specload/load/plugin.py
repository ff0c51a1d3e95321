"""Hooks specload into Locust's events (imported by the user module).

``init_command_line_parser`` adds specload's options; ``init`` creates the
process's :class:`~specload.load.session.LoadSession` and registers the
``specload:*`` runner messages for the runner's role, and the client's own lag and CPU
meter (:mod:`specload.load.lag`: measured where users run, a worker's sent in Locust's
statistics report, shown in the client metrics and the web UI's client tab). At the end
of a run started by ``locust`` itself (its ``quit`` event, after its statistics;
``specload run`` has its own per level), the master or single process logs the truncation
guard's warnings
(:func:`specload.load.report.truncation_report`).

A worker also watches its master (:class:`MasterWatchdog`): Locust's master
answers each worker heartbeat (one a second) with its own, and a worker left
without any for :data:`MASTER_SILENCE_TIMEOUT_S` quits — the master was
killed, stopped or cut off, and nobody records what the worker would send.
(Locust's own limit is 60 s, ``MASTER_HEARTBEAT_TIMEOUT``.)
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from typing import Any

import gevent
from locust import events

from specload.load.lag import attach as attach_client_load
from specload.load.options import add_options
from specload.load.report import truncation_report
from specload.load.session import LoadSession, get_session

log = logging.getLogger("specload.load")

#: A worker that heard nothing from its master for this long quits (the master sends a
#: heartbeat every second, so a level without step changes never comes near it).
MASTER_SILENCE_TIMEOUT_S = 5.0
#: How often the watchdog looks; a check counts at most twice this much silence, so a
#: worker whose own loop was blocked (loading a large prompt file) is not fooled.
_CHECK_S = 0.5


class MasterWatchdog:
    """Quits a worker runner when its master has been silent for ``timeout_s``."""

    def __init__(
        self,
        runner: Any,
        *,
        timeout_s: float = MASTER_SILENCE_TIMEOUT_S,
        clock: Callable[[], float] = time.monotonic,
        sleep: Callable[[float], None] = gevent.sleep,
    ) -> None:
        self.runner = runner
        self.timeout_s = timeout_s
        self.clock = clock
        self.sleep = sleep
        self.silent_s = 0.0

    def heard(self, **_kw: Any) -> None:
        """A heartbeat from the master arrived."""
        self.silent_s = 0.0

    def check(self, elapsed_s: float) -> bool:
        """Count ``elapsed_s`` more of silence; True when the master counts as gone."""
        self.silent_s += min(max(elapsed_s, 0.0), 2 * _CHECK_S)
        return self.silent_s >= self.timeout_s

    def run(self) -> None:
        last = self.clock()
        while True:
            self.sleep(_CHECK_S)
            now = self.clock()
            gone = self.check(now - last)
            last = now
            if gone:
                log.error(
                    "specload: no message from the master in %.0fs: it is gone; quitting "
                    "(MASTER_SILENCE_TIMEOUT_S)",
                    self.silent_s,
                )
                environment = getattr(self.runner, "environment", None)
                if environment is not None:
                    environment.process_exit_code = 1
                self.runner.quit()
                return


def warn_truncation(session: LoadSession) -> None:
    """Log the truncation guard's warnings of the records this process published."""
    for line in truncation_report(session.aggregator):
        log.warning("specload: %s", line)


def _add_options(parser: Any, **kw: Any) -> None:
    add_options(parser)


def _on_init(environment: Any, web_ui: Any = None, **kw: Any) -> None:
    session = get_session(environment)
    session.attach(environment.runner)
    # The client's own lag and CPU (specload.load.lag), per step: measured where users run.
    variant = str(getattr(session.options, "variant", "") or "")
    book = attach_client_load(environment, session.role, lambda: session.step, variant)
    session.metrics.set_client_load(book.figures, book.step_names, variant)
    session.attach_web_ui(web_ui)
    if session.role != "worker":
        # Only Locust's own main fires ``quit`` (the sweep warns per level itself).
        environment.events.quit.add_listener(lambda **kw: warn_truncation(session))
    if session.role == "worker":
        watchdog = MasterWatchdog(environment.runner)
        environment.events.heartbeat_received.add_listener(watchdog.heard)
        environment._specload_watchdog = gevent.spawn(watchdog.run)


events.init_command_line_parser.add_listener(_add_options)  # type: ignore[no-untyped-call]
events.init.add_listener(_on_init)  # type: ignore[no-untyped-call]
