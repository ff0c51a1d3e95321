"""Where an n-gram step's time goes on vLLM's CPU build, against a plain step.

Runs vLLM in process (``VLLM_ENABLE_V1_MULTIPROCESSING=0``: engine core, scheduler and model
runner in this one process, as in one engine-core process of a server) with the tiny plain
model, once plain and once with n-gram speculation, on the same greedy requests, and times
every phase of every engine step by wrapping vLLM's own methods:

    step = schedule + execute_model (_update_states, _prepare_inputs, _model_forward, ...)
         + sample_tokens (_sample: the sampler or the rejection sampler, _bookkeeping_sync,
           propose_draft_token_ids: the n-gram proposer) + update_from_output
         + post_step (take_draft_token_ids: the extra engine-to-worker call)

Per step it records the tokens and sequences scheduled and whether any draft was scheduled,
and prints, per variant and step kind, the median of each phase. The front end of a server
(API process, detokenising, streaming) is not here: it is the same work per output token for
both, and less per step for n-gram (several tokens per step).

Run in the vLLM venv (not specload's)::

    $VLLM_PY bench/cpu_ngram_decompose.py --model ~/.cache/specload/tiny-models-*/plain \\
        --requests 12 --max-tokens 200 --out bench/results/cpu_ngram_decompose.json
"""

from __future__ import annotations

import argparse
import functools
import json
import os
import statistics
import sys
import time
from collections import defaultdict
from pathlib import Path
from typing import Any

os.environ.setdefault("VLLM_ENABLE_V1_MULTIPROCESSING", "0")
os.environ.setdefault("VLLM_CPU_KVCACHE_SPACE", "1")
os.environ.setdefault("VLLM_CPU_OMP_THREADS_BIND", "nobind")
os.environ.setdefault("OMP_NUM_THREADS", "1")
os.environ.setdefault("VLLM_NO_USAGE_STATS", "1")
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

_perf = time.perf_counter
STEPS: list[dict[str, Any]] = []
_current: dict[str, Any] | None = None


def _wrap(cls: type, name: str, label: str | None = None) -> None:
    orig = getattr(cls, name)
    key = label or name

    @functools.wraps(orig)
    def timed(*args: Any, **kwargs: Any) -> Any:
        t0 = _perf()
        try:
            return orig(*args, **kwargs)
        finally:
            if _current is not None:
                _current[key] = _current.get(key, 0.0) + (_perf() - t0) * 1e3

    setattr(cls, name, timed)


def instrument() -> None:
    # vLLM is imported late: its environment variables are set above first.
    from vllm.v1.core.sched.scheduler import Scheduler  # noqa: PLC0415
    from vllm.v1.engine.core import EngineCore  # noqa: PLC0415
    from vllm.v1.worker.gpu_model_runner import GPUModelRunner  # noqa: PLC0415

    orig_step = EngineCore.step
    orig_post = EngineCore.post_step

    def step(self: Any) -> Any:
        global _current
        rec: dict[str, Any] = {}
        _current = rec
        t0 = _perf()
        out = orig_step(self)
        rec["step"] = (_perf() - t0) * 1e3
        return out

    def post_step(self: Any, model_executed: bool) -> Any:
        t0 = _perf()
        try:
            return orig_post(self, model_executed)
        finally:
            if _current is not None:
                _current["post_step"] = (_perf() - t0) * 1e3
                if model_executed:
                    _current["total"] = _current.get("step", 0.0) + _current["post_step"]
                    STEPS.append(_current)

    EngineCore.step = step  # type: ignore[method-assign]
    EngineCore.post_step = post_step  # type: ignore[method-assign]
    orig_schedule = Scheduler.schedule

    def schedule(self: Any, *args: Any, **kwargs: Any) -> Any:
        t0 = _perf()
        out = orig_schedule(self, *args, **kwargs)
        if _current is not None:
            _current["schedule"] = (_perf() - t0) * 1e3
            _current["tokens"] = out.total_num_scheduled_tokens
            _current["seqs"] = len(out.num_scheduled_tokens)
            spec = getattr(out, "scheduled_spec_decode_tokens", {}) or {}
            _current["drafts"] = sum(len(v) for v in spec.values())
            _current["prefill"] = bool(out.scheduled_new_reqs)
        return out

    Scheduler.schedule = schedule  # type: ignore[method-assign]
    _wrap(Scheduler, "update_from_output")
    for name in (
        "execute_model",
        "sample_tokens",
        "_update_states",
        "_prepare_inputs",
        "_model_forward",
        "_sample",
        "_bookkeeping_sync",
        "propose_draft_token_ids",
        "take_draft_token_ids",
    ):
        if hasattr(GPUModelRunner, name):
            _wrap(GPUModelRunner, name, "runner." + name)


