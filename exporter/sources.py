"""Extra family sources: anything with ``collect()`` that the exporter serves too.

The profiler captures (``exporter/profiling.py``) and the baseline
file (``baselines:`` in the config) plug in here without the core knowing
them. A source may also have ``start()`` and ``close()``; a source whose
``collect()`` raises drops only its own families for that scrape.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Protocol, runtime_checkable

from prometheus_client.metrics_core import Metric


@runtime_checkable
class FamilySource(Protocol):
    def collect(self) -> Iterable[Metric]: ...


def start_source(source: object) -> None:
    start = getattr(source, "start", None)
    if callable(start):
        start()


def close_source(source: object) -> None:
    for name in ("close", "stop"):
        fn = getattr(source, name, None)
        if callable(fn):
            fn()
            return
