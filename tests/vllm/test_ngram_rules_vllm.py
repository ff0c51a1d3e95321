"""The replay rules against vLLM's own proposers, run in-process in the vLLM venv.

``scripts/vllm_ngram_drafts.py`` (in the vLLM venv, no server) returns the drafts of every
context of the given requests from vLLM 0.32's own code: the V1 runner's numba
``NgramProposer`` (rule ``v1``), Model Runner V2's Triton kernel through Triton's
interpreter (rule ``v2``) and the V1 runner's ``ngram_gpu`` search (rule ``ngram_gpu``).
Each is checked context by context against :func:`simulator.ngram.propose`, then
step by step: a request walked with vLLM's drafts (accepted = the longest prefix equal to
the output, the scheduler's ``max_model_len`` cap) must equal the replay's steps.

Token ids: a real baseline's ``tokens.jsonl`` when ``SPECLOAD_NGRAM_TOKENS`` names one
(the first requests, cut to bound the interpreter's time), else synthetic sequences with
copied runs (:mod:`specload.predict.synthetic`) and a looping one like a random model's
greedy output.
"""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest

from simulator.ngram import RequestReplay, propose
from specload.predict.synthetic import make_records
from specload.records.tokens import read_tokens
from tests.fixtures.vllm import VllmEnv

pytestmark = pytest.mark.vllm

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "scripts" / "vllm_ngram_drafts.py"
LOOKUP = (2, 4)
MAX_K = 8
MAX_MODEL_LEN = 512
BACKEND_RULE = {"numba": "v1", "triton": "v2", "ngram_gpu": "ngram_gpu"}


def _requests(n: int, out_len: int) -> list[dict[str, list[int]]]:
    path = os.environ.get("SPECLOAD_NGRAM_TOKENS")
    if path:
        records = read_tokens(path)[:n]
    else:
        records = make_records(n - 1, levels=[1], seed=11)
    reqs = [
        {"prompt_ids": list(r.prompt_ids[:200]), "output_ids": list(r.output_ids[:out_len])}
        for r in records
    ]
    if not path:  # a loop, as the tiny random models' greedy output
        loop = [5, 17, 5, 17, 9] * 8 + [3, 5, 17, 5, 17, 9, 9, 9, 9] * 6
        reqs.append({"prompt_ids": [1, 5, 17, 2], "output_ids": loop[:out_len]})
    return reqs


def _vllm_drafts(
    env: VllmEnv, backend: str, requests: list[dict[str, list[int]]]
) -> list[list[list[int]]]:
    spec = {
        "k": MAX_K,
        "lookup_min": LOOKUP[0],
        "lookup_max": LOOKUP[1],
        "max_model_len": MAX_MODEL_LEN,
        "requests": requests,
    }
    environ = dict(os.environ, TRITON_INTERPRET="1") if backend == "triton" else None
    proc = subprocess.run(
        [str(env.python), str(SCRIPT), "--backend", backend],
        input=json.dumps(spec),
        capture_output=True,
        text=True,
        timeout=600,
        env=environ,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    out = json.loads(proc.stdout)
    assert out["vllm_version"] == env.version
    drafts: list[list[list[int]]] = out["drafts"]
    return drafts


def _walk(
    prompt: list[int], output: list[int], drafts: list[list[int]], *, k: int, rule: str, mml: int
) -> list[tuple[int, int, int, int]]:
    """The request's steps with vLLM's drafts: (position, verified, counted, accepted)."""
    m = len(output)
    steps = [(0, 0, 0, 0)] if m else []
    pos = 1
    while pos < m:
        n = len(prompt) + pos
        cap = max(0, mml - n - 1)
        draft = drafts[pos - 1][:k][:cap]
        counted = min(k, cap) if rule != "v1" else len(draft)
        a = 0
        while a < len(draft) and pos + a < m and draft[a] == output[pos + a]:
            a += 1
        steps.append((pos, len(draft), counted, a))
        pos += min(a + 1, m - pos)
    return steps


@pytest.mark.parametrize("backend", ["numba", "triton", "ngram_gpu"])
def test_replay_equals_vllm(vllm_env: VllmEnv, backend: str) -> None:
    rule = BACKEND_RULE[backend]
    requests = _requests(4, 150) if backend == "triton" else _requests(8, 300)
    drafts = _vllm_drafts(vllm_env, backend, requests)
    assert len(drafts) == len(requests)
    with_content = 0
    for req, per_ctx in zip(requests, drafts, strict=True):
        prompt, output = req["prompt_ids"], req["output_ids"]
        assert len(per_ctx) == max(len(output) - 1, 0)
        # Context by context: the same draft as vLLM's proposer.
        for j, got in enumerate(per_ctx):
            ctx = prompt + output[: j + 1]
            want = propose(
                ctx, k=MAX_K, lookup_min=LOOKUP[0], lookup_max=LOOKUP[1],
                max_model_len=MAX_MODEL_LEN, rule=rule,
            )  # fmt: skip
            assert got == want, (backend, j, ctx[-8:])
            with_content += bool(got) and got != [ctx[-1]] * MAX_K
        # Step by step, for several k (a k-draft is the first k slots of the 8-draft).
        replay = RequestReplay(
            prompt, output, lookup_min=LOOKUP[0], lookup_max=LOOKUP[1], max_k=MAX_K, rule=rule
        )
        for k in (1, 3, MAX_K):
            seq = replay.steps(k, MAX_MODEL_LEN)
            got_steps = list(
                zip(
                    seq.position.tolist(),
                    seq.drafted.tolist(),
                    seq.counted_tokens.tolist(),
                    seq.accepted.tolist(),
                    strict=True,
                )
            )
            assert got_steps == _walk(prompt, output, per_ctx, k=k, rule=rule, mml=MAX_MODEL_LEN), (
                backend,
                k,
            )
    assert with_content >= 20  # the sequences exercise matches, not only empty drafts
