"""The reactor: every open stream's socket read from one greenlet per process, with epoll.

It blocks in ``epoll`` with the event loop's own fd in the set, so other greenlets'
sockets wake it too, and reads each ready socket once per round. With the C
extension (``specload.load._fastpath``) a round is one C call, each read carries
the kernel's arrival stamp of its data (``SO_TIMESTAMPNS``, on
``time.perf_counter()``'s clock) and a *fused reader* (the request's
``StreamMeter``) takes a streamed body's reads in one pass, declining to the full
parsers what it cannot read with certainty. As reads are stamped on arrival, at
>= 32 open streams the reactor polls at most once per ``SPECLOAD_READ_BATCH_S``
(1 ms): one wake-up reads dozens of sockets. Without the extension (or with
``SPECLOAD_FASTPATH=0``) every read goes through the full parsers and is stamped
when the poll that found it returned. The switches: :mod:`specload.load.switches`.
"""

from __future__ import annotations

import contextlib
import os
import select
import time
from typing import Any

import gevent
import gevent.event
from gevent import monkey

from specload.load.failures import RequestFailed, Stale
from specload.load.response import ResponseParser
from specload.load.switches import SWITCHES, rx_timestamps
from specload.load.switches import fastpath as _fastpath

_perf = time.perf_counter
READ_SIZE = 65536  # bytes per socket read (into one reused buffer)
_YIELD_EVERY_S = 0.002
_YIELD_TIMER_S = 1e-6
_BLOCK_S = 0.001
# With arrival stamps, reading late costs no accuracy: at >= _BATCH_MIN_STREAMS open
# streams, poll at most every SPECLOAD_READ_BATCH_S so one wake-up reads many sockets.
_BATCH_MIN_STREAMS = 32
_MAX_UNSTAMPED = 16  # more reads than this without a kernel stamp: batching stops
_os_sleep = monkey.get_original("time", "sleep")

# Kinds of what the C round hands back (see _fastpath.read_ready).
_R_DATA, _R_EOF, _R_ENDED, _R_ERRNO, _R_LOOP, _R_UNKNOWN, _R_EXC, _R_STOPPED = range(8)


