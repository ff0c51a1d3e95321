"""Prompt sets: the built-in corpus, JSONL and ShareGPT files, one-line errors."""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path
from types import SimpleNamespace

import pytest

from specload.errors import UsageError
from specload.load.options import validate
from specload.prompts import (
    CATEGORIES,
    DEFAULT_MAX_TOKENS,
    PromptSampler,
    load_builtin,
    load_prompt_set,
)

pytestmark = pytest.mark.unit


def test_builtin_corpus_has_100_distinct_prompts_in_five_categories() -> None:
    prompts = load_builtin()
    assert len(prompts) >= 100
    counts = Counter(p.category for p in prompts)
    assert set(counts) == set(CATEGORIES)
    assert min(counts.values()) >= 20
    assert len({p.text for p in prompts}) == len(prompts)
    assert all(p.max_tokens == DEFAULT_MAX_TOKENS[p.category] for p in prompts)


def test_builtin_restricted_to_categories() -> None:
    prompts = load_prompt_set("builtin:math,coding")
    assert {p.category for p in prompts} == {"math", "coding"}
    with pytest.raises(UsageError, match="unknown category poetry"):
        load_prompt_set("builtin:poetry")


def test_jsonl_prompt_and_messages(tmp_path: Path) -> None:
    f = tmp_path / "p.jsonl"
    f.write_text(
        json.dumps({"prompt": "hi", "category": "math", "max_tokens": 64})
        + "\n\n"
        + json.dumps(
            {"messages": [{"role": "system", "content": "s"}, {"role": "user", "content": "u"}]}
        )
        + "\n"
    )
    a, b = load_prompt_set(str(f))
    assert a.messages == ({"role": "user", "content": "hi"},) and a.max_tokens == 64
    assert a.category == "math"
    assert b.category == "explanation" and len(b.messages) == 2
    assert b.max_tokens == DEFAULT_MAX_TOKENS["explanation"]


@pytest.mark.parametrize(
    ("line", "message"),
    [
        ("{not json", r"p\.jsonl:2: invalid JSON"),
        ('{"category": "math"}', r"p\.jsonl:2: field 'prompt' or 'messages' is missing"),
        ('{"prompt": "x", "max_tokens": -1}', r"p\.jsonl:2: field 'max_tokens'"),
        ('{"messages": [{"role": "user"}]}', r"p\.jsonl:2: field 'messages\[0\]'"),
        ('{"prompt": ""}', r"p\.jsonl:2: field 'prompt'"),
    ],
)
def test_bad_jsonl_names_file_line_and_field(tmp_path: Path, line: str, message: str) -> None:
    f = tmp_path / "p.jsonl"
    f.write_text('{"prompt": "ok"}\n' + line + "\n")
    with pytest.raises(UsageError, match=message) as exc:
        load_prompt_set(str(f))
    assert "\n" not in str(exc.value)


def test_sharegpt_first_human_turn(tmp_path: Path) -> None:
    f = tmp_path / "sg.json"
    f.write_text(
        json.dumps(
            [
                {
                    "id": "a",
                    "conversations": [
                        {"from": "system", "value": "s"},
                        {"from": "human", "value": "question"},
                        {"from": "gpt", "value": "answer"},
                    ],
                },
                {"id": "b", "conversations": [{"from": "gpt", "value": "only"}]},
            ]
        )
    )
    (p,) = load_prompt_set(str(f))
    assert p.id == "a" and p.messages == ({"role": "user", "content": "question"},)


def test_bad_sharegpt_names_entry_and_field(tmp_path: Path) -> None:
    f = tmp_path / "sg.json"
    f.write_text(json.dumps([{"conversations": "nope"}]))
    with pytest.raises(UsageError, match=r"sg\.json: entry 0: field 'conversations'"):
        load_prompt_set(str(f))


def test_missing_file_is_one_line() -> None:
    with pytest.raises(UsageError, match=r"--prompts: '/nonexistent\.jsonl'"):
        load_prompt_set("/nonexistent.jsonl")


def test_sampler_is_seeded_reproducible_and_covers_every_prompt() -> None:
    prompts = load_builtin()
    a = [next(PromptSampler(prompts, seed=3)).id for _ in range(1)]
    s1, s2 = PromptSampler(prompts, seed=3), PromptSampler(prompts, seed=3)
    first = [next(s1).id for _ in range(250)]
    assert first == [next(s2).id for _ in range(250)]
    assert a[0] == first[0]
    assert len(set(first[:100])) == 100  # one full pass before repeating
    other = PromptSampler(prompts, seed=3, stream=1)
    assert [next(other).id for _ in range(10)] != first[:10]


@pytest.mark.parametrize(
    ("field", "value", "message"),
    [
        ("max_tokens", 0, "--max-tokens"),
        ("request_timeout", 0.0, "--request-timeout"),
        ("temperature", -1.0, "--temperature"),
        ("tokenizer", "/nonexistent/tok", "--tokenizer"),
    ],
)
def test_bad_load_options_name_the_option(field: str, value: object, message: str) -> None:
    opts = SimpleNamespace(max_tokens=None, request_timeout=600.0, temperature=None, tokenizer="")
    setattr(opts, field, value)
    with pytest.raises(UsageError, match=message):
        validate(opts)
