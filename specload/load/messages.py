"""The runner messages between a Locust master and its workers: names and payloads.

Each message is a frozen dataclass: built by the sender, :meth:`payload` is what
goes over Locust's ``send_message``; the receiver reads ``msg.data`` back with
:meth:`parse` (missing fields take the defaults below). The session
(:mod:`specload.load.session`) registers the handlers and holds the state.

- ``specload:records`` (:class:`RecordsMessage`) worker -> master, every 0.25 s
  and at each stats report: ``{"records": [RequestRecord.to_dict(include_histograms=True)…],
  "started": n, "seq": s, "budget_left": b, "step_started": k}`` — every completed
  request travels, so the master's aggregates equal a single process's exactly;
  ``budget_left`` is what the worker may still start in step ``s`` (None: no limit),
  ``step_started`` what it started in step ``s``; ``backoffs``: its users' waits after
  failed requests since the last message, ``[variant, model, category, step, s]`` each
  (the master's client metrics count them);
- ``specload:step`` (:class:`StepMessage`) master -> workers:
  ``{"name": step, "seq": n, "budget": k}``; also sent to each worker when it
  connects. ``budget``: None (no limit), or how many requests the worker may start
  in this step (0 at the step's start: budget is granted on demand);
- ``specload:want`` (:class:`WantMessage`) worker -> master: ``{"seq": n, "waiting": u}``:
  ``u`` users wait for budget in step ``n``;
- ``specload:budget`` (:class:`BudgetMessage`) master -> one worker:
  ``{"seq": n, "add": k}``, budget granted for step ``n``.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

MSG_RECORDS = "specload:records"
MSG_STEP = "specload:step"
MSG_WANT = "specload:want"
MSG_BUDGET = "specload:budget"


def _data(data: Any) -> Any:
    return data or {}


@dataclass(frozen=True)
class RecordsMessage:
    """Worker -> master: completed records, requests started, budget left."""

    records: Sequence[Any]  # RequestRecord.to_dict(include_histograms=True) each
    started: int | None  # requests started on the worker (None: not reported)
    seq: int | None  # the step ``budget_left`` is of (None: neither reported)
    budget_left: int | None  # None: no limit (or not reported)
    step_started: int | None = None  # requests started in step ``seq`` (None: not reported)
    # its users' waits after failed requests: [variant, model, category, step, seconds] each
    backoffs: Sequence[Sequence[Any]] = ()

    def payload(self) -> dict[str, Any]:
        return {
            "records": self.records,
            "started": self.started,
            "seq": self.seq,
            "budget_left": self.budget_left,
            "step_started": self.step_started,
            "backoffs": self.backoffs,
        }

    @classmethod
    def parse(cls, data: Any) -> RecordsMessage:
        d = _data(data)
        started = d.get("started")
        seq = d.get("seq")
        left = d.get("budget_left") if seq is not None else None
        step_started = d.get("step_started") if seq is not None else None
        return cls(
            records=d.get("records", ()),
            started=None if started is None else int(started),
            seq=None if seq is None else int(seq),
            budget_left=None if left is None else int(left),
            step_started=None if step_started is None else int(step_started),
            backoffs=tuple(
                tuple(b)
                for b in d.get("backoffs") or ()
                if isinstance(b, list | tuple) and len(b) == 5
            ),
        )


@dataclass(frozen=True)
class StepMessage:
    """Master -> workers: the step in force from now on."""

    name: str
    seq: int
    budget: int | None  # None: no limit; else what the worker may start (0 at the start)

    def payload(self) -> dict[str, Any]:
        return {"name": self.name, "seq": self.seq, "budget": self.budget}

    @classmethod
    def parse(cls, data: Any) -> StepMessage:
        d = _data(data)
        budget = d.get("budget")
        return cls(
            name=str(d["name"]),
            seq=int(d.get("seq", 0)),
            budget=None if budget is None else int(budget),
        )


@dataclass(frozen=True)
class WantMessage:
    """Worker -> master: ``waiting`` users wait for budget in step ``seq``."""

    seq: int
    waiting: int

    def payload(self) -> dict[str, Any]:
        return {"seq": self.seq, "waiting": self.waiting}

    @classmethod
    def parse(cls, data: Any) -> WantMessage:
        d = _data(data)
        return cls(seq=int(d.get("seq", -1)), waiting=int(d.get("waiting", 1)))


@dataclass(frozen=True)
class BudgetMessage:
    """Master -> one worker: ``add`` more requests it may start in step ``seq``."""

    seq: int
    add: int

    def payload(self) -> dict[str, Any]:
        return {"seq": self.seq, "add": self.add}

    @classmethod
    def parse(cls, data: Any) -> BudgetMessage:
        d = _data(data)
        return cls(seq=int(d.get("seq", -1)), add=int(d.get("add", 0)))
