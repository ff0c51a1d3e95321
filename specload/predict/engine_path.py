"""The engine path a speculative variant runs on, and the baseline's.

The same ``--speculative-config`` runs differently on different vLLM builds and devices,
and the forecast has to know which: the proposer's rule decides the counts, the scheduler's
mode and the graph mode decide what each step costs beyond the baseline's curve.

========================  ===============================================================
field                     what it decides
========================  ===============================================================
``replay_rule``           the n-gram rule replayed (:data:`simulator.ngram.RULES`):
                          ``v1`` (the longest n-gram at its earliest occurrence, 0..k
                          drafts: vLLM's CPU numba proposer and the 0.16 reference),
                          ``v2`` (Model Runner V2's Triton kernel: the rightmost
                          occurrence, always k drafts, the last token as filler) or
                          ``ngram_gpu`` (the V1 runner's ``method: ngram_gpu``: the ``v1``
                          drafts verified, k counted per decode step)
``baseline_async`` /      whether the scheduler overlaps the host's per-step work with the
``variant_async``         forward pass (on GPUs on by default; off for every CPU server in
                          0.32, and for the CPU-proposer n-gram method everywhere)
``graph_mode`` /          CUDA graphs: the captured batch sizes a step is padded up to, and
``capture_sizes``         whether a step replays a full graph or piecewise ones
========================  ===============================================================

Every field says where it came from (``sources``): a preset, ``--engine-path``, the
baseline's recorded server information, the server's log, or a default — printed with
every forecast.

**Presets** (vLLM 0.32.0, read in its source):

* ``cpu-0.32`` — the CPU build: ``vllm/platforms/cpu.py`` sets ``async_scheduling = False``
  for every CPU server; the build has no Triton CPU backend (``vllm/triton_utils/
  importing.py``), so ``VllmConfig.use_v2_model_runner`` (``vllm/config/vllm.py``) logs
  "Model Runner V2 requires Triton; using the V1 model runner instead." and the V1 runner
  serves ``method: ngram`` with the numba ``NgramProposer``
  (``vllm/v1/spec_decode/ngram_proposer.py``); no CUDA graphs.
* ``gpu-0.32-v2`` — the GPU default: Model Runner V2 (``use_v2_model_runner`` is True unless
  ``VLLM_USE_V2_MODEL_RUNNER=0`` or an unsupported feature); it serves both ``ngram`` and
  ``ngram_gpu`` with ``NgramGPUSpeculator`` (``vllm/v1/worker/gpu/spec_decode/__init__.py``,
  ``.../ngram/speculator.py``: rule ``v2``). The baseline schedules async (the default when
  no option forbids it); the variant with ``method: ngram`` does **not**: ``VllmConfig.
  __post_init__``'s async decision checks the *method*, not the runner — "Async
  scheduling not supported with ngram-based speculative decoding and will be disabled."
  — while ``ngram_gpu`` (``NgramGPUTypes``) keeps async on. CUDA graphs
  ``FULL_AND_PIECEWISE`` (the optimization-level defaults in ``vllm/config/vllm.py``),
  capture sizes ``[1, 2, 4, 8, 16, …, 248, 256, 272, …, 512]`` (``_set_cudagraph_sizes``:
  ``max_cudagraph_capture_size = min(2 x max_num_seqs, 512)``, 1024 on Blackwell); V2 sizes
  its spec-decode graphs itself (``vllm/v1/worker/gpu/cudagraph_utils.py``), the V1 runner
  rounds them (``CompilationConfig.adjust_cudagraph_sizes_for_spec_decode``).
* ``gpu-0.32-v1`` — ``VLLM_USE_V2_MODEL_RUNNER=0``: the V1 runner, ``method: ngram`` with
  the CPU numba proposer (rule ``v1``), the variant synchronous, ``FULL_AND_PIECEWISE``
  graphs with the capture sizes rounded to multiples of k + 1.

With ``method: ngram_gpu`` (:meth:`EnginePath.for_method`) the variant keeps async
scheduling, and on the V1 runner it runs ``NgramProposerGPU``
(``vllm/v1/spec_decode/ngram_proposer_gpu.py``, rule ``ngram_gpu``).

**Detection**: :func:`from_server_log` reads a vLLM 0.32 server's startup log;
:func:`detect` reads what ``specload run`` recorded about the baseline's server
(``summary.json``'s ``server_info``); :func:`resolve` makes the path a forecast uses.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from specload.errors import UsageError
from specload.results.model import Summary, read
from specload.vllm_log import from_server_log

REPLAY_RULES = ("v1", "v2", "ngram_gpu")  # = simulator.ngram.RULES
GRAPH_MODES = ("none", "piecewise", "full", "full_and_piecewise")
PROPOSERS = ("ngram-numba", "ngram-gpu", "ngram-triton-v2")
RUNNERS = ("v1", "v2")
DEVICES = ("cpu", "gpu", "unknown")

# EnginePath's fields in the order describe() and to_json() give them.
FIELDS = (
    "vllm_version",
    "device",
    "runner",
    "proposer",
    "replay_rule",
    "baseline_async",
    "variant_async",
    "graph_mode",
    "capture_sizes",
)


@dataclass(frozen=True)
class EnginePath:
    """What the baseline and the variant run on (see the module's table)."""

    name: str  # the preset's name, or "detected" / "custom"
    vllm_version: str | None
    device: str  # "cpu" | "gpu" | "unknown"
    runner: str  # "v1" | "v2": the model runner serving the variant
    proposer: str  # "ngram-numba" | "ngram-gpu" | "ngram-triton-v2"
    replay_rule: str  # one of REPLAY_RULES
    baseline_async: bool | None  # None: not known
    variant_async: bool | None
    graph_mode: str  # one of GRAPH_MODES ("none": eager, no padding)
    capture_sizes: tuple[int, ...] = ()  # the baseline's captured batch sizes (tokens)
    sources: Mapping[str, str] = field(default_factory=dict)  # field -> where it came from
    method: str = "ngram"  # the speculative method the path is for ("ngram" | "ngram_gpu")

    def source(self, name: str) -> str:
        return self.sources.get(name, self.sources.get("*", "default"))

    def with_fields(self, source: str, **values: Any) -> EnginePath:
        """A copy with ``values`` set, each field's source ``source``."""
        sources = dict(self.sources)
        star = sources.pop("*", None)
        if star is not None:  # spell the preset out per field before some are replaced
            sources = {f: sources.get(f, star) for f in FIELDS} | {
                k: v for k, v in sources.items() if k not in FIELDS
            }
        for name in values:
            sources[name] = source
        return dataclasses.replace(self, sources=sources, **values)

    def labelled(self, source: str) -> EnginePath:
        """A copy whose every field says it came from ``source``."""
        return dataclasses.replace(self, sources=dict.fromkeys(FIELDS, source))

    def for_method(self, method: str) -> EnginePath:
        """The path for ``method`` (``ngram`` or ``ngram_gpu``; module doc)."""
        if method == self.method or self.device != "gpu":
            return dataclasses.replace(self, method=method)
        src = f"method {method} (vllm/config/vllm.py: async scheduling by method)"
        if method == "ngram_gpu":
            values: dict[str, Any] = {"variant_async": True}
            if self.runner == "v1":
                values |= {"proposer": "ngram-gpu", "replay_rule": "ngram_gpu"}
        else:
            values = {"variant_async": False}
            if self.runner == "v1":
                values |= {"proposer": "ngram-numba", "replay_rule": "v1"}
        return dataclasses.replace(self.with_fields(src, **values), method=method)

    def describe(self) -> list[str]:
        """One line per field with its value; where it came from once in the header for the
        fields that share the commonest source, beside the field for the others."""
        sources = [_short(self.source(name)) for name in FIELDS]
        common = max(set(sources), key=sources.count)
        lines = [f"engine path: {self.name} (method {self.method}; from {common} unless said)"]
        for name, src in zip(FIELDS, sources, strict=True):
            said = "" if src == common else f" ({src})"
            lines.append(f"  {name}: {_show(getattr(self, name))}{said}")
        return lines

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {"name": self.name, "method": self.method}
        for name in FIELDS:
            value = getattr(self, name)
            out[name] = list(value) if isinstance(value, tuple) else value
        out["sources"] = {name: self.source(name) for name in FIELDS}
        return out


def _short(source: str, width: int = 90) -> str:
    """A source as the Markdown says it: a quoted log line cut to ``width`` characters (the
    JSON keeps it whole)."""
    return source if len(source) <= width else source[: width - 1] + "…"


def _show(value: Any) -> str:
    if value is None:
        return "unknown"
    if isinstance(value, bool):
        return "on" if value else "off"
    if isinstance(value, tuple):
        if len(value) > 8:  # capture sizes: the first few, the count and the largest
            head = ", ".join(str(v) for v in value[:4])
            return f"{head}, … {value[-1]} ({len(value)} sizes)"
        return ", ".join(str(v) for v in value) or "none"
    return str(value)


# vLLM 0.32's default capture sizes on a non-Blackwell GPU (vllm/config/vllm.py,
# _set_cudagraph_sizes: [1, 2, 4] + range(8, 256, 8) + range(256, max + 1, 16), max 512).
GPU_032_CAPTURE_SIZES = (1, 2, 4, *range(8, 256, 8), *range(256, 513, 16))

# vLLM 0.32's CPU build: every CPU server runs synchronously (vllm/platforms/cpu.py), no
# CUDA graphs, the V1 runner with the numba n-gram proposer (earliest occurrence, 0..k).
CPU_032 = EnginePath(
    name="cpu-0.32",
    vllm_version="0.32.0",
    device="cpu",
    runner="v1",
    proposer="ngram-numba",
    replay_rule="v1",
    baseline_async=False,
    variant_async=False,
    graph_mode="none",
    sources={"*": "preset cpu-0.32"},
)

# vLLM 0.32 on a GPU, the default: Model Runner V2 and its Triton n-gram kernel.
GPU_032_V2 = EnginePath(
    name="gpu-0.32-v2",
    vllm_version="0.32.0",
    device="gpu",
    runner="v2",
    proposer="ngram-triton-v2",
    replay_rule="v2",
    baseline_async=True,
    variant_async=False,
    graph_mode="full_and_piecewise",
    capture_sizes=GPU_032_CAPTURE_SIZES,
    sources={"*": "preset gpu-0.32-v2"},
)

# vLLM 0.32 on a GPU with VLLM_USE_V2_MODEL_RUNNER=0: the V1 runner, the CPU proposer.
GPU_032_V1 = EnginePath(
    name="gpu-0.32-v1",
    vllm_version="0.32.0",
    device="gpu",
    runner="v1",
    proposer="ngram-numba",
    replay_rule="v1",
    baseline_async=True,
    variant_async=False,
    graph_mode="full_and_piecewise",
    capture_sizes=GPU_032_CAPTURE_SIZES,
    sources={"*": "preset gpu-0.32-v1"},
)

PRESETS: dict[str, EnginePath] = {p.name: p for p in (CPU_032, GPU_032_V2, GPU_032_V1)}
# resolve()'s fallback; `specload predict` itself assumes no path where none is detected.
DEFAULT_PRESET = CPU_032.name


# --------------------------------------------------------------------------- detection


def _base_for(device: str | None, runner: str | None) -> EnginePath:
    if device == "cpu":
        return CPU_032
    if runner == "v1":
        return GPU_032_V1
    return GPU_032_V2


def from_facts(info: Mapping[str, Any]) -> EnginePath | None:
    """The engine path from a baseline's recorded server information (``server_info`` of
    ``summary.json``: ``vllm_version`` from ``/version``, ``log`` from
    :func:`from_server_log`); None when it tells nothing about the path."""
    raw_log = info.get("log")
    log: Mapping[str, Any] = raw_log if isinstance(raw_log, Mapping) else {}
    raw_ev = log.get("evidence")
    ev: Mapping[str, Any] = raw_ev if isinstance(raw_ev, Mapping) else {}
    version = info.get("vllm_version") or log.get("vllm_version")
    device, runner = log.get("device"), log.get("runner")
    if not version and device is None and runner is None:
        return None
    base = _base_for(device, runner)
    values: dict[str, tuple[Any, str]] = {}

    def logged(name: str) -> str:
        line = ev.get(name)
        return f"server log: {line}" if line else "server log"

    if info.get("vllm_version"):
        values["vllm_version"] = (str(info["vllm_version"]), "baseline server GET /version")
    elif log.get("vllm_version"):
        values["vllm_version"] = (str(log["vllm_version"]), logged("vllm_version"))
    if device in ("cpu", "gpu"):
        values["device"] = (device, logged("device"))
    if runner in RUNNERS:
        values["runner"] = (runner, logged("runner"))
    role = log.get("role")
    if isinstance(log.get("async_scheduling"), bool):
        name = "variant_async" if role == "variant" else "baseline_async"
        values[name] = (log["async_scheduling"], logged("async_scheduling"))
    if role != "variant":
        if log.get("graph_mode") in GRAPH_MODES:
            values["graph_mode"] = (log["graph_mode"], logged("graph_mode"))
        sizes = log.get("capture_sizes")
        if isinstance(sizes, list) and all(isinstance(s, int) for s in sizes):
            values["capture_sizes"] = (tuple(sizes), logged("capture_sizes"))
    if device not in ("cpu", "gpu"):
        # A version alone does not say CPU or GPU (the CPU build answers /version alike).
        values["device"] = ("unknown", "not detected (no server log)")
    path = dataclasses.replace(base, name="detected")
    path = path.labelled(f"preset {base.name} (nearest to what was detected)")
    for name, (value, src) in values.items():
        path = path.with_fields(src, **{name: value})
    return path


def read_server_info(results_dir: str | Path | Summary) -> dict[str, Any] | None:
    """``server_info`` of a results directory's summary (:attr:`Summary.server_info`, read
    by the model; None: none recorded, or no summary there)."""
    if isinstance(results_dir, Summary):
        summary = results_dir
    else:
        try:
            summary = read(results_dir)
        except (UsageError, OSError):
            return None
    if summary.server_info is not None:
        return dict(summary.server_info)
    # Older results: the readiness gate's version, and the simulator's time scale.
    out: dict[str, Any] = {}
    if summary.server_version:
        out["vllm_version"] = summary.server_version
    if summary.server_time_scale is not None:
        out["simulator"] = True
    return out or None


def detect(results_dir: str | Path, server_log: str | None = None) -> EnginePath | None:
    """The engine path from what the baseline recorded (``summary.json``'s ``server_info``)
    and, when given, a server log's text (its facts win over the recorded ones)."""
    info: dict[str, Any] = dict(read_server_info(results_dir) or {})
    if server_log is not None:
        facts = from_server_log(server_log)
        if facts:
            info["log"] = facts
    if _is_simulator(info):
        return None
    return from_facts(info) if info else None


def _is_simulator(info: Mapping[str, Any]) -> bool:
    """specload's own simulator answers /version with its own marker: no engine path."""
    return bool(info.get("simulator"))


# --------------------------------------------------------------------------- resolving


def is_detected(path: EnginePath | None) -> bool:
    """Whether detection found enough to stand for the path (the device, at least)."""
    return path is not None and path.device != "unknown"


def resolve(
    preset: str | None,
    detected: EnginePath | None,
    overrides: Mapping[str, Any] | None = None,
    *,
    method: str = "ngram",
) -> EnginePath:
    """The path a forecast uses.

    ``preset`` (``--engine-path``; None or ``auto``: the detected path where the device was
    detected, else :data:`DEFAULT_PRESET`, assumed): an explicit preset names the variant's
    path (runner, proposer, rule, async, graph mode) and wins over detection for those; what
    the baseline itself showed (version, its async mode, its capture sizes) is still taken
    from ``detected``. ``overrides``: field -> (value, source) or value (source "flag").
    Raises ValueError for an unknown preset or field.
    """
    if preset in (None, "auto"):
        if is_detected(detected):
            assert detected is not None
            path = detected
        else:
            path = PRESETS[DEFAULT_PRESET].labelled(
                f"preset {DEFAULT_PRESET} (assumed: the device was not detected; "
                "--engine-path or --server-log tells it)"
            )
            path = dataclasses.replace(path, name=DEFAULT_PRESET)
            if detected is not None and detected.vllm_version:
                src = detected.source("vllm_version")
                path = path.with_fields(src, vllm_version=detected.vllm_version)
    else:
        if preset not in PRESETS:
            raise ValueError(f"engine path {preset!r}: one of auto, {', '.join(PRESETS)}")
        path = PRESETS[preset].labelled(f"preset {preset} (--engine-path)")
        if detected is not None and detected.device == path.device:
            for name in ("vllm_version", "baseline_async", "capture_sizes"):
                src = detected.source(name)
                if not src.startswith("preset"):
                    path = path.with_fields(src, **{name: getattr(detected, name)})
    path = path.for_method(method)
    for name, value in (overrides or {}).items():
        if name not in FIELDS:
            raise ValueError(f"engine path field {name!r}: one of {', '.join(FIELDS)}")
        val, src = value if isinstance(value, tuple) and len(value) == 2 else (value, "flag")
        path = path.with_fields(str(src), **{name: val})
    _check(path)
    return path


def choose(
    results_dir: str | Path,
    *,
    method: str = "ngram",
    engine_path: str = "auto",
    server_log: str | None = None,
) -> tuple[EnginePath | None, list[str]]:
    """The engine path a variant of the baseline in ``results_dir`` runs on (``engine_path``:
    a preset's name, or ``auto``: what the baseline recorded about its server and
    ``server_log``, a vLLM startup log's text), and the notes to show with the forecast.

    None for a draft method, and with ``auto`` for a baseline on specload's simulator and for
    one that recorded no device: never an assumed device (CPU terms on a GPU baseline, or none
    on a CPU one, would be a confident wrong answer), the baseline's curve alone, said in a
    note. Raises ValueError for an unknown preset.
    """
    if method != "ngram":
        return None, []
    info = read_server_info(results_dir) or {}
    if info.get("simulator") and engine_path == "auto" and server_log is None:
        return None, [
            "the baseline ran on specload's simulator: no engine path, no terms beyond the "
            "baseline's curve (--engine-path prices one)"
        ]
    detected = detect(results_dir, server_log=server_log)
    if engine_path == "auto" and not is_detected(detected):
        return None, [
            "engine path not known (the baseline recorded no device): no per-step terms "
            "priced, the forecast is the baseline's curve alone and comes out too fast where "
            "the variant's steps cost more (on vLLM 0.32's CPU build about 45% at c1); give "
            "--engine-path or --server-log FILE"
        ]
    path = resolve(engine_path, detected, method="ngram")
    notes = []
    mismatch = detected is not None and is_detected(detected) and detected.device != path.device
    if engine_path != "auto" and detected is not None and mismatch:
        notes.append(
            f"--engine-path {engine_path}: the baseline ran on a {detected.device} "
            f"server ({detected.source('device')}); its own facts are not used"
        )
    return path, notes


def _check(path: EnginePath) -> None:
    for name, allowed in (
        ("device", DEVICES),
        ("runner", RUNNERS),
        ("proposer", PROPOSERS),
        ("replay_rule", REPLAY_RULES),
        ("graph_mode", GRAPH_MODES),
    ):
        if getattr(path, name) not in allowed:
            raise ValueError(
                f"engine path {name} {getattr(path, name)!r}: one of {', '.join(allowed)}"
            )
