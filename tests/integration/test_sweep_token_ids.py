"""``specload run --record-token-ids`` against the simulator: tokens.jsonl, one line per
completed request as requests.jsonl has them, read by ``specload predict``."""

from __future__ import annotations

import json
import threading
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

from specload.records.tokens import read_tokens
from specload.results import read_requests

pytestmark = pytest.mark.integration

RUN = [
    "--concurrency",
    "1,2",
    "--requests",
    "6",
    "--warmup",
    "0",
    "--max-tokens",
    "64",
    "--metrics-address",
    "off",
    "--progress",
    "plain",
    "--no-plots",
]


@pytest.mark.parametrize("workers", ["0", "1"])  # 1: the ids travel worker -> master
def test_record_token_ids_writes_tokens_jsonl_that_predict_reads(
    sweep_sim: Callable[[list[str]], Any], specload_run: Any, tmp_path: Path, workers: str
) -> None:
    sim = sweep_sim(["--variant", "baseline", "--time-scale", "10"])
    out = tmp_path / "run"
    args = ["run", "--host", sim.url, "--variant", "baseline", "--record-token-ids"]
    result = specload_run([*args, *RUN, "--workers", workers, "--out", str(out)])
    assert result.returncode == 0, result.stderr + result.stdout
    records = [r for r in read_requests(out) if r["ok"]]
    assert len(records) == 12
    assert not any("output_ids" in r or "prompt_ids" in r for r in read_requests(out))
    tokens = read_tokens(out)
    assert len(tokens) == 12
    assert sorted((t.step, len(t.output_ids)) for t in tokens) == sorted(
        (r["step"], r["tokens_output"]) for r in records
    )
    assert all(t.prompt_ids and t.max_tokens == 64 and t.finish_reason for t in tokens)
    assert {t.step for t in tokens} == {"c1", "c2"}

    predict = specload_run(
        [
            "predict",
            str(out),
            "--method",
            "ngram",
            "--num-speculative-tokens",
            "3",
            "--prompt-lookup-min",
            "2",
            "--prompt-lookup-max",
            "4",
            "--json",
        ]
    )
    assert predict.returncode == 0, predict.stderr
    levels = json.loads(predict.stdout)["levels"]
    assert isinstance(levels, list) and levels


def test_a_server_without_token_ids_stops_the_run_naming_the_option(
    specload_run: Any, tmp_path: Path
) -> None:
    # A server of our own answering like a vLLM that ignores return_token_ids.
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, *args: Any) -> None:  # quiet
            pass

        def _send(self, status: int, body: bytes, ctype: str = "application/json") -> None:
            self.send_response(status)
            self.send_header("Content-Type", ctype)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def do_GET(self) -> None:
            if self.path.endswith("/models"):
                self._send(200, json.dumps({"data": [{"id": "m"}]}).encode())
            else:
                self._send(200, b"{}")

        def do_POST(self) -> None:
            self.rfile.read(int(self.headers.get("Content-Length", 0)))
            events = [
                {
                    "choices": [{"index": 0, "delta": {"content": "x"}, "finish_reason": None}],
                    "usage": {"prompt_tokens": 2, "completion_tokens": 1},
                },
                {
                    "choices": [{"index": 0, "delta": {"content": " y"}, "finish_reason": "stop"}],
                    "usage": {"prompt_tokens": 2, "completion_tokens": 2},
                },
            ]
            body = b"".join(b"data: " + json.dumps(e).encode() + b"\n\n" for e in events)
            self._send(200, body + b"data: [DONE]\n\n", "text/event-stream")

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        url = f"http://127.0.0.1:{server.server_address[1]}"
        result = specload_run(
            [
                "run",
                "--host",
                url,
                "--record-token-ids",
                "--metrics-url",
                "off",
                *RUN,
                "--out",
                str(tmp_path / "run"),
            ]
        )
    finally:
        server.shutdown()
        server.server_close()
    assert result.returncode == 2, result.stderr + result.stdout
    lines = [line for line in result.stderr.splitlines() if "error" in line]
    assert lines == [
        "specload: error: --record-token-ids: the server returned no token ids "
        "(it needs a vLLM that supports return_token_ids)"
    ]
