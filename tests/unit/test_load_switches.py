"""The load generator's environment switches: read in one place, documented in one table."""

from __future__ import annotations

import dataclasses
import re
from pathlib import Path

import pytest

from specload.load import switches
from specload.load.switches import SWITCHES, Switches

pytestmark = pytest.mark.unit

ROOT = Path(__file__).resolve().parents[2]
LOAD = ROOT / "specload" / "load"


def test_defaults_without_any_switch_set() -> None:
    assert Switches.from_env({}) == Switches()
    assert Switches() == Switches(
        fastpath=True, rx_timestamps=True, read_batch_s=0.001, reactor_drive=True, reactor=True
    )


@pytest.mark.parametrize("name", [f.name for f in dataclasses.fields(Switches)])
def test_each_switch_is_read_from_its_variable(name: str) -> None:
    variable = f"SPECLOAD_{name.upper()}"
    assert Switches.variable(name) == variable
    default = getattr(Switches(), name)
    if isinstance(default, bool):
        assert getattr(Switches.from_env({variable: "0"}), name) is False
        for text in ("1", "", "yes", "false"):  # only 0 switches off
            assert getattr(Switches.from_env({variable: text}), name) is True
    else:
        assert getattr(Switches.from_env({variable: "0"}), name) == 0.0
        assert getattr(Switches.from_env({variable: "0.0025"}), name) == 0.0025
        with pytest.raises(ValueError):
            Switches.from_env({variable: "fast"})
    others = {f.name: getattr(Switches(), f.name) for f in dataclasses.fields(Switches)}
    changed = Switches.from_env({variable: "0"})
    assert {k: v for k, v in dataclasses.asdict(changed).items() if k != name} == {
        k: v for k, v in others.items() if k != name
    }


def test_the_switches_are_frozen() -> None:
    with pytest.raises(dataclasses.FrozenInstanceError):
        SWITCHES.fastpath = False  # type: ignore[misc]


def test_what_is_in_force_follows_the_switches() -> None:
    if not SWITCHES.fastpath:
        assert switches.fastpath is None
    else:
        assert switches.fastpath is switches.extension
    assert switches.rx_timestamps == (switches.fastpath is not None and SWITCHES.rx_timestamps)


def test_no_other_module_of_the_load_package_reads_the_environment() -> None:
    readers = sorted(
        path.name
        for path in LOAD.glob("*.py")
        if re.search(r"os\.environ|getenv|environ\.get", path.read_text())
    )
    assert readers == ["switches.py"]


def test_docs_table_lists_every_switch_with_its_default() -> None:
    text = (ROOT / "docs" / "load.md").read_text()
    rows = dict(re.findall(r"^\| `(SPECLOAD_[A-Z_]+)` \| `([^`]*)` \|", text, re.M))
    for f in dataclasses.fields(Switches):
        variable = Switches.variable(f.name)
        assert variable in rows, variable
        default = f.default
        expected = ("1" if default else "0") if isinstance(default, bool) else str(default)
        assert rows[variable] == expected, variable
