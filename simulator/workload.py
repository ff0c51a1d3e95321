"""What a request asks of the model: its category and how many tokens it reasons and answers.

The simulator cannot understand a prompt, so a request's category comes from
the ``X-Specload-Category`` header the load generator sends, or — without it —
from a stable hash of the prompt text. Reasoning and content lengths are drawn
per category from seeded log-normal distributions (median, spread, clip).
"""

from __future__ import annotations

import math
import random
import zlib
from dataclasses import dataclass

from simulator.text import prompt_token_ids

CATEGORIES: tuple[str, ...] = ("coding", "math", "structured", "explanation", "long_reasoning")
# The four prompt types of the reference table (long_reasoning is the fifth prompt,
# the one that exhausted max_tokens, and is not part of the ~74 tok/s average).
REFERENCE_CATEGORIES: tuple[str, ...] = ("coding", "math", "structured", "explanation")
CATEGORY_HEADER = "x-specload-category"


@dataclass(frozen=True)
class LengthDistribution:
    """Log-normal token count: ``median`` x exp(``sigma`` x N(0,1)), clipped to [lo, hi]."""

    median: float
    sigma: float
    lo: int
    hi: int

    def draw(self, rng: random.Random) -> int:
        value = self.median * math.exp(self.sigma * rng.gauss(0.0, 1.0))
        return max(self.lo, min(self.hi, round(value)))

    def mean(self) -> float:
        """Mean without clipping (for documentation)."""
        return self.median * math.exp(self.sigma**2 / 2)


@dataclass(frozen=True)
class CategoryProfile:
    reasoning: LengthDistribution
    content: LengthDistribution


# Coding reasons longest (the slowest category on the reference, long contexts);
# long_reasoning usually runs past a 4096-token budget inside reasoning.
PROFILES: dict[str, CategoryProfile] = {
    "coding": CategoryProfile(
        LengthDistribution(2400, 0.35, 300, 12000), LengthDistribution(800, 0.35, 50, 4000)
    ),
    "math": CategoryProfile(
        LengthDistribution(1000, 0.40, 100, 8000), LengthDistribution(250, 0.40, 20, 2000)
    ),
    "structured": CategoryProfile(
        LengthDistribution(650, 0.40, 60, 6000), LengthDistribution(450, 0.35, 40, 2000)
    ),
    "explanation": CategoryProfile(
        LengthDistribution(450, 0.40, 50, 6000), LengthDistribution(550, 0.35, 60, 3000)
    ),
    "long_reasoning": CategoryProfile(
        LengthDistribution(4000, 0.30, 1500, 16000), LengthDistribution(400, 0.40, 30, 2000)
    ),
}


def category_of(header: str | None, prompt_text: str) -> str:
    """The category named by the header if valid, else a stable hash of the prompt."""
    if header:
        name = header.strip().lower().replace("-", "_")
        if name == "explanatory":
            name = "explanation"
        if name in PROFILES:
            return name
    index = zlib.crc32(prompt_text.encode("utf-8", "replace")) % len(CATEGORIES)
    return CATEGORIES[index]


def prompt_tokens_of(text: str) -> int:
    """Prompt tokens as the simulated tokenizer counts them
    (:func:`simulator.text.prompt_token_ids`: the chat template, then a core word as one
    token, any other word one per 4 characters)."""
    return len(prompt_token_ids(text))


@dataclass(frozen=True)
class Workload:
    """The tokens one request will produce before any max_tokens cap."""

    category: str
    reasoning_tokens: int
    content_tokens: int


def draw_workload(category: str, rng: random.Random) -> Workload:
    profile = PROFILES[category]
    return Workload(category, profile.reasoning.draw(rng), profile.content.draw(rng))
