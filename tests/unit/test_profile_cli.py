"""``specload profile analyze|capture`` against files and a loopback fake of vLLM's endpoints."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from specload.cli import main
from specload.profile.synthetic import StepSpec, write_trace

pytestmark = pytest.mark.unit

STEPS = [StepSpec(1, 13600.0, 7000.0, allreduces=8, other_kernels=8)] * 4 + [
    StepSpec(32, 20000.0, 6000.0, allreduces=8, other_kernels=8)
] * 4


class FakeVLLM:
    """POST /start_profile and /stop_profile; on stop, writes one trace per rank."""

    def __init__(self, trace_dir: Path, mode: str = "ok", world_size: int = 2) -> None:
        self.trace_dir = trace_dir
        self.mode = mode
        self.world_size = world_size
        self.calls: list[str] = []
        fake = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                fake.calls.append(self.path)
                if fake.mode == "404":
                    self.send_error(404)
                    return
                if self.path == "/stop_profile":
                    if fake.mode == "slow_stop":
                        time.sleep(1.0)
                    elif fake.mode == "bad_trace":
                        path = fake.trace_dir / "w_rank0.pt.trace.json.gz"
                        write_trace(path, STEPS)
                        data = path.read_bytes()
                        path.write_bytes(data[: len(data) // 2])
                    elif fake.mode == "ok":
                        # vLLM writes a summary table, the simulator a truth.json: not traces.
                        (fake.trace_dir / "truth.json").write_text("{}")
                        (fake.trace_dir / "rank0.profiler_out.txt").write_text("table")
                        for rank in range(fake.world_size):
                            write_trace(
                                fake.trace_dir / f"w_rank{rank}.{len(fake.calls)}.pt.trace.json.gz",
                                STEPS,
                                rank=rank,
                                world_size=fake.world_size,
                            )
                self.send_response(200)
                self.send_header("Content-Length", "0")
                self.end_headers()

            def log_message(self, format: str, *args: object) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/v1"
        self.thread = threading.Thread(target=self.server.serve_forever, args=(0.05,), daemon=True)
        self.thread.start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()
        self.thread.join()


@pytest.fixture
def fake_vllm(tmp_path: Path) -> Iterator[FakeVLLM]:
    (tmp_path / "traces").mkdir()
    fake = FakeVLLM(tmp_path / "traces")
    yield fake
    fake.close()


def test_analyze_text_and_json(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    for rank in range(2):
        write_trace(tmp_path / f"r{rank}.pt.trace.json.gz", STEPS, rank=rank, world_size=2)
    assert main(["profile", "analyze", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    assert "all-reduce share" in out and "51.5%" in out and "30.0%" in out
    assert "spin-wait" in out
    assert main(["profile", "analyze", "--json", *map(str, sorted(tmp_path.iterdir()))]) == 0
    j = json.loads(capsys.readouterr().out)
    for key in (
        "decode_allreduce_ratio",
        "decode_step_seconds",
        "decode_allreduce_seconds_per_step",
        "decode_steps",
        "ranks",
    ):
        assert key in j
    assert j["decode_steps"] == 8 and len(j["ranks"]) == 2
    assert j["buckets"]["1"]["allreduce_ratio"] == pytest.approx(7000 / 13600, abs=1e-4)


@pytest.mark.parametrize(
    ("content", "needle"),
    [
        (b"", "is empty"),
        (b'{"traceEvents": [{"ph": "X"', "truncated"),
        (b"not json", "malformed"),
        (b'{"schemaVersion": 1}', "no traceEvents"),
    ],
)
def test_analyze_bad_file_is_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], content: bytes, needle: str
) -> None:
    path = tmp_path / "bad.pt.trace.json"
    path.write_bytes(content)
    assert main(["profile", "analyze", str(path)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and str(path) in err and needle in err
    assert "Traceback" not in err


def test_analyze_missing_path(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["profile", "analyze", str(tmp_path / "nope")]) == 2
    assert "no such trace file" in capsys.readouterr().err


def capture(target: str, trace_dir: Path | str, *args: str) -> int:
    """``specload profile capture --target TARGET --trace-dir DIR ARGS``: its exit code."""
    return main(["profile", "capture", "--target", target, "--trace-dir", str(trace_dir), *args])


def test_capture(fake_vllm: FakeVLLM, capsys: pytest.CaptureFixture[str]) -> None:
    # An old trace in the directory is not part of this capture.
    write_trace(fake_vllm.trace_dir / "old_rank0.pt.trace.json.gz", STEPS[:1])
    code = capture(fake_vllm.url, fake_vllm.trace_dir, "--seconds", "0.2", "--json")
    assert code == 0
    j = json.loads(capsys.readouterr().out)
    assert fake_vllm.calls == ["/start_profile", "/stop_profile"]  # no /v1/v1, no /v1
    assert len(j["files"]) == 2 and not any("old" in f for f in j["files"])
    assert j["decode_steps"] == 8
    assert j["decode_allreduce_ratio"] == pytest.approx(13000 / 33600, abs=1e-4)


def test_capture_profiler_not_enabled(
    fake_vllm: FakeVLLM, capsys: pytest.CaptureFixture[str]
) -> None:
    fake_vllm.mode = "404"
    code = capture(fake_vllm.url, fake_vllm.trace_dir, "--seconds", "0.1")
    err = capsys.readouterr().err
    assert code == 2 and err.count("\n") == 1 and "profiler not enabled" in err


def test_capture_stop_timeout(fake_vllm: FakeVLLM, capsys: pytest.CaptureFixture[str]) -> None:
    fake_vllm.mode = "slow_stop"
    code = capture(
        fake_vllm.url, str(fake_vllm.trace_dir), "--seconds", "0.1", "--stop-timeout", "0.3"
    )
    err = capsys.readouterr().err
    assert code == 2 and err.count("\n") == 1
    assert "stop_profile" in err and "within 0.3 s" in err


def test_capture_no_trace(fake_vllm: FakeVLLM, capsys: pytest.CaptureFixture[str]) -> None:
    fake_vllm.mode = "no_trace"
    code = capture(fake_vllm.url, fake_vllm.trace_dir, "--seconds", "0.1", "--settle", "0.3")
    err = capsys.readouterr().err
    assert code == 2 and err.count("\n") == 1 and "no trace found" in err


def test_capture_truncated_trace(fake_vllm: FakeVLLM, capsys: pytest.CaptureFixture[str]) -> None:
    fake_vllm.mode = "bad_trace"
    code = capture(fake_vllm.url, fake_vllm.trace_dir, "--seconds", "0.1", "--settle", "1")
    err = capsys.readouterr().err
    assert code == 2 and err.count("\n") == 1
    assert "w_rank0.pt.trace.json.gz is truncated" in err


def test_capture_unreachable(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code = capture("http://127.0.0.1:9", tmp_path, "--seconds", "0.1")
    err = capsys.readouterr().err
    assert code == 2 and "cannot reach" in err
