"""The local stack as processes (``specload stack up|down|status|reload``).

- :mod:`specload.stack.plan` — which parts run, on which ports, with which command;
- :mod:`specload.stack.configs` — Prometheus, target lists and exporter config for a plan;
- :mod:`specload.stack.procs` — start, identify and stop processes (pid + start time);
- :mod:`specload.stack.state` — the state folder's ``stack.json``;
- :mod:`specload.stack.control` — up, down, status, reload (the command's and the demo's);
- :mod:`specload.commands.stack` — the subcommand.
"""