def instrument_proposer() -> None:
    """After the engine is up: importing numba before vLLM's CPU kernel overrides are
    registered breaks their module scan (an llvmlite object in the way)."""
    from vllm.v1.spec_decode.ngram_proposer import NgramProposer  # noqa: PLC0415

    if not hasattr(NgramProposer.propose, "__wrapped__"):
        _wrap(NgramProposer, "propose", "ngram.propose")


def kind(s: dict[str, Any]) -> str:
    if s.get("prefill"):
        return "prefill"
    if s["drafts"]:
        return f"seqs{s['seqs']}-drafted"
    return f"seqs{s['seqs']}-nodraft"


def summarize(steps: list[dict[str, Any]]) -> dict[str, Any]:
    groups: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for s in steps:
        groups[kind(s)].append(s)
    out: dict[str, Any] = {}
    for k, ss in sorted(groups.items()):
        keys = sorted({key for s in ss for key, v in s.items() if isinstance(v, float)})
        out[k] = {
            "steps": len(ss),
            "tokens_median": statistics.median(s["tokens"] for s in ss),
            **{key: round(statistics.median(s.get(key, 0.0) for s in ss), 4) for key in keys},
        }
    return out


def prompts_from(path: Path, n: int) -> list[list[dict[str, str]]]:
    rows = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    by_cat: dict[str, list[list[dict[str, str]]]] = defaultdict(list)
    for r in rows:
        msgs = r.get("messages") or [{"role": "user", "content": r.get("prompt", "")}]
        by_cat[r.get("category", "")].append(msgs)
    # round-robin over the categories, like the load generator's users
    cats = sorted(by_cat)
    out = []
    for i in range(n):
        rows_of = by_cat[cats[i % len(cats)]]
        out.append(rows_of[i // len(cats) % len(rows_of)])
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", required=True)
    corpus = Path(__file__).parent.parent / "specload/prompts/corpus.jsonl"
    ap.add_argument("--prompts", default=str(corpus))
    ap.add_argument("--requests", type=int, default=12)
    ap.add_argument("--max-tokens", type=int, default=200)
    ap.add_argument("--concurrency", type=int, nargs="+", default=[1, 4])
    ap.add_argument("--variant", choices=["plain", "ngram"], required=True)
    ap.add_argument("--k", type=int, default=3)
    ap.add_argument("--out", type=Path)
    args = ap.parse_args()
    instrument()
    from vllm import LLM, SamplingParams  # noqa: PLC0415

    prompts = prompts_from(Path(args.prompts), args.requests)
    params = SamplingParams(temperature=0.0, max_tokens=args.max_tokens, ignore_eos=False)
    result: dict[str, Any] = {"args": {k: str(v) for k, v in vars(args).items()}, "runs": []}
    variant = args.variant
    spec = (
        {
            "method": "ngram",
            "num_speculative_tokens": args.k,
            "prompt_lookup_min": 2,
            "prompt_lookup_max": 4,
        }
        if variant == "ngram"
        else None
    )
    # One engine per process: vLLM's distributed state does not survive a second LLM.
    llm = LLM(
        model=args.model,
        enforce_eager=True,
        max_model_len=2048,
        speculative_config=spec,
        seed=0,
    )
    if variant == "ngram":
        instrument_proposer()
    for c in args.concurrency:  # warm with the measurement's own shape first
        for i in range(0, min(len(prompts), 4 * c), c):
            llm.chat(prompts[i : i + c], params, use_tqdm=False)
    for c in args.concurrency:
        STEPS.clear()
        t0 = _perf()
        for i in range(0, len(prompts), c):
            llm.chat(prompts[i : i + c], params, use_tqdm=False)
        wall = _perf() - t0
        summ = summarize(STEPS)
        result["runs"].append(
            {
                "variant": variant,
                "concurrency": c,
                "wall_s": wall,
                "steps": len(STEPS),
                "kinds": summ,
            }
        )
        print(f"== {variant} c{c}: {len(STEPS)} steps in {wall:.1f}s", flush=True)
        for k, row in summ.items():
            cols = " ".join(f"{key}={v}" for key, v in row.items())
            print(f"  {k}: {cols}", flush=True)
    if args.out:
        args.out.write_text(json.dumps(result, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
