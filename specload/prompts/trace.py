"""Request traces to replay at their own times (``specload run --trace FILE``).

Two JSONL forms, told apart line by line:

- **Mooncake** (the FAST'25 traces): ``timestamp`` (ms from the trace's start),
  ``input_length``, ``output_length``, ``hash_ids`` (one id per block of
  :data:`BLOCK_TOKENS` prompt tokens). The prompt is made of one text block per hash id —
  the same id, the same words, byte for byte — so requests that share leading ids share
  their prompt prefix on the server as they did in the trace; the last block is cut to
  ``input_length``. A word stands for a token (the server's tokenizer may count a few
  more or fewer).
- **plain**: ``timestamp`` (ms), ``prompt`` (a string) or ``messages`` (chat messages),
  optional ``max_tokens``, optional ``category``.

Entries are replayed in timestamp order; ``speedup`` divides the times (2: twice as fast).
Every entry is proven sendable as it is read, as prompt files are
(:mod:`specload.prompts`): UTF-8 text, ``max_tokens`` and ``output_length`` from 1 to
:data:`~specload.prompts.MAX_TOKENS_LIMIT`, a printable category, messages with string
``role`` and ``content`` (the only keys sent). A bad line is a
:class:`~specload.errors.UsageError` naming the file, the line and the field.
"""

from __future__ import annotations

import hashlib
import json
import random
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from specload.errors import UsageError
from specload.prompts import (
    FALLBACK_CATEGORY,
    MAX_TOKENS_LIMIT,
    Prompt,
    check_category,
    check_messages,
    check_prompt_text,
)

BLOCK_TOKENS = 512  # Mooncake's block size
TRACE_CATEGORY = "trace"
MAX_TRACE_ENTRIES = 10_000_000
# The words a block is made of (common short words: each about one token).
_WORDS = (
    "the",
    "of",
    "and",
    "to",
    "in",
    "is",
    "that",
    "for",
    "it",
    "as",
    "with",
    "was",
    "on",
    "be",
    "at",
    "by",
    "this",
    "had",
    "not",
    "are",
    "but",
    "from",
    "or",
    "have",
    "an",
    "they",
    "which",
    "one",
    "you",
    "were",
    "all",
    "we",
    "her",
    "she",
    "there",
    "would",
    "their",
    "will",
    "when",
    "who",
    "him",
    "been",
    "has",
    "more",
    "if",
    "no",
    "out",
    "do",
    "so",
    "can",
    "what",
    "up",
    "said",
    "about",
    "other",
    "into",
    "than",
    "its",
    "time",
    "only",
)


@dataclass(frozen=True)
class TraceEntry:
    offset_s: float  # from the trace's start, speedup applied
    prompt: Prompt


def block_text(hash_id: int, tokens: int = BLOCK_TOKENS) -> str:
    """The words of one block: the same for the same id, whatever the request."""
    rng = random.Random(hash_id)
    return " ".join(rng.choice(_WORDS) for _ in range(tokens))


def _field(obj: dict[str, Any], name: str, where: str) -> Any:
    if name not in obj:
        raise UsageError(f"{where}: no {name!r}")
    return obj[name]


def _count(value: Any, name: str, where: str, *, low: int = 0) -> int:
    if type(value) is not int or not low <= value <= MAX_TOKENS_LIMIT:
        raise UsageError(
            f"{where}: {name} must be a whole number from {low} to {MAX_TOKENS_LIMIT:,}, "
            f"not {value!r:.40}"
        )
    return value


def _entry(obj: Any, index: int, where: str) -> tuple[float, Prompt]:
    if not isinstance(obj, dict):
        raise UsageError(f"{where}: not a JSON object")
    ts = _field(obj, "timestamp", where)
    if isinstance(ts, bool) or not isinstance(ts, int | float) or not 0 <= ts < 1e15:
        raise UsageError(f"{where}: timestamp must be milliseconds (a number >= 0), not {ts!r:.40}")
    category = check_category(
        obj.get("category", TRACE_CATEGORY if "hash_ids" in obj else FALLBACK_CATEGORY), where
    )
    if "hash_ids" in obj or "input_length" in obj:
        length = _count(_field(obj, "input_length", where), "input_length", where, low=1)
        out = _count(_field(obj, "output_length", where), "output_length", where, low=1)
        ids = _field(obj, "hash_ids", where)
        if not isinstance(ids, list) or not all(type(h) is int for h in ids) or not ids:
            raise UsageError(f"{where}: hash_ids must be a non-empty list of integers")
        if len(ids) * BLOCK_TOKENS < length:
            raise UsageError(
                f"{where}: input_length {length} needs {-(-length // BLOCK_TOKENS)} blocks, "
                f"hash_ids has {len(ids)}"
            )
        words: list[str] = []
        left = length
        for h in ids:
            if left <= 0:
                break
            take = min(left, BLOCK_TOKENS)
            words.append(block_text(h, take))  # a cut block: the full one's first words
            left -= take
        text = " ".join(words)
        messages: tuple[dict[str, str], ...] = ({"role": "user", "content": text},)
        max_tokens = out
    else:
        if "messages" in obj:
            messages = check_messages(obj["messages"], where)
        else:
            text = check_prompt_text(_field(obj, "prompt", where), where)
            messages = ({"role": "user", "content": text},)
        mt = obj.get("max_tokens")
        max_tokens = _count(mt, "max_tokens", where, low=1) if mt is not None else 2048
    return float(ts) / 1000.0, Prompt(f"trace-{index}", category, messages, max_tokens)


def load_trace(path: str | Path, *, speedup: float = 1.0) -> list[TraceEntry]:
    """The trace's entries in time order, offsets from the first (raises UsageError)."""
    p = Path(path)
    name = f"--trace {str(p)!r}"
    if not p.is_file():
        raise UsageError(f"{name}: no such file")
    if not speedup > 0:
        raise UsageError(f"--trace-speedup: {speedup} must be positive")
    out: list[tuple[float, Prompt]] = []
    try:
        with p.open("rb") as f:
            for n, line in enumerate(f, 1):
                if not line.strip():
                    continue
                where = f"{name} line {n}"
                try:
                    obj = json.loads(line)
                except (ValueError, RecursionError):  # digits limit, encoding, nesting
                    raise UsageError(f"{where}: not JSON") from None
                out.append(_entry(obj, len(out), where))
                if len(out) > MAX_TRACE_ENTRIES:
                    raise UsageError(f"{name}: more than {MAX_TRACE_ENTRIES:,} entries")
    except OSError as exc:
        raise UsageError(f"{name}: cannot read ({exc.strerror})") from None
    if not out:
        raise UsageError(f"{name}: no entries")
    out.sort(key=lambda e: e[0])
    start = out[0][0]
    return [TraceEntry((t - start) / speedup, prompt) for t, prompt in out]


def trace_digest(path: str | Path, speedup: float = 1.0) -> str:
    """What identifies a trace replay across hosts: the file's bytes and the speedup (a
    worker started with another file, or none, would send another workload)."""
    h = hashlib.sha256(f"{float(speedup)!r}\n".encode())
    try:
        with Path(path).open("rb") as f:
            for block in iter(lambda: f.read(1 << 20), b""):
                h.update(block)
    except OSError:
        return ""
    return h.hexdigest()[:16]


def share(entries: Sequence[TraceEntry], index: int, count: int) -> list[TraceEntry]:
    """The entries one of ``count`` load processes sends (every ``count``-th from ``index``)."""
    return list(entries[index::count]) if count > 1 else list(entries)
