"""A/B comparison of result directories (``specload compare``).

Each variant against the first, per level and category: medians of TPOT,
TTFT, TTFCT and output tok/s with n per side, the relative difference with a
bootstrap confidence interval that contains it, and a verdict — after checking
that the runs are finished and comparable; for speculative variants the measured
speedup against the ideal one, and for every variant the concurrency where it stops
being faster. :mod:`.model` checks and computes, :mod:`.stats` bootstraps,
:mod:`.efficiency` and :mod:`.crossover` are the speculation figures, :mod:`.profiles`
reads ``specload profile`` reports, :mod:`.report` writes Markdown and JSON,
:mod:`.plots` draws. Every figure of a run comes from :mod:`specload.results.model`, the
one reader of ``summary.json`` (the truncated share and its one threshold, the acceptance,
the median, the verdict).
"""
