"""exporter.baselines: `specload baseline export` files served as metrics."""

from __future__ import annotations

import os
from pathlib import Path

import orjson
import pytest
from prometheus_client import CollectorRegistry

from exporter.baselines import BaselineSource
from specload.compare.baseline import FORMAT

pytestmark = pytest.mark.unit


def write(path: Path, tpot_median: float, variant: str = "baseline") -> None:
    doc = {
        "format": FORMAT,
        "variant": variant,
        "model": "kimi",
        "created_at": "2026-11-29T10:00:00+00:00",
        "source": "results/baseline",
        "entries": [
            {"concurrency": 1, "request_rate": None, "category": "all",
             "tpot_median_seconds": tpot_median, "tpot_p90_seconds": 0.015, "requests": 118},
            {"concurrency": 8, "request_rate": None, "category": "coding",
             "tpot_median_seconds": 0.016, "tpot_p90_seconds": 0.019, "requests": 40},
            {"concurrency": None, "request_rate": 2.5, "category": "all",
             "tpot_median_seconds": 0.02, "tpot_p90_seconds": 0.03, "requests": 50},
        ],
    }  # fmt: skip
    path.write_bytes(orjson.dumps(doc))


def registry(source: BaselineSource) -> CollectorRegistry:
    reg = CollectorRegistry(auto_describe=False)
    reg.register(source)  # type: ignore[arg-type]
    return reg


def test_entries_become_series_and_reload_on_change(tmp_path: Path) -> None:
    path = tmp_path / "baseline.json"
    write(path, 0.0136)
    reg = registry(BaselineSource([path]))
    labels = {"variant": "baseline", "model": "kimi", "category": "all", "concurrency": "1",
              "request_rate": ""}  # fmt: skip
    get = reg.get_sample_value
    assert get("specload_baseline_tpot_seconds", {**labels, "quantile": "0.5"}) == 0.0136
    assert get("specload_baseline_tpot_seconds", {**labels, "quantile": "0.9"}) == 0.015
    assert get("specload_baseline_requests", labels) == 118
    rate = {**labels, "concurrency": "", "request_rate": "2.5", "quantile": "0.5"}
    assert get("specload_baseline_tpot_seconds", rate) == 0.02
    write(path, 0.0140)
    os.utime(path, ns=(1, 2_000_000_000_000_000_000))  # a different mtime, whatever the clock
    assert get("specload_baseline_tpot_seconds", {**labels, "quantile": "0.5"}) == 0.0140


def test_bad_or_missing_file_keeps_last_good_and_counts(tmp_path: Path) -> None:
    path = tmp_path / "baseline.json"
    write(path, 0.0136)
    src = BaselineSource([path, tmp_path / "missing.json"])
    reg = registry(src)
    q = {"variant": "baseline", "model": "kimi", "category": "all", "concurrency": "1",
         "request_rate": "", "quantile": "0.5"}  # fmt: skip
    assert reg.get_sample_value("specload_baseline_tpot_seconds", q) == 0.0136
    path.write_text("{not json")
    os.utime(path, ns=(1, 3_000_000_000_000_000_000))
    assert reg.get_sample_value("specload_baseline_tpot_seconds", q) == 0.0136
    errs = reg.get_sample_value("specload_baseline_load_errors_total", {"path": str(path)})
    assert errs is not None and errs >= 1
    missing = {"path": str(tmp_path / "missing.json")}
    assert (reg.get_sample_value("specload_baseline_load_errors_total", missing) or 0) >= 1
