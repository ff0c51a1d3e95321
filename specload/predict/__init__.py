"""``specload predict``: forecast a speculative-decoding variant from a baseline run alone.

* :mod:`specload.records.tokens` — ``tokens.jsonl`` (the baseline's token ids): reader, writer;
* :mod:`simulator.ngram` — an independent replay of vLLM's n-gram proposer: per
  request, the step sequence (drafted, accepted, emitted per step) and vLLM's counters;
* :mod:`specload.predict.stepcost` — the step-cost curve T(n, ctx) fitted to the baseline's
  levels, and the plan of levels that would cover a variant's step sizes;
* :mod:`specload.predict.baseline` — the baseline results directory a forecast reads;
* :mod:`specload.predict.closedloop` — continuous batching replayed in step counts
  (:class:`~specload.predict.closedloop.BatchEngine`);
* :mod:`specload.predict.forecast` — TPOT per request, intervals, verdicts, the k schedule,
  draft methods' break-even;
* :mod:`specload.predict.report` — JSON and Markdown (the command:
  :mod:`specload.commands.predict`).

See docs/predict.md.
"""
