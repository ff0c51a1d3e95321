"""The Locust user: a closed-loop chat client sending reasoning-heavy prompts.

A user whose requests fail is paced, so a failing target is not flooded: after its
n-th failed request in a row it waits
:func:`~specload.load.failures.backoff_s` (0.25 s doubling to 8 s; a success resets
the count), and at least what the answer's ``Retry-After`` asked (at most
:data:`~specload.load.failures.RETRY_AFTER_MAX_S`: :func:`~specload.load.failures.pause_s`).
``client_error`` (a fault of specload's own code, not the target's) and
``unfinished`` neither count nor reset. The wait comes
after the record is published (no request is in flight meanwhile), is counted in
the client metrics (``specload_client_backoffs_total``,
``specload_client_backoff_seconds_total``) and ends at once when the user is stopped.
"""

from __future__ import annotations

from typing import Any

import gevent
from gevent import GreenletExit
from locust import User, constant, task
from locust.exception import StopUser
from locust.user.task import LOCUST_STATE_RUNNING, LOCUST_STATE_STOPPING, LOCUST_STATE_WAITING

from specload.load import plugin as _plugin  # registers specload's options and messages
from specload.load.chat import ChatRequester
from specload.load.failures import BACKOFF_FIRST_S, RequestFailed, pause_s
from specload.load.session import LoadSession, get_session
from specload.prompts import Prompt
from specload.records.request import RequestRecord

del _plugin

REFUSED_BACKOFF_S = BACKOFF_FIRST_S  # the wait after a first refused connection
# Failures that say nothing of the target: they neither count nor reset the backoff.
_NOT_COUNTED = frozenset({"client_error", "unfinished"})


class ChatUser(User):
    """Sends the next prompt as soon as the last answer ended (closed loop)."""

    wait_time = constant(0)

    def __init__(self, environment: Any) -> None:
        super().__init__(environment)
        self._session: LoadSession = get_session(environment)
        self._requester: ChatRequester | None = None
        self._failures = 0  # failed requests in a row (for the backoff)
        # Open loop: when the next request was due (wall clock; the pacer's ticket).
        self.scheduled_s: float | None = None

    @task
    def chat(self) -> None:
        session = self._session
        prompt = self.next_prompt()
        step = session.request_started()
        if self._requester is None:
            try:
                self._requester = session.new_requester()
            except RequestFailed as exc:
                record = session.failed_record(prompt, step, exc)
                session.complete(record)
                self._pace(record, exc.retry_after_s)
                return
        scheduled, self.scheduled_s = self.scheduled_s, None
        try:
            record = self._requester.send(prompt, step)
            record.scheduled_s = scheduled
        except GreenletExit:
            # Locust stopped this user mid-request: record it as unfinished.
            partial = self._requester.interrupted()
            if partial is None:
                session.request_abandoned()
            else:
                session.complete(partial)
            raise
        session.complete(record)
        if not record.ok:
            self._pace(record, getattr(self._requester, "retry_after_s", None))
        else:
            self._failures = 0

    def next_prompt(self) -> Prompt:
        """The next request's prompt (the session's sampler; a trace replay's own)."""
        return self._session.next_prompt()

    def _pace(self, record: RequestRecord, retry_after_s: float | None) -> None:
        """After a failed request (published): wait as the backoff and Retry-After say."""
        if record.error_kind in _NOT_COUNTED:
            return
        self._failures += 1
        wait = pause_s(self._failures, retry_after_s)
        if wait <= 0:
            return
        self._session.backoff(record, wait)
        # Waiting, as in Locust's own wait_time: a stop ends the wait at once.
        self._state = LOCUST_STATE_WAITING
        gevent.sleep(wait)
        if self._state == LOCUST_STATE_STOPPING:
            raise StopUser()
        self._state = LOCUST_STATE_RUNNING

    def on_stop(self) -> None:
        if self._requester is not None:
            self._requester.close()
