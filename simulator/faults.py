"""Faults on demand: each kind happens to a request with its own rate.

``http500``, ``http503``, ``http429`` answer at once with that status and
vLLM's error body; the stream faults strike part-way through a stream:
``reset`` drops the connection with a TCP RST, ``malformed`` inserts a chunk of
broken JSON, ``stall`` holds the stream for ``--stall-seconds`` (wall clock),
``no-done`` ends the stream without ``data: [DONE]``. At most one fault per
request; kinds are tried in this order. ``--fault-every KIND=N`` strikes every Nth chat
request instead (the Nth, 2Nth, … since the start: known per-request truth for tests).
"""

from __future__ import annotations

import random
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from specload.errors import UsageError

FAULT_KINDS: tuple[str, ...] = (
    "http500",
    "http503",
    "http429",
    "reset",
    "malformed",
    "stall",
    "no-done",
)
STATUS_FAULTS: dict[str, int] = {"http500": 500, "http503": 503, "http429": 429}
STATUS_TYPES: dict[int, str] = {
    500: "InternalServerError",
    503: "ServiceUnavailableError",
    429: "TooManyRequests",
}


@dataclass(frozen=True)
class FaultConfig:
    rates: dict[str, float]
    stall_seconds: float = 30.0
    every: dict[str, int] = field(default_factory=dict)

    def pick(self, rng: random.Random, ordinal: int | None = None) -> str | None:
        """The fault of a request (None: none); ``ordinal``: the request's number, from 1."""
        if ordinal is not None:
            for kind in FAULT_KINDS:
                n = self.every.get(kind)
                if n and ordinal % n == 0:
                    return kind
        for kind in FAULT_KINDS:
            rate = self.rates.get(kind, 0.0)
            if rate > 0 and rng.random() < rate:
                return kind
        return None


def _per_kind(
    items: list[str] | None, flag: str, value: str, read: Callable[[str], Any]
) -> dict[str, Any]:
    """``KIND=VALUE`` items → values by kind; ``read`` raises ValueError naming what is wrong
    with a value. Bad items raise UsageError naming them."""
    out: dict[str, Any] = {}
    for item in items or []:
        kind, sep, text = item.partition("=")
        kind = kind.strip()
        if not sep:
            raise UsageError(f"{flag} {item!r}: expected KIND={value}")
        if kind not in FAULT_KINDS:
            raise UsageError(
                f"{flag} {item!r}: unknown kind {kind!r} (kinds: {', '.join(FAULT_KINDS)})"
            )
        try:
            out[kind] = read(text)
        except ValueError as exc:
            raise UsageError(f"{flag} {item!r}: {exc}") from None
    return out


def _rate(text: str) -> float:
    try:
        rate = float(text)
    except ValueError:
        raise ValueError("rate must be a number in [0, 1]") from None
    if not 0.0 <= rate <= 1.0:
        raise ValueError("rate must be in [0, 1]")
    return rate


def _every(text: str) -> int:
    try:
        n = int(text)
    except ValueError:
        raise ValueError("N must be a whole number") from None
    if not 1 <= n <= 10**9:
        raise ValueError("N must be from 1 to 1e9")
    return n


def parse_fault_rates(items: list[str] | None) -> dict[str, float]:
    """``["http500=0.1", "stall=0.01"]`` → rates; bad items raise UsageError naming them."""
    return _per_kind(items, "--fault-rate", "RATE", _rate)


def parse_fault_every(items: list[str] | None) -> dict[str, int]:
    """``["stall=5"]`` → every 5th request stalls; bad items raise UsageError naming them."""
    return _per_kind(items, "--fault-every", "N", _every)
