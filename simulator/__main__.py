"""``python -m simulator ...``: the same as ``specload sim ...`` (:mod:`specload.commands.sim`)."""

from specload.commands.sim import main

raise SystemExit(main())
