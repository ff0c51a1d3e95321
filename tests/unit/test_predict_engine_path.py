"""EnginePath: the presets, the server log's lines, detection from a results directory,
and resolving ``--engine-path``.

Known truth: the CPU logs are real vLLM 0.32.0 output (tests/data/vllm-0.32.0/
engine_log_*_cpu.txt, an in-process engine on the tiny models, paths shortened); the GPU
lines are written from the 0.32 source's format strings (file:line in engine_path.py).
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

import orjson
import pytest

from simulator.ngram import RULES
from specload.errors import UsageError
from specload.predict import engine_path as ep
from specload.vllm_log import MAX_EVIDENCE_CHARS, from_server_log

DATA = Path(__file__).resolve().parents[1] / "data" / "vllm-0.32.0"

GPU_NGRAM_LOG = """\
(APIServer pid=7) INFO 12-04 10:00:00 [api_utils.py:286] non-default args: {'model': 'Qwen/Qwen3-8B', 'speculative_config': {'method': 'ngram', 'num_speculative_tokens': 3}}
(APIServer pid=7) WARNING 12-04 10:00:01 [vllm.py:1605] Async scheduling not supported with ngram-based speculative decoding and will be disabled.
(EngineCore pid=8) INFO 12-04 10:00:02 [core.py:133] Initializing a V1 LLM engine (v0.32.0) with config: model='Qwen/Qwen3-8B', speculative_config=SpeculativeConfig(method='ngram', model=None, num_spec_tokens=3), device_config=cuda, compilation_config={'mode': <CompilationMode.VLLM_COMPILE: 3>, 'cudagraph_mode': <CUDAGraphMode.FULL_AND_PIECEWISE: (2, 1)>, 'cudagraph_capture_sizes': [4, 8, 16], 'max_cudagraph_capture_size': 16}
(EngineCore pid=8) INFO 12-04 10:00:03 [gpu_worker.py:518] Using V2 Model Runner
(APIServer pid=7) INFO 12-04 10:01:00 [api_utils.py:328] vLLM server version 0.32.0, serving model Qwen/Qwen3-8B
"""  # noqa: E501

GPU_BASELINE_V1_LOG = """\
(EngineCore pid=8) INFO 12-04 10:00:02 [core.py:133] Initializing a V1 LLM engine (v0.32.0) with config: model='m', speculative_config=None, device_config=cuda, compilation_config={'cudagraph_mode': <CUDAGraphMode.PIECEWISE: 1>, 'cudagraph_capture_sizes': [1, 2, 4, 8]}
(EngineCore pid=8) WARNING 12-04 10:00:01 [vllm.py:734] Model Runner V2 does not yet support LoRA; using the V1 model runner instead.
"""  # noqa: E501


def test_presets_are_consistent():
    assert set(ep.REPLAY_RULES) == set(RULES)
    assert set(ep.PRESETS) == {"cpu-0.32", "gpu-0.32-v2", "gpu-0.32-v1"}
    cpu, v2, v1 = ep.PRESETS["cpu-0.32"], ep.PRESETS["gpu-0.32-v2"], ep.PRESETS["gpu-0.32-v1"]
    assert (cpu.runner, cpu.replay_rule, cpu.baseline_async, cpu.graph_mode) == (
        "v1", "v1", False, "none",
    )  # fmt: skip
    assert (v2.runner, v2.proposer, v2.replay_rule) == ("v2", "ngram-triton-v2", "v2")
    # method ngram: vllm/config/vllm.py turns async off by method, on either runner.
    assert (v2.baseline_async, v2.variant_async) == (True, False)
    assert (v1.runner, v1.proposer, v1.replay_rule, v1.variant_async) == (
        "v1", "ngram-numba", "v1", False,
    )  # fmt: skip
    # vLLM 0.32's default capture sizes (_set_cudagraph_sizes, max 512).
    assert v2.capture_sizes[:5] == (1, 2, 4, 8, 16)
    assert v2.capture_sizes[-3:] == (480, 496, 512) and 248 in v2.capture_sizes
    assert 252 not in v2.capture_sizes and len(v2.capture_sizes) == 3 + 31 + 17


def test_for_method_ngram_gpu():
    v1 = ep.PRESETS["gpu-0.32-v1"].for_method("ngram_gpu")
    assert (v1.proposer, v1.replay_rule, v1.variant_async) == ("ngram-gpu", "ngram_gpu", True)
    assert v1.source("variant_async").startswith("method ngram_gpu")
    assert v1.source("runner") == "preset gpu-0.32-v1"
    v2 = ep.PRESETS["gpu-0.32-v2"].for_method("ngram_gpu")
    assert (v2.proposer, v2.replay_rule, v2.variant_async) == ("ngram-triton-v2", "v2", True)
    # The CPU build forces sync for every server: the method changes nothing.
    cpu = ep.PRESETS["cpu-0.32"].for_method("ngram_gpu")
    assert cpu.variant_async is False and cpu.method == "ngram_gpu"


def test_describe_and_json():
    path = ep.PRESETS["cpu-0.32"]
    lines = path.describe()
    # the source every field shares is said once, in the header
    assert lines[0] == "engine path: cpu-0.32 (method ngram; from preset cpu-0.32 unless said)"
    assert "  replay_rule: v1" in lines
    assert "  variant_async: off" in lines
    assert "  capture_sizes: none" in lines
    assert len(lines) == 1 + len(ep.FIELDS)
    # a field with another source says it beside its value; long size lists are shortened
    other = dataclasses.replace(
        ep.PRESETS["gpu-0.32-v2"],
        sources={**ep.PRESETS["gpu-0.32-v2"].sources, "graph_mode": "server log"},
    )
    described = other.describe()
    assert any(
        line.startswith("  graph_mode: ") and line.endswith(" (server log)") for line in described
    )
    sizes = next(line for line in described if line.startswith("  capture_sizes: "))
    assert sizes == "  capture_sizes: 1, 2, 4, 8, … 512 (51 sizes)"
    data = path.to_json()
    assert data["capture_sizes"] == [] and data["replay_rule"] == "v1"
    assert data["sources"]["graph_mode"] == "preset cpu-0.32"
    orjson.dumps(data)  # JSON-able


# ----------------------------------------------------------------- the server's log


def test_real_cpu_ngram_log():
    facts = from_server_log((DATA / "engine_log_ngram_cpu.txt").read_text())
    assert facts["vllm_version"] == "0.32.0"
    assert facts["device"] == "cpu"
    assert facts["runner"] == "v1"  # "Model Runner V2 requires Triton; using the V1 ..."
    assert facts["role"] == "variant" and facts["spec_method"] == "ngram"
    assert facts["async_scheduling"] is False
    assert "Async scheduling not supported with ngram" in facts["evidence"]["async_scheduling"]
    assert facts["graph_mode"] == "none" and facts["capture_sizes"] == []
    assert all(len(v) <= MAX_EVIDENCE_CHARS for v in facts["evidence"].values())


def test_real_cpu_plain_log():
    facts = from_server_log((DATA / "engine_log_plain_cpu.txt").read_text())
    assert (facts["role"], facts["device"], facts["runner"]) == ("baseline", "cpu", "v1")
    # No line says so: the CPU platform turns async scheduling off for every server.
    assert facts["async_scheduling"] is False
    assert "spec_method" not in facts


def test_gpu_logs():
    facts = from_server_log(GPU_NGRAM_LOG)
    assert (facts["device"], facts["runner"], facts["role"]) == ("gpu", "v2", "variant")
    assert facts["async_scheduling"] is False
    assert facts["graph_mode"] == "full_and_piecewise"
    assert facts["capture_sizes"] == [4, 8, 16]
    base = from_server_log(GPU_BASELINE_V1_LOG)
    assert (base["runner"], base["graph_mode"], base["role"]) == ("v1", "piecewise", "baseline")
    assert "async_scheduling" not in base  # a GPU baseline: nothing said, not assumed here
    assert from_server_log("nothing of vLLM here\n") == {}


# ----------------------------------------------------------------- detection and resolving


def _results(tmp_path: Path, server_info: dict | None, **extra) -> Path:
    summary = {"schema_version": 1, "levels": [], **extra}
    if server_info is not None:
        summary["server_info"] = server_info
    (tmp_path / "summary.json").write_bytes(orjson.dumps(summary))
    return tmp_path


def test_detect_from_recorded_log(tmp_path):
    log = from_server_log(GPU_BASELINE_V1_LOG)
    path = ep.detect(_results(tmp_path, {"vllm_version": "0.32.0", "log": log}))
    assert path is not None and path.name == "detected"
    assert (path.device, path.runner, path.replay_rule) == ("gpu", "v1", "v1")
    assert path.capture_sizes == (1, 2, 4, 8) and path.graph_mode == "piecewise"
    assert path.source("vllm_version") == "baseline server GET /version"
    assert path.source("capture_sizes").startswith("server log: (EngineCore")
    assert path.source("baseline_async") == "preset gpu-0.32-v1 (nearest to what was detected)"


def test_detect_version_only_and_nothing(tmp_path):
    a = tmp_path / "a"
    a.mkdir()
    path = ep.detect(_results(a, None, server_version="0.32.0"))
    assert path is not None and path.device == "unknown" and not ep.is_detected(path)
    b = tmp_path / "b"
    b.mkdir()
    assert ep.detect(_results(b, None)) is None
    assert ep.detect(tmp_path / "missing") is None
    c = tmp_path / "c"
    c.mkdir()
    assert ep.detect(_results(c, {"vllm_version": "0.1", "simulator": True})) is None


def test_detect_with_a_log_file_given(tmp_path):
    text = (DATA / "engine_log_plain_cpu.txt").read_text()
    path = ep.detect(_results(tmp_path, {"vllm_version": "0.32.0"}), server_log=text)
    assert path is not None and ep.is_detected(path)
    assert (path.device, path.replay_rule, path.baseline_async) == ("cpu", "v1", False)


def test_resolve():
    # auto, nothing detected: the CPU preset, assumed, and says so.
    path = ep.resolve(None, None)
    assert path.name == "cpu-0.32" and "assumed" in path.source("runner")
    # auto with a version only: still assumed, the version kept with its source.
    version_only = ep.from_facts({"vllm_version": "0.33.1"})
    path = ep.resolve("auto", version_only)
    assert path.vllm_version == "0.33.1" and path.device == "cpu"
    assert path.source("vllm_version") == "baseline server GET /version"
    # An explicit preset wins for the variant's path; the baseline's own facts stay.
    detected = ep.from_facts(
        {"vllm_version": "0.32.0", "log": from_server_log(GPU_BASELINE_V1_LOG)}
    )
    path = ep.resolve("gpu-0.32-v2", detected)
    assert (path.runner, path.replay_rule) == ("v2", "v2")
    assert path.source("runner") == "preset gpu-0.32-v2 (--engine-path)"
    assert path.capture_sizes == (1, 2, 4, 8)
    assert path.source("capture_sizes").startswith("server log")
    # method and overrides
    path = ep.resolve("gpu-0.32-v1", None, {"variant_async": (True, "--x")}, method="ngram")
    assert path.variant_async is True and path.source("variant_async") == "--x"
    with pytest.raises(ValueError, match="engine path 'gpu-9'"):
        ep.resolve("gpu-9", None)
    with pytest.raises(ValueError, match="field 'colour'"):
        ep.resolve("cpu-0.32", None, {"colour": 1})
    with pytest.raises(ValueError, match="replay_rule 'v7'"):
        ep.resolve("cpu-0.32", None, {"replay_rule": "v7"})


# ----------------------------------------------------------------- the predict command


def _predict(*argv: str) -> int:
    import argparse  # noqa: PLC0415

    from specload.commands import predict as cli  # noqa: PLC0415

    p = argparse.ArgumentParser(prog="specload predict")
    cli.add_arguments(p)
    return cli.run(p.parse_args(list(argv)))


NGRAM = ("--num-speculative-tokens", "3", "--prompt-lookup-min", "2", "--prompt-lookup-max", "4")


@pytest.fixture
def synthetic_baseline(tmp_path):
    from specload.predict.synthetic import (  # noqa: PLC0415
        LinearCost,
        make_records,
        write_synthetic_baseline,
    )

    recs = make_records(12, levels=[1, 2], seed=5, min_tokens=60, max_tokens=200)
    return write_synthetic_baseline(tmp_path / "base", recs, levels=[1, 2], cost=LinearCost())


def test_predict_assumes_no_device_and_says_so(synthetic_baseline, capsys):
    # No device recorded: no engine path is assumed (CPU terms on a GPU baseline would be a
    # confident wrong answer); the curve alone, the v1 rule, and a warning that says so.
    assert _predict(str(synthetic_baseline), *NGRAM, "--bootstrap", "100", "--json") == 0
    out = capsys.readouterr()
    assert "engine path not known" in out.err and "--engine-path" in out.err
    data = orjson.loads(out.out)
    assert data.get("engine_path") is None
    assert any("engine path not known" in w for w in data["warnings"])
    assert all(lv["estimated_step_overhead_ms"] in (0, None) for lv in data["levels"])
    argv = (*NGRAM, "--bootstrap", "100", "--json", "--engine-path", "cpu-0.32")
    assert _predict(str(synthetic_baseline), *argv) == 0
    cpu = orjson.loads(capsys.readouterr().out)
    assert cpu["engine_path"]["name"] == "cpu-0.32" and cpu["engine_path"]["replay_rule"] == "v1"
    assert cpu["totals"]["drafts"] == data["totals"]["drafts"]  # the same rule, v1


def test_predict_v2_path_counts_k_drafts_per_step(synthetic_baseline, capsys):
    assert _predict(str(synthetic_baseline), *NGRAM, "--bootstrap", "100", "--json") == 0
    v1 = orjson.loads(capsys.readouterr().out)
    argv = (*NGRAM, "--bootstrap", "100", "--json", "--engine-path", "gpu-0.32-v2")
    assert _predict(str(synthetic_baseline), *argv) == 0
    out = capsys.readouterr()
    assert "assumed" not in out.err
    v2 = orjson.loads(out.out)
    assert v2["engine_path"]["replay_rule"] == "v2"
    assert v2["engine_path"]["sources"]["runner"] == "preset gpu-0.32-v2 (--engine-path)"
    t1, t2 = v1["totals"], v2["totals"]
    # v2 drafts k = 3 on every decode step: 3 draft tokens per draft, a draft on every step
    # but the prefill; v1 drafts only where an n-gram matched.
    assert t2["draft_tokens"] == 3 * t2["drafts"]
    assert t2["drafts"] == t2["steps"] - t2["requests"]
    assert t1["drafts"] < t2["drafts"]


def test_predict_reads_a_server_log(synthetic_baseline, capsys):
    log = DATA / "engine_log_plain_cpu.txt"
    argv = (*NGRAM, "--bootstrap", "100", "--json", "--server-log", str(log))
    assert _predict(str(synthetic_baseline), *argv) == 0
    out = capsys.readouterr()
    assert "assumed" not in out.err
    data = orjson.loads(out.out)
    assert data["engine_path"]["name"] == "detected"
    assert data["engine_path"]["device"] == "cpu"
    assert data["engine_path"]["sources"]["device"].startswith("server log: (MainProcess")
    # A GPU preset against a CPU baseline's log: said, and the CPU facts are not mixed in.
    assert _predict(str(synthetic_baseline), *argv, "--engine-path", "gpu-0.32-v1") == 0
    out = capsys.readouterr()
    assert "the baseline ran on a cpu server" in out.err
    assert orjson.loads(out.out)["engine_path"]["capture_sizes"][:3] == [1, 2, 4]


def test_predict_bad_server_log(synthetic_baseline, tmp_path):
    from specload.errors import UsageError  # noqa: PLC0415

    with pytest.raises(UsageError, match=r"--server-log .*nope\.log: No such file"):
        _predict(str(synthetic_baseline), *NGRAM, "--server-log", str(tmp_path / "nope.log"))
    junk = tmp_path / "junk.log"
    junk.write_text("hello\n")
    with pytest.raises(UsageError, match="no line of a vLLM server's startup log"):
        _predict(str(synthetic_baseline), *NGRAM, "--server-log", str(junk))


def test_moe_flag_charges_shared_verification_less_and_bad_shapes_are_one_line(
    synthetic_baseline, capsys
):
    argv = (*NGRAM, "--bootstrap", "100", "--json", "--engine-path", "gpu-0.32-v1")
    assert _predict(str(synthetic_baseline), *argv) == 0
    dense = orjson.loads(capsys.readouterr().out)
    assert _predict(str(synthetic_baseline), *argv, "--moe", "256:8:1") == 0
    moe = orjson.loads(capsys.readouterr().out)
    names = [t["name"] for t in moe["terms"]]
    assert "MoE expert reads" in names and "MoE expert reads" not in [
        t["name"] for t in dense["terms"]
    ]
    # a step of one sequence verifying 1 + k tokens wakes fewer experts than 1 + k sequences:
    # the MoE forecast is faster wherever sequences drafted (c1 here), never slower
    for d, m in zip(dense["levels"], moe["levels"], strict=True):
        assert m["predicted_median_tpot_ms"] <= d["predicted_median_tpot_ms"] + 1e-9
    assert (
        moe["levels"][0]["predicted_median_tpot_ms"]
        < dense["levels"][0]["predicted_median_tpot_ms"]
    )
    for bad in ("256", "8:256", "x:8", "0:0", "256:8:1:2"):
        with pytest.raises(UsageError, match=f"--moe {bad}"):
            _predict(str(synthetic_baseline), *argv, "--moe", bad)
