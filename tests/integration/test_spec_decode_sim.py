"""Speculative decoding per request and per channel, against the simulator's own truth.

The simulator (n-gram, ``--per-request-spec-decode-metrics detailed``) keeps, for every
request, the verify steps it ran in each channel (a step belongs to the channel of its
first token) on its control port (``GET /truth/spec_decode``). ``specload run`` places
the server's per-step counts on the stream's chunks without seeing that truth; the sums
per channel must be the simulator's. The level's counts reconcile with the server's
counters exactly (one level, no warm-up: nothing overlaps the scrapes), and traffic from
another client on the same server is flagged. The prefix cache: without the reset a
second run finds the first one's cache warm (``compare`` warns); with it (the default)
both runs see the same hit ratio.
"""

from __future__ import annotations

import json
import threading
from pathlib import Path
from typing import Any

import httpx
import jsonschema
import pytest

from specload.results import summary_schema
from tests.fixtures.sim import SimHandle, start_sim
from tests.fixtures.sweep import run_specload

pytestmark = [pytest.mark.integration, pytest.mark.slow]

COMMON = [
    *("--warmup", "0", "--metrics-address", "off", "--progress", "off", "--no-plots"),
]
CHANNELS = ("reasoning", "content")


def _records(out: Path) -> list[dict[str, Any]]:
    lines = (out / "requests.jsonl").read_text().splitlines()
    return [json.loads(line) for line in lines if line.strip()]


def _summary(out: Path) -> dict[str, Any]:
    data: dict[str, Any] = json.loads((out / "summary.json").read_text())
    return data


def _run(sim: SimHandle, out: Path, *args: str, variant: str = "ngram") -> dict[str, Any]:
    result = run_specload(
        [*("run", "--host", sim.url, "--variant", variant, "--out", str(out)), *COMMON, *args],
        timeout=300,
    )
    assert result.returncode == 0, result.stderr[-3000:] + result.stdout[-2000:]
    return _summary(out)


@pytest.fixture
def ngram_sim(tmp_path: Path) -> Any:
    handle = start_sim(
        [
            *("--variant", "ngram", "--load-time", "0", "--time-scale", "20"),
            *("--per-request-spec-decode-metrics", "detailed"),
        ],
        tmp_path / "sim",
    )
    try:
        yield handle
    finally:
        handle.stop()


def test_channel_parts_equal_the_simulators_and_the_level_reconciles(
    ngram_sim: SimHandle, tmp_path: Path
) -> None:
    out = tmp_path / "run"
    summary = _run(ngram_sim, out, "--concurrency", "4", "--requests", "24", "--max-tokens", "1500")
    truth = ngram_sim._control("GET", "/truth/spec_decode")["requests"]
    records = [r for r in _records(out) if r["ok"]]
    assert len(records) == 24 and len(truth) == 24
    assert all(r["spec_decode"]["source"] == "server" for r in records)
    assert all(r["spec_decode"]["detailed"] for r in records)
    both = [r for r in records if r["tokens_reasoning"] and r["tokens_content"]]
    assert len(both) >= 8, "the test needs requests with both channels"
    splits = [r["spec_decode"]["split"] for r in records]
    assert None not in splits, splits

    # Per channel, summed over the requests: the client's placement against the truth.
    client = {c: [0, 0, 0] for c in CHANNELS}
    real = {c: [0, 0, 0] for c in CHANNELS}
    keys = ("drafts", "draft_tokens", "accepted_tokens")
    for r in records:
        for c in CHANNELS:
            for i, k in enumerate(keys):
                client[c][i] += r["spec_decode"][c][k]
    for t in truth.values():
        for c in CHANNELS:
            for i, k in enumerate(keys):
                real[c][i] += t[c][k]
    estimated = splits.count("estimated")
    print(json.dumps({"client": client, "truth": real, "estimated_splits": estimated}))
    for c in CHANNELS:
        assert client[c][2] == real[c][2]  # accepted tokens: always placed exactly
        if not estimated:
            assert client[c] == real[c]
        else:  # only steps that accepted nothing may sit on the other side of the boundary
            assert abs(client[c][0] - real[c][0]) <= max(3, 0.001 * real[c][0]), (client, real)
    # The simulator's reasoning repeats itself less than its answers.
    rate = {c: real[c][2] / real[c][1] for c in CHANNELS}
    assert rate["content"] > 1.05 * rate["reasoning"], rate

    jsonschema.validate(summary, summary_schema())
    level = summary["levels"][0]
    sd = level["spec_decode"]
    assert sd["drafts"] == sum(client[c][0] for c in CHANNELS)
    assert sd["reasoning"]["acceptance_rate"] == pytest.approx(
        client["reasoning"][2] / client["reasoning"][1]
    )
    assert sum(sd["acceptance_rate_histogram"]["counts"]) == 24
    # Reconciled exactly: one level, no warm-up, every request inside the two scrapes.
    assert level["spec_decode_reconciled"] is True
    assert level["tokens_reconciled"] is True
    rec = level["reconciliation"]
    assert rec["requests_inside"] == 24 and rec["requests_overlapping"] == 0
    for key in keys:
        part = rec["spec_decode"][key]
        assert part["client_min"] == part["client_max"] == part["server"], (key, part)
    tokens = rec["generated_tokens"]
    assert tokens["client_min"] == tokens["server"] == sum(r["tokens_output"] for r in records)
    assert level["prefix_cache_reset"] is True


