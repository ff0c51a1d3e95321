"""Predicted against measured speedups of n-gram speculation on real vLLM (CPU build).

Alternates a plain and an n-gram server of the tiny plain model, one at a time (two vLLM
servers up at once on two cores make the front end hold streams back), over several rounds.
Each server is warmed with the measurement's own shape first (c1 and c4, 12 requests of 200
tokens each), then measured; the plain run of a round is the baseline the forecast is made
from (``--record-token-ids``, levels 1,2,4,8), the n-gram run is the variant (levels 1 and 4).
Nothing about the variant goes into the forecast: ``specload predict`` sees the baseline only,
and ``--measured`` is read afterwards for the comparison.

Writes one JSON line per round (predicted and measured ratios variant/baseline at each level,
the forecast's terms) to ``--out`` and prints a table; run it from the repository root::

    .venv/bin/python bench/vllm_predict_rounds.py --rounds 3 \\
        --out bench/results/vllm_predict_rounds.jsonl
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from tests.fixtures.vllm import (  # noqa: E402 - a bench script run from the repo root
    NGRAM_SPECULATIVE_CONFIG,
    REASONING,
    ServerSpec,
    VllmServer,
    find_vllm_env,
)

COMMON = [
    *("--temperature", "0", "--max-tokens", "200", "--warmup", "0"),
    *("--metrics-address", "off", "--progress", "off", "--no-plots"),
    *("--request-timeout", "120"),
]
SPEC = [
    *("--method", "ngram"),
    *("--num-speculative-tokens", str(NGRAM_SPECULATIVE_CONFIG["num_speculative_tokens"])),
    *("--prompt-lookup-min", str(NGRAM_SPECULATIVE_CONFIG["prompt_lookup_min"])),
    *("--prompt-lookup-max", str(NGRAM_SPECULATIVE_CONFIG["prompt_lookup_max"])),
    *("--max-model-len", "2048"),
]
PLAIN = ServerSpec("plain", "plain", REASONING)
NGRAM = ServerSpec(
    "ngram", "plain", (*REASONING, "--speculative-config", json.dumps(NGRAM_SPECULATIVE_CONFIG))
)


def specload(*args: str, timeout_s: float = 900) -> subprocess.CompletedProcess[str]:
    cmd = [sys.executable, "-m", "specload", *args]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=timeout_s, check=False)


def run(server: VllmServer, out: Path, levels: str, requests: int, *extra: str) -> Path:
    res = specload(
        "run",
        *("--host", server.base_url, "--out", str(out)),
        *("--concurrency", levels, "--requests", str(requests)),
        *COMMON,
        *extra,
    )
    if res.returncode != 0:
        raise SystemExit(f"specload run failed ({out}): {res.stderr.strip()[-600:]}")
    return out


def medians(result: Path) -> dict[int, float]:
    summary = json.loads((result / "summary.json").read_text())
    return {
        int(lv["concurrency"]): float(lv["median_tpot_ms"])
        for lv in summary["levels"]
        if lv.get("median_tpot_ms") is not None
    }


def measure(
    spec: ServerSpec, env: Any, work: Path, out: Path, levels: str, n: int, *extra: str
) -> Path:
    server = VllmServer(spec, env, work)
    server.start()
    try:
        run(server, work / f"warm-{spec.kind}-{time.time_ns()}", "1,4", 12)
        return run(server, out, levels, n, *extra)
    finally:
        server.stop()


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--requests", type=int, default=24)
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--keep", type=Path, help="keep the runs here (default: a temporary folder)")
    ap.add_argument("--predict-args", default="", help="extra `specload predict` arguments")
    args = ap.parse_args()
    env, why = find_vllm_env()
    if env is None:
        raise SystemExit(f"no vLLM environment: {why}")
    keep = args.keep or Path(tempfile.mkdtemp(prefix="specload-rounds-"))
    rows = []
    for r in range(args.rounds):
        work = keep / f"round{r}"
        work.mkdir(parents=True, exist_ok=True)
        base = measure(
            PLAIN, env, work, work / "baseline", "1,2,4,8", args.requests, "--record-token-ids"
        )
        var = measure(NGRAM, env, work, work / "ngram", "1,4", args.requests)
        pred = specload(
            "predict",
            *(str(base), *SPEC, "--json", "--measured", str(var)),
            *("--server-log", str(work / "vllm-plain.log")),
            *args.predict_args.split(),
        )
        if pred.returncode != 0:
            raise SystemExit(f"specload predict failed: {pred.stderr.strip()[-600:]}")
        data = json.loads(pred.stdout)
        (work / "prediction.json").write_text(pred.stdout)
        b, v = medians(base), medians(var)
        row: dict[str, Any] = {"round": r, "levels": {}}
        for lv in data["levels"]:
            c = int(lv["concurrency"])
            if c not in v:
                continue
            predicted = float(lv["predicted_median_tpot_ms"])
            row["levels"][c] = {
                "baseline_ms": b[c],
                "variant_ms": v[c],
                "predicted_ms": predicted,
                "measured_ratio": v[c] / b[c],
                "predicted_ratio": predicted / b[c],
            }
        rows.append(row)
        with args.out.open("a") as fh:
            fh.write(json.dumps(row) + "\n")
        print(json.dumps(row), flush=True)
    for c in (1, 4):
        meas = [row["levels"][c]["measured_ratio"] for row in rows if c in row["levels"]]
        pred = [row["levels"][c]["predicted_ratio"] for row in rows if c in row["levels"]]
        if meas:
            print(
                f"c{c}: measured ratio median {statistics.median(meas):.3f} "
                f"(spread {min(meas):.3f}..{max(meas):.3f}); predicted median "
                f"{statistics.median(pred):.3f} ({min(pred):.3f}..{max(pred):.3f})"
            )
    print(f"runs kept in {keep}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
