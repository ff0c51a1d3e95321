"""The specload exporter: vLLM service variants into Prometheus.

- :mod:`exporter.config` — YAML file and flags, validated (one-line errors).
- :mod:`exporter.fetch` — one bounded GET (one deadline per poll, body cap, fault reasons)
  and the poller's transport.
- secrets out of what is shown (URL userinfo, keys, log records): :mod:`specload.redact`,
  shared with the load client.
- :mod:`exporter.vllm_metrics` — what is read from vLLM's /metrics and derived.
- :mod:`exporter.lifecycle` — ready/loading/down through reloads.
- :mod:`exporter.logs` — following a server's log (file or journal).
- :mod:`exporter.target` — one monitored server: poll, fold, view.
- :mod:`exporter.poller` — a thread per target on a common schedule.
- :mod:`exporter.collector` — the prometheus-client Collector.
- :mod:`exporter.sources`, :mod:`exporter.baselines`, :mod:`exporter.profiling` — extra families.
- :mod:`exporter.app` — the running exporter (its command: :mod:`specload.commands.exporter`).

See docs/exporter.md.
"""
