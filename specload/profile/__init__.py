"""All-reduce share of decode time from vLLM's torch-profiler traces.

- :mod:`specload.profile.tracefile` writes and streams torch-profiler Chrome traces.
- :mod:`specload.profile.kernels` classifies all-reduce work by name (one table).
- :mod:`specload.profile.analysis` turns trace files into a :class:`ProfileReport`.
- :mod:`specload.profile.capture` drives ``/start_profile`` and ``/stop_profile``.
- :mod:`specload.profile.render` prints a report for a terminal.
- :mod:`specload.profile.synthetic` writes traces with a known share (tests, benchmarks).
- :mod:`specload.commands.profile` is ``specload profile analyze|capture``.

The exporter's scheduled captures live in :mod:`exporter.profiling`.
"""

from __future__ import annotations
