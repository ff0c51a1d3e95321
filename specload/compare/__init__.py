"""A/B comparison of result directories (``specload compare``).

Each variant against the first, per level and category: medians of TPOT,
TTFT, TTFCT and output tok/s, the relative difference with a bootstrap
confidence interval, and a verdict. :mod:`.model` computes, :mod:`.stats`
bootstraps, :mod:`.report` writes Markdown, :mod:`.plots` draws.
"""
