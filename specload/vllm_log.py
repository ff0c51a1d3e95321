"""The one reader of what a vLLM server's startup log says about its engine path.

The lines vLLM 0.32 writes at start (version, platform, model runner, async scheduling,
CUDA-graph mode and capture sizes), each fact with the log line it came from. ``specload
run --server-log`` records them (:mod:`specload.sweep.server_info`); ``specload predict``
turns them into an engine path (:mod:`specload.predict.engine_path`).
"""

from __future__ import annotations

import re
from typing import Any

# The lines of a vLLM 0.32 server's startup log that tell the engine path (file: line of
# the 0.32 source that writes them).
_LOG_PATTERNS: dict[str, re.Pattern[str]] = {
    # vllm/v1/engine/core.py:134 "Initializing a V1 LLM engine (v%s) with config: %s"
    "engine": re.compile(r"Initializing a V1 LLM engine \(v([^)\s]+)\) with config: (.*)"),
    # vllm/entrypoints/serve/utils/api_utils.py:327 "vLLM server version %s, serving model %s"
    "server_version": re.compile(r"vLLM server version (\S+), serving model"),
    # vllm/platforms/__init__.py:291 (debug) "Automatically detected platform %s."
    "platform": re.compile(r"Automatically detected platform (\w+)\."),
    # vllm/v1/worker/gpu_worker.py:518, cpu_worker.py:162 "Using V2 Model Runner"
    "v2_runner": re.compile(r"Using V2 Model Runner"),
    # vllm/config/vllm.py:726/734 "...; using the V1 model runner instead."
    "v1_runner": re.compile(r"using the V1 model runner instead"),
    # vllm/config/vllm.py:1605 "Async scheduling not supported with %s-based speculative
    # decoding and will be disabled."
    "async_spec_off": re.compile(
        r"Async scheduling not supported with (\w+)-based speculative decoding"
    ),
    # vllm/config/vllm.py:1614-1640: the other reasons async scheduling is turned off
    "async_off": re.compile(
        r"Async scheduling (?:is not compatible with .* and will be disabled|will be disabled "
        r"because|is disabled (?:for|because))"
    ),
    # vllm/entrypoints/serve/utils/api_utils.py:286 "non-default args: %s"
    "async_arg": re.compile(r"non-default args: .*'async_scheduling': (True|False)"),
    # vllm/config/vllm.py:1703 "Enforce eager set, disabling torch.compile, CUDAGraphs, ..."
    "eager": re.compile(r"Enforce eager set, disabling torch\.compile, CUDAGraphs"),
}
# Inside the engine's config line (VllmConfig.__str__, vllm/config/vllm.py:2703).
_CONFIG_PATTERNS: dict[str, re.Pattern[str]] = {
    "device": re.compile(r"\bdevice_config=(\w+)"),
    "spec_method": re.compile(r"speculative_config=SpeculativeConfig\(method='(\w+)'"),
    "no_spec": re.compile(r"speculative_config=None"),
    "graph_mode": re.compile(r"'cudagraph_mode': <CUDAGraphMode\.(\w+):"),
    "capture_sizes": re.compile(r"'cudagraph_capture_sizes': \[([\d,\s]*)\]"),
}
_GRAPH_MODE = {
    "NONE": "none",
    "PIECEWISE": "piecewise",
    "FULL": "full",
    "FULL_DECODE_ONLY": "full",  # full decode graphs, mixed steps eager
    "FULL_AND_PIECEWISE": "full_and_piecewise",
}
MAX_EVIDENCE_CHARS = 200  # each quoted log line is cut to this


def _evidence(text: str, match: re.Match[str]) -> str:
    start = text.rfind("\n", 0, match.start()) + 1
    end = text.find("\n", match.end())
    line = text[start : end if end >= 0 else len(text)].strip()
    return line if len(line) <= MAX_EVIDENCE_CHARS else line[: MAX_EVIDENCE_CHARS - 1] + "…"


def from_server_log(text: str) -> dict[str, Any]:
    """What a vLLM server's startup log says about its engine path.

    Returns a JSON-able dict with the facts found (absent: not in the log) — ``vllm_version``,
    ``device`` (``cpu`` / ``gpu``), ``runner`` (``v1`` / ``v2``), ``role`` (``baseline``:
    no speculative config; ``variant``), ``spec_method``, ``async_scheduling`` (bool),
    ``graph_mode``, ``capture_sizes`` — and ``evidence``: fact -> the log line it came from.
    """
    text = re.sub(r"\x1b\[[0-9;]*m", "", text)  # colour codes
    facts: dict[str, Any] = {}
    evidence: dict[str, str] = {}

    def found(name: str, value: Any, m: re.Match[str]) -> None:
        if name not in facts:
            facts[name] = value
            evidence[name] = _evidence(text, m)

    p = _LOG_PATTERNS
    engine = p["engine"].search(text)
    if engine:
        found("vllm_version", engine.group(1), engine)
        config = engine.group(2)
        if m := _CONFIG_PATTERNS["device"].search(config):
            found("device", "cpu" if m.group(1) == "cpu" else "gpu", engine)
        if m := _CONFIG_PATTERNS["spec_method"].search(config):
            found("role", "variant", engine)
            found("spec_method", m.group(1), engine)
        elif _CONFIG_PATTERNS["no_spec"].search(config):
            found("role", "baseline", engine)
        if m := _CONFIG_PATTERNS["graph_mode"].search(config):
            mode = _GRAPH_MODE.get(m.group(1))
            if mode is not None:
                found("graph_mode", mode, engine)
        if m := _CONFIG_PATTERNS["capture_sizes"].search(config):
            sizes = [int(s) for s in re.findall(r"\d+", m.group(1))]
            found("capture_sizes", sizes, engine)
    if m := p["server_version"].search(text):
        found("vllm_version", m.group(1), m)
    if m := p["platform"].search(text):
        found("device", "cpu" if m.group(1) == "cpu" else "gpu", m)
    if m := p["v2_runner"].search(text):
        found("runner", "v2", m)
    elif m := p["v1_runner"].search(text):
        found("runner", "v1", m)
    if m := p["async_spec_off"].search(text):
        found("async_scheduling", False, m)
        found("spec_method", m.group(1), m)
    elif m := p["async_off"].search(text):
        found("async_scheduling", False, m)
    elif m := p["async_arg"].search(text):
        found("async_scheduling", m.group(1) == "True", m)
    if facts.get("device") == "cpu" and "async_scheduling" not in facts and engine:
        # vllm/platforms/cpu.py:331 turns it off for every CPU server, without a line.
        found("async_scheduling", False, engine)
    if m := p["eager"].search(text):
        found("graph_mode", "none", m)
    if facts:
        facts["evidence"] = evidence
    return facts
