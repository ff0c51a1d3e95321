"""Baseline files (``specload baseline export``) served as metrics.

Each file (format ``specload-baseline/1``, see :mod:`specload.compare.baseline`) becomes::

    specload_baseline_tpot_seconds{variant, model, category, concurrency, request_rate, quantile}
    specload_baseline_requests{variant, model, category, concurrency, request_rate}

``quantile`` is ``0.5`` (median) or ``0.9``; ``concurrency`` / ``request_rate``
are the sweep level ("" when the level has the other one). A file is re-read
when it changes; a file that turns bad keeps its last good content served and
counts ``specload_baseline_load_errors_total{path}``.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily
from prometheus_client.metrics_core import Metric

from specload.compare.baseline import load_baseline
from specload.errors import UsageError

log = logging.getLogger("specload.exporter")

LABELS = ["variant", "model", "category", "concurrency", "request_rate"]


def _level(value: object) -> str:
    if value is None:
        return ""
    if isinstance(value, float) and value.is_integer():
        return str(int(value))
    return str(value)


class BaselineSource:
    def __init__(self, paths: Sequence[Path]) -> None:
        self.paths = list(paths)
        self._lock = threading.Lock()
        self._loaded: dict[Path, tuple[float, dict[str, Any]]] = {}
        self._errors: dict[Path, int] = dict.fromkeys(self.paths, 0)

    def _refresh(self, path: Path) -> dict[str, Any] | None:
        try:
            mtime = path.stat().st_mtime_ns
        except OSError:
            mtime = None
        cached = self._loaded.get(path)
        if cached is not None and mtime is not None and cached[0] == mtime:
            return cached[1]
        if mtime is None:
            if cached is None:
                self._errors[path] += 1
            return cached[1] if cached else None
        try:
            data = load_baseline(path)
        except UsageError as exc:
            self._errors[path] += 1
            log.warning("baseline %s: %s", path, exc)
            return cached[1] if cached else None
        self._loaded[path] = (mtime, data)
        return data

    def collect(self) -> Iterator[Metric]:
        tpot = GaugeMetricFamily(
            "specload_baseline_tpot_seconds",
            "Baseline TPOT per sweep level and prompt category (quantile 0.5 or 0.9).",
            labels=[*LABELS, "quantile"],
        )
        requests = GaugeMetricFamily(
            "specload_baseline_requests",
            "Requests the baseline figure is based on.",
            labels=LABELS,
        )
        errors = CounterMetricFamily(
            "specload_baseline_load_errors",
            "Failures reading a baseline file (the last good content stays served).",
            labels=["path"],
        )
        seen: set[tuple[str, ...]] = set()  # two files with the same series: the first wins
        with self._lock:
            for path in self.paths:
                data = self._refresh(path)
                errors.add_metric([str(path)], self._errors[path])
                if data is None:
                    continue
                variant = str(data.get("variant") or "")
                model = str(data.get("model") or "")
                for e in data["entries"]:
                    labels = [
                        variant,
                        model,
                        str(e["category"]),
                        _level(e.get("concurrency")),
                        _level(e.get("request_rate")),
                    ]
                    if tuple(labels) in seen:
                        continue
                    seen.add(tuple(labels))
                    tpot.add_metric([*labels, "0.5"], float(e["tpot_median_seconds"]))
                    tpot.add_metric([*labels, "0.9"], float(e["tpot_p90_seconds"]))
                    if e.get("requests") is not None:
                        requests.add_metric(labels, float(e["requests"]))
        yield tpot
        yield requests
        yield errors
