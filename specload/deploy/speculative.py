"""Service variants and the vLLM flags that carry speculative decoding.

A variant is a name and a speculative config (None for the baseline). The
flags below are every way a vLLM command line has carried speculation:
``--speculative-config``/``-sc`` (JSON, also ``--speculative-config.key``),
vLLM 0.32's ``--spec-method/--spec-model/--spec-tokens``, and the ≤0.8
flags (``--speculative-model``, ``--num-speculative-tokens``…). vLLM reads
``_`` and ``-`` alike in flag names.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import Any

from specload.errors import UsageError

#: vLLM's per-request speculative-decoding metrics (``none``, ``summary``, ``detailed``).
PER_REQUEST_FLAG = "--per-request-spec-decode-metrics"
PER_REQUEST_LEVELS = ("none", "summary", "detailed")

#: Flags that take a value (as the next word or after ``=``).
FLAGS_WITH_VALUE = frozenset(
    {
        "--speculative-config",
        "-sc",
        "--spec-method",
        "--spec-model",
        "--spec-tokens",
        # vLLM <= 0.8
        "--speculative-model",
        "--speculative-model-quantization",
        "--num-speculative-tokens",
        "--speculative-draft-tensor-parallel-size",
        "--speculative-max-model-len",
        "--speculative-disable-by-batch-size",
        "--ngram-prompt-lookup-max",
        "--ngram-prompt-lookup-min",
        "--spec-decoding-acceptance-method",
        "--typical-acceptance-sampler-posterior-threshold",
        "--typical-acceptance-sampler-posterior-alpha",
        "--disable-logprobs-during-spec-decoding",
        # vLLM >= 0.32: per-request counts on responses; refused without speculation
        PER_REQUEST_FLAG,
    }
)
#: Flags that stand alone.
FLAGS_ALONE = frozenset({"--speculative-disable-mqa-scorer"})
#: Flags whose dotted form (``--speculative-config.method``) sets one key.
_DOTTED = frozenset({"--speculative-config", "-sc"})

BUILTIN_VARIANTS = ("baseline", "ngram", "eagle3")
_NAME = re.compile(r"[a-z0-9][a-z0-9_.-]{0,62}")


@dataclass(frozen=True)
class Variant:
    name: str
    #: vLLM's speculative config; None means no speculation (baseline).
    speculative_config: dict[str, Any] | None
    #: ``--per-request-spec-decode-metrics`` for the variant; None: the source unit's own.
    per_request_metrics: str | None = None

    def config_json(self) -> str:
        """Compact, key-ordered JSON, ASCII only (one word in ``ExecStart=``)."""
        assert self.speculative_config is not None
        return json.dumps(self.speculative_config, separators=(",", ":"), ensure_ascii=True)


def flag_name(word: str) -> str:
    """``--speculative_config=...`` → ``--speculative-config`` (vLLM's own normalisation)."""
    name = word.split("=", 1)[0]
    if name.startswith("--"):
        name = "--" + name[2:].replace("_", "-")
    return name


def speculative_flag(word: str) -> tuple[bool, bool]:
    """(is a speculative flag, its value is the next word)."""
    name = flag_name(word)
    inline_value = "=" in word
    base = name.split(".", 1)[0]
    if name in FLAGS_ALONE:
        return True, False
    if name in FLAGS_WITH_VALUE or (base in _DOTTED and "." in name):
        return True, not inline_value
    return False, False


def check_variant_name(name: str) -> str:
    if not _NAME.fullmatch(name):
        raise UsageError(
            f"--variant: {name!r} is not a variant name "
            "(lower-case letters, digits, '.', '_', '-'; starting with a letter or digit)"
        )
    return name


def _bounded_int(value: int, flag: str, low: int, high: int) -> int:
    if isinstance(value, bool) or not low <= value <= high:
        raise UsageError(f"{flag}: {value!r} must be an integer from {low} to {high}")
    return value


def _check_text(value: str, flag: str) -> str:
    if not value or any(ord(ch) < 32 or ord(ch) == 127 for ch in value):
        raise UsageError(f"{flag}: {value!r} must be non-empty text without control characters")
    return value


def baseline() -> Variant:
    return Variant("baseline", None)


def ngram(num_speculative_tokens: int = 3, lookup_min: int = 2, lookup_max: int = 4) -> Variant:
    k = _bounded_int(num_speculative_tokens, "--num-speculative-tokens", 1, 64)
    low = _bounded_int(lookup_min, "--prompt-lookup-min", 1, 64)
    high = _bounded_int(lookup_max, "--prompt-lookup-max", 1, 64)
    if low > high:
        raise UsageError(f"--prompt-lookup-min: {low} is larger than --prompt-lookup-max {high}")
    return Variant(
        "ngram",
        {
            "method": "ngram",
            "num_speculative_tokens": k,
            "prompt_lookup_max": high,
            "prompt_lookup_min": low,
        },
    )


def eagle3(
    draft_model: str, num_speculative_tokens: int = 3, draft_tp: int | None = None
) -> Variant:
    config: dict[str, Any] = {
        "method": "eagle3",
        "model": _check_text(draft_model, "--draft-model"),
        "num_speculative_tokens": _bounded_int(
            num_speculative_tokens, "--num-speculative-tokens", 1, 64
        ),
    }
    if draft_tp is not None:
        config["draft_tensor_parallel_size"] = _bounded_int(draft_tp, "--draft-tp", 1, 64)
    return Variant("eagle3", config)


def from_json(name: str, text: str) -> Variant:
    """Any ``--speculative-config`` JSON object, under the variant name ``name``."""
    try:
        config = json.loads(text)
    except ValueError as exc:
        raise UsageError(f"--spec: {text!r} is not JSON ({exc})") from None
    if not isinstance(config, dict) or not config:
        raise UsageError(f"--spec: {text!r} must be a non-empty JSON object")
    method = config.get("method")
    if method is not None and not isinstance(method, str):
        raise UsageError(f"--spec: 'method' must be a string, got {method!r}")
    if name in ("ngram", "eagle3") and method not in (None, name):
        raise UsageError(f"--spec: method {method!r} does not match --variant {name}")
    return Variant(check_variant_name(name), config)
