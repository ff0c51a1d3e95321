"""``python -m simulator ...``: the same as ``specload sim ...``."""

from __future__ import annotations

import sys

from simulator import cli
from specload.cli import _Parser
from specload.errors import UsageError


def main(argv: list[str] | None = None) -> int:
    parser = _Parser(
        prog="specload sim", description="serve a simulated vLLM (the embedded default)"
    )
    cli.add_arguments(parser)
    args = parser.parse_args(argv)
    try:
        return cli.run(args)
    except UsageError as exc:
        print(f"specload sim: error: {exc}", file=sys.stderr)
        return exc.exit_code
    except KeyboardInterrupt:
        return 130


if __name__ == "__main__":
    raise SystemExit(main())
