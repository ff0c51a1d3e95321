"""Service variants as presets: baseline, n-gram speculation, an EAGLE-3 draft head.

Speculation proposes up to ``num_speculative_tokens`` (k) draft tokens; the target
verifies 1 + drafts tokens per sequence in one step (:mod:`simulator.speculation`).

* ``acceptance_model="text"`` (the n-gram preset): vLLM's n-gram proposer runs over the
  sequence's own token ids (:mod:`simulator.text`) and a draft token is accepted exactly when
  it is the sequence's next token — acceptance emerges from the text.
* ``acceptance_model="probabilistic"`` (EAGLE-3; n-gram when ``--spec acceptance`` or
  ``proposal_rate`` is given): a draft of k tokens in ``proposal_rate[category]`` of the
  steps, draft position i (1-based) accepted with probability
  ``acceptance[category] x acceptance_scale x acceptance_decay^(i-1)`` given that all
  earlier positions were. The n-gram preset keeps its probabilistic tables: they are what
  its text calibration aims at (docs/simulator.md).
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field, replace

import orjson

from simulator.costmodel import _coerce
from simulator.limits import ACCEPTANCE_MODELS, PROBABILITY, SPEC_BOUNDS, SPEC_METHODS
from simulator.workload import CATEGORIES
from specload.errors import UsageError

VARIANTS: tuple[str, ...] = ("baseline", "ngram", "eagle3")


@dataclass(frozen=True)
class Variant:
    name: str
    method: str = ""  # "", "ngram" or "eagle3"
    num_speculative_tokens: int = 0
    acceptance: dict[str, float] = field(default_factory=dict)
    proposal_rate: dict[str, float] = field(default_factory=dict)
    acceptance_scale: float = 1.0
    acceptance_decay: float = 1.0
    # n-gram: prompt-lookup on the CPU for every running sequence.
    draft_s_per_seq: float = 0.0
    # EAGLE-3: per draft position, a fixed part (its own small forward with all-reduces)
    # and a part per sequence.
    draft_step_s: float = 0.0
    draft_s_per_token: float = 0.0
    prompt_lookup_max: int = 4
    prompt_lookup_min: int = 2
    draft_model: str = ""
    # How independent a draft token's expert routing is from the token before it:
    # 1.0 = a fresh set of experts (n-gram copies from elsewhere in the context),
    # lower = plausible continuations that reuse their sequence's experts (EAGLE-3).
    draft_expert_novelty: float = 1.0
    # "text": the n-gram proposer over the generated text; "probabilistic": the tables above.
    acceptance_model: str = "probabilistic"

    @property
    def speculative(self) -> bool:
        return bool(self.method) and self.num_speculative_tokens > 0

    def draft_cost_s(self, num_seqs: int) -> float:
        if not self.speculative or num_seqs == 0:
            return 0.0
        if self.method == "ngram":
            return self.draft_s_per_seq * num_seqs
        k = self.num_speculative_tokens
        return k * (self.draft_step_s + self.draft_s_per_token * num_seqs)

    def proposes(self, category: str, rng: random.Random) -> bool:
        rate = self.proposal_rate.get(category, 1.0)
        return rate >= 1.0 or rng.random() < rate

    def position_acceptance(self, category: str) -> list[float]:
        """Conditional acceptance probability of each draft position."""
        base = min(1.0, self.acceptance.get(category, 0.0) * self.acceptance_scale)
        return [
            min(1.0, base * self.acceptance_decay**i) for i in range(self.num_speculative_tokens)
        ]

    def speculative_config(self) -> str:
        """The ``speculative_config=`` text of vLLM 0.32's engine config line."""
        if not self.speculative:
            return "None"
        model = f"'{self.draft_model}'" if self.draft_model else "None"
        return (
            f"SpeculativeConfig(method='{self.method}', model={model}, "
            f"num_spec_tokens={self.num_speculative_tokens})"
        )

    def cli_json(self) -> str:
        """The ``--speculative-config`` JSON that would start this variant on real vLLM."""
        if not self.speculative:
            return ""
        config: dict[str, object] = {
            "method": self.method,
            "num_speculative_tokens": self.num_speculative_tokens,
        }
        if self.method == "ngram":
            config["prompt_lookup_max"] = self.prompt_lookup_max
            config["prompt_lookup_min"] = self.prompt_lookup_min
        else:
            config["model"] = self.draft_model
        return orjson.dumps(config).decode()

    def with_overrides(self, overrides: dict[str, str]) -> Variant:
        """A copy with ``--spec`` overrides; bounds in :data:`simulator.limits.SPEC_BOUNDS`."""
        scalar = {k: v for k, v in overrides.items() if k not in ("acceptance", "proposal_rate")}
        if "method" in scalar and scalar["method"] not in SPEC_METHODS:
            raise UsageError(
                f"--spec method={scalar['method']}: must be one of {', '.join(SPEC_METHODS)}"
            )
        model = scalar.get("acceptance_model")
        if model is not None and model not in ACCEPTANCE_MODELS:
            raise UsageError(
                f"--spec acceptance_model={model}: must be one of {', '.join(ACCEPTANCE_MODELS)}"
            )
        if model is None:
            if "acceptance" in overrides or "proposal_rate" in overrides:
                scalar["acceptance_model"] = "probabilistic"  # the tables were asked for
            elif "method" in scalar:
                ngram = scalar["method"] == "ngram"
                scalar["acceptance_model"] = "text" if ngram else "probabilistic"
        changed = replace(self, **_coerce(self, scalar, "--spec", SPEC_BOUNDS))
        if changed.acceptance_model == "text" and changed.method not in ("", "ngram"):
            raise UsageError(
                f"--spec acceptance_model=text: only for method ngram (not {changed.method})"
            )
        if changed.prompt_lookup_min > changed.prompt_lookup_max:
            raise UsageError(
                f"--spec prompt_lookup_min={changed.prompt_lookup_min}: must be at most "
                f"prompt_lookup_max ({changed.prompt_lookup_max})"
            )
        if "acceptance" in overrides:
            acceptance = _per_category("acceptance", overrides["acceptance"])
            changed = replace(changed, acceptance={**changed.acceptance, **acceptance})
        if "proposal_rate" in overrides:
            rate = _per_category("proposal_rate", overrides["proposal_rate"])
            changed = replace(changed, proposal_rate={**changed.proposal_rate, **rate})
        return changed


