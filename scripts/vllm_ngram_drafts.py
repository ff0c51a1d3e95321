#!/usr/bin/env python3
"""vLLM's own n-gram proposers on given token ids: the drafts of every context.

Runs **inside the vLLM venv** (``scripts/install-vllm.sh``), in-process, no server:

* ``--backend numba``: the V1 runner's CPU proposer, ``vllm.v1.spec_decode.ngram_proposer.
  NgramProposer.propose`` (the numba kernel), built from a stand-in config (it reads only
  the speculative, model, scheduler and parallel fields set below);
* ``--backend triton``: Model Runner V2's ``NgramGPUSpeculator.propose``
  (``vllm/v1/worker/gpu/spec_decode/ngram/speculator.py``: its two Triton kernels) on CPU
  tensors through Triton's interpreter (``TRITON_INTERPRET=1``). The CPU build's
  ``vllm.triton_utils`` disables Triton (no CPU backend, no active GPU driver) and hands out
  a placeholder module, so the real ``triton`` is put in its place before the speculator
  module is imported. One fix to the interpreter is needed (Triton 3.9): a mask built with
  ``&`` from a scalar comparison reaches ``_interpreter.load`` as int32 and fails with
  ``ValueError('mask has unsupported dtype')``; masks are cast to bool (their values are
  0/1) before the interpreter's load and store — the kernels' code is vLLM's, unchanged;
* ``--backend ngram_gpu``: the V1 runner's ``method: ngram_gpu`` search,
  ``NgramGPUKernel._find_first_and_extract_all_n_parallel``
  (``vllm/v1/spec_decode/ngram_proposer_gpu.py``; plain PyTorch, run on CPU tensors,
  unbound: it reads nothing of ``self``), then the leading valid (non -1) tokens as
  ``NgramGPUKernel.forward`` counts them.

Reads JSON on stdin::

    {"k": 3, "lookup_min": 2, "lookup_max": 4, "max_model_len": 2048,
     "requests": [{"prompt_ids": [...], "output_ids": [...]}, ...]}

and writes JSON on stdout: ``{"vllm_version", "backend", "drafts"}`` where ``drafts[i][j]``
is the draft vLLM's proposer returns for request i's context ``prompt + output[:j+1]``
(j = 0 .. len(output) - 2: every context a decode step is proposed from). Numba and
ngram_gpu: the valid tokens (0..k); Triton: the kernel's k slots (the filler included).

    python scripts/vllm_ngram_drafts.py --backend numba < in.json > out.json
"""

# vLLM, torch and triton are imported where a backend needs them: they are heavy, and the
# real triton has to replace vLLM's placeholder before the speculator module is imported.
# ruff: noqa: PLC0415

from __future__ import annotations

import argparse
import json
import os
import sys
import types
from typing import Any

BATCH = 64  # contexts per proposer call (the stand-in max_num_seqs)


def _config(k: int, lo: int, hi: int, max_model_len: int) -> Any:
    ns = types.SimpleNamespace
    return ns(
        speculative_config=ns(prompt_lookup_min=lo, prompt_lookup_max=hi, num_speculative_tokens=k),
        model_config=ns(max_model_len=max_model_len),
        scheduler_config=ns(max_num_seqs=BATCH),
        parallel_config=ns(tensor_parallel_size=1),
    )


def _contexts(requests: list[dict[str, list[int]]]) -> list[list[int]]:
    out: list[list[int]] = []
    for r in requests:
        prompt, output = list(r["prompt_ids"]), list(r["output_ids"])
        out.extend(prompt + output[: j + 1] for j in range(len(output) - 1))
    return out


def numba_drafts(contexts: list[list[int]], k: int, lo: int, hi: int, mml: int) -> list[list[int]]:
    import numpy as np
    from vllm.v1.spec_decode.ngram_proposer import NgramProposer

    proposer = NgramProposer(_config(k, lo, hi, mml))
    drafts: list[list[int]] = []
    for b in range(0, len(contexts), BATCH):
        batch = contexts[b : b + BATCH]
        token_ids = np.zeros((len(batch), mml), dtype=np.int32)
        num_tokens = np.zeros(len(batch), dtype=np.int32)
        for i, ctx in enumerate(batch):
            token_ids[i, : len(ctx)] = ctx
            num_tokens[i] = len(ctx)
        sampled = [[ctx[-1]] for ctx in batch]  # one token sampled in the last step
        drafts.extend(
            [int(t) for t in d] for d in proposer.propose(k, sampled, num_tokens, token_ids)
        )
    return drafts


