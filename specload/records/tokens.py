"""``tokens.jsonl``: the token ids of a baseline run, one line per completed request.

``specload run --record-token-ids`` appends one JSON object per completed request,
as each completes (like ``requests.jsonl``)::

    {"step": "c4", "category": "coding", "prompt_ids": [...], "output_ids": [...],
     "content_start": 117, "max_tokens": 256, "finish_reason": "length"}

``step`` is the level's step label (``c4``; warm-up requests carry ``c4-warmup``),
``content_start`` the index in ``output_ids`` of the first content (answer) token —
``null`` when the request never left its reasoning, ``0`` for a model that does not
reason. ``output_ids`` are the ids the server returned (the stop token included when
the server sends it).

:func:`read_tokens` skips a torn last line (a killed run) and turns anything else that is
not such a line into one :class:`~specload.errors.UsageError` naming the file and line;
:func:`write_tokens` / :func:`token_line` write the format (tests, benchmarks).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import orjson

from specload.errors import UsageError

TOKENS_FILE = "tokens.jsonl"
FINISH_REASONS = ("length", "stop", "abort")


@dataclass(frozen=True, slots=True)
class TokenRecord:
    """One completed request's token ids."""

    step: str
    category: str
    prompt_ids: tuple[int, ...]
    output_ids: tuple[int, ...]
    content_start: int | None = None
    max_tokens: int | None = None
    finish_reason: str | None = None

    @property
    def level(self) -> str:
        """The level's name (``c4``) for a measured request; warm-ups keep their suffix."""
        return self.step

    def to_dict(self) -> dict[str, Any]:
        return {
            "step": self.step,
            "category": self.category,
            "prompt_ids": list(self.prompt_ids),
            "output_ids": list(self.output_ids),
            "content_start": self.content_start,
            "max_tokens": self.max_tokens,
            "finish_reason": self.finish_reason,
        }


def token_line(record: TokenRecord | Mapping[str, Any]) -> bytes:
    """One line of ``tokens.jsonl`` (with its newline)."""
    data = record.to_dict() if isinstance(record, TokenRecord) else dict(record)
    return orjson.dumps(data) + b"\n"


def write_tokens(path: str | Path, records: Iterable[TokenRecord | Mapping[str, Any]]) -> Path:
    """Append ``records`` to ``path`` (a results directory or the file itself)."""
    p = Path(path)
    if p.is_dir():
        p = p / TOKENS_FILE
    with p.open("ab") as fh:
        for record in records:
            fh.write(token_line(record))
    return p


def tokens_path(path: str | Path) -> Path:
    p = Path(path)
    return p / TOKENS_FILE if p.is_dir() else p


def read_tokens(path: str | Path) -> list[TokenRecord]:
    """Every record of ``tokens.jsonl`` (``path``: a results directory or the file).

    A missing file, a line that is not a JSON object with the fields above, or ids that are
    not non-negative integers raise :class:`UsageError` (one line: file, line, field); a
    last line that is not valid JSON is a torn write of a killed run and is skipped.
    """
    p = tokens_path(path)
    try:
        lines = p.read_bytes().splitlines()
    except FileNotFoundError:
        raise UsageError(
            f"{p}: no token ids (rerun the baseline with `specload run --record-token-ids`)"
        ) from None
    except OSError as exc:
        raise UsageError(f"{p}: cannot read ({exc.strerror})") from None
    out: list[TokenRecord] = []
    last = len(lines)
    while last and not lines[last - 1].strip():
        last -= 1
    for lineno, line in enumerate(lines[:last], 1):
        if not line.strip():
            continue
        try:
            item = orjson.loads(line)
        except orjson.JSONDecodeError:
            if lineno == last:
                break  # the run was killed while writing this line
            raise UsageError(f"{p}:{lineno}: not valid JSON") from None
        out.append(_record(item, f"{p}:{lineno}"))
    return out


def _ids(value: Any, where: str, name: str) -> tuple[int, ...]:
    if not isinstance(value, list):
        raise UsageError(f"{where}: {name} must be a list of token ids")
    for v in value:
        if type(v) is not int or v < 0:
            raise UsageError(f"{where}: {name} has {v!r}, not a token id (an integer >= 0)")
    return tuple(value)


def _record(item: Any, where: str) -> TokenRecord:
    if not isinstance(item, dict):
        raise UsageError(f"{where}: not a JSON object")
    step = item.get("step")
    if not isinstance(step, str) or not step:
        raise UsageError(f"{where}: step must be a level's step label such as 'c4'")
    category = item.get("category")
    if category is None:
        category = "unknown"
    if not isinstance(category, str):
        raise UsageError(f"{where}: category must be a string")
    if "prompt_ids" not in item or "output_ids" not in item:
        missing = "prompt_ids" if "prompt_ids" not in item else "output_ids"
        raise UsageError(f"{where}: no {missing}")
    prompt = _ids(item["prompt_ids"], where, "prompt_ids")
    output = _ids(item["output_ids"], where, "output_ids")
    content_start = item.get("content_start")
    if content_start is not None and (
        type(content_start) is not int or not 0 <= content_start <= len(output)
    ):
        raise UsageError(
            f"{where}: content_start {content_start!r} must be null or an index in "
            f"[0, {len(output)}] (the output has {len(output)} tokens)"
        )
    max_tokens = item.get("max_tokens")
    if max_tokens is not None and (type(max_tokens) is not int or max_tokens < 1):
        raise UsageError(f"{where}: max_tokens {max_tokens!r} must be null or an integer >= 1")
    finish = item.get("finish_reason")
    if finish is not None and finish not in FINISH_REASONS:
        raise UsageError(
            f"{where}: finish_reason {finish!r} must be null or one of {', '.join(FINISH_REASONS)}"
        )
    return TokenRecord(step, category, prompt, output, content_start, max_tokens, finish)
