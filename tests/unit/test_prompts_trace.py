"""Traces: Mooncake and plain JSONL read into timed prompts; shared blocks share text."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from specload.errors import UsageError
from specload.prompts.trace import BLOCK_TOKENS, block_text, load_trace, share


def write(path: Path, rows: list[object]) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def test_mooncake_entries_share_their_blocks_byte_for_byte(tmp_path: Path) -> None:
    rows = [
        {"timestamp": 1500, "input_length": 700, "output_length": 20, "hash_ids": [1, 2]},
        {"timestamp": 500, "input_length": 1024, "output_length": 5, "hash_ids": [1, 3]},
        {"timestamp": 2500, "input_length": 100, "output_length": 9, "hash_ids": [4]},
    ]
    entries = load_trace(write(tmp_path / "t.jsonl", rows), speedup=2.0)
    # time order, offsets from the first, halved
    assert [e.offset_s for e in entries] == [0.0, 0.5, 1.0]
    texts = [e.prompt.messages[0]["content"] for e in entries]
    assert [len(t.split()) for t in texts] == [1024, 700, 100]
    assert [e.prompt.max_tokens for e in entries] == [5, 20, 9]
    first = block_text(1)
    assert texts[0].startswith(first + " ") and texts[1].startswith(first + " ")
    assert texts[0][len(first) :] != texts[1][len(first) :]  # blocks 3 and 2 differ
    assert texts[1].split()[BLOCK_TOKENS:] == block_text(2).split()[: 700 - BLOCK_TOKENS]
    assert {e.prompt.category for e in entries} == {"trace"}


def test_plain_entries_and_shares(tmp_path: Path) -> None:
    rows = [
        {"timestamp": 0, "prompt": "hello", "max_tokens": 8, "category": "math"},
        {"timestamp": 10, "messages": [{"role": "user", "content": "hi"}]},
        {"timestamp": 20, "prompt": "third"},
    ]
    entries = load_trace(write(tmp_path / "p.jsonl", rows))
    assert entries[0].prompt.messages == ({"role": "user", "content": "hello"},)
    assert entries[0].prompt.category == "math" and entries[0].prompt.max_tokens == 8
    assert entries[1].offset_s == pytest.approx(0.01)
    assert [e.offset_s for e in share(entries, 1, 2)] == [pytest.approx(0.01)]
    assert len(share(entries, 0, 2)) == 2 and len(share(entries, 0, 1)) == 3


@pytest.mark.parametrize(
    ("row", "message"),
    [
        ({"prompt": "x"}, "no 'timestamp'"),
        ({"timestamp": -1, "prompt": "x"}, "timestamp must be milliseconds"),
        ({"timestamp": 0}, "no 'prompt'"),
        ({"timestamp": 0, "input_length": 10, "output_length": 1}, "no 'hash_ids'"),
        ({"timestamp": 0, "input_length": 600, "output_length": 1, "hash_ids": [1]}, "2 blocks"),
        ({"timestamp": 0, "input_length": 6, "output_length": 0, "hash_ids": [1]}, "output_length"),
        ({"timestamp": 0, "prompt": "x", "max_tokens": "many"}, "max_tokens"),
        ("[1]", "not a JSON object"),
    ],
)  # fmt: skip
def test_bad_lines_name_the_file_line_and_field(tmp_path: Path, row: object, message: str) -> None:
    path = write(tmp_path / "bad.jsonl", [{"timestamp": 0, "prompt": "ok"}, row])
    with pytest.raises(UsageError, match=message) as info:
        load_trace(path)
    assert "line 2" in str(info.value) and "bad.jsonl" in str(info.value)


def test_missing_or_empty_traces(tmp_path: Path) -> None:
    with pytest.raises(UsageError, match="no such file"):
        load_trace(tmp_path / "none.jsonl")
    (tmp_path / "empty.jsonl").write_text("\n")
    with pytest.raises(UsageError, match="no entries"):
        load_trace(tmp_path / "empty.jsonl")
