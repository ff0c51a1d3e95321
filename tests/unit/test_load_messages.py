"""The runner messages between master and workers: names, payloads, and reading them back."""

from __future__ import annotations

import pytest

from specload.load.messages import (
    MSG_BUDGET,
    MSG_RECORDS,
    MSG_STEP,
    MSG_WANT,
    BudgetMessage,
    RecordsMessage,
    StepMessage,
    WantMessage,
)

pytestmark = pytest.mark.unit


def test_names() -> None:
    assert (MSG_RECORDS, MSG_STEP, MSG_WANT, MSG_BUDGET) == (
        "specload:records",
        "specload:step",
        "specload:want",
        "specload:budget",
    )


def test_payloads_are_the_wire_format() -> None:
    records = [{"category": "math"}]
    assert RecordsMessage(records, 5, 2, 3, 4).payload() == {
        "records": records,
        "started": 5,
        "seq": 2,
        "budget_left": 3,
        "step_started": 4,
        "backoffs": (),
    }
    assert StepMessage("c16", 4, 0).payload() == {"name": "c16", "seq": 4, "budget": 0}
    assert StepMessage("run", 1, None).payload() == {"name": "run", "seq": 1, "budget": None}
    assert WantMessage(4, 7).payload() == {"seq": 4, "waiting": 7}
    assert BudgetMessage(4, 14).payload() == {"seq": 4, "add": 14}


@pytest.mark.parametrize(
    "message",
    [
        RecordsMessage([{"a": 1}], 5, 2, 3, 4),
        RecordsMessage([], 0, 1, None),
        StepMessage("c16", 4, 0),
        StepMessage("run", 0, None),
        WantMessage(4, 7),
        BudgetMessage(4, 14),
    ],
)
def test_parse_reads_back_what_payload_wrote(
    message: RecordsMessage | StepMessage | WantMessage | BudgetMessage,
) -> None:
    assert type(message).parse(message.payload()) == message


def test_missing_fields_take_their_defaults() -> None:
    for empty in (None, {}):
        assert RecordsMessage.parse(empty) == RecordsMessage((), None, None, None)
        assert WantMessage.parse(empty) == WantMessage(-1, 1)
        assert BudgetMessage.parse(empty) == BudgetMessage(-1, 0)
    assert StepMessage.parse({"name": "x"}) == StepMessage("x", 0, None)
    # a budget left is the step's named with it: without a step, none (started in it too)
    assert RecordsMessage.parse({"budget_left": 3}).budget_left is None
    assert RecordsMessage.parse({"step_started": 3}).step_started is None


def test_numbers_are_read_as_integers() -> None:
    assert StepMessage.parse({"name": 7, "seq": "3", "budget": 2.0}) == StepMessage("7", 3, 2)
    assert RecordsMessage.parse({"started": "4", "seq": 1.0, "budget_left": "2"}) == (
        RecordsMessage((), 4, 1, 2)
    )