def _patch_interpreter() -> None:
    import numpy as np
    import triton.runtime.interpreter as interp

    builder = interp.InterpreterBuilder
    load, store = builder.create_masked_load, builder.create_masked_store

    def as_bool(mask: Any) -> Any:
        if mask.data.dtype != np.bool_:
            mask = interp.TensorHandle(mask.data.astype(np.bool_), mask.dtype)
        return mask

    def create_masked_load(self, ptrs, mask, other, cache_policy, is_volatile):  # type: ignore[no-untyped-def]  # noqa: PLR0917
        return load(self, ptrs, as_bool(mask), other, cache_policy, is_volatile)

    def create_masked_store(self, ptrs, value, mask, cache_policy):  # type: ignore[no-untyped-def]
        return store(self, ptrs, value, as_bool(mask), cache_policy)

    builder.create_masked_load = create_masked_load
    builder.create_masked_store = create_masked_store


def triton_drafts(contexts: list[list[int]], k: int, lo: int, hi: int, mml: int) -> list[list[int]]:
    if os.environ.get("TRITON_INTERPRET") != "1":
        raise SystemExit("the triton backend needs TRITON_INTERPRET=1 in the environment")
    import torch
    import triton
    import triton.language as tl
    from vllm import triton_utils

    _patch_interpreter()
    triton_utils.triton = triton
    triton_utils.tl = tl
    triton_utils.HAS_TRITON = True
    from vllm.v1.worker.gpu.spec_decode.ngram import speculator

    ns = types.SimpleNamespace
    drafts: list[list[int]] = []
    for b in range(0, len(contexts), BATCH):
        batch = contexts[b : b + BATCH]
        n = len(batch)
        all_ids = torch.zeros((BATCH, mml), dtype=torch.int32)
        total_len = torch.zeros(BATCH, dtype=torch.int32)
        last = torch.zeros(BATCH, dtype=torch.int64)
        for i, ctx in enumerate(batch):
            all_ids[i, : len(ctx)] = torch.tensor(ctx, dtype=torch.int32)
            total_len[i] = len(ctx)
            last[i] = ctx[-1]  # post_update's last_sampled_tokens
        states = ns(all_token_ids=ns(gpu=all_ids), total_len=ns(gpu=total_len))
        spec = speculator.NgramGPUSpeculator(_config(k, lo, hi, mml), torch.device("cpu"), states)
        batch_in = ns(num_reqs=n, idx_mapping=torch.arange(n, dtype=torch.int64))
        num_sampled = torch.ones(n, dtype=torch.int32)
        out = spec.propose(
            batch_in, None, None, None, None, num_sampled, None, last, None, None, None
        )
        drafts.extend([int(t) for t in row] for row in out.tolist())
    return drafts


def ngram_gpu_drafts(
    contexts: list[list[int]], k: int, lo: int, hi: int, mml: int
) -> list[list[int]]:
    import torch
    from vllm.v1.spec_decode.ngram_proposer_gpu import NgramGPUKernel

    search = NgramGPUKernel._find_first_and_extract_all_n_parallel
    drafts: list[list[int]] = []
    for b in range(0, len(contexts), BATCH):
        batch = contexts[b : b + BATCH]
        token_ids = torch.zeros((len(batch), mml), dtype=torch.int32)
        lengths = torch.zeros(len(batch), dtype=torch.int32)
        for i, ctx in enumerate(batch):
            token_ids[i, : len(ctx)] = torch.tensor(ctx, dtype=torch.int32)
            lengths[i] = len(ctx)
        out = search(None, token_ids, lengths, lo, hi, k)
        # forward(): rows shorter than prompt_lookup_min get no draft (combined_mask).
        out = torch.where((lengths >= lo).unsqueeze(1), out, -1)
        for row in out.tolist():
            valid = []
            for t in row:  # the leading valid tokens (num_valid_draft_tokens)
                if t == -1:
                    break
                valid.append(int(t))
            drafts.append(valid)
    return drafts


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--backend", choices=("numba", "triton", "ngram_gpu"), required=True)
    args = ap.parse_args()
    spec = json.load(sys.stdin)
    k, lo, hi = int(spec["k"]), int(spec["lookup_min"]), int(spec["lookup_max"])
    mml = int(spec["max_model_len"])
    contexts = _contexts(spec["requests"])
    if any(len(c) >= mml for c in contexts):
        raise SystemExit(f"a context reaches max_model_len {mml}: raise it")
    fn = {"numba": numba_drafts, "triton": triton_drafts, "ngram_gpu": ngram_gpu_drafts}[
        args.backend
    ]
    drafts = fn(contexts, k, lo, hi, mml) if contexts else []
    import vllm

    flat = iter(drafts)
    per_request = [
        [next(flat) for _ in range(max(len(r["output_ids"]) - 1, 0))] for r in spec["requests"]
    ]
    json.dump(
        {"vllm_version": vllm.__version__, "backend": args.backend, "drafts": per_request},
        sys.stdout,
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
