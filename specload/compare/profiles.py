"""The all-reduce share of a run, from a ``specload profile`` report beside its results.

``specload profile analyze … --json`` and ``specload profile capture … --json`` print a
report (docs/profiling.md); neither ``specload run`` nor ``specload profile`` writes it
into a results directory. The convention: save it as ``profile.json`` in the run's
results directory (``specload profile capture --target URL --trace-dir T --json >
results/ngram/profile.json``), or name the file with ``specload compare --profile
DIR=FILE``. A level's share is the report's ``batch_sizes[<the level's concurrency>]``
``allreduce_ratio`` (decode steps of exactly that many requests, median over ranks):
a capture holds the batch sizes it saw, and a level measures one. A level whose
concurrency the capture never decoded at has none; the report's whole-capture
``decode_allreduce_ratio`` is shown once per run.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import orjson

from specload.errors import UsageError
from specload.results.model import finite_number

PROFILE_FILE = "profile.json"


@dataclass(frozen=True)
class Profile:
    path: Path
    report: Mapping[str, Any]

    @property
    def decode_allreduce_ratio(self) -> float | None:
        return finite_number(self.report.get("decode_allreduce_ratio"))

    @property
    def decode_steps(self) -> int | None:
        steps = finite_number(self.report.get("decode_steps"))
        return None if steps is None else int(steps)

    def share_at(self, concurrency: float | None) -> float | None:
        """All-reduce share of decode steps with ``concurrency`` requests (None: none seen)."""
        if concurrency is None or concurrency != int(concurrency):
            return None
        sizes = self.report.get("batch_sizes")
        if not isinstance(sizes, Mapping):
            return None
        entry = sizes.get(str(int(concurrency)))
        if not isinstance(entry, Mapping) or not finite_number(entry.get("steps")):
            return None
        return finite_number(entry.get("allreduce_ratio"))


def read_profile(path: str | Path) -> Profile:
    """A ``specload profile --json`` report; anything else is a one-line error naming it."""
    p = Path(path)
    try:
        data = orjson.loads(p.read_bytes())
    except FileNotFoundError:
        raise UsageError(f"{p}: no such profile report") from None
    except OSError as exc:
        raise UsageError(f"{p}: cannot read the profile report ({exc.strerror})") from None
    except orjson.JSONDecodeError as exc:
        raise UsageError(f"{p}: the profile report is not JSON ({exc})") from None
    if not isinstance(data, dict) or "decode_allreduce_ratio" not in data:
        raise UsageError(
            f"{p}: not a `specload profile … --json` report (no decode_allreduce_ratio)"
        )
    ratio = data["decode_allreduce_ratio"]
    if ratio is not None and finite_number(ratio) is None:
        raise UsageError(f"{p}: decode_allreduce_ratio {ratio!r} is not a number")
    return Profile(p, data)


def profile_beside(results_dir: Path) -> Profile | None:
    """``profile.json`` in a results directory, when there is one."""
    path = results_dir / PROFILE_FILE
    return read_profile(path) if path.is_file() else None


def parse_profile_options(items: list[str] | None, dirs: list[str]) -> dict[int, Path]:
    """``--profile DIR=FILE`` items → {index of DIR among the compared directories: FILE}."""
    out: dict[int, Path] = {}
    resolved = [Path(d).resolve() for d in dirs]
    for item in items or []:
        name, sep, file = item.rpartition("=")
        if not sep or not name or not file:
            raise UsageError(f"--profile {item!r}: expected DIR=FILE")
        where = Path(name).resolve()
        if where not in resolved:
            raise UsageError(f"--profile {item}: {name} is not one of the compared directories")
        index = resolved.index(where)
        if index in out:
            raise UsageError(f"--profile {item}: {name} was given a profile twice")
        out[index] = Path(file)
    return out
