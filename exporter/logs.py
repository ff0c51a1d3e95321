"""Following a vLLM server's log: what it says about its variant and its loading.

Two sources: a file (followed like ``tail -F``: truncation and rotation are
noticed) or a systemd unit's journal (``journalctl -u UNIT -f -o cat``).
Either yields new complete lines on each :meth:`poll`, bounded per call.

:class:`LogState` reads the lines:

- the engine's config line (``Initializing a V1 LLM engine (v0.32.0) with
  config: model='…', speculative_config=…, tensor_parallel_size=8, …``) or the
  ``non-default args: {…}`` line gives the variant's method, number of
  speculative tokens, draft model, tensor-parallel size and vLLM version, and
  marks the start of a (re)load;
- checkpoint loading lines (``Loading safetensors checkpoint shards:  40%
  Completed | 2/5 …``) give the load progress;
- ``Application startup complete`` (or ``Uvicorn running``) ends the load.
"""

from __future__ import annotations

import collections
import contextlib
import logging
import os
import re
import subprocess
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Protocol

from exporter.config import LogSource

log = logging.getLogger("specload.exporter")

MAX_READ_BYTES = 4 * 1024 * 1024  # per poll
MAX_LINE_BYTES = 16 * 1024  # vLLM's engine config line is a few KB
START_TAIL_BYTES = 1024 * 1024  # how much history to read when following starts


class LineSource(Protocol):
    def poll(self) -> list[str]: ...
    def close(self) -> None: ...


class FileFollower:
    """New complete lines of a file since the last poll (``tail -F`` semantics)."""

    def __init__(self, path: Path, *, from_start_bytes: int = START_TAIL_BYTES) -> None:
        self.path = path
        self._file: IO[bytes] | None = None
        self._inode: tuple[int, int] | None = None
        self._partial = b""
        self._tail = from_start_bytes
        self._first = True

    def _open(self) -> bool:
        try:
            f = self.path.open("rb")
        except OSError:
            return False
        st = os.fstat(f.fileno())
        self._file, self._inode = f, (st.st_dev, st.st_ino)
        if self._first and st.st_size > self._tail:
            f.seek(st.st_size - self._tail)
            f.readline()  # drop the partial first line
        self._first = False
        self._partial = b""
        return True

    def _rotated(self) -> bool:
        assert self._file is not None
        try:
            st = os.stat(self.path)
        except OSError:
            return False  # gone for now; keep reading what we have
        if (st.st_dev, st.st_ino) != self._inode:
            return True
        return st.st_size < self._file.tell()  # truncated

    def poll(self) -> list[str]:
        if self._file is None and not self._open():
            return []
        assert self._file is not None
        data = self._file.read(MAX_READ_BYTES)
        if not data and self._rotated():
            self._file.close()
            self._file = None
            self._first = False
            return self._split(self._reopen_read())
        return self._split(data)

    def _reopen_read(self) -> bytes:
        if not self._open():
            return b""
        f = self._file
        return f.read(MAX_READ_BYTES) if f is not None else b""

    def _split(self, data: bytes) -> list[str]:
        if not data:
            return []
        # Progress bars redraw with carriage returns: each redraw is a line of its own.
        buf = (self._partial + data).replace(b"\r\n", b"\n").replace(b"\r", b"\n")
        lines = buf.split(b"\n")
        self._partial = lines.pop()
        if len(self._partial) > MAX_LINE_BYTES:
            self._partial = b""  # a runaway line: drop it rather than grow
        return [ln[:MAX_LINE_BYTES].decode("utf-8", "replace") for ln in lines if ln]

    def close(self) -> None:
        if self._file is not None:
            self._file.close()
            self._file = None


class JournalFollower:
    """Lines of a systemd unit's journal, via ``journalctl -f`` in a reader thread."""

    def __init__(
        self, unit: str, *, command: list[str] | None = None, max_lines: int = 2_000
    ) -> None:
        self.unit = unit
        self._cmd = command or [
            "journalctl",
            "-u",
            unit,
            "-f",
            "-o",
            "cat",
            "-n",
            "500",
            "--no-pager",
        ]
        self._lines: collections.deque[str] = collections.deque(maxlen=max_lines)
        self._lock = threading.Lock()
        self._proc: subprocess.Popen[bytes] | None = None
        self._thread: threading.Thread | None = None
        self.error: str | None = None

    def _start(self) -> None:
        try:
            self._proc = subprocess.Popen(
                self._cmd,
                stdout=subprocess.PIPE,
                stderr=subprocess.DEVNULL,
                stdin=subprocess.DEVNULL,
            )
        except OSError as exc:
            self.error = f"cannot run {self._cmd[0]}: {exc.strerror or exc}"
            log.warning("log of unit %s: %s", self.unit, self.error)
            return
        self._thread = threading.Thread(target=self._read, name=f"journal-{self.unit}", daemon=True)
        self._thread.start()

    def _read(self) -> None:
        proc = self._proc
        assert proc is not None and proc.stdout is not None
        for raw in proc.stdout:
            line = raw[:MAX_LINE_BYTES].decode("utf-8", "replace").rstrip("\r\n")
            with self._lock:
                self._lines.append(line)

    def poll(self) -> list[str]:
        if self._proc is None and self.error is None:
            self._start()
        with self._lock:
            out = list(self._lines)
            self._lines.clear()
        return out

    def close(self) -> None:
        proc = self._proc
        if proc is not None:
            proc.terminate()
            try:
                proc.wait(timeout=5)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
            if proc.stdout is not None:
                proc.stdout.close()
        if self._thread is not None:
            self._thread.join(timeout=5)


