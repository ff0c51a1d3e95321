"""The HTTP client's parts under their former name, for code that still imports them here.

The parts live in their own modules: :mod:`specload.load.failures`
(``RequestFailed``), :mod:`specload.load.chunked` (``ChunkedDecoder``),
:mod:`specload.load.response` (``ResponseParser``, ``FastReader``),
:mod:`specload.load.reactor` (``Reactor``, ``get_reactor``) and
:mod:`specload.load.connection` (``Connection``); the environment switches in
:mod:`specload.load.switches`. Import from those.
"""

from __future__ import annotations

from specload.load.chunked import ChunkedDecoder
from specload.load.connection import Connection
from specload.load.failures import RequestFailed
from specload.load.reactor import Reactor, get_reactor
from specload.load.response import FastReader, OnBody, ResponseParser

__all__ = [
    "ChunkedDecoder",
    "Connection",
    "FastReader",
    "OnBody",
    "Reactor",
    "RequestFailed",
    "ResponseParser",
    "get_reactor",
]
