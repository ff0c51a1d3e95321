"""specload's Locust options, listed: ``python -m specload.load.locust_help``.

``locust -f locustfiles/chat.py --help`` cannot list them: Locust prints its help
before it imports the locustfile (``locust.argument_parser.parse_locustfile_option``),
and a locustfile's options join the parser only on import
(``events.init_command_line_parser``). This prints them from the same declarations
(:func:`specload.load.options.add_options`), with their environment variables, in
Locust's own help format. Locust's web UI lists those it takes (under *Custom
parameters* of its start form).
"""

from __future__ import annotations

import sys
from typing import Any

from specload.load.options import add_options

PROG = "locust -f locustfiles/chat.py"
# Keywords only Locust's parser itself takes (its web UI's form), not an argument group.
_WEB_UI_KWARGS = ("include_in_web_ui", "is_secret", "is_required", "is_multiple")


class _Group:
    """An argument group that takes Locust's declarations (its web-UI keywords dropped)."""

    def __init__(self, group: Any) -> None:
        self.group = group

    def add_argument(self, *flags: str, **kwargs: Any) -> None:
        for key in _WEB_UI_KWARGS:
            kwargs.pop(key, None)
        self.group.add_argument(*flags, **kwargs)


def help_text() -> str:
    """specload's options as ``locust --help`` would show them, had it imported the file."""
    from locust.argument_parser import LocustArgumentParser  # noqa: PLC0415

    parser = LocustArgumentParser(
        prog=PROG,
        usage=f"{PROG} [Locust's options] [specload's options]",
        description=(
            "specload's options, after Locust's own (locust --help). Each is also read "
            "from its environment variable."
        ),
        add_help=False,
        add_env_var_help=True,
        add_config_file_help=False,
    )
    add_options(_Group(parser.add_argument_group("specload options")))
    return str(parser.format_help())


def main() -> int:
    sys.stdout.write(help_text())
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