def open_log(source: LogSource) -> LineSource:
    if source.path is not None:
        return FileFollower(source.path)
    assert source.unit is not None
    return JournalFollower(source.unit)


# --- reading the lines ----------------------------------------------------------------

_SPEC_RE = re.compile(r"speculative_config['\"]?\s*[=:]\s*")
_METHOD_RE = re.compile(r"""['"]?method['"]?\s*[=:]\s*['"]?([A-Za-z0-9_.-]+)""")
_NUM_TOKENS_RE = re.compile(r"""['"]?num_spec(?:ulative)?_tokens['"]?\s*[=:]\s*(\d+)""")
_DRAFT_MODEL_RE = re.compile(r"""['"]?model['"]?\s*[=:]\s*(?:'([^']*)'|"([^"]*)"|None|null)""")
_TP_RE = re.compile(r"""['"]?tensor_parallel_size['"]?\s*[=:]\s*(\d+)""")
_VERSION_RE = re.compile(
    r"(?:engine \(v|vLLM API server version |vLLM version )v?(\d+\.\d+[0-9A-Za-z.+_-]*)"
)
_PROGRESS_RE = re.compile(r"(?i)loading\b[^%]*?(\d{1,3}(?:\.\d+)?)%")
_FRACTION_RE = re.compile(r"(?i)loading\b.*?\|\s*(\d+)/(\d+)\b")
_READY_RE = re.compile(r"Application startup complete|Uvicorn running on")
_START_RE = re.compile(r"Initializing a V\d LLM engine|non-default args:|vLLM API server version")


def _balanced(text: str, start: int) -> str:
    """The bracketed expression starting at ``text[start]`` (or the bare word there)."""
    if start >= len(text):
        return ""
    if text.startswith("None", start):
        return "None"
    pairs = {"(": ")", "{": "}", "[": "]"}
    # SpeculativeConfig(...) — skip a leading identifier.
    i = start
    while i < len(text) and (text[i].isalnum() or text[i] == "_"):
        i += 1
    if i >= len(text) or text[i] not in pairs:
        return text[start:i]
    depth = 0
    for j in range(i, len(text)):
        ch = text[j]
        if ch in pairs:
            depth += 1
        elif ch in (")", "}", "]"):
            depth -= 1
            if depth == 0:
                return text[start : j + 1]
    return text[start:]


@dataclass(frozen=True)
class SpecInfo:
    method: str  # "none" when speculation is off
    num_speculative_tokens: int | None
    draft_model: str | None


def parse_speculative_config(text: str) -> SpecInfo | None:
    """From a line carrying ``speculative_config=…``; ``None`` when the line has none."""
    m = _SPEC_RE.search(text)
    if m is None:
        return None
    body = _balanced(text, m.end())
    if body in ("None", "null", "{}", ""):
        return SpecInfo("none", 0, None)
    method = _METHOD_RE.search(body)
    k = _NUM_TOKENS_RE.search(body)
    draft = _DRAFT_MODEL_RE.search(body)
    draft_model = None
    if draft is not None:
        draft_model = draft.group(1) or draft.group(2) or None
    name = method.group(1) if method is not None else "unknown"
    if name in ("None", "null"):
        name = "unknown"
    return SpecInfo(name, int(k.group(1)) if k else None, draft_model)


@dataclass
class LogState:
    """What the log has told us so far (mutated by :meth:`feed`)."""

    spec: SpecInfo | None = None
    tensor_parallel_size: int | None = None
    vllm_version: str | None = None
    loading: bool = False  # between a start marker and "startup complete"
    load_started_s: float | None = None
    load_progress: float | None = None  # 0..1, the latest loading line since the load started
    lines_seen: int = 0

    def feed(self, lines: list[str], now_s: float) -> None:
        for line in lines:
            self.lines_seen += 1
            self._line(line, now_s)

    def _line(self, line: str, now_s: float) -> None:
        if _START_RE.search(line):
            if not self.loading:
                self.loading = True
                self.load_started_s = now_s
                self.load_progress = 0.0
            v = _VERSION_RE.search(line)
            if v is not None:
                self.vllm_version = v.group(1)
        if "speculative_config" in line:
            spec = parse_speculative_config(line)
            if spec is not None:
                self.spec = spec
            tp = _TP_RE.search(line)
            if tp is not None:
                self.tensor_parallel_size = int(tp.group(1))
            return
        if "oading" in line:
            p = _PROGRESS_RE.search(line)
            if p is not None:
                self.load_progress = min(1.0, float(p.group(1)) / 100.0)
                self._mark_loading(now_s)
                return
            f = _FRACTION_RE.search(line)
            if f is not None and int(f.group(2)) > 0:
                self.load_progress = min(1.0, int(f.group(1)) / int(f.group(2)))
                self._mark_loading(now_s)
                return
        if _READY_RE.search(line):
            self.loading = False

    def _mark_loading(self, now_s: float) -> None:
        if not self.loading:
            self.loading = True
            self.load_started_s = now_s


def close_quietly(source: LineSource) -> None:
    with contextlib.suppress(Exception):
        source.close()
