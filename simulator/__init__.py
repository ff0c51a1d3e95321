"""A simulated vLLM 0.32 server: the embedded default target of specload."""