def _per_category(name: str, text: str) -> dict[str, float]:
    """``0.3`` (all categories) or ``coding:0.4,math:0.2``."""
    out: dict[str, float] = {}
    try:
        if ":" not in text:
            value = PROBABILITY.check(float(text), f"--spec {name}={text}")
            return dict.fromkeys(CATEGORIES, value)
        for part in text.split(","):
            cat, _, value_text = part.partition(":")
            if cat.strip() not in CATEGORIES:
                raise UsageError(f"--spec {name}: unknown category {cat.strip()!r}")
            out[cat.strip()] = PROBABILITY.check(float(value_text), f"--spec {name}={text}")
    except ValueError:
        raise UsageError(f"--spec {name}={text}: expected a number or CATEGORY:NUMBER,…") from None
    return out


# Reasoning text repeats little: drafts are rarely accepted. Coding and structured answers
# repeat what the reasoning drafted, so they lose least. With the text model these tables are
# the calibration targets (and the model of ``--spec acceptance_model=probabilistic``).
NGRAM = Variant(
    name="ngram",
    method="ngram",
    num_speculative_tokens=5,
    acceptance={
        "coding": 0.34,
        "math": 0.30,
        "structured": 0.33,
        "explanation": 0.23,
        "long_reasoning": 0.25,
    },
    proposal_rate={
        "coding": 0.85,
        "math": 0.90,
        "structured": 0.90,
        "explanation": 0.95,
        "long_reasoning": 0.95,
    },
    acceptance_decay=0.85,
    draft_s_per_seq=60e-6,
    prompt_lookup_max=4,
    prompt_lookup_min=2,
    acceptance_model="text",
)

EAGLE3 = Variant(
    name="eagle3",
    method="eagle3",
    num_speculative_tokens=3,
    acceptance={
        "coding": 0.55,
        "math": 0.57,
        "structured": 0.56,
        "explanation": 0.53,
        "long_reasoning": 0.52,
    },
    acceptance_decay=0.85,
    draft_step_s=0.35e-3,
    draft_expert_novelty=0.5,
    draft_s_per_token=4e-6,
    draft_model="kimi-k2.5-eagle3-draft",
)

PRESETS: dict[str, Variant] = {
    "baseline": Variant(name="baseline"),
    "ngram": NGRAM,
    "eagle3": EAGLE3,
}


def variant_named(name: str) -> Variant:
    try:
        return PRESETS[name]
    except KeyError:
        raise UsageError(
            f"--variant {name!r}: unknown (choose from {', '.join(VARIANTS)})"
        ) from None
