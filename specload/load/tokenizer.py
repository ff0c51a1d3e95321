"""A local tokenizer (``--tokenizer``) for servers that send no usage."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from specload.errors import UsageError


class LocalTokenizer:
    """Counts tokens with a Hugging Face ``tokenizer.json`` (the ``tokenizers`` package)."""

    def __init__(self, path: str | Path) -> None:
        p = Path(path)
        if p.is_dir():
            p = p / "tokenizer.json"
        if not p.is_file():
            raise UsageError(f"--tokenizer: {str(path)!r} has no tokenizer.json")
        try:
            from tokenizers import Tokenizer  # noqa: PLC0415 (optional dependency)
        except ImportError:
            raise UsageError(
                "--tokenizer: needs the 'tokenizers' package (pip install tokenizers)"
            ) from None
        try:
            self._tok: Any = Tokenizer.from_file(str(p))
        except Exception as exc:
            raise UsageError(f"--tokenizer: cannot load {str(p)!r} ({exc})") from None

    def count(self, text: str) -> int:
        if not text:
            return 0
        return len(self._tok.encode(text, add_special_tokens=False).ids)
