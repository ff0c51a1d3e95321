"""The results directory: ``requests.jsonl`` appended per request, ``summary.json`` atomically.

Measured data is never lost: each record is written and flushed as its
request completes (a killed run keeps every completed request), and
``summary.json`` is replaced atomically (write a temporary file in the same
directory, fsync, rename), so a reader never sees half a file.
"""

from __future__ import annotations

import os
import tempfile
from collections.abc import Mapping
from pathlib import Path
from typing import IO, Any

import orjson

from specload.errors import UsageError

REQUESTS_FILE = "requests.jsonl"
SUMMARY_FILE = "summary.json"
SUMMARY_MD_FILE = "summary.md"


def atomic_write_bytes(path: Path, payload: bytes) -> None:
    """Replace ``path`` with ``payload`` so readers see the old or the new file, never a mix."""
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as fh:
            fh.write(payload)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def atomic_write_text(path: Path, text: str) -> None:
    atomic_write_bytes(path, text.encode())


def dump_json(data: Any) -> bytes:
    return orjson.dumps(data, option=orjson.OPT_INDENT_2 | orjson.OPT_SERIALIZE_NUMPY) + b"\n"


def prepare_out_dir(path: str | Path, *, name: str = "--out") -> Path:
    """Create ``path`` if needed and check it is a writable directory (one-line error if not)."""
    out = Path(path)
    try:
        out.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise UsageError(f"{name} {str(out)!r}: cannot create directory ({exc.strerror})") from None
    if not out.is_dir():
        raise UsageError(f"{name} {str(out)!r}: not a directory")
    try:
        fd, probe = tempfile.mkstemp(prefix=".specload-write-check.", dir=out)
        os.close(fd)
        os.unlink(probe)
    except OSError as exc:
        raise UsageError(f"{name} {str(out)!r}: not writable ({exc.strerror})") from None
    return out


class ResultsWriter:
    """Owns one results directory for one run."""

    def __init__(self, out_dir: str | Path) -> None:
        self.dir = prepare_out_dir(out_dir)
        self.requests_path = self.dir / REQUESTS_FILE
        self.summary_path = self.dir / SUMMARY_FILE
        self._requests: IO[bytes] | None = self.requests_path.open("ab")
        self.records_written = 0

    def append(self, record: Mapping[str, Any]) -> None:
        """Write one request record and flush it to the OS at once."""
        fh = self._requests
        if fh is None:
            return
        fh.write(orjson.dumps(record, option=orjson.OPT_SERIALIZE_NUMPY) + b"\n")
        fh.flush()
        self.records_written += 1

    def write_summary(self, summary: Mapping[str, Any]) -> None:
        atomic_write_bytes(self.summary_path, dump_json(summary))

    def write_text(self, name: str, text: str) -> Path:
        path = self.dir / name
        atomic_write_text(path, text)
        return path

    def close(self) -> None:
        if self._requests is not None:
            self._requests.flush()
            os.fsync(self._requests.fileno())
            self._requests.close()
            self._requests = None


def read_summary(path: str | Path) -> dict[str, Any]:
    """Read ``summary.json`` from a results directory (or the file itself)."""
    p = Path(path)
    if p.is_dir():
        p = p / SUMMARY_FILE
    try:
        data = orjson.loads(p.read_bytes())
    except FileNotFoundError:
        raise UsageError(f"{path}: no {SUMMARY_FILE} (is it a results directory?)") from None
    except orjson.JSONDecodeError as exc:
        raise UsageError(f"{p}: not valid JSON ({exc})") from None
    if not isinstance(data, dict) or "levels" not in data:
        raise UsageError(f"{p}: not a specload summary (no 'levels')")
    return data


def read_requests(path: str | Path) -> list[dict[str, Any]]:
    """Every record of ``requests.jsonl``; a torn last line (a killed run) is skipped."""
    p = Path(path)
    if p.is_dir():
        p = p / REQUESTS_FILE
    records: list[dict[str, Any]] = []
    try:
        lines = p.read_bytes().splitlines()
    except FileNotFoundError:
        return records
    for lineno, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            item = orjson.loads(line)
        except orjson.JSONDecodeError:
            if lineno == len(lines):
                break  # the run was killed while writing this line
            raise UsageError(f"{p}:{lineno}: not valid JSON") from None
        if isinstance(item, dict):
            records.append(item)
    return records
