#!/usr/bin/env python3
"""Capture real vLLM pages into tests/data/vllm-<version>/ for offline tests.

Starts the tiny-model servers from tests/fixtures/vllm.py (plain, ngram, answering),
sends a few fixed requests and stores what the server answered, byte for byte
where it matters (SSE streams). Run after scripts/install-vllm.sh:

    .venv/bin/python scripts/capture_vllm_pages.py [--out tests/data/vllm-0.32.0]
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import httpx

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from tests.fixtures.vllm import VLLM_VERSION, VllmPool, VllmServer, find_vllm_env  # noqa: E402

PROMPT = "Count the primes below 30, then list them in order."
STREAM_OPTIONS = {"include_usage": True, "continuous_usage_stats": True}
STREAM_BODY = {"stream": True, "stream_options": STREAM_OPTIONS}


def chat_body(server: VllmServer, **extra: Any) -> dict[str, Any]:
    body: dict[str, Any] = {
        "model": server.model,
        "messages": [{"role": "user", "content": PROMPT}],
        "max_tokens": 24,
        "seed": 7,
    }
    body.update(extra)
    return body


def stream_raw(client: httpx.Client, server: VllmServer, body: dict[str, Any]) -> bytes:
    with client.stream("POST", f"{server.base_url}/chat/completions", json=body) as response:
        response.raise_for_status()
        return b"".join(response.iter_raw())


def warm(client: httpx.Client, server: VllmServer, greedy: bool) -> None:
    """A few requests so the counters and histograms have samples."""
    for i in range(3):
        extra: dict[str, Any] = {"max_tokens": 32, "seed": i}
        if greedy:
            extra["temperature"] = 0.0
        client.post(f"{server.base_url}/chat/completions", json=chat_body(server, **extra))


def capture_errors(client: httpx.Client, server: VllmServer) -> dict[str, Any]:
    url = f"{server.base_url}/chat/completions"
    cases: dict[str, tuple[bytes, str]] = {
        "unknown_model": (
            json.dumps(
                {"model": "no-such-model", "messages": [{"role": "user", "content": "hi"}]}
            ).encode(),
            "application/json",
        ),
        "bad_json": (b'{"model": "tiny-plain", "messages": [', "application/json"),
        "missing_messages": (
            json.dumps({"model": server.model, "max_tokens": 4}).encode(),
            "application/json",
        ),
    }
    out: dict[str, Any] = {}
    for name, (payload, ctype) in cases.items():
        r = client.post(url, content=payload, headers={"content-type": ctype})
        try:
            body: Any = r.json()
        except ValueError:
            body = r.text
        out[name] = {
            "request": {"method": "POST", "path": "/v1/chat/completions", "body": payload.decode()},
            "status": r.status_code,
            "content_type": r.headers.get("content-type"),
            "body": body,
        }
    return out


def capture_plain(client: httpx.Client, pool: VllmPool, out: Path) -> None:
    plain = pool.ensure("plain")
    warm(client, plain, greedy=False)
    (out / "stream_chat_plain.txt").write_bytes(
        stream_raw(client, plain, chat_body(plain, **STREAM_BODY))
    )
    r = client.post(f"{plain.base_url}/chat/completions", json=chat_body(plain))
    (out / "chat_plain.json").write_text(json.dumps(r.json(), indent=2) + "\n")
    (out / "errors.json").write_text(json.dumps(capture_errors(client, plain), indent=2) + "\n")
    (out / "models.json").write_text(
        json.dumps(client.get(f"{plain.base_url}/models").json(), indent=2) + "\n"
    )
    (out / "version.json").write_text(
        json.dumps(client.get(f"{plain.url}/version").json(), indent=2) + "\n"
    )
    (out / "metrics_plain.txt").write_text(client.get(f"{plain.url}/metrics").text)


def capture_ngram(client: httpx.Client, pool: VllmPool, out: Path) -> None:
    ngram = pool.ensure("ngram")
    warm(client, ngram, greedy=True)
    greedy_stream = chat_body(ngram, temperature=0.0, max_tokens=48, **STREAM_BODY)
    (out / "stream_chat_ngram.txt").write_bytes(stream_raw(client, ngram, greedy_stream))
    (out / "metrics_ngram.txt").write_text(client.get(f"{ngram.url}/metrics").text)


def capture_answering(client: httpx.Client, pool: VllmPool, out: Path) -> None:
    answering = pool.ensure("answering")
    (out / "stream_chat_answering.txt").write_bytes(
        stream_raw(client, answering, chat_body(answering, max_tokens=48, **STREAM_BODY))
    )


def capture_tp2_trace(client: httpx.Client, pool: VllmPool, out: Path) -> None:
    """Torch-profiler traces of both ranks of a tensor-parallel-2 server (a few steps)."""
    server = pool.server("profiled_tp2")
    server.ready_timeout_s = max(server.ready_timeout_s, 600.0)
    pool.ensure("profiled_tp2")
    assert server.trace_dir is not None
    body = chat_body(server, max_tokens=16)
    client.post(f"{server.base_url}/chat/completions", json=body)  # warm-up, not traced
    client.post(f"{server.url}/start_profile", timeout=600)
    client.post(f"{server.base_url}/chat/completions", json=chat_body(server, max_tokens=4))
    client.post(f"{server.url}/stop_profile", timeout=1200)
    deadline = time.monotonic() + 120
    while len(ranks := sorted(server.trace_dir.glob("rank*.pt.trace.json.gz"))) < 2:
        if time.monotonic() > deadline:
            raise RuntimeError(f"rank traces missing in {server.trace_dir}")
        time.sleep(1.0)
    for rank, path in enumerate(ranks):
        shutil.copyfile(path, out / f"trace_tp2_rank{rank}.pt.trace.json.gz")


CAPTURES = {
    "plain": capture_plain,
    "ngram": capture_ngram,
    "answering": capture_answering,
    "profiled_tp2": capture_tp2_trace,
}
DEFAULT_CAPTURES = ("plain", "ngram", "answering")  # the TP-2 trace only on request


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    default_out = ROOT / "tests" / "data" / f"vllm-{VLLM_VERSION}"
    parser.add_argument("--out", type=Path, default=default_out)
    parser.add_argument(
        "--only", choices=list(CAPTURES), action="append", help="capture only these servers"
    )
    args = parser.parse_args(argv)
    env, reason = find_vllm_env()
    if env is None:
        print(f"capture_vllm_pages: {reason}; run scripts/install-vllm.sh", file=sys.stderr)
        return 1
    out: Path = args.out
    out.mkdir(parents=True, exist_ok=True)
    pool = VllmPool(env, Path(tempfile.mkdtemp(prefix="specload-capture-")))
    try:
        with httpx.Client(timeout=120) as client:
            for kind in args.only or DEFAULT_CAPTURES:
                CAPTURES[kind](client, pool, out)
                server = pool.server(kind)
                print(
                    f"{kind}: ready after {server.ready_after_s:.1f} s, "
                    f"RSS {server.rss_bytes() / 2**30:.2f} GiB (with children)",
                    file=sys.stderr,
                )
    finally:
        pool.stop_all()
    print(f"captured into {out}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
