"""Prompt sets: the built-in corpus and user files, in a seeded, reproducible order.

``load_prompt_set(spec)`` accepts:

- ``builtin`` — 100 prompts written for specload, 20 in each category
  (``coding``, ``math``, ``structured``, ``explanation``, ``long_reasoning``),
  each category with its default token budget (:data:`DEFAULT_MAX_TOKENS`);
- ``builtin:math,coding`` — the built-in corpus restricted to categories;
- a ``.jsonl`` file: one object per line with ``prompt`` (a string) or
  ``messages`` (OpenAI chat messages), optional ``category`` (default
  ``explanation``) and ``max_tokens``;
- a ShareGPT ``.json`` file: a list of ``{"conversations": [{"from": "human",
  "value": ...}, ...]}``; the first human turn is the prompt.

A bad file raises :class:`~specload.errors.UsageError` naming the file, the
line (or entry) and the field.
"""

from __future__ import annotations

import json
import random
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from typing import Any

from specload.errors import UsageError

CATEGORIES: tuple[str, ...] = ("coding", "math", "structured", "explanation", "long_reasoning")

# Default max_tokens per category: reasoning models spend thousands of tokens
# thinking before they answer (the reference measured with 4096).
DEFAULT_MAX_TOKENS: dict[str, int] = {
    "coding": 4096,
    "math": 4096,
    "structured": 2048,
    "explanation": 2048,
    "long_reasoning": 8192,
}
FALLBACK_CATEGORY = "explanation"


@dataclass(frozen=True)
class Prompt:
    """One prompt: chat messages, a category and a token budget."""

    id: str
    category: str
    messages: tuple[dict[str, str], ...]
    max_tokens: int

    @property
    def text(self) -> str:
        return "\n".join(m.get("content", "") for m in self.messages)


def _budget(category: str, max_tokens: Any, where: str) -> int:
    if max_tokens is None:
        return DEFAULT_MAX_TOKENS.get(category, DEFAULT_MAX_TOKENS[FALLBACK_CATEGORY])
    if isinstance(max_tokens, bool) or not isinstance(max_tokens, int) or max_tokens < 1:
        raise UsageError(f"{where}: field 'max_tokens' must be a positive integer")
    return max_tokens


def _category(value: Any, where: str) -> str:
    if value is None:
        return FALLBACK_CATEGORY
    if not isinstance(value, str) or not value.strip():
        raise UsageError(f"{where}: field 'category' must be a non-empty string")
    return value.strip()


def _messages(value: Any, where: str) -> tuple[dict[str, str], ...]:
    if not isinstance(value, list) or not value:
        raise UsageError(f"{where}: field 'messages' must be a non-empty list")
    out = []
    for i, m in enumerate(value):
        if (
            not isinstance(m, dict)
            or not isinstance(m.get("role"), str)
            or not isinstance(m.get("content"), str)
        ):
            raise UsageError(f"{where}: field 'messages[{i}]' needs string 'role' and 'content'")
        out.append({"role": m["role"], "content": m["content"]})
    return tuple(out)


def _from_object(obj: Any, where: str, default_id: str) -> Prompt:
    if not isinstance(obj, dict):
        raise UsageError(f"{where}: expected a JSON object")
    category = _category(obj.get("category"), where)
    if "messages" in obj:
        messages = _messages(obj["messages"], where)
    elif "prompt" in obj:
        if not isinstance(obj["prompt"], str) or not obj["prompt"].strip():
            raise UsageError(f"{where}: field 'prompt' must be a non-empty string")
        messages = ({"role": "user", "content": obj["prompt"]},)
    else:
        raise UsageError(f"{where}: field 'prompt' or 'messages' is missing")
    pid = obj.get("id", default_id)
    return Prompt(str(pid), category, messages, _budget(category, obj.get("max_tokens"), where))


