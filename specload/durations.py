"""Durations on the command line: ``30`` (seconds), ``30s``, ``2m``, ``1h``, ``500ms``.

The one implementation used by every subcommand that takes a time.
"""

from __future__ import annotations

import math
import re

from specload.errors import UsageError

_UNITS = {"ms": 1e-3, "s": 1.0, "m": 60.0, "h": 3600.0}
_PATTERN = re.compile(r"^\s*([0-9]*\.?[0-9]+(?:[eE][-+]?[0-9]+)?)\s*(ms|s|m|h)?\s*$")


def parse_duration(
    text: str | float | int, *, name: str = "duration", allow_zero: bool = True
) -> float:
    """Return seconds; raise :class:`UsageError` naming ``name`` on bad input.

    >>> parse_duration("2m")
    120.0
    >>> parse_duration("0", name="--warmup")
    0.0
    """
    if isinstance(text, int | float) and not isinstance(text, bool):
        value = float(text)
    else:
        match = _PATTERN.match(str(text))
        if match is None:
            raise UsageError(
                f"{name}: {text!r} is not a duration (use seconds like 30, or 30s, 2m, 1h, 500ms)"
            )
        value = float(match.group(1)) * _UNITS[match.group(2) or "s"]
    if not math.isfinite(value) or value < 0:
        raise UsageError(f"{name}: {text!r} must be a non-negative duration")
    if value == 0 and not allow_zero:
        raise UsageError(f"{name}: {text!r} must be greater than zero")
    return value
