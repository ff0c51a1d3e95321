"""What one request measured, and the statistics and token files made of it: the shared floor
every reader of a record imports (no gevent, no HTTP client).

- :mod:`specload.records.request` — :class:`~specload.records.request.RequestRecord`;
- :mod:`specload.records.stats` — :class:`~specload.records.stats.Stats` (exact
  per-request percentiles, mergeable ITL histograms) and the per-step ``Aggregator``;
- :mod:`specload.records.specdecode` — a request's speculative-decoding counts;
- :mod:`specload.records.tokens` — ``tokens.jsonl``, the token ids a run recorded.
"""
