"""``--per-request-spec-decode-metrics`` over real sockets: where vLLM 0.32 puts
``metrics.speculative_decoding``, that it adds up to the server's counters, and the
per-channel truth on the control port."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Callable
from typing import Any

import httpx
import pytest

from specload import promtext
from specload.sse import DONE, SSEDecoder
from tests.fixtures.sim import SimHandle

pytestmark = pytest.mark.integration

MESSAGES = [{"role": "user", "content": "Write a function that merges two sorted lists."}]


def stream(url: str, body: dict[str, Any]) -> list[dict[str, Any]]:
    events: list[bytes] = []
    decoder = SSEDecoder()
    with httpx.stream("POST", url + "/v1/chat/completions", json=body, timeout=60) as r:
        assert r.status_code == 200
        for data in r.iter_raw():
            events.extend(decoder.feed(data))
    assert events[-1] == DONE
    return [json.loads(e) for e in events[:-1]]


def counters(url: str) -> dict[str, float]:
    page = promtext.parse(httpx.get(url + "/metrics").text)
    return {
        name: page[f"vllm:spec_decode_num_{name}_total"].total() or 0.0
        for name in ("drafts", "draft_tokens", "accepted_tokens")
    }


def truth(sim: SimHandle) -> dict[str, Any]:
    r = httpx.get(sim.control_url + "/truth/spec_decode", timeout=10)
    assert r.status_code == 200
    result: dict[str, Any] = r.json()
    return result


def test_detailed_metrics_ride_on_the_usage_chunk_and_add_up(
    sim_factory: Callable[..., SimHandle],
) -> None:
    sim = sim_factory(
        ["--variant", "ngram", "--time-scale", "50", "--per-request-spec-decode-metrics",
         "detailed"]
    )  # fmt: skip
    before = counters(sim.url)
    base = {"messages": MESSAGES, "max_tokens": 300, "stream": True}
    with_usage = stream(sim.url, {**base, "stream_options": {"include_usage": True}})
    without = stream(sim.url, base)
    whole = httpx.post(
        sim.url + "/v1/chat/completions", json={"messages": MESSAGES, "max_tokens": 300}, timeout=60
    ).json()
    after = counters(sim.url)

    final = with_usage[-1]
    assert final["choices"] == [] and final["usage"]["completion_tokens"] == 300
    spec = final["metrics"]["speculative_decoding"]
    assert list(spec) == [
        "mean_acceptance_length", "draft_acceptance_rate", "acceptance_histogram",
        "num_spec_steps", "num_accepted_draft_tokens", "num_draft_tokens", "num_spec_tokens",
        "per_step_accepted", "per_step_drafted",
    ]  # fmt: skip
    assert spec["num_spec_tokens"] == 5 and len(spec["acceptance_histogram"]) == 6
    assert len(spec["per_step_accepted"]) == spec["num_spec_steps"] > 0
    assert spec["draft_acceptance_rate"] == pytest.approx(
        spec["num_accepted_draft_tokens"] / spec["num_draft_tokens"]
    )
    # A verify step is one chunk: the steps with accepted drafts are the multi-token chunks
    # (all but perhaps the last, cut by max_tokens).
    sizes = [
        len("".join(d.get(k, "") for k in ("reasoning", "content")).split())
        for d in (c["choices"][0]["delta"] for c in with_usage[1:-1])
    ]
    multi = [n - 1 for n in sizes[:-1] if n > 1]
    assert multi == [a for a in spec["per_step_accepted"] if a > 0][: len(multi)]
    assert all("metrics" not in c for c in with_usage[:-1])
    assert all("metrics" not in c for c in without)  # no include_usage: no usage chunk
    assert without[-1]["choices"][0]["finish_reason"] == "length"
    whole_spec = whole["metrics"]["speculative_decoding"]
    assert len(whole_spec["per_step_drafted"]) == whole_spec["num_spec_steps"]

    # The truth, by response id; with the counters, one request after another.
    records = truth(sim)["requests"]
    ids = (final["id"], without[0]["id"], whole["id"])
    assert set(ids) <= set(records)
    totals = [records[i]["total"] for i in ids]
    assert sum(t["drafts"] for t in totals) == after["drafts"] - before["drafts"]
    assert sum(t["draft_tokens"] for t in totals) == after["draft_tokens"] - before["draft_tokens"]
    assert sum(t["accepted_tokens"] for t in totals) == (
        after["accepted_tokens"] - before["accepted_tokens"]
    )
    for rid, payload in ((final["id"], spec), (whole["id"], whole_spec)):
        record = records[rid]
        assert record["total"] == {
            "drafts": payload["num_spec_steps"],
            "draft_tokens": payload["num_draft_tokens"],
            "accepted_tokens": payload["num_accepted_draft_tokens"],
        }
        for key in ("drafts", "draft_tokens", "accepted_tokens"):
            assert record["reasoning"][key] + record["content"][key] == record["total"][key]
    reasoning_words = sum(len(c["choices"][0]["delta"].get("reasoning", "").split())
                          for c in with_usage[1:-1])  # fmt: skip
    assert records[final["id"]]["reasoning_tokens"] == reasoning_words
    assert records[final["id"]]["completion_tokens"] == 300


def test_summary_metrics_omit_the_per_step_arrays(sim_factory: Callable[..., SimHandle]) -> None:
    sim = sim_factory(
        ["--variant", "eagle3", "--time-scale", "50", "--per-request-spec-decode-metrics",
         "summary"]
    )  # fmt: skip
    chunks = stream(
        sim.url,
        {"messages": MESSAGES, "max_tokens": 200, "stream": True,
         "stream_options": {"include_usage": True}},
    )  # fmt: skip
    spec = chunks[-1]["metrics"]["speculative_decoding"]
    assert "per_step_accepted" not in spec and "per_step_drafted" not in spec
    assert spec["num_spec_tokens"] == 3 and spec["num_spec_steps"] > 0
    whole = httpx.post(
        sim.url + "/v1/completions", json={"prompt": "Merge two lists.", "max_tokens": 100},
        timeout=60,
    ).json()  # fmt: skip
    assert whole["metrics"]["speculative_decoding"]["per_step_accepted"] is None
    assert whole["metrics"]["speculative_decoding"]["num_spec_steps"] > 0
    # A reload to a variant that does not speculate: no metrics while it runs.
    generation = sim.state()["generation"]
    sim.reload("baseline")
    sim.wait_ready(generation=generation + 1)
    plain = httpx.post(
        sim.url + "/v1/chat/completions", json={"messages": MESSAGES, "max_tokens": 20}, timeout=60
    ).json()
    assert plain["metrics"] is None
    assert chunks[-1]["id"] in truth(sim)["requests"]  # the truth outlives the reload


def test_default_has_no_metrics(sim_factory: Callable[..., SimHandle]) -> None:
    sim = sim_factory(["--variant", "ngram", "--time-scale", "50"])
    chunks = stream(
        sim.url,
        {"messages": MESSAGES, "max_tokens": 50, "stream": True,
         "stream_options": {"include_usage": True}},
    )  # fmt: skip
    assert "metrics" not in chunks[-1]
    assert truth(sim)["requests"] == {}


def test_the_flag_without_speculation_is_refused() -> None:
    proc = subprocess.run(
        [sys.executable, "-m", "simulator", "--variant", "baseline",
         "--per-request-spec-decode-metrics", "summary", "--port", "0"],
        capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip
    assert proc.returncode == 2
    assert proc.stderr.count("\n") == 1
    assert "--per-request-spec-decode-metrics summary: requires speculative decoding" in (
        proc.stderr
    )
