"""The results directory: ``requests.jsonl`` appended per request, ``summary.json`` atomically.

Measured data is never lost: each record is written and flushed as its
request completes (a killed run keeps every completed request), and
``summary.json`` is replaced atomically (write a temporary file in the same
directory, fsync, rename), so a reader never sees half a file.

A write that fails (a full disk) never leaves half a line: each record is one
``os.write`` of the whole line, and a short write is cut back to the last whole
line. The writer then stops writing records and remembers why (:attr:`ResultsWriter.error`);
every summary written after that says ``status: failed`` with that reason. So that
this last summary still fits on a full disk, the writer can hold a spare file of
``spare_bytes`` allocated up front (``.summary.json.spare``), used only when the
ordinary write fails. A summary that cannot be written keeps the last good one
(:attr:`ResultsWriter.summary_error` says why).
"""

from __future__ import annotations

import contextlib
import errno
import os
import secrets
import tempfile
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import orjson

from specload.errors import UsageError
from specload.records.tokens import TOKENS_FILE, token_line

REQUESTS_FILE = "requests.jsonl"
#: Records a worker sent after the master declared it lost (its link failed and came back):
#: their requests were counted lost or never counted, so they are kept here, outside the
#: results (every reader of ``requests.jsonl`` would count them twice).
LATE_FILE = "late.jsonl"
SUMMARY_FILE = "summary.json"
SUMMARY_MD_FILE = "summary.md"


#: The mode every result file is created with, less the umask (``0644`` under umask 022):
#: ``requests.jsonl``, ``summary.json``, ``summary.md``, the plots and ``baseline.json`` alike.
FILE_MODE = 0o666


def _create_temporary(path: Path) -> tuple[int, Path]:
    """A new, empty file beside ``path`` (``.NAME.XXXXXXXX``), opened for writing.

    Created with :data:`FILE_MODE` so the kernel applies the umask (and a directory's
    default ACL), as for any file the user creates: :func:`tempfile.mkstemp` would make
    it ``0600`` whatever the umask, and the rename would keep that.
    """
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC
    for _ in range(100):
        tmp = path.parent / f".{path.name}.{secrets.token_hex(4)}"
        try:
            return os.open(tmp, flags, FILE_MODE), tmp
        except FileExistsError:
            continue
    raise FileExistsError(errno.EEXIST, f"no free temporary name beside {path}")


def atomic_write_bytes(path: Path, payload: bytes) -> None:
    """Replace ``path`` with ``payload`` so readers see the old or the new file, never a mix.

    The new file's mode is :data:`FILE_MODE` less the umask (the old file's mode is not kept).
    """
    fd, tmp = _create_temporary(path)
    try:
        with os.fdopen(fd, "wb") as fh:
            fh.write(payload)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
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


#: What ``specload run`` keeps allocated for its last summary on a full disk.
SUMMARY_SPARE_BYTES = 1 << 20
SPARE_SUFFIX = ".spare"
_DISK_FULL = frozenset({errno.ENOSPC, errno.EDQUOT})


def write_failure(exc: OSError, what: str) -> str:
    """One line: why ``what`` could not be written (``disk full: …`` for ENOSPC/EDQUOT)."""
    detail = exc.strerror or str(exc) or type(exc).__name__
    if exc.errno in _DISK_FULL:
        return f"disk full: cannot write {what} ({detail})"
    return f"cannot write {what} ({detail})"