class Reactor:
    """Reads every registered stream's socket from one greenlet, with epoll.

    One per process (:func:`get_reactor`). ``wait(...)`` blocks the calling
    greenlet until its response is complete, failed, or timed out. Between
    rounds the other greenlets run: after a stream ended, when the event loop
    has a ready socket or a due timer (the reactor blocks at most 1 ms), and at
    least every 2 ms.
    """

    def __init__(self) -> None:
        epoll = (
            monkey.get_original("select", "epoll")
            if monkey.is_module_patched("select")
            else select.epoll
        )
        self._ep: Any = epoll()
        self._epfd = self._ep.fileno()
        self._handlers: dict[int, _Stream] = {}
        self._parsers: list[ResponseParser | None] = [None] * 1024  # by fd, for the C round
        self._buf = bytearray(READ_SIZE)
        self._yield_now = False
        self._hub = gevent.get_hub()
        self._work = gevent.event.Event()  # set when a stream is registered
        # Driving mode: block in our own epoll, which also watches the event loop's
        # backend fd (ready when any other greenlet's socket is). Else (no such fd):
        # wait for our epoll fd through the hub, one greenlet switch per wake-up.
        self._hub_fd = -1
        self._watcher: Any = None
        if SWITCHES.reactor_drive:
            with contextlib.suppress(AttributeError, OSError, ValueError, TypeError):
                hub_fd = int(self._hub.loop.fileno())
                self._ep.register(hub_fd, select.EPOLLIN)
                self._hub_fd = hub_fd
        if self._hub_fd < 0:
            self._watcher = self._hub.loop.io(self._ep.fileno(), 1)
        self.wakeups = 0  # poll rounds that found ready sockets
        self.reads = 0  # socket reads
        self.fast_reads = 0  # reads taken by a fused reader (the rest: the full parsers)
        self.yields = 0  # switches to the other greenlets (driving mode)
        self.unstamped_reads = 0  # reads without a kernel arrival stamp (stamped at poll time)
        self.hub_wakeups = 0  # rounds where the event loop's fd was ready
        self._greenlet = gevent.spawn(self._run)

    def wait(self, raw: Any, parser: ResponseParser, timeout_s: float | None) -> None:
        """Read the response of ``raw`` (a non-blocking socket) into ``parser``."""
        stream = _Stream(raw, parser)
        fd = raw.fileno()
        self._handlers[fd] = stream
        if fd >= len(self._parsers):
            self._parsers.extend([None] * (fd + 1024 - len(self._parsers)))
        self._parsers[fd] = parser
        try:
            self._ep.register(fd, select.EPOLLIN)
        except FileExistsError:
            self._ep.modify(fd, select.EPOLLIN)
        self._work.set()
        try:
            if not stream.event.wait(timeout_s):
                raise RequestFailed("timeout", "no complete response in time")
        finally:
            if self._handlers.get(fd) is stream:
                self._finish(fd, stream, None)
        if stream.error is not None:
            raise stream.error

    def _finish(self, fd: int, stream: _Stream, error: BaseException | None) -> None:
        del self._handlers[fd]
        self._parsers[fd] = None
        self._yield_now = True  # its user greenlet can go on
        with contextlib.suppress(OSError, ValueError):
            self._ep.unregister(fd)
        stream.error = error
        stream.event.set()

    def _run(self) -> None:
        handlers = self._handlers
        hub_wait = self._hub.wait
        watcher = self._watcher
        work = self._work
        read_round = self._read_round_c if _fastpath is not None else self._read_round_py
        # Driving: block up to _BLOCK_S in epoll (timers of other greenlets run at most
        # that late); else poll without blocking and wait through the hub.
        block_s = _BLOCK_S if watcher is None else 0.0
        batch_s = SWITCHES.read_batch_s if rx_timestamps and watcher is None else 0.0
        last_poll = 0.0
        last_yield = _perf()
        while True:
            if self._yield_now or _perf() - last_yield > _YIELD_EVERY_S:
                # Let the other greenlets run: users whose response ended, timers, sockets.
                self.yields += 1
                self._yield_now = False
                # A timer, not sleep(0): sleep(0) only queues a callback, and the hub runs
                # queued callbacks back to back (checking the clock every 50), so a reactor
                # that blocks ~1 ms per round would starve due timers for ~50 ms. A timer
                # makes the hub go round its whole loop: I/O, timers, then back here.
                gevent.sleep(_YIELD_TIMER_S)
                last_yield = _perf()
            if not handlers:
                if watcher is None:
                    work.clear()
                    work.wait()
                else:
                    hub_wait(watcher)
                last_yield = _perf()
                continue
            if batch_s and len(handlers) >= _BATCH_MIN_STREAMS:
                if self.unstamped_reads > _MAX_UNSTAMPED:
                    batch_s = 0.0  # no arrival stamps here: read data as soon as it is there
                wait_s = batch_s - (_perf() - last_poll)
                if wait_s > 0:
                    _os_sleep(wait_s)  # the whole process: data waits, stamped on arrival
            ready = read_round(block_s)
            last_poll = _perf()
            if not ready:
                if watcher is None:
                    self._yield_now = True  # a timer may be due
                else:
                    hub_wait(watcher)
                    last_yield = _perf()

    def _read_round_c(self, timeout_s: float) -> int:
        """One round in C (``_fastpath.read_ready``): Python sees only what the fused
        readers did not take (heads, other bodies, ends, errors)."""
        ready, left, _now, unstamped = _fastpath.read_ready(
            self._epfd, timeout_s, self._buf, self._parsers, self._hub_fd
        )
        if not ready:
            return 0
        self.wakeups += 1
        self.reads += ready
        self.unstamped_reads += unstamped
        handlers = self._handlers
        taken = ready
        for fd, kind, payload, t in left:
            taken -= 1
            if kind == _R_LOOP:
                self.reads -= 1
                self.hub_wakeups += 1
                self._yield_now = True  # another greenlet's socket is ready
                continue
            stream = handlers.get(fd)
            if stream is None:
                with contextlib.suppress(OSError, ValueError):
                    self._ep.unregister(fd)
                continue
            parser = stream.parser
            if kind == _R_ENDED:
                taken += 1
                parser.fast_ended()
                self._finish(fd, stream, None)
            elif kind == _R_STOPPED:  # the stream ended at [DONE], its body did not
                taken += 1
                parser.stop()
                self._finish(fd, stream, None)
            elif kind == _R_ERRNO:
                exc = OSError(payload, os.strerror(payload))
                self._finish(
                    fd,
                    stream,
                    Stale() if not parser.got_bytes else RequestFailed("reset", str(exc)),
                )
            elif kind == _R_EXC:
                self._finish(fd, stream, payload)
            else:
                self._feed(fd, stream, payload if kind == _R_DATA else b"", t)
        self.fast_reads += taken
        return ready

    def _read_round_py(self, timeout_s: float) -> int:
        """One round in Python (no C extension): every read through the full parsers."""
        events = self._ep.poll(timeout_s)
        if not events:
            return 0
        # Every socket in this round was ready when poll returned: stamp them all with
        # that moment, so reading the others first does not make the last one late.
        now = _perf()
        self.wakeups += 1
        self.reads += len(events)
        handlers = self._handlers
        buf = self._buf
        view = memoryview(buf)
        for fd, _mask in events:
            stream = handlers.get(fd)
            if stream is None:
                if fd == self._hub_fd:
                    self.reads -= 1
                    self.hub_wakeups += 1
                    self._yield_now = True
                    continue
                with contextlib.suppress(OSError, ValueError):
                    self._ep.unregister(fd)
                continue
            try:
                n = stream.recv_into(buf)
            except BlockingIOError:
                continue
            except OSError as exc:
                self._finish(
                    fd,
                    stream,
                    Stale() if not stream.parser.got_bytes else RequestFailed("reset", str(exc)),
                )
                continue
            self._feed(fd, stream, view[:n].tobytes(), now)
        return len(events)

    def _feed(self, fd: int, stream: _Stream, data: bytes, now: float) -> None:
        parser = stream.parser
        try:
            if data:
                done = parser.feed(data, now)
            elif not parser.got_bytes:
                raise Stale
            else:
                done = parser.eof(now)
        except Exception as exc:
            self._finish(fd, stream, exc)
            return
        if done:
            self._finish(fd, stream, None)


class _Stream:
    __slots__ = ("error", "event", "parser", "raw", "recv_into")

    def __init__(self, raw: Any, parser: ResponseParser) -> None:
        self.raw = raw
        self.recv_into = raw.recv_into
        self.parser = parser
        self.event = gevent.event.Event()
        self.error: BaseException | None = None


_reactor: Reactor | None = None


def get_reactor() -> Reactor:
    global _reactor
    if _reactor is None:
        _reactor = Reactor()
    return _reactor
