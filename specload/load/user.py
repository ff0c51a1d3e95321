"""The Locust user: a closed-loop chat client sending reasoning-heavy prompts."""

from __future__ import annotations

from typing import Any

import gevent
from gevent import GreenletExit
from locust import User, constant, task

from specload.load import plugin as _plugin  # registers specload's options and messages
from specload.load.chat import ChatRequester
from specload.load.failures import RequestFailed
from specload.load.session import LoadSession, get_session

del _plugin

REFUSED_BACKOFF_S = 0.25


class ChatUser(User):
    """Sends the next prompt as soon as the last answer ended (closed loop)."""

    wait_time = constant(0)

    def __init__(self, environment: Any) -> None:
        super().__init__(environment)
        self._session: LoadSession = get_session(environment)
        self._requester: ChatRequester | None = None

    @task
    def chat(self) -> None:
        session = self._session
        prompt = session.next_prompt()
        step = session.request_started()
        if self._requester is None:
            try:
                self._requester = session.new_requester()
            except RequestFailed as exc:
                session.complete(session.failed_record(prompt, step, exc))
                gevent.sleep(REFUSED_BACKOFF_S * 2)
                return
        try:
            record = self._requester.send(prompt, step)
        except GreenletExit:
            # Locust stopped this user mid-request: record it as unfinished.
            partial = self._requester.interrupted()
            if partial is None:
                session.request_abandoned()
            else:
                session.complete(partial)
            raise
        session.complete(record)
        if record.error_kind == "refused":
            # A target that is down (a reload): do not spin.
            gevent.sleep(REFUSED_BACKOFF_S)

    def on_stop(self) -> None:
        if self._requester is not None:
            self._requester.close()
