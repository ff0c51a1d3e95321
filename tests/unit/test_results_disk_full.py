"""The results writer on a full disk: whole lines only in requests.jsonl (a short write is
cut back), records stop with the reason kept, every later summary says ``failed`` with it,
a summary that cannot be written keeps the last good one, and the spare file lets the last
summary through."""

from __future__ import annotations

import errno
import os
from pathlib import Path
from typing import Any

import orjson
import pytest

from specload.results import writer as writer_mod
from specload.results.writer import SUMMARY_FILE, ResultsWriter, read_summary

pytestmark = pytest.mark.unit


def rec(i: int) -> dict[str, Any]:
    return {"step": "c1", "i": i, "ok": True, "pad": "x" * 200}


def lines(path: Path) -> list[bytes]:
    raw = path.read_bytes()
    assert raw == b"" or raw.endswith(b"\n"), raw[-80:]  # never a torn last line
    return raw.splitlines()


class FullDisk:
    """``os.write`` on the records' fd: room for ``room`` more bytes, then ENOSPC (a write
    that does not fit writes what fits and returns short, as the kernel does)."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch, room: int) -> None:
        self.room = room
        self.calls = 0
        real = os.write

        def write(fd: int, data: bytes) -> int:
            self.calls += 1
            if self.room <= 0:
                raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
            n = real(fd, data[: self.room])
            self.room -= n
            return n

        monkeypatch.setattr(writer_mod.os, "write", write)


def test_a_short_write_is_cut_back_to_whole_lines_and_records_stop(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    w = ResultsWriter(tmp_path)
    w.append(rec(0))
    w.append(rec(1))
    line = len(orjson.dumps(rec(2))) + 1
    disk = FullDisk(monkeypatch, room=line + line // 2)  # one more line and half of one
    for i in range(2, 10):
        w.append(rec(i))
    assert [orjson.loads(x)["i"] for x in lines(w.requests_path)] == [0, 1, 2]
    assert w.records_written == 3 and w.records_dropped == 7
    assert disk.calls == 2  # the short write, then nothing more was tried
    assert w.error == (
        "disk full: cannot write requests.jsonl (No space left on device) after 3 records"
    )
    w.close()


def test_an_error_on_the_first_byte_keeps_the_file_whole(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    w = ResultsWriter(tmp_path)
    w.append(rec(0))
    FullDisk(monkeypatch, room=0)
    w.append(rec(1))
    assert len(lines(w.requests_path)) == 1
    assert w.error is not None and w.error.startswith("disk full:")
    w.close()


def test_other_write_errors_are_named_as_such(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    w = ResultsWriter(tmp_path)

    def eio(fd: int, data: bytes) -> int:
        raise OSError(errno.EIO, os.strerror(errno.EIO))

    monkeypatch.setattr(writer_mod.os, "write", eio)
    w.append(rec(0))
    assert w.error == "cannot write requests.jsonl (Input/output error) after 0 records"
    w.close()


def test_summaries_after_the_failure_say_failed_with_the_reason(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    w = ResultsWriter(tmp_path)
    w.write_summary({"status": "running", "stop_reason": None, "levels": []})
    FullDisk(monkeypatch, room=0)
    w.append(rec(0))
    monkeypatch.undo()
    # the driver's reason is the writer's own (the session stops the run with it)
    w.write_summary({"status": "interrupted", "stop_reason": w.error, "levels": []})
    summary = read_summary(tmp_path)
    assert summary["status"] == "failed" and summary["stop_reason"] == w.error
    # another reason after it (a SIGINT) is kept behind it
    w.write_summary({"status": "interrupted", "stop_reason": "SIGINT", "levels": []})
    assert read_summary(tmp_path)["stop_reason"] == f"{w.error}; then SIGINT"
    assert w.mark({"status": "complete"})["status"] == "failed"
    w.close()


def test_a_summary_that_cannot_be_written_keeps_the_last_good_one(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    w = ResultsWriter(tmp_path)
    w.write_summary({"status": "running", "levels": [], "n": 1})

    def full(path: Path, payload: bytes) -> None:
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    monkeypatch.setattr(writer_mod, "atomic_write_bytes", full)
    w.write_summary({"status": "complete", "levels": [], "n": 2})  # does not raise
    assert read_summary(tmp_path)["n"] == 1
    assert w.summary_error == "disk full: cannot write summary.json (No space left on device)"
    monkeypatch.undo()
    w.write_summary({"status": "complete", "levels": [], "n": 3})
    assert read_summary(tmp_path)["n"] == 3 and w.summary_error is None
    w.close()


def test_the_spare_takes_the_last_summary_when_the_disk_is_full(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    w = ResultsWriter(tmp_path, spare_bytes=64 * 1024)
    assert w.spare_path.stat().st_size == 64 * 1024
    w.write_summary({"status": "running", "levels": [], "n": 1})
    assert w.spare_path.exists()  # the ordinary write worked: the spare is kept

    def full(path: Path, payload: bytes) -> None:
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    monkeypatch.setattr(writer_mod, "atomic_write_bytes", full)
    w.write_summary({"status": "failed", "levels": [], "n": 2})
    assert read_summary(tmp_path)["n"] == 2 and w.summary_error is None
    assert not w.spare_path.exists()  # its blocks are summary.json's now
    assert orjson.loads((tmp_path / SUMMARY_FILE).read_bytes())["n"] == 2  # no padding
    w.write_summary({"status": "failed", "levels": [], "n": 3})  # no spare left
    assert read_summary(tmp_path)["n"] == 2 and w.summary_error is not None
    w.close()


def test_close_drops_the_spare(tmp_path: Path) -> None:
    w = ResultsWriter(tmp_path, spare_bytes=4096)
    assert w.spare_path.exists()
    w.close()
    w.close()  # twice is fine
    assert sorted(p.name for p in tmp_path.iterdir()) == ["requests.jsonl"]