class ResultsWriter:
    """Owns one results directory for one run."""

    def __init__(self, out_dir: str | Path, *, spare_bytes: int = 0) -> None:
        self.dir = prepare_out_dir(out_dir)
        self.requests_path = self.dir / REQUESTS_FILE
        self.summary_path = self.dir / SUMMARY_FILE
        self._fd: int | None = os.open(
            self.requests_path, os.O_WRONLY | os.O_CREAT | os.O_APPEND | os.O_CLOEXEC, FILE_MODE
        )
        self._size = os.fstat(self._fd).st_size  # the end of the last whole line
        self.records_written = 0
        self.records_dropped = 0  # not written after a failure
        self.error: str | None = None  # why records stopped being written
        self.summary_error: str | None = None  # why the last summary could not be written
        self.spare_path = self.summary_path.with_name(f".{SUMMARY_FILE}{SPARE_SUFFIX}")
        self._spare = _allocate(self.spare_path, spare_bytes) if spare_bytes > 0 else False
        self.tokens_path = self.dir / TOKENS_FILE
        self._tokens_fd: int | None = None  # opened by the first append_tokens
        self._tokens_size = 0
        self.tokens_written = 0
        self.late_written = 0

    def append(self, record: Mapping[str, Any]) -> None:
        """Write one request record as one line, straight to the OS; after a failed write,
        nothing more (see :attr:`error`)."""
        fd = self._fd
        if fd is None or self.error is not None:
            self.records_dropped += 1
            return
        line = orjson.dumps(record, option=orjson.OPT_SERIALIZE_NUMPY) + b"\n"
        try:
            written = os.write(fd, line)
        except OSError as exc:
            self._fail(exc)
            return
        if written != len(line):  # part of a line: cut back to the last whole one
            with contextlib.suppress(OSError):
                os.ftruncate(fd, self._size)
            self._fail(OSError(errno.ENOSPC, os.strerror(errno.ENOSPC)))
            return
        self._size += written
        self.records_written += 1

    def _fail(self, exc: OSError) -> None:
        self.records_dropped += 1
        self.error = f"{write_failure(exc, REQUESTS_FILE)} after {self.records_written} records"

    def append_tokens(self, record: Mapping[str, Any]) -> None:
        """Write one request's token ids as one line of ``tokens.jsonl`` (the format of
        :func:`specload.records.tokens.token_line`), straight to the OS like the records;
        a failed write stops the records too (:attr:`error`)."""
        if self.error is not None or self._fd is None:
            return
        try:
            if self._tokens_fd is None:
                self._tokens_fd = os.open(
                    self.tokens_path,
                    os.O_WRONLY | os.O_CREAT | os.O_APPEND | os.O_CLOEXEC,
                    FILE_MODE,
                )
                self._tokens_size = os.fstat(self._tokens_fd).st_size
            fd = self._tokens_fd
            line = token_line(record)
            written = os.write(fd, line)
            if written != len(line):  # part of a line: cut back to the last whole one
                with contextlib.suppress(OSError):
                    os.ftruncate(fd, self._tokens_size)
                raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        except OSError as exc:
            self.error = f"{write_failure(exc, TOKENS_FILE)} after {self.tokens_written} lines"
            return
        self._tokens_size += written
        self.tokens_written += 1

    def append_late(self, record: Mapping[str, Any]) -> None:
        """Keep one record of a worker declared lost in :data:`LATE_FILE` (one line, at
        once: O_APPEND); a failed write is logged by the caller's count, not fatal."""
        line = orjson.dumps(dict(record), option=orjson.OPT_SERIALIZE_NUMPY) + b"\n"
        try:
            fd = os.open(
                self.dir / LATE_FILE,
                os.O_WRONLY | os.O_CREAT | os.O_APPEND | os.O_CLOEXEC,
                FILE_MODE,
            )
            try:
                os.write(fd, line)
            finally:
                os.close(fd)
        except OSError:
            return
        self.late_written += 1

    def mark(self, summary: Mapping[str, Any]) -> dict[str, Any]:
        """``summary`` as it must be written: ``failed``, with the reason, once records
        could not be written (a summary that says complete would hide the missing ones)."""
        out = dict(summary)
        if self.error is not None:
            given = out.get("stop_reason")
            out["status"] = "failed"
            out["stop_reason"] = (
                self.error if not given or given == self.error else f"{self.error}; then {given}"
            )
        return out

    def write_summary(self, summary: Mapping[str, Any]) -> None:
        """Replace ``summary.json`` (as :meth:`mark` has it); on failure keep the last good
        one and set :attr:`summary_error` (never raises an ``OSError``)."""
        payload = dump_json(self.mark(summary))
        try:
            atomic_write_bytes(self.summary_path, payload)
        except OSError as exc:
            if self._spare and self._write_into_spare(payload):
                self.summary_error = None
                return
            self.summary_error = write_failure(exc, SUMMARY_FILE)
            return
        self.summary_error = None

    def _write_into_spare(self, payload: bytes) -> bool:
        """The summary written into the spare's blocks (allocated up front), then renamed."""
        self._spare = False  # one use: its blocks become summary.json's
        try:
            if self.spare_path.stat().st_size < len(payload):
                return False
            fd = os.open(self.spare_path, os.O_WRONLY | os.O_CLOEXEC)
            try:
                os.pwrite(fd, payload, 0)
                os.ftruncate(fd, len(payload))
                os.fsync(fd)
            finally:
                os.close(fd)
            os.replace(self.spare_path, self.summary_path)
        except OSError:
            return False
        return True

    def write_text(self, name: str, text: str) -> Path:
        path = self.dir / name
        atomic_write_text(path, text)
        return path

    def close(self) -> None:
        """Flush the records to disk and drop the spare; a failure is kept in :attr:`error`."""
        if self._tokens_fd is not None:
            tfd, self._tokens_fd = self._tokens_fd, None
            try:
                os.fsync(tfd)
            except OSError as exc:
                if self.error is None:
                    self.error = f"{write_failure(exc, TOKENS_FILE)} at the end"
            finally:
                os.close(tfd)
        if self._fd is not None:
            fd, self._fd = self._fd, None
            try:
                os.fsync(fd)
            except OSError as exc:
                if self.error is None:
                    self.error = f"{write_failure(exc, REQUESTS_FILE)} at the end"
            finally:
                os.close(fd)
        self._spare = False
        with contextlib.suppress(OSError):
            self.spare_path.unlink(missing_ok=True)


def _allocate(path: Path, size: int) -> bool:
    """A file of ``size`` bytes whose blocks are allocated (False if there is no room)."""
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC, FILE_MODE)
    except OSError:
        return False
    try:
        try:
            os.posix_fallocate(fd, 0, size)
        except OSError as exc:
            if exc.errno not in (errno.EOPNOTSUPP, errno.EINVAL):
                raise
            os.pwrite(fd, bytes(size), 0)  # no fallocate here: write the blocks
        os.fsync(fd)
    except OSError:
        os.close(fd)
        with contextlib.suppress(OSError):
            path.unlink()
        return False
    os.close(fd)
    return True


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
