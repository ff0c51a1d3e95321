"""Per-request speculative decoding on real vLLM (CPU build, the tiny plain model, n-gram,
greedy, ``--per-request-spec-decode-metrics detailed``, ``VLLM_SERVER_DEV_MODE=1``).

Known truth is the server's own counters: one level without warm-up, the first scrape
before the users start and the last after every request ended, so the per-request sums
must equal the counter deltas exactly and the level says ``spec_decode_reconciled: true``.
This model reasons until max_tokens, so every request's counts are reasoning's (the split
with both channels is checked on the simulator). A second client on the same server makes
the level's counts disagree, and the level says so.
"""

from __future__ import annotations

import json
import threading
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.fixtures.sweep import run_specload

pytestmark = [pytest.mark.vllm, pytest.mark.slow]

RUN = [
    *("--temperature", "0", "--max-tokens", "64", "--warmup", "0"),
    *("--metrics-address", "off", "--progress", "off", "--no-plots"),
]
KEYS = ("drafts", "draft_tokens", "accepted_tokens")


def _run(server: Any, out: Path, *args: str) -> dict[str, Any]:
    result = run_specload(["run", "--host", server.base_url, "--out", str(out), *RUN, *args], 300)
    assert result.returncode == 0, result.stderr[-3000:]
    data: dict[str, Any] = json.loads((out / "summary.json").read_text())
    return data


def _records(out: Path) -> list[dict[str, Any]]:
    lines = (out / "requests.jsonl").read_text().splitlines()
    return [json.loads(line) for line in lines if line.strip()]


def test_per_request_counts_equal_the_counters_and_other_traffic_is_flagged(
    vllm_ngram: Any, tmp_path: Path
) -> None:
    out = tmp_path / "run"
    summary = _run(vllm_ngram, out, "--concurrency", "4", "--requests", "24")
    records = [r for r in _records(out) if r["ok"]]
    assert len(records) == 24
    level = summary["levels"][0]
    server = level["server"]
    sums = {k: 0 for k in KEYS}
    for r in records:
        sd = r["spec_decode"]
        assert sd["source"] == "server" and sd["detailed"], sd
        for k in KEYS:
            sums[k] += sd[k]
        # The channel parts add up; the answer part is empty (the model reasons throughout).
        assert sd["split"] == "exact"
        assert [sd["reasoning"][k] + sd["content"][k] for k in KEYS] == [sd[k] for k in KEYS]
        assert sd["content"]["drafts"] == 0
    print(json.dumps({"client": sums, "server": server}))
    assert sums["drafts"] > 0
    assert sums["drafts"] == server["spec_decode_num_drafts"]
    assert sums["draft_tokens"] == server["spec_decode_num_draft_tokens"]
    assert sums["accepted_tokens"] == server["spec_decode_num_accepted_tokens"]
    assert level["spec_decode_reconciled"] is True
    assert level["tokens_reconciled"] is True
    assert level["reconciliation"]["requests_overlapping"] == 0
    assert level["prefix_cache_reset"] is True  # VLLM_SERVER_DEV_MODE=1 serves the reset
    assert level["spec_decode"]["drafts"] == sums["drafts"]

    stop = threading.Event()
    sent: list[int] = []

    def other_client() -> None:
        body = {
            "model": vllm_ngram.model,
            # a prompt that repeats itself: the n-gram proposer drafts from it
            "messages": [{"role": "user", "content": "one two three four " * 8}],
            "max_tokens": 64,
            "temperature": 0,
        }
        with httpx.Client(timeout=60) as client:
            while not stop.is_set():
                client.post(vllm_ngram.url + "/v1/chat/completions", json=body)
                sent.append(1)

    thread = threading.Thread(target=other_client, daemon=True)
    thread.start()
    try:
        busy = _run(vllm_ngram, tmp_path / "busy", "--concurrency", "2", "--requests", "8")
    finally:
        stop.set()
        thread.join(timeout=60)
    assert sent
    level = busy["levels"][0]
    print(json.dumps({"other_requests": len(sent), "reconciliation": level["reconciliation"]}))
    assert level["tokens_reconciled"] is False
    assert level["spec_decode_reconciled"] is False, level["reconciliation"]
    assert "other_traffic" in level["flags"]
