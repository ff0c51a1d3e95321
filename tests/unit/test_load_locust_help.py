"""specload's Locust options are listed where the locustfile says they are.

Locust prints ``locust -f FILE --help`` before it imports FILE, so the options a
locustfile adds never show there; ``python -m specload.load.locust_help`` lists them.
Both run as processes (Locust monkey-patches the process it is imported in).
"""

from __future__ import annotations

import ast
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from specload.load.options import add_options

pytestmark = pytest.mark.unit

ROOT = Path(__file__).resolve().parents[2]
LOCUSTFILE = ROOT / "locustfiles" / "chat.py"


class Declared:
    """Stands in for Locust's parser: what add_options declares (the known truth)."""

    def __init__(self) -> None:
        self.options: list[tuple[str, str]] = []

    def add_argument(self, *flags: str, **kwargs: Any) -> None:
        flag = next(f for f in flags if f.startswith("--"))
        self.options.append((flag, kwargs["env_var"]))


def run(*args: str) -> str:
    done = subprocess.run(
        [sys.executable, *args], capture_output=True, text=True, timeout=120, cwd=ROOT, check=True
    )
    return done.stdout


def test_locust_help_lists_every_option_with_its_variable() -> None:
    declared = Declared()
    add_options(declared)
    assert len(declared.options) > 15
    text = run("-m", "specload.load.locust_help")
    flat = re.sub(r"\s+", " ", text)  # help text wraps lines
    assert text.startswith("usage: locust -f locustfiles/chat.py")
    for flag, env_var in declared.options:
        assert re.search(rf"(^|\s){re.escape(flag)}\b", text, re.M), flag
        assert f"[env var: {env_var}]" in flat, env_var


def test_locust_itself_does_not_list_them_and_the_locustfile_says_where_they_are() -> None:
    text = run("-m", "locust", "-f", str(LOCUSTFILE), "--help")
    assert "--web-port" in text  # Locust's own help
    assert "--prompts" not in text and "SPECLOAD_" not in text
    doc = ast.get_docstring(ast.parse(LOCUSTFILE.read_text())) or ""
    assert "python -m specload.load.locust_help" in doc
    assert "appear in ``locust --help``" not in doc
