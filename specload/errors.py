"""The one error type that the command line turns into a one-line message.

Anything a user can get wrong (a flag, a file, a URL, an unreachable host)
raises :class:`UsageError` with a message that names the input. ``specload``
prints ``specload: error: <message>`` and exits with ``exit_code`` — never a
traceback.
"""

from __future__ import annotations


class UsageError(Exception):
    """Bad input from the user; the message names the input."""

    def __init__(self, message: str, exit_code: int = 2) -> None:
        super().__init__(message)
        self.exit_code = exit_code

    def __str__(self) -> str:
        # Exactly one line, whatever the caller passed.
        return " ".join(str(self.args[0]).split()) if self.args else ""
