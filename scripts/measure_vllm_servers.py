#!/usr/bin/env python3
"""Measure each real-vLLM test server: time to ready and resident memory.

Starts the servers of tests/fixtures/vllm.py one at a time (so each RSS is its own),
sends one request, reads the RSS of the server and all its children, stops it.

    .venv/bin/python scripts/measure_vllm_servers.py [KIND ...]
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

import httpx

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from tests.fixtures.vllm import SERVER_KINDS, VllmPool, find_vllm_env  # noqa: E402


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("kinds", nargs="*", default=list(SERVER_KINDS), choices=list(SERVER_KINDS))
    args = parser.parse_args(argv)
    env, reason = find_vllm_env()
    if env is None:
        print(f"measure_vllm_servers: {reason}; run scripts/install-vllm.sh", file=sys.stderr)
        return 1
    pool = VllmPool(env, Path(tempfile.mkdtemp(prefix="specload-measure-")), max_local=1)
    print("| server | ready after (s) | RSS incl. children (GiB) |")
    print("|---|---|---|")
    try:
        for kind in args.kinds:
            server = pool.ensure(kind)
            body = {
                "model": server.model,
                "messages": [{"role": "user", "content": "Count the primes below 30."}],
                "max_tokens": 32,
            }
            httpx.post(f"{server.base_url}/chat/completions", json=body, timeout=120)
            rss = server.rss_bytes() / 2**30
            print(f"| {kind} | {server.ready_after_s:.1f} | {rss:.2f} |", flush=True)
            server.stop()
    finally:
        pool.stop_all()
    return 0


if __name__ == "__main__":
    sys.exit(main())