def load_jsonl(path: str | Path) -> list[Prompt]:
    p = Path(path)
    prompts: list[Prompt] = []
    try:
        lines = p.read_text(encoding="utf-8").splitlines()
    except OSError as exc:
        raise UsageError(f"{p}: cannot read ({exc.strerror})") from None
    except UnicodeDecodeError:
        raise UsageError(f"{p}: not UTF-8 text") from None
    for n, line in enumerate(lines, 1):
        if not line.strip():
            continue
        where = f"{p}:{n}"
        try:
            obj = json.loads(line)
        except json.JSONDecodeError as exc:
            raise UsageError(f"{where}: invalid JSON ({exc.msg})") from None
        prompts.append(_from_object(obj, where, f"{p.stem}-{n}"))
    if not prompts:
        raise UsageError(f"{p}: no prompts")
    return prompts


def load_sharegpt(path: str | Path) -> list[Prompt]:
    p = Path(path)
    try:
        data = json.loads(p.read_text(encoding="utf-8"))
    except OSError as exc:
        raise UsageError(f"{p}: cannot read ({exc.strerror})") from None
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise UsageError(f"{p}: invalid JSON ({exc})") from None
    if not isinstance(data, list):
        raise UsageError(f"{p}: expected a JSON list of ShareGPT conversations")
    prompts: list[Prompt] = []
    for n, entry in enumerate(data):
        where = f"{p}: entry {n}"
        if not isinstance(entry, dict) or not isinstance(entry.get("conversations"), list):
            raise UsageError(f"{where}: field 'conversations' must be a list")
        first = next(
            (
                turn
                for turn in entry["conversations"]
                if isinstance(turn, dict) and turn.get("from") in ("human", "user")
            ),
            None,
        )
        if first is None:
            continue  # a conversation without a human turn has no prompt
        if not isinstance(first.get("value"), str) or not first["value"].strip():
            raise UsageError(f"{where}: field 'conversations[].value' must be a non-empty string")
        category = _category(entry.get("category"), where)
        prompts.append(
            Prompt(
                str(entry.get("id", f"{p.stem}-{n}")),
                category,
                ({"role": "user", "content": first["value"]},),
                _budget(category, entry.get("max_tokens"), where),
            )
        )
    if not prompts:
        raise UsageError(f"{p}: no prompts (no conversation has a human turn)")
    return prompts


def load_builtin(categories: Sequence[str] | None = None) -> list[Prompt]:
    """The built-in corpus (100 prompts), optionally restricted to ``categories``."""
    text = resources.files(__name__).joinpath("corpus.jsonl").read_text(encoding="utf-8")
    prompts = [
        _from_object(json.loads(line), f"builtin:{n}", f"builtin-{n}")
        for n, line in enumerate(text.splitlines(), 1)
        if line.strip()
    ]
    if categories:
        unknown = sorted(set(categories) - set(CATEGORIES))
        if unknown:
            raise UsageError(
                f"--prompts: unknown category {', '.join(unknown)} "
                f"(built-in categories: {', '.join(CATEGORIES)})"
            )
        prompts = [p for p in prompts if p.category in categories]
    return prompts


def load_prompt_set(spec: str) -> list[Prompt]:
    """Load ``builtin``, ``builtin:CATS``, a JSONL file or a ShareGPT JSON file."""
    spec = spec.strip()
    if spec in ("", "builtin"):
        return load_builtin()
    if spec.startswith("builtin:"):
        cats = [c.strip() for c in spec[len("builtin:") :].split(",") if c.strip()]
        return load_builtin(cats)
    path = Path(spec)
    if not path.exists():
        raise UsageError(f"--prompts: {spec!r} is neither 'builtin' nor an existing file")
    if path.suffix == ".json":
        return load_sharegpt(path)
    return load_jsonl(path)


class PromptSampler:
    """Cycles through prompts in a seeded shuffled order, reshuffling each pass.

    The same ``seed`` and ``stream`` give the same sequence; workers use their
    index as ``stream`` so they do not all send the same prompt at once.
    """

    def __init__(self, prompts: Sequence[Prompt], seed: int = 0, stream: int = 0) -> None:
        if not prompts:
            raise UsageError("--prompts: the prompt set is empty")
        self._prompts = list(prompts)
        self._rng = random.Random(f"{seed}/{stream}")
        self._order: list[int] = []

    def __iter__(self) -> Iterator[Prompt]:
        return self

    def __next__(self) -> Prompt:
        if not self._order:
            self._order = list(range(len(self._prompts)))
            self._rng.shuffle(self._order)
            self._order.reverse()
        return self._prompts[self._order.pop()]
