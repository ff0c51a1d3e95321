"""The specload exporter: vLLM service variants into Prometheus."""
