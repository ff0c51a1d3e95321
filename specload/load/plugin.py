"""Hooks specload into Locust's events (imported by the user module).

``init_command_line_parser`` adds specload's options; ``init`` creates the
process's :class:`~specload.load.session.LoadSession` and registers the
``specload:*`` runner messages for the runner's role.
"""

from __future__ import annotations

from typing import Any

from locust import events

from specload.load.options import add_options
from specload.load.session import get_session


def _add_options(parser: Any, **kw: Any) -> None:
    add_options(parser)


def _on_init(environment: Any, web_ui: Any = None, **kw: Any) -> None:
    session = get_session(environment)
    session.attach(environment.runner)
    session.attach_web_ui(web_ui)


events.init_command_line_parser.add_listener(_add_options)  # type: ignore[no-untyped-call]
events.init.add_listener(_on_init)  # type: ignore[no-untyped-call]
