"""Deployment files: systemd units for vLLM variants (``specload deploy``).

- :mod:`specload.deploy.execline` — systemd's command-line quoting (not a shell's);
- :mod:`specload.deploy.unitfile` — a unit file as lines, with ``ExecStart=`` located;
- :mod:`specload.deploy.speculative` — variants and vLLM's speculative flags;
- :mod:`specload.deploy.systemd` — rewrite a vLLM unit into a variant's unit.
"""
