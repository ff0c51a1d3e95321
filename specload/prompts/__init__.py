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

Every prompt is proven sendable as it is loaded: each string is UTF-8 text (a JSON
``"\\ud800"`` escape, common in scraped ShareGPT data, decodes to a lone surrogate
that no request body can hold), ``max_tokens`` a whole number from 1 to
:data:`MAX_TOKENS_LIMIT`, a category printable text (no line break: it labels records
and metrics). A bad file raises :class:`~specload.errors.UsageError` naming the file,
the line (1-based; a ShareGPT file: the entry, 0-based as ``jq '.[N]'``) and the
field, and how many more lines are bad. Loading the same unchanged file again (the
options' check, then the load generator) reads it once.
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
# A request's max_tokens at most (the meter's own cap on a request's tokens; the
# load options' --max-tokens has the same bound).
MAX_TOKENS_LIMIT = 10_000_000
MAX_CATEGORY_CHARS = 100  # a category labels records, metrics and tables


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


def check_text(value: str, field: str, where: str) -> str:
    """``value`` if it can be sent: UTF-8 text (a JSON ``"\\ud800"`` escape decodes to a
    lone surrogate, which no request body can hold), else :class:`UsageError`."""
    if value.isascii():
        return value
    try:
        value.encode("utf-8")
    except UnicodeEncodeError as exc:
        raise UsageError(
            f"{where}: field {field!r}: lone surrogate \\u{ord(value[exc.start]):04x} "
            f"(character {exc.start + 1}) cannot be encoded as UTF-8"
        ) from None
    return value


def check_max_tokens(value: Any, where: str, field: str = "max_tokens") -> int:
    """A request's ``max_tokens``: a whole number from 1 to :data:`MAX_TOKENS_LIMIT`
    (JSON's ``1.0``, ``1e30``, ``true`` and ``2**70`` are not)."""
    if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= MAX_TOKENS_LIMIT:
        raise UsageError(
            f"{where}: field {field!r} must be a whole number from 1 to "
            f"{MAX_TOKENS_LIMIT:,}, not {value!r:.40}"
        )
    return value


def check_category(value: Any, where: str) -> str:
    """A category (stripped): printable text of at most :data:`MAX_CATEGORY_CHARS`
    characters. It labels records and metrics; a line break or other control character
    has no place in a label (nor in the header the simulator reads)."""
    if not isinstance(value, str) or not value.strip():
        raise UsageError(f"{where}: field 'category' must be a non-empty string")
    text = check_text(value.strip(), "category", where)
    if len(text) > MAX_CATEGORY_CHARS:
        raise UsageError(
            f"{where}: field 'category' is {len(text):,} characters long "
            f"(at most {MAX_CATEGORY_CHARS})"
        )
    if not text.isprintable():
        i, ch = next((i, ch) for i, ch in enumerate(text) if not ch.isprintable())
        raise UsageError(
            f"{where}: field 'category': {ch!a} (character {i + 1}) is not printable "
            "(a category is a label: printable text only)"
        )
    return text


def _budget(category: str, max_tokens: Any, where: str) -> int:
    if max_tokens is None:
        return DEFAULT_MAX_TOKENS.get(category, DEFAULT_MAX_TOKENS[FALLBACK_CATEGORY])
    return check_max_tokens(max_tokens, where)


def _category(value: Any, where: str) -> str:
    if value is None:
        return FALLBACK_CATEGORY
    return check_category(value, where)


def check_messages(value: Any, where: str) -> tuple[dict[str, str], ...]:
    """Chat messages: a non-empty list of objects with string ``role`` and ``content``
    (other keys are not sent), every string UTF-8 text."""
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
        out.append(
            {
                "role": check_text(m["role"], f"messages[{i}].role", where),
                "content": check_text(m["content"], f"messages[{i}].content", where),
            }
        )
    return tuple(out)


def check_prompt_text(value: Any, where: str, field: str = "prompt") -> str:
    """A prompt string: non-empty UTF-8 text."""
    if not isinstance(value, str) or not value.strip():
        raise UsageError(f"{where}: field {field!r} must be a non-empty string")
    return check_text(value, field, where)


def _from_object(obj: Any, where: str, default_id: str) -> Prompt:
    if not isinstance(obj, dict):
        raise UsageError(f"{where}: expected a JSON object")
    category = _category(obj.get("category"), where)
    if "messages" in obj:
        messages = check_messages(obj["messages"], where)
    elif "prompt" in obj:
        messages = ({"role": "user", "content": check_prompt_text(obj["prompt"], where)},)
    else:
        raise UsageError(f"{where}: field 'prompt' or 'messages' is missing")
    pid = obj.get("id", default_id)
    return Prompt(str(pid), category, messages, _budget(category, obj.get("max_tokens"), where))


def _json(text: str | bytes, where: str) -> Any:
    """One JSON document, or a one-line :class:`UsageError` (a number of more than 4,300
    digits and nesting too deep for the parser are bad JSON too, not a traceback)."""
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        raise UsageError(f"{where}: invalid JSON ({exc.msg}, column {exc.colno})") from None
    except (ValueError, RecursionError) as exc:  # int digits limit, bad encoding, nesting
        detail = str(exc).split(";")[0] if isinstance(exc, ValueError) else "nested too deep"
        raise UsageError(f"{where}: invalid JSON ({detail[:80]})") from None


class _Errors:
    """The first bad entry of a file and how many more there are (every entry is
    checked, so one run of the command says how much of the file is bad)."""

    def __init__(self) -> None:
        self.first: UsageError | None = None
        self.more = 0

    def add(self, exc: UsageError) -> None:
        if self.first is None:
            self.first = exc
        else:
            self.more += 1

    def raise_first(self, unit: str) -> None:
        if self.first is None:
            return
        if not self.more:
            raise self.first
        plural = "s" if self.more > 1 else ""
        raise UsageError(f"{self.first} (and {self.more:,} more bad {unit}{plural})")


def _lines(text: str) -> list[str]:
    """JSONL lines: split at line feeds only. ``str.splitlines`` also splits at U+2028,
    U+0085 and others that JSON strings may hold raw (scraped text does)."""
    return [line.removesuffix("\r") for line in text.split("\n")]


def load_jsonl(path: str | Path) -> list[Prompt]:
    p = Path(path)
    prompts: list[Prompt] = []
    try:
        text = p.read_text(encoding="utf-8")
    except OSError as exc:
        raise UsageError(f"{p}: cannot read ({exc.strerror})") from None
    except UnicodeDecodeError as exc:
        bad = p.read_bytes()[: exc.start].count(b"\n") + 1
        raise UsageError(f"{p}:{bad}: not UTF-8 text (byte {exc.object[exc.start]:#04x})") from None
    errors = _Errors()
    for n, row in enumerate(_lines(text), 1):
        if not row.strip():
            continue
        where = f"{p}:{n}"
        try:
            prompts.append(_from_object(_json(row, where), where, f"{p.stem}-{n}"))
        except UsageError as exc:
            errors.add(exc)
    errors.raise_first("line")
    if not prompts:
        raise UsageError(f"{p}: no prompts")
    return prompts


def load_sharegpt(path: str | Path) -> list[Prompt]:
    p = Path(path)
    try:
        raw = p.read_bytes()
    except OSError as exc:
        raise UsageError(f"{p}: cannot read ({exc.strerror})") from None
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        line = raw[: exc.start].count(b"\n") + 1
        raise UsageError(f"{p}:{line}: not UTF-8 text (byte {raw[exc.start]:#04x})") from None
    data = _json(text, str(p))
    if not isinstance(data, list):
        raise UsageError(f"{p}: expected a JSON list of ShareGPT conversations")
    prompts: list[Prompt] = []
    errors = _Errors()
    for n, entry in enumerate(data):
        where = f"{p}: entry {n}"
        try:
            prompt = _sharegpt_entry(entry, where, f"{p.stem}-{n}")
        except UsageError as exc:
            errors.add(exc)
            continue
        if prompt is not None:
            prompts.append(prompt)
    errors.raise_first("entry")
    if not prompts:
        raise UsageError(f"{p}: no prompts (no conversation has a human turn)")
    return prompts


def _sharegpt_entry(entry: Any, where: str, default_id: str) -> Prompt | None:
    if not isinstance(entry, dict) or not isinstance(entry.get("conversations"), list):
        raise UsageError(f"{where}: field 'conversations' must be a list")
    first = next(
        (
            (i, turn)
            for i, turn in enumerate(entry["conversations"])
            if isinstance(turn, dict) and turn.get("from") in ("human", "user")
        ),
        None,
    )
    if first is None:
        return None  # a conversation without a human turn has no prompt
    i, turn = first
    text = check_prompt_text(turn.get("value"), where, f"conversations[{i}].value")
    category = _category(entry.get("category"), where)
    return Prompt(
        str(entry.get("id", default_id)),
        category,
        ({"role": "user", "content": text},),
        _budget(category, entry.get("max_tokens"), where),
    )


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


# The last file loaded: (spec, its identity) -> its prompts. The options' check and the
# load generator load the same file in one process; a big ShareGPT file is read once.
_last: tuple[tuple[str, tuple[int, int, int, int]], list[Prompt]] | None = None


def load_prompt_set(spec: str) -> list[Prompt]:
    """Load ``builtin``, ``builtin:CATS``, a JSONL file or a ShareGPT JSON file."""
    global _last
    spec = spec.strip()
    if spec in ("", "builtin"):
        return load_builtin()
    if spec.startswith("builtin:"):
        cats = [c.strip() for c in spec[len("builtin:") :].split(",") if c.strip()]
        return load_builtin(cats)
    path = Path(spec)
    try:
        st = path.stat()
    except (OSError, ValueError):  # ValueError: a NUL in the name
        raise UsageError(f"--prompts: {spec!r} is neither 'builtin' nor an existing file") from None
    key = (spec, (st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns))
    if _last is not None and _last[0] == key:
        return list(_last[1])
    prompts = load_sharegpt(path) if path.suffix == ".json" else load_jsonl(path)
    _last = (key, prompts)
    return list(prompts)


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
