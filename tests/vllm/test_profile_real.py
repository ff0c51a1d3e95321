"""A real vLLM CPU trace: capture through the API, find the decode steps and their times."""

from __future__ import annotations

import os
import shutil
import threading
from pathlib import Path

import httpx
import pytest

from specload.profile.capture import capture
from specload.profile.tracefile import iter_events, parse_step_annotation
from specload.urls import parse_server_url

pytestmark = [pytest.mark.vllm, pytest.mark.slow]


def _load(url: str, model: str, stop: threading.Event, concurrency: int = 3) -> None:
    def one() -> None:
        with httpx.Client(timeout=600.0) as client:
            while not stop.is_set():
                try:
                    client.post(f"{url}/v1/chat/completions", json={
                        "model": model, "max_tokens": 48,
                        "messages": [{"role": "user", "content": "Count to ten."}]})
                except httpx.HTTPError:
                    # The server stalls while it writes the trace: not this test's subject.
                    stop.wait(0.5)

    threads = [threading.Thread(target=one, daemon=True) for _ in range(concurrency)]
    for t in threads:
        t.start()
    stop.wait()
    for t in threads:
        t.join(60.0)


def test_real_cpu_trace_has_decode_steps(vllm_profiled) -> None:  # type: ignore[no-untyped-def]
    server = vllm_profiled
    trace_dir: Path = server.trace_dir
    stop = threading.Event()
    loader = threading.Thread(target=_load, args=(server.url, server.model, stop), daemon=True)
    loader.start()
    try:
        # vLLM writes the trace (and a summary table) inside /stop_profile: minutes for
        # a long capture on CPU, so capture briefly.
        result = capture(parse_server_url(server.url), trace_dir, 0.8, stop_timeout_s=400.0,
                         settle_s=60.0)
    finally:
        stop.set()
        loader.join(120.0)
    keep = os.environ.get("SPECLOAD_KEEP_TRACES")
    if keep:  # for looking at a real trace by hand
        Path(keep).mkdir(parents=True, exist_ok=True)
        for f in result.files:
            shutil.copy(f, Path(keep) / f.name)
    report = result.report
    j = report.to_json()
    assert result.files, "no trace files"
    assert report.decode_steps > 0
    step_s = report.decode_step_seconds
    assert step_s is not None and 0 < step_s < 5.0
    # Several requests ran at once: some decode steps batch more than one request.
    assert max(int(b) for b in j["batch_sizes"]) >= 2
    # The analysis counted exactly the steps the trace annotates as decode-only.
    rank0 = next(r for r in report.ranks if r.rank == 0)
    annotated = sum(
        1 for ev in iter_events(Path(rank0.file))
        if ev.get("cat") == "user_annotation"
        and (shape := parse_step_annotation(str(ev.get("name", "")))) is not None
        and shape.decode_only
    )
    assert rank0.decode.steps == annotated
    # TP=1 on CPU: no all-reduce at all.
    assert rank0.mode == "cpu_op"
    assert j["decode_allreduce_ratio"] == 0.0
