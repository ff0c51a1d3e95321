"""Client minus server on real vLLM 0.32 (CPU build, the tiny plain model, the shared n-gram
server started with ``--enable-per-request-metrics``): every record of ``specload run`` carries
the server's own timing of the request, the level reports the client-minus-server TTFT and ITL,
and they obey what must hold whatever the machine's load:

- the server's intervals lie inside the client's (the client sends before the server queues the
  request and stamps the first token after the engine made it): TTFT minus the server's queue
  and TTFT is positive, and so is its median;
- the server's generation time is its mean ITL times the tokens but one (vLLM's own formula),
  and the client's token count is the one the server divided by.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from tests.fixtures.sweep import run_specload

pytestmark = [pytest.mark.vllm, pytest.mark.slow]

RUN = [
    *("--concurrency", "2", "--requests", "8", "--warmup", "0"),
    *("--temperature", "0", "--max-tokens", "32"),
    *("--metrics-address", "off", "--progress", "off", "--no-plots"),
]
SERVER_FIELDS = ("server_ttft_s", "server_queue_s", "server_generation_s", "server_itl_s")


def test_every_record_carries_vllms_timing_and_the_level_its_client_overhead(
    vllm_ngram: Any, tmp_path: Path
) -> None:
    out = tmp_path / "run"
    result = run_specload(["run", "--host", vllm_ngram.base_url, "--out", str(out), *RUN], 300)
    assert result.returncode == 0, result.stderr[-3000:]
    level = json.loads((out / "summary.json").read_text())["levels"][0]
    lines = (out / "requests.jsonl").read_text().splitlines()
    records = [r for r in map(json.loads, lines) if r["step"] == level["name"] and r["ok"]]
    assert len(records) == level["completed"] == 8
    for r in records:
        assert all(isinstance(r[k], float) for k in SERVER_FIELDS), r
        assert r["ttft_s"] > r["server_queue_s"] + r["server_ttft_s"] > 0, r
        assert r["server_generation_s"] == pytest.approx(
            r["server_itl_s"] * (r["tokens_output"] - 1), rel=1e-6
        )
    print(json.dumps({k: v for k, v in level.items() if "minus_server" in k or "lag" in k}))
    assert level["server_timing_requests"] == 8
    assert level["median_ttft_minus_server_ms"] > 0
    assert (
        level["p10_ttft_minus_server_ms"]
        <= level["median_ttft_minus_server_ms"]
        <= level["p90_ttft_minus_server_ms"]
    )
    assert level["median_itl_minus_server_ms"] is not None
    assert level["client_processes"] == 1 and level["client_lag_p99_s"] is not None
