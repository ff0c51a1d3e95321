"""The torch-profiler trace writer and the streaming reader."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import pytest

from specload.profile.tracefile import (
    ALLREDUCE_KERNEL_EXAMPLES,
    TraceFileError,
    TraceWriter,
    is_trace_file,
    iter_events,
    parse_step_annotation,
    rank_from_name,
    read_header,
    step_annotation_name,
)

pytestmark = pytest.mark.unit


def _write(path: Path) -> None:
    with TraceWriter(path, rank=3, world_size=8, device=3) as w:
        name = step_annotation_name(0, 0, 4, 4)
        w.annotation(name, 100.0, 40.0)
        w.gpu_annotation(name, 150.0, 30.0)
        w.kernel(ALLREDUCE_KERNEL_EXAMPLES["nccl"], 152.0, 10.0, launch_ts_us=101.0)
        w.kernel("gemm", 163.0, 10.0, stream=13)
        w.cpu_op("aten::mm", 102.0, 3.0)


@pytest.mark.parametrize("name", ["r.pt.trace.json", "r.pt.trace.json.gz"])
def test_writer_produces_torch_shaped_trace(tmp_path: Path, name: str) -> None:
    path = tmp_path / name
    _write(path)
    raw = path.read_bytes()
    assert (raw[:2] == b"\x1f\x8b") == name.endswith(".gz")
    doc = json.loads(gzip.decompress(raw) if name.endswith(".gz") else raw)
    assert doc["schemaVersion"] == 1
    assert doc["distributedInfo"]["rank"] == 3 and doc["distributedInfo"]["world_size"] == 8
    assert doc["deviceProperties"][0]["id"] == 3
    events = doc["traceEvents"]
    by_cat: dict[str, list[dict]] = {}
    for ev in events:
        by_cat.setdefault(ev.get("cat", ev["ph"]), []).append(ev)
    (ann,) = by_cat["user_annotation"]
    assert ann["name"] == "execute_context_0(0)_generation_4(4)" and ann["ph"] == "X"
    (gpu_ann,) = by_cat["gpu_user_annotation"]
    assert gpu_ann["pid"] == 3 and gpu_ann["tid"] == 7
    kernels = by_cat["kernel"]
    assert [k["tid"] for k in kernels] == [7, 13]
    assert all(k["pid"] == 3 for k in kernels)
    (launch,) = by_cat["cuda_runtime"]
    assert launch["pid"] == ann["pid"]
    assert launch["args"]["correlation"] == kernels[0]["args"]["correlation"]
    flows = by_cat["ac2g"]
    assert {f["ph"] for f in flows} == {"s", "f"}
    assert all(f["id"] == kernels[0]["args"]["correlation"] for f in flows)
    assert by_cat["cpu_op"][0]["name"] == "aten::mm"
    # Torch ends with an instant event whose pid/tid are empty strings.
    assert events[-1]["name"] == "Record Window End" and events[-1]["pid"] == ""
    # Streaming reader sees the same events.
    assert list(iter_events(path)) == events


def test_file_appears_only_when_closed(tmp_path: Path) -> None:
    path = tmp_path / "a.pt.trace.json.gz"
    w = TraceWriter(path, rank=0)
    w.open()
    w.annotation("x", 0.0, 1.0)
    assert not path.exists()
    assert not any(is_trace_file(p) for p in tmp_path.iterdir())
    w.close()
    assert path.exists() and [p.name for p in tmp_path.iterdir()] == ["a.pt.trace.json.gz"]
    assert is_trace_file(path)


def test_trace_file_names() -> None:
    assert is_trace_file(Path("rank0.1795947370151047313.pt.trace.json.gz"))
    assert is_trace_file(Path("x.pt.trace.json"))
    assert not is_trace_file(Path("truth.json"))
    assert not is_trace_file(Path("rank0.profiler_out.txt"))
    assert not is_trace_file(Path(".x.pt.trace.json.gz.part"))
    assert is_trace_file(Path("trace.json"), torch_names_only=False)


def test_cpu_only_trace_has_no_devices(tmp_path: Path) -> None:
    path = tmp_path / "cpu.json"
    with TraceWriter(path, rank=1, world_size=2, device=None) as w:
        w.cpu_op(ALLREDUCE_KERNEL_EXAMPLES["cpu_shm"], 1.0, 2.0)
    header = read_header(path)
    assert (header.rank, header.world_size, header.device_names) == (1, 2, ())


def test_header(tmp_path: Path) -> None:
    path = tmp_path / "h.json.gz"
    _write(path)
    header = read_header(path)
    assert header.rank == 3 and header.world_size == 8
    assert header.device_names and "NVIDIA" in header.device_names[0]


def test_step_annotation_round_trip() -> None:
    name = step_annotation_name(2, 1024, 30, 120)
    assert name == "execute_context_2(1024)_generation_30(120)"
    shape = parse_step_annotation(name)
    assert shape is not None
    assert (shape.num_prefill, shape.prefill_tokens, shape.num_decode, shape.decode_tokens) == (
        2,
        1024,
        30,
        120,
    )
    assert not shape.decode_only
    decode = parse_step_annotation("execute_context_0(0)_generation_1(1)")
    assert decode is not None and decode.decode_only
    for other in (
        "execute_model",
        "execute_context_0(0)",
        "execute_context_x(0)_generation_1(1)",
        "execute_context_0(0)_generation_1(1)_extra",
    ):
        assert parse_step_annotation(other) is None


def test_rank_from_name() -> None:
    assert rank_from_name(Path("dp0_pp0_tp0_dcp0_ep0_rank5.1732.pt.trace.json.gz")) == 5
    assert rank_from_name(Path("host_1234.1732.pt.trace.json.gz")) is None


def _error(path: Path) -> str:
    with pytest.raises(TraceFileError) as info:
        list(iter_events(path))
    message = str(info.value)
    assert str(path) in message and "\n" not in message
    return message.replace(str(path), "<path>")


def test_empty_file(tmp_path: Path) -> None:
    path = tmp_path / "empty.json.gz"
    path.write_bytes(b"")
    assert "empty" in _error(path)


def test_truncated_gzip(tmp_path: Path) -> None:
    path = tmp_path / "t.json.gz"
    _write(path)
    data = path.read_bytes()
    path.write_bytes(data[: len(data) // 2])
    assert "truncated" in _error(path)


def test_truncated_json(tmp_path: Path) -> None:
    path = tmp_path / "t.json"
    _write(path)
    text = path.read_text()
    path.write_text(text[: len(text) // 2])
    assert "truncated" in _error(path)


def test_malformed_json(tmp_path: Path) -> None:
    path = tmp_path / "m.json"
    path.write_text('{"traceEvents": [{"ph": "X",, }]}')
    assert "malformed" in _error(path)


def test_tricky_but_valid_events(tmp_path: Path) -> None:
    """Braces and brackets inside strings, nested args, Kineto's pretty-printed layout."""
    events = [
        {"ph": "X", "cat": "kernel", "name": "a}, {b", "ts": 1.5, "dur": 2},
        {
            "ph": "X",
            "cat": "kernel",
            "args": {"a": {"b": [1, {"c": "}]"}]}},
            "name": "void at::native::gpu_kernel_impl<...>::{lambda(int)#1}>",
        },
        {"ph": "X", "name": 'quote " } , ] \\', "ts": 3},
        {},
    ]
    doc = {
        "schemaVersion": 1,
        "distributedInfo": {"rank": 2, "world_size": 4},
        "traceEvents": events,
        "traceName": "x",
    }
    for indent in (None, 2):
        path = tmp_path / f"t{indent}.pt.trace.json"
        path.write_text(json.dumps(doc, indent=indent))
        assert list(iter_events(path)) == events
        assert read_header(path).rank == 2


def test_non_object_event(tmp_path: Path) -> None:
    path = tmp_path / "n.json"
    path.write_text('{"traceEvents": [{"ph": "X"}, [1, 2]]}')
    assert "non-object" in _error(path)


def test_empty_event_list(tmp_path: Path) -> None:
    path = tmp_path / "e.json"
    path.write_text('{"schemaVersion": 1, "traceEvents": [ ]}')
    assert list(iter_events(path)) == []


def test_missing_file(tmp_path: Path) -> None:
    assert "cannot read" in _error(tmp_path / "nope.json")
