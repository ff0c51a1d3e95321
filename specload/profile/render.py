"""A :class:`ProfileReport` as text for a terminal."""

from __future__ import annotations

from specload.profile.analysis import SPIN_WAIT_NOTE, ProfileReport
from specload.profile.kernels import FAMILY_BY_NAME

_MODES = {
    "gpu_annotation": "kernels placed by GPU step ranges (gpu_user_annotation)",
    "launch_correlation": "kernels placed by their launch inside CPU step ranges (correlation)",
    "kernel_start": "kernels placed by their start inside CPU step ranges (no GPU ranges, "
    "no launches in the trace)",
    "cpu_op": "CPU trace: all-reduce CPU ops inside CPU step ranges",
}


def _ms(value: float | None) -> str:
    return "-" if value is None else f"{value * 1e3:.3f}"


def _pct(value: float | None) -> str:
    return "-" if value is None else f"{value * 100:.1f}%"


def render_text(report: ProfileReport) -> str:
    j = report.to_json()
    lines: list[str] = []
    modes = sorted({r.mode for r in report.ranks})
    lines.append(
        f"{len(report.ranks)} rank(s), {report.decode_steps} decode steps per rank (median); "
        + "; ".join(_MODES.get(m, m) for m in modes)
    )
    counts = report.kernel_counts()
    if counts:
        per_step = [
            f"{FAMILY_BY_NAME[f].backend} [{f}] {n} in decode steps" for f, n in counts.items()
        ]
        lines.append("all-reduce: " + ", ".join(per_step))
    else:
        lines.append("all-reduce: none found in decode steps")
    lines.append("")
    lines.append(f"{'decode, across ranks':<28}{'median':>12}{'max':>12}")
    lines.append(
        f"{'  step time (ms)':<28}{_ms(j['decode_step_seconds']):>12}"
        f"{_ms(j['decode_step_seconds_max']):>12}"
    )
    ar_med = j["decode_allreduce_seconds_per_step"]
    ar_max = j["decode_allreduce_seconds_per_step_max"]
    lines.append(f"{'  all-reduce per step (ms)':<28}{_ms(ar_med):>12}{_ms(ar_max):>12}")
    lines.append(
        f"{'  all-reduce share':<28}{_pct(j['decode_allreduce_ratio']):>12}"
        f"{_pct(j['decode_allreduce_ratio_max']):>12}"
    )
    lines.append("")
    lines.append("by batch size (decode steps; median across ranks)")
    lines.append(f"  {'batch':<8}{'steps':>8}{'step ms':>12}{'all-reduce ms':>15}{'share':>9}")
    for label, b in j["buckets"].items():
        lines.append(
            f"  {label:<8}{b['steps']:>8}{_ms(b['step_seconds']):>12}"
            f"{_ms(b['allreduce_seconds_per_step']):>15}{_pct(b['allreduce_ratio']):>9}"
        )
    mixed = j["mixed"]
    if mixed["steps"]:
        lines.append(
            f"mixed prefill steps (apart): {mixed['steps']} steps,"
            f" step {_ms(mixed['step_seconds'])} ms,"
            f" all-reduce {_ms(mixed['allreduce_seconds_per_step'])} ms"
            f" ({_pct(mixed['allreduce_ratio'])})"
        )
    lines.append("")
    lines.append("per rank")
    lines.append(
        f"  {'rank':<6}{'steps':>8}{'step ms':>12}{'all-reduce ms':>15}{'share':>9}{'ar/step':>9}"
    )
    for r in report.ranks:
        d = r.decode
        per = d.allreduce_kernels_per_step
        lines.append(
            f"  {r.rank:<6}{d.steps:>8}{_ms(d.step_seconds):>12}"
            f"{_ms(d.allreduce_seconds_per_step):>15}{_pct(d.allreduce_ratio):>9}"
            f"{'-' if per is None else f'{per:.1f}':>9}"
        )
    lines.append("")
    lines.append("note: " + SPIN_WAIT_NOTE)
    outside = sum(r.allreduce_outside_steps for r in report.ranks)
    if outside:
        lines.append(
            f"note: {outside} all-reduce kernel(s) or op(s) lie outside every step range "
            "(warm-up, or steps cut by the capture window) and are not counted."
        )
    straggler = report.straggler()
    if straggler is not None:
        rank, low, median = straggler
        lines.append(
            f"note: rank {rank} spends {low * 1e3:.3f} ms per step in all-reduce against a "
            f"median of {median * 1e3:.3f} ms: the others likely wait for it."
        )
    return "\n".join(lines)
