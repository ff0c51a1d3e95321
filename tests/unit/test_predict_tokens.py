"""tokens.jsonl: round trip, a torn last line skipped, bad content one line naming the line."""

from __future__ import annotations

import pytest

from specload.errors import UsageError
from specload.records.tokens import TokenRecord, read_tokens, token_line, write_tokens

REC = TokenRecord("c4", "coding", (1, 2, 3), (4, 5, 6, 7), 2, 256, "length")


def test_round_trip(tmp_path):
    write_tokens(tmp_path, [REC, TokenRecord("c1", "math", (9,), (), None, None, None)])
    got = read_tokens(tmp_path)
    assert got[0] == REC
    assert got[1].output_ids == () and got[1].content_start is None
    assert read_tokens(tmp_path / "tokens.jsonl") == got


def test_torn_last_line_is_skipped(tmp_path):
    p = write_tokens(tmp_path, [REC, REC])
    with p.open("ab") as fh:
        fh.write(b'{"step": "c4", "prompt_ids": [1, 2')
    assert len(read_tokens(tmp_path)) == 2


def test_missing_file_names_the_option(tmp_path):
    with pytest.raises(UsageError, match="--record-token-ids"):
        read_tokens(tmp_path)


@pytest.mark.parametrize(
    ("line", "message"),
    [
        (b"[1, 2]", "not a JSON object"),
        (b'{"category": "x", "prompt_ids": [], "output_ids": []}', "step"),
        (b'{"step": "c1", "output_ids": []}', "no prompt_ids"),
        (b'{"step": "c1", "prompt_ids": [1], "output_ids": "abc"}', "output_ids must be"),
        (b'{"step": "c1", "prompt_ids": [1, -2], "output_ids": []}', "not a token id"),
        (b'{"step": "c1", "prompt_ids": [1.5], "output_ids": []}', "not a token id"),
        (
            b'{"step": "c1", "prompt_ids": [], "output_ids": [1], "content_start": 5}',
            "content_start",
        ),
        (b'{"step": "c1", "prompt_ids": [], "output_ids": [], "max_tokens": 0}', "max_tokens"),
        (
            b'{"step": "c1", "prompt_ids": [], "output_ids": [], "finish_reason": "x"}',
            "finish_reason",
        ),
    ],
)
def test_bad_content_is_one_line(tmp_path, line, message):
    p = tmp_path / "tokens.jsonl"
    p.write_bytes(token_line(REC) + line + b"\n" + token_line(REC))
    with pytest.raises(UsageError, match=message) as info:
        read_tokens(tmp_path)
    assert ":2:" in str(info.value)
    assert "\n" not in str(info.value)


def test_invalid_json_inside_the_file_is_an_error(tmp_path):
    p = tmp_path / "tokens.jsonl"
    p.write_bytes(token_line(REC) + b"{oops\n" + token_line(REC))
    with pytest.raises(UsageError, match=r":2: not valid JSON"):
        read_tokens(tmp_path)
