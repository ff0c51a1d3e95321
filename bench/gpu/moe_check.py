"""The MoE correction checked against a ``moe_step.py`` run (bench/results/gpu_moe.md).

Reads the JSON, prints the model ``specload.predict.moe`` builds from it, and checks the
correction where the file can: its ``layouts`` section measured n tokens of ONE sequence
(constructed overlap rho) and n sequences of one token. The baseline's curve is the
independent layout (time against tokens, interpolated); the forecast charges one sequence's
n tokens the curve at ``charged_tokens(n, drafts = n - 1)`` — compared here with the time
measured for that sequence, and with the uncorrected charge (the curve at n). The overlap is
the one the script constructed (the file says which), so this checks the equivalent-token
arithmetic and the row cost on that device, not a real router's overlap.

    .venv/bin/python bench/gpu/moe_check.py bench/results/gpu_moe_h200.json
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from specload.predict.moe import MoeModel  # noqa: E402


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("file", type=Path)
    args = p.parse_args()
    base = MoeModel.from_json(args.file)
    print("\n".join(base.summary()))
    doc = json.loads(args.file.read_text())
    rows = doc["measurements"]["layouts"]
    if not rows:
        print("no layouts measured: nothing to check")
        return 0
    rho = doc["settings"]["overlap"]
    med: dict[tuple[str, int], float] = {}
    uniq: dict[tuple[str, int], float] = {}
    for layout in ("one_sequence", "independent"):
        for n in sorted({r["tokens"] for r in rows}):
            sel = [r for r in rows if (r["layout"], r["tokens"]) == (layout, n)]
            if sel:
                med[layout, n] = statistics.median(r["time_ms"] for r in sel)
                uniq[layout, n] = statistics.fmean(r["unique_experts"] for r in sel)
    ns = np.array(sorted(n for lay, n in med if lay == "independent"), dtype=float)
    curve_t = np.array([med["independent", int(n)] for n in ns])

    def curve(x: np.ndarray) -> np.ndarray:
        return np.asarray(np.interp(x, ns, curve_t), dtype=float)

    # The row cost of the implementation the layouts ran (its own grid), not negative.
    impl = rows[0].get("impl", "loop")
    grid = [r for r in doc["measurements"]["grid"] if r["impl"] == impl]
    lam = base.row_cost
    if len(grid) >= 4:
        a = np.array([[1.0, r["rows"], r["unique_experts"]] for r in grid])
        coef = np.linalg.lstsq(a, np.array([r["time_ms"] for r in grid]), rcond=None)[0]
        lam = max(coef[1], 0.0) / (coef[2] * base.shape.top_k)
    models = {
        "row cost 0": MoeModel(
            shape=base.shape,
            overlap=rho,
            overlap_low=rho,
            overlap_high=rho,
            source="the run's constructed overlap",
        ),
        f"row cost {lam:.3g} ({impl} grid)": MoeModel(
            shape=base.shape,
            overlap=rho,
            overlap_low=rho,
            overlap_high=rho,
            source="the run's constructed overlap",
            row_cost=lam,
        ),
    }
    print(f"\none sequence of n tokens (overlap {rho}, {impl}) against the independent-token curve")
    head = f"{'n':>3} {'U seq':>6} {'U model':>7} {'measured':>9} {'uncorr.':>8}"
    for name in models:
        head += f" | {name:>26}"
    print(head)
    for n in [int(v) for v in ns]:
        if ("one_sequence", n) not in med:
            continue
        got = med["one_sequence", n]
        u_model = models["row cost 0"].sequence_unique_experts(n).item()
        line = f"{n:>3} {uniq['one_sequence', n]:>6.1f} {u_model:>7.1f} {got:>9.3f}"
        line += f" {curve(np.array([n]))[0]:>8.3f}"
        for m in models.values():
            x = m.charged_tokens(np.array([float(n)]), np.array([n - 1.0]))
            pred = curve(x)[0]
            line += f" | x {x[0]:5.2f}: {pred:7.3f} ms ({(pred / got - 1) * 100:+5.1f}%)"
        print(line)
    return 0


if __name__ == "__main__":
    sys.exit(main())
