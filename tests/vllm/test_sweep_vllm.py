"""``specload run`` against real vLLM (CPU build, tiny model): every generated token
accounted for, and the server-side block against the raw counters."""

from __future__ import annotations

import time

import httpx
import jsonschema
import pytest

from specload import promtext
from specload.results import read_requests, read_summary, summary_schema

pytestmark = [pytest.mark.vllm, pytest.mark.slow]

RUN = [
    "--concurrency",
    "1,3",
    "--warmup",
    "0",
    "--duration",
    "8",
    "--max-tokens",
    "64",
    "--temperature",
    "0",
    "--metrics-address",
    "off",
    "--progress",
    "off",
    "--no-plots",
]


def generation_tokens(url: str) -> float:
    fam = promtext.parse(httpx.get(url + "/metrics", timeout=10).text).get_family(
        "vllm:generation_tokens_total"
    )
    assert fam is not None
    total = fam.total()
    assert total is not None
    return total


@pytest.mark.parametrize("kind", ["vllm_plain", "vllm_ngram"])
def test_sweep_on_real_vllm(kind, request, specload_run, tmp_path):
    server = request.getfixturevalue(kind)
    out = tmp_path / "run"
    before = generation_tokens(server.url)
    result = specload_run(
        ["run", "--host", server.base_url, "--variant", kind, "--out", str(out), *RUN], timeout=180
    )
    assert result.returncode == 0, result.stderr
    records = read_requests(out)
    client = sum(r["tokens_output"] for r in records)
    after = before
    for _ in range(50):  # the counter follows the last engine step closely
        after = generation_tokens(server.url)
        if after - before >= client:
            break
        time.sleep(0.1)
    summary = read_summary(out)
    jsonschema.validate(summary, summary_schema())
    assert summary["status"] == "complete"
    assert summary["server_version"] == "0.32.0"
    assert records and all(r["ok"] for r in records), [r["error_kind"] for r in records]
    # the drain let every request finish: the client counted every token the server generated
    assert client == after - before
    blocks = [level["server"] for level in summary["levels"]]
    assert sum(b["generation_tokens"] for b in blocks) <= after - before
    for level, block in zip(summary["levels"], blocks, strict=True):
        assert level["completed"] == sum(1 for r in records if r["step"] == level["name"]) > 0
        assert block["generation_tokens"] > 0
        if block["requests_success"] > 0:
            assert block["mean_tpot_ms"] > 0
        if kind == "vllm_ngram" and block["spec_decode_num_drafts"] > 0:
            assert block["source"] == "v1_counters"
            assert 0 <= block["spec_decode_acceptance_rate"] <= 1
            assert block["spec_decode_acceptance_rate"] == pytest.approx(
                block["spec_decode_num_accepted_tokens"] / block["spec_decode_num_draft_tokens"]
            )
            assert block["spec_decode_mean_acceptance_length"] == pytest.approx(
                1 + block["spec_decode_num_accepted_tokens"] / block["spec_decode_num_drafts"]
            )
            assert set(block["spec_decode_acceptance_per_position"]) == {"0", "1", "2"}
        elif kind == "vllm_plain":
            assert "spec_decode_acceptance_rate" not in block
    if kind == "vllm_ngram":
        detail = [(r["step"], r["tokens_output"], r["chunks"]) for r in records]
        assert sum(b["spec_decode_num_drafts"] for b in blocks) > 0, (blocks, detail)
