"""The story's names and the reference deployment's figures (``shared/REFERENCE.md``); the
options' defaults."""

from __future__ import annotations

from collections.abc import Mapping

from specload.stack.rules import DEMO_TIME_SCALE

#: The stack's one server: it starts as ``baseline`` and is reloaded into ``ngram``.
SERVER = "baseline"
RELOAD_AS = "ngram"
VARIANTS = ("baseline", "ngram")
HOST = "127.0.0.1"

#: The reference deployment (``shared/REFERENCE.md``): single stream, max_tokens 4096,
#: reasoning counted — median TPOT per prompt type.
REFERENCE_MAX_TOKENS = 4096
REFERENCE_TPOT_MS: Mapping[str, float] = {
    "coding": 16.0,
    "math": 12.8,
    "structured": 13.1,
    "explanation": 12.6,
}
REFERENCE_TYPES = tuple(REFERENCE_TPOT_MS)
#: The reference's fifth prompt, which spent all 4096 tokens reasoning.
FIFTH_PROMPT = "long_reasoning"
FIFTH_REQUESTS = 12
FIFTH_CONCURRENCY = 4
TPOT_ALERT = "SpecloadTPOTRegression"
#: How long the steady load of stage 6 waits for the alert to reach the webhook.
ALERT_TIMEOUT_S = 150.0
#: Stage 7's ngram sweep runs ``--against`` the baseline: a level ends once ngram is known
#: slower or faster by more than this margin, or equivalent within it.
AGAINST_MARGIN = "5%"
#: ... never before this many requests: compare's own minimum sample for an interval
#: (``specload.compare.options.MIN_N_DEFAULT``; fewer and compare says "n too small"), so
#: the comparison of the same pair can always judge what the sweep decided.
AGAINST_MIN_REQUESTS = 10

#: Option defaults: (normal, --quick).
DEFAULTS: dict[str, tuple[str, str]] = {
    "concurrency": ("1,4", "1,4"),
    "warmup": ("2s", "1s"),
    "duration": ("20s", "10s"),
    "max_tokens": (str(REFERENCE_MAX_TOKENS), str(REFERENCE_MAX_TOKENS)),
    "time_scale": (str(DEMO_TIME_SCALE), str(DEMO_TIME_SCALE)),
    "load_time": ("8s", "3s"),
    "scrape_interval": ("1s", "1s"),
}
