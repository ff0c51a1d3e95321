"""Headless sweeps over concurrency levels or request rates (``specload run``).

- :mod:`.options`: the command line's declarations and the workers' argv, :mod:`.settings`:
  the one frozen settings object a run reads
- :mod:`.plan`: options → levels (validated), :mod:`.window`: a pausable measured window
- :mod:`.driver`: the sequence of levels, outages, stop; independent of Locust
- :mod:`.backend`, :mod:`.locustfile`: Locust runners (single process or master + workers)
- :mod:`.readiness`: the readiness gate, :mod:`.server`: vLLM ``/metrics`` around each level
- :mod:`.progress`: the live display, :mod:`.session`: one run end to end
"""
