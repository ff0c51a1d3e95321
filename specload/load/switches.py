"""The load generator's environment switches, read once, and the path they put in force.

Every ``SPECLOAD_*`` switch of ``specload.load`` is read here, at import, into
:data:`SWITCHES` (documented in docs/load.md: the table of switches). They are for
diagnostics and benchmarks: the defaults are what a run uses. A switch's variable
is ``SPECLOAD_`` and its field name in capitals; a boolean is off only when set to
``0``.

:data:`fastpath` is the C extension when it is built and not switched off (else
None: the pure-Python path); :data:`rx_timestamps` whether reads carry the
kernel's arrival stamps (that needs the extension).
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass, fields
from typing import Any


@dataclass(frozen=True)
class Switches:
    """The switches' values (each field: ``SPECLOAD_<FIELD>``)."""

    fastpath: bool = True  # 0: the pure-Python path even when the extension is built
    rx_timestamps: bool = True  # 0: reads stamped when the poll returned, no batching
    read_batch_s: float = 0.001  # seconds between polls at most (arrival stamps, >= 32 streams)
    reactor_drive: bool = True  # 0: the reactor waits through gevent's hub
    reactor: bool = True  # 0: each stream read in its own greenlet

    @staticmethod
    def variable(name: str) -> str:
        """The environment variable of the field ``name``."""
        return f"SPECLOAD_{name.upper()}"

    @classmethod
    def from_env(cls, environ: Mapping[str, str] | None = None) -> Switches:
        """The switches as set in ``environ`` (default: the process's environment)."""
        env = os.environ if environ is None else environ
        values: dict[str, Any] = {}
        for f in fields(cls):
            text = env.get(cls.variable(f.name))
            if text is None:
                continue
            values[f.name] = text != "0" if isinstance(f.default, bool) else float(text)
        return cls(**values)


SWITCHES = Switches.from_env()

try:
    from specload.load import _fastpath
except ImportError:  # built without a C compiler
    _fastpath = None  # type: ignore[assignment]

# The C extension when built (its meter core also serves tests with SPECLOAD_FASTPATH=0).
extension = _fastpath
# The C extension in use: None without it or with SPECLOAD_FASTPATH=0. Typed as the
# module: its users check for None once, where they choose a path.
fastpath = _fastpath
if not SWITCHES.fastpath:
    fastpath = None  # type: ignore[assignment]
# Kernel receive timestamps (SO_TIMESTAMPNS): each read carries the time its data arrived.
rx_timestamps = fastpath is not None and SWITCHES.rx_timestamps
