"""Peak memory and speed of ``specload profile analyze`` on a large synthetic trace.

Writes a torch-profiler-shaped decode trace of about ``--mb`` megabytes (plain
JSON, or gzip with ``--gzip``) with a known all-reduce share, then analyses it
in a fresh process and reports that process's peak RSS, the wall time and
whether the share was recovered. Goal: 200 MB analysed under 300 MB peak RSS.

    .venv/bin/python bench/bench_profile_memory.py --mb 200
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from specload.profile.synthetic import StepSpec, write_trace

_CHILD = """
import json, resource, sys, time
from pathlib import Path
from specload.profile.analysis import analyze
t0 = time.perf_counter()
report = analyze([Path(sys.argv[1])])
took = time.perf_counter() - t0
rss_kb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
print(json.dumps({"seconds": took, "peak_rss_mb": rss_kb / 1024,
                  "ratio": report.decode_allreduce_ratio, "steps": report.decode_steps}))
"""


def _steps(target_bytes: int) -> list[StepSpec]:
    # ~122 all-reduces + 250 other kernels per step (61 layers, reference model); each
    # kernel is written with its launch and flow events (~650 bytes per kernel in all).
    per_step_bytes = (122 + 250) * 650
    n = max(1, target_bytes // per_step_bytes)
    return [
        StepSpec(
            1 if i % 2 == 0 else 32,
            13600.0 if i % 2 == 0 else 20000.0,
            7000.0 if i % 2 == 0 else 6000.0,
            allreduces=122,
            other_kernels=250,
        )
        for i in range(n)
    ]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--mb", type=float, default=200.0)
    ap.add_argument("--gzip", action="store_true")
    ap.add_argument("--keep", type=Path, default=None, help="write the trace here and keep it")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        suffix = ".pt.trace.json.gz" if args.gzip else ".pt.trace.json"
        path = args.keep or Path(tmp) / f"bench_rank0{suffix}"
        t0 = time.perf_counter()
        steps = _steps(int(args.mb * 1e6))
        truth = write_trace(path, steps, style="gpu_annotation")
        wrote = time.perf_counter() - t0
        size_mb = path.stat().st_size / 1e6
        env = dict(os.environ)
        out = subprocess.run(
            [sys.executable, "-c", _CHILD, str(path)],
            check=True,
            capture_output=True,
            text=True,
            env=env,
        ).stdout
        result = json.loads(out)
    result.update(
        {
            "file_mb": round(size_mb, 1),
            "gzip": args.gzip,
            "write_seconds": round(wrote, 1),
            "true_ratio": truth.ratio(),
            "error_pp": abs(result["ratio"] - truth.ratio()) * 100,
            "bench_parent_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
        }
    )
    print(json.dumps(result, indent=2))
    return 0 if result["peak_rss_mb"] < 300 and result["error_pp"] < 1 else 1


if __name__ == "__main__":
    raise SystemExit(main())
