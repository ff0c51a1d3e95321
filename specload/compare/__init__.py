"""A/B comparison of result directories (``specload compare``).

Each variant against the first, per level and category: medians of TPOT,
TTFT, TTFCT and output tok/s with n per side, the relative difference with a
bootstrap confidence interval that contains it, and a verdict — after checking
that the runs are finished and comparable; for speculative variants the measured
speedup against the ideal one, and for every variant the concurrency where it stops
being faster. :mod:`.model` checks and computes, :mod:`.stats` bootstraps,
:mod:`.efficiency` and :mod:`.crossover` are the speculation figures, :mod:`.profiles`
reads ``specload profile`` reports, :mod:`.report` writes Markdown and JSON,
:mod:`.plots` draws. Importing this package is light (no numpy): the baseline export reads
:data:`TRUNCATED_SHARE` from here.
"""

# A side whose completed requests ended inside reasoning at max_tokens more often than this
# share has no meaningful content measures (TTFCT); ``baseline export`` warns about such levels.
TRUNCATED_SHARE = 0.5
