"""``python -m simulator ...``: the same as ``specload sim ...`` (:mod:`specload.commands.sim`)."""

import sys

from specload.cli import main

raise SystemExit(main(["sim", *sys.argv[1:]]))