def test_traffic_from_another_client_is_flagged(ngram_sim: SimHandle, tmp_path: Path) -> None:
    stop = threading.Event()
    sent: list[int] = []

    def other_client() -> None:
        body = {
            "model": "sim",
            "messages": [{"role": "user", "content": "Explain caching."}],
            "max_tokens": 64,
        }
        with httpx.Client(timeout=30) as client:
            models = client.get(ngram_sim.url + "/v1/models").json()
            body["model"] = models["data"][0]["id"]
            while not stop.is_set():
                client.post(ngram_sim.url + "/v1/chat/completions", json=body)
                sent.append(1)

    thread = threading.Thread(target=other_client, daemon=True)
    thread.start()
    try:
        summary = _run(
            ngram_sim,
            tmp_path / "run",
            "--concurrency",
            "2",
            "--requests",
            "8",
            "--max-tokens",
            "300",
        )
    finally:
        stop.set()
        thread.join(timeout=30)
    assert sent, "the other client sent nothing"
    level = summary["levels"][0]
    assert level["tokens_reconciled"] is False
    assert level["spec_decode_reconciled"] is False
    assert "other_traffic" in level["flags"]
    assert any("other traffic on the server" in w for w in level["warnings"])


def _compare(a: Path, b: Path) -> str:
    result = run_specload(["compare", str(a), str(b), "--out", str(a.parent / "cmp")])
    assert result.returncode == 0, result.stderr
    return (a.parent / "cmp" / "comparison.md").read_text()


def test_a_warm_prefix_cache_is_reset_and_otherwise_warned_of(tmp_path: Path) -> None:
    sim = start_sim(["--load-time", "0", "--time-scale", "20"], tmp_path / "sim")
    try:
        args = ["--concurrency", "1", "--requests", "10", "--max-tokens", "64"]
        off = ["--prefix-cache-reset", "off"]
        cold = _run(sim, tmp_path / "cold", *args, *off, variant="baseline")
        warm = _run(sim, tmp_path / "warm", *args, *off, variant="baseline")
        reset_a = _run(sim, tmp_path / "reset-a", *args, variant="baseline")
        reset_b = _run(sim, tmp_path / "reset-b", *args, variant="baseline")
    finally:
        sim.stop()
    ratio = {
        name: s["levels"][0]["prefix_cache_hit_ratio"]
        for name, s in [("cold", cold), ("warm", warm), ("a", reset_a), ("b", reset_b)]
    }
    print(json.dumps(ratio))
    assert ratio["warm"] > ratio["cold"] + 0.05
    assert ratio["a"] == ratio["b"] == pytest.approx(ratio["cold"])
    assert cold["levels"][0]["prefix_cache_reset"] is None
    assert reset_a["levels"][0]["prefix_cache_reset"] is True
    assert "prefix" in _compare(tmp_path / "cold", tmp_path / "warm").lower()
    assert "prefix-cache hit ratio" not in _compare(tmp_path / "reset-a", tmp_path / "reset-b")


def test_without_a_reset_the_cache_bust_nonce_keeps_runs_apart(tmp_path: Path) -> None:
    # A server without the development endpoints (vLLM without VLLM_SERVER_DEV_MODE=1).
    sim = start_sim(["--load-time", "0", "--time-scale", "20", "--dev-mode", "off"], tmp_path)
    try:
        args = ["--concurrency", "1,2", "--requests", "6", "--max-tokens", "32"]
        runs = [
            _run(sim, tmp_path / "plain-1", *args, variant="baseline"),
            _run(sim, tmp_path / "plain-2", *args, variant="baseline"),
            _run(sim, tmp_path / "bust-1", *args, "--cache-bust", "on", variant="baseline"),
            _run(sim, tmp_path / "bust-2", *args, "--cache-bust", "on", variant="baseline"),
        ]
    finally:
        sim.stop()
    for summary in runs:
        levels = summary["levels"]
        assert [lv["prefix_cache_reset"] for lv in levels] == [False, None]  # asked once
        assert any("VLLM_SERVER_DEV_MODE=1" in w for w in levels[0]["warnings"])
    ratios = [[lv["prefix_cache_hit_ratio"] for lv in s["levels"]] for s in runs]
    print(json.dumps(ratios))
    # Without the nonce the second run finds the first one's prompts cached...
    assert ratios[1][0] > ratios[0][0] + 0.05
    # ...with it, each run's prompts are its own: the two runs see the same cache.
    assert ratios[2] == pytest.approx(ratios[3])
    assert runs[2]["options"]["cache_bust"] != runs[3]["options"]["cache_bust"]
