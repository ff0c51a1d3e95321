"""Inputs proven sendable when they are loaded: prompt files, ShareGPT files, traces and
the load options. A prompt that no request body can hold (a lone surrogate, a
``max_tokens`` JSON or vLLM cannot take), or a category that could split a header or a
label, is a one-line error naming the file, the line and the field — never a run that
hangs or ends "complete" with nothing sent. What the loaders cannot have refused still
never escapes the requester: it is a ``bad_request`` record, sent to nobody, and nothing
of a prompt reaches an HTTP header."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

import specload.prompts
from specload.errors import UsageError
from specload.load.chat import ChatRequester, ChatSettings
from specload.load.metrics import FIXED_ERROR_KINDS
from specload.load.options import validate
from specload.prompts import MAX_TOKENS_LIMIT, Prompt, load_prompt_set
from specload.prompts.trace import load_trace
from specload.records.request import ERROR_KINDS
from specload.urls import parse_server_url
from tests.fixtures.canned import CannedServer

Canned = Callable[..., CannedServer]

pytestmark = pytest.mark.unit

SURROGATE = "a\ud800b"  # what json.loads makes of "a\ud800b" (scraped ShareGPT data)


def jsonl(path: Path, rows: list[Any]) -> Path:
    # ensure_ascii (the default) writes a lone surrogate as the escape \ud800, as
    # scraped files hold it; the line itself is valid UTF-8 and valid JSON.
    path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    return path


def load_error(path: Path) -> str:
    with pytest.raises(UsageError) as info:
        load_prompt_set(str(path))
    text = str(info.value)
    assert "\n" not in text and "\r" not in text
    return text


# -- prompt files: text ------------------------------------------------------------------


@pytest.mark.parametrize(
    ("row", "field", "code", "position"),
    [
        ({"prompt": SURROGATE}, "prompt", "d800", 2),
        ({"messages": [{"role": "user", "content": "ok"}, {"role": "user", "content": SURROGATE}]},
         "messages[1].content", "d800", 2),
        ({"messages": [{"role": "\udfff", "content": "x"}]}, "messages[0].role", "dfff", 1),
        ({"prompt": "x", "category": SURROGATE}, "category", "d800", 2),
    ],
)  # fmt: skip
def test_a_lone_surrogate_is_named_with_file_line_and_field(
    tmp_path: Path, row: dict[str, Any], field: str, code: str, position: int
) -> None:
    path = jsonl(tmp_path / "prompts.jsonl", [{"prompt": "fine"}, {"prompt": "fine"}, row])
    assert f"\\u{code}" in path.read_text()  # the file holds the escape, as scraped data does
    assert load_error(path) == (
        f"{path}:3: field {field!r}: lone surrogate \\u{code} (character {position}) "
        "cannot be encoded as UTF-8"
    )


def test_a_surrogate_pair_is_one_character_and_loads(tmp_path: Path) -> None:
    path = jsonl(tmp_path / "p.jsonl", [{"prompt": "smile \U0001f600", "category": "emoji ✓"}])
    (p,) = load_prompt_set(str(path))
    assert p.messages[0]["content"] == "smile \U0001f600" and p.category == "emoji ✓"


def test_sharegpt_surrogate_names_entry_and_turn(tmp_path: Path) -> None:
    path = tmp_path / "sg.json"
    good = {"conversations": [{"from": "human", "value": "q"}]}
    bad = {"conversations": [{"from": "gpt", "value": "a"}, {"from": "human", "value": SURROGATE}]}
    path.write_text(json.dumps([good, bad]))
    assert load_error(path) == (
        f"{path}: entry 1: field 'conversations[1].value': lone surrogate \\ud800 "
        "(character 2) cannot be encoded as UTF-8"
    )


def test_every_bad_line_is_counted_in_the_one_line(tmp_path: Path) -> None:
    rows = [{"prompt": "ok"}, {"prompt": SURROGATE}, {"prompt": "ok"}]
    rows += [{"prompt": "x", "max_tokens": 0}, {"prompt": SURROGATE}]
    message = load_error(jsonl(tmp_path / "p.jsonl", rows))
    assert message.startswith(f"{tmp_path / 'p.jsonl'}:2: field 'prompt': lone surrogate")
    assert message.endswith("(and 2 more bad lines)")


def test_raw_line_separators_inside_strings_do_not_split_lines(tmp_path: Path) -> None:
    # Valid JSON may hold U+2028, U+0085, \x1c raw in a string (ensure_ascii=False, as
    # scraped files are written): str.splitlines() split them, "invalid JSON" at a
    # line number one too low for every line after.
    text = "one\u2028two\x85three\x1cfour"
    path = tmp_path / "p.jsonl"
    rows = [{"prompt": text}, {"prompt": "x", "max_tokens": -1}]
    path.write_text(
        "".join(json.dumps(r, ensure_ascii=False) + "\r\n" for r in rows), encoding="utf-8"
    )
    assert load_error(path).startswith(f"{path}:2: field 'max_tokens'")
    path.write_text(json.dumps(rows[0], ensure_ascii=False) + "\n", encoding="utf-8")
    (p,) = load_prompt_set(str(path))
    assert p.messages[0]["content"] == text


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ('{"prompt": "x", "max_tokens": 1' + "0" * 5000 + "}", "invalid JSON (Exceeds the limit"),
        ('{"prompt": ' + "[" * 100_000 + "]" * 100_000 + "}", "invalid JSON (nested too deep)"),
    ],
)
def test_json_the_parser_refuses_is_one_line_not_a_traceback(
    tmp_path: Path, text: str, message: str
) -> None:
    jsonl_path = tmp_path / "p.jsonl"
    jsonl_path.write_text(text + "\n")
    assert load_error(jsonl_path).startswith(f"{jsonl_path}:1: {message}")
    sharegpt = tmp_path / "p.json"
    sharegpt.write_text("[" + text + "]")
    assert load_error(sharegpt).startswith(f"{sharegpt}: {message}")


def test_bytes_that_are_not_utf8_name_their_line(tmp_path: Path) -> None:
    path = tmp_path / "p.jsonl"
    path.write_bytes(b'{"prompt": "ok"}\n{"prompt": "caf\xe9"}\n')
    assert load_error(path) == f"{path}:2: not UTF-8 text (byte 0xe9)"


# -- prompt files: numbers ---------------------------------------------------------------

BAD_MAX_TOKENS = [0, -1, 2**70, MAX_TOKENS_LIMIT + 1, 1.5, 1.0, 1e30, True, "5", None]


@pytest.mark.parametrize("value", BAD_MAX_TOKENS, ids=repr)
def test_max_tokens_out_of_range_is_refused_in_every_format(tmp_path: Path, value: Any) -> None:
    if value is None:  # an explicit null is the default budget, as a missing field
        (p,) = load_prompt_set(
            str(jsonl(tmp_path / "p.jsonl", [{"prompt": "x", "max_tokens": None}]))
        )
        assert p.max_tokens == 2048
        return
    expect = f"field 'max_tokens' must be a whole number from 1 to {MAX_TOKENS_LIMIT:,}"
    path = jsonl(tmp_path / "p.jsonl", [{"prompt": "x"}, {"prompt": "x", "max_tokens": value}])
    assert load_error(path) == f"{path}:2: {expect}, not {value!r:.40}"
    sharegpt = tmp_path / "sg.json"
    sharegpt.write_text(
        json.dumps([{"conversations": [{"from": "human", "value": "q"}], "max_tokens": value}])
    )
    assert load_error(sharegpt) == f"{sharegpt}: entry 0: {expect}, not {value!r:.40}"
    trace = jsonl(tmp_path / "t.jsonl", [{"timestamp": 0, "prompt": "x", "max_tokens": value}])
    with pytest.raises(UsageError, match="line 1: max_tokens must be a whole number from 1"):
        load_trace(trace)


def test_max_tokens_at_its_bounds_loads(tmp_path: Path) -> None:
    rows = [{"prompt": "x", "max_tokens": 1}, {"prompt": "y", "max_tokens": MAX_TOKENS_LIMIT}]
    assert [p.max_tokens for p in load_prompt_set(str(jsonl(tmp_path / "p.jsonl", rows)))] == [
        1,
        MAX_TOKENS_LIMIT,
    ]


@pytest.mark.parametrize("literal", ["NaN", "Infinity", "-Infinity", "1e400"])
def test_non_finite_json_numbers_are_refused(tmp_path: Path, literal: str) -> None:
    path = tmp_path / "p.jsonl"
    path.write_text('{"prompt": "x", "max_tokens": ' + literal + "}\n")
    assert f"{path}:1: field 'max_tokens' must be a whole number" in load_error(path)


# -- categories: never header bytes, never a broken label --------------------------------


@pytest.mark.parametrize(
    ("category", "shown", "position"),
    [
        ("math\r\nX-Injected: 1", "'\\r'", 5),
        ("a\nb", "'\\n'", 2),
        ("a\tb", "'\\t'", 2),
        ("a\x00b", "'\\x00'", 2),
        ("a\x85b", "'\\x85'", 2),
        ("a\u2028b", "'\\u2028'", 2),
        ("a\x1bb", "'\\x1b'", 2),
    ],
)
def test_a_category_with_control_characters_is_refused(
    tmp_path: Path, category: str, shown: str, position: int
) -> None:
    path = jsonl(tmp_path / "p.jsonl", [{"prompt": "x", "category": category}])
    assert load_error(path) == (
        f"{path}:1: field 'category': {shown} (character {position}) is not printable "
        "(a category is a label: printable text only)"
    )
    trace = jsonl(tmp_path / "t.jsonl", [{"timestamp": 0, "prompt": "x", "category": category}])
    with pytest.raises(UsageError, match=r"line 1: field 'category': .* is not printable"):
        load_trace(trace)


def test_a_category_longer_than_a_label_is_refused(tmp_path: Path) -> None:
    path = jsonl(tmp_path / "p.jsonl", [{"prompt": "x", "category": "c" * 101}])
    assert load_error(path) == f"{path}:1: field 'category' is 101 characters long (at most 100)"
    (p,) = load_prompt_set(
        str(jsonl(tmp_path / "q.jsonl", [{"prompt": "x", "category": "c" * 100}]))
    )
    assert p.category == "c" * 100


# -- traces --------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("row", "message"),
    [
        ({"timestamp": 0, "prompt": SURROGATE},
         "field 'prompt': lone surrogate \\ud800 (character 2)"),
        ({"timestamp": 0, "messages": [{"role": "user", "content": SURROGATE}]},
         "field 'messages[0].content': lone surrogate"),
        # before: every value was str()'d — {"content": null} was sent as "None"
        ({"timestamp": 0, "messages": [{"role": "user", "content": None}]},
         "field 'messages[0]' needs string 'role' and 'content'"),
        ({"timestamp": 0, "input_length": 5, "output_length": 2**70, "hash_ids": [1]},
         "output_length must be a whole number from 1 to 10,000,000"),
        ({"timestamp": 0, "input_length": 5, "output_length": 1, "hash_ids": [1],
          "category": "a\r\nb"}, "field 'category': '\\r'"),
    ],
)  # fmt: skip
def test_trace_lines_are_proven_sendable(tmp_path: Path, row: Any, message: str) -> None:
    path = jsonl(tmp_path / "t.jsonl", [{"timestamp": 0, "prompt": "ok"}, row])
    with pytest.raises(UsageError) as info:
        load_trace(path)
    assert str(info.value).startswith(f"--trace {str(path)!r} line 2: ")
    assert message in str(info.value)


def test_trace_deep_nesting_is_one_line(tmp_path: Path) -> None:
    path = tmp_path / "t.jsonl"
    path.write_text('{"timestamp": 0, "prompt": ' + "[" * 100_000 + "]" * 100_000 + "}\n")
    with pytest.raises(UsageError, match="line 1: not JSON"):
        load_trace(path)


# -- load options ----------------------------------------------------------------------------


def options(**kw: Any) -> SimpleNamespace:
    base: dict[str, Any] = {
        "max_tokens": None,
        "request_timeout": 600.0,
        "temperature": None,
        "tokenizer": "",
        "model": "",
        "variant": "default",
    }
    return SimpleNamespace(**(base | kw))


@pytest.mark.parametrize(
    ("kw", "message"),
    [
        ({"max_tokens": 0}, "--max-tokens: 0 must be at least 1"),
        ({"max_tokens": -1}, "--max-tokens: -1 must be at least 1"),
        ({"max_tokens": 2**70}, "--max-tokens: 1180591620717411303424 is beyond the limit"),
        ({"max_tokens": 1.5}, "--max-tokens: 1.5 is not a whole number"),
        ({"max_tokens": True}, "--max-tokens: True is not a whole number"),
        ({"temperature": float("nan")}, "--temperature: nan must be between 0 and 100"),
        ({"temperature": float("inf")}, "--temperature: inf must be between 0 and 100"),
        ({"temperature": -0.5}, "--temperature: -0.5 must be between 0 and 100"),
        ({"request_timeout": float("nan")}, "--request-timeout: nan must be positive"),
        # a byte that is not UTF-8 in argv reaches Python as a lone surrogate
        ({"model": "m\udcff"}, "--model: 'm\\udcff' is not UTF-8 text (character 2 is '\\udcff')"),
        ({"model": "m\r\nX: 1"}, "--model: 'm\\r\\nX: 1': character 2 ('\\r') is not printable"),
        ({"variant": "v\x00"}, "--variant: 'v\\x00': character 2 ('\\x00') is not printable"),
        ({"variant": "v" * 1001}, "--variant: 1,001 characters (at most 1,000)"),
    ],
)
def test_load_options_are_range_checked_naming_the_option(kw: dict[str, Any], message: str) -> None:
    with pytest.raises(UsageError) as info:
        validate(options(**kw))
    assert str(info.value).startswith(message)


def test_validate_loads_the_prompt_set(tmp_path: Path) -> None:
    path = jsonl(tmp_path / "p.jsonl", [{"prompt": SURROGATE}])
    with pytest.raises(UsageError, match=r"p\.jsonl:1: field 'prompt': lone surrogate"):
        validate(options(prompts=str(path)))
    validate(options(prompts="builtin"))


def test_an_unchanged_file_is_read_once_and_a_changed_one_again(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    calls: list[Path] = []
    real = specload.prompts.load_jsonl

    def counted(path: Path) -> list[Prompt]:
        calls.append(path)
        return real(path)

    monkeypatch.setattr(specload.prompts, "load_jsonl", counted)
    path = jsonl(tmp_path / "p.jsonl", [{"prompt": "one"}])
    # the options' check, then the load generator, in one process
    first, again = load_prompt_set(str(path)), load_prompt_set(str(path))
    assert first == again and len(calls) == 1
    path.write_text(json.dumps({"prompt": SURROGATE}) + "\n")  # changed: read again
    with pytest.raises(UsageError):
        load_prompt_set(str(path))
    assert len(calls) == 2


# -- the requester: what the loaders could not refuse is never sent ------------------------

OK_ANSWER = (
    b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ntransfer-encoding: chunked\r\n\r\n"
)


def sse_ok() -> bytes:
    body = (
        b'data: {"choices":[{"delta":{"content":"a"},"finish_reason":"stop"}],'
        b'"usage":{"prompt_tokens":1,"completion_tokens":1}}\n\ndata: [DONE]\n\n'
    )
    return OK_ANSWER + b"%x\r\n%s\r\n0\r\n\r\n" % (len(body), body)


def requester(server: CannedServer, **kw: Any) -> ChatRequester:
    settings = ChatSettings(model="m", timeout_s=10.0, **kw)
    return ChatRequester(parse_server_url(server.url), settings)


@pytest.mark.parametrize(
    ("prompt", "detail"),
    [
        (Prompt("p", "math", ({"role": "user", "content": SURROGATE},), 10), "surrogates"),
        (Prompt("p", "math", ({"role": "user", "content": "x"},), 2**70), "64-bit"),
        (Prompt("p", "math", ({"role": "user\udc80", "content": "x"},), 10), "surrogates"),
    ],
)
def test_an_unsendable_request_is_a_bad_request_record_sent_to_nobody(
    canned: Canned, prompt: Prompt, detail: str
) -> None:
    # Before: the requester raised (UnicodeEncodeError, orjson's JSONEncodeError) out of
    # the user's task — Locust logged a traceback, the budget never got its record
    # (--requests hung; --duration ended "complete", 0 ok, 0 failed).
    server = canned([sse_ok()], repeat_last=True)
    chat = requester(server)
    record = chat.send(prompt, "c1")
    assert record.ok is False and record.error_kind == "bad_request"
    assert record.error_detail is not None and detail in record.error_detail
    assert record.error_detail.startswith("request body cannot be built: ")
    record.error_detail.encode("utf-8")
    assert record.max_tokens is None or record.max_tokens < 2**63  # the record can be written
    assert record.e2e_s == 0.0 and record.end_s == record.start_s
    assert server.connections == 0 and server.requests == []
    # the requester goes on: the next, sendable prompt is sent and measured
    good = chat.send(Prompt("q", "math", ({"role": "user", "content": "hi"},), 10), "c1")
    assert good.ok, good.error_detail
    chat.close()


def test_a_model_name_that_is_not_utf8_is_a_bad_request(canned: Canned) -> None:
    server = canned([sse_ok()], repeat_last=True)
    chat = requester(server)
    chat.settings = ChatSettings(model="m\udcff", timeout_s=10.0)
    record = chat.send(Prompt("p", "math", ({"role": "user", "content": "x"},), 10), "c1")
    assert record.error_kind == "bad_request" and record.model == "m\\udcff"
    assert server.connections == 0


def head_of(request: bytes) -> list[bytes]:
    return request.split(b"\r\n\r\n", 1)[0].split(b"\r\n")


@pytest.mark.parametrize(
    ("category", "header"),
    [
        ("math", b"X-Specload-Category: math"),
        ("long_reasoning", b"X-Specload-Category: long_reasoning"),
        ("trace", None),
        ("my category", None),
        ("x\r\nX-Injected: 1", None),  # what the loaders now refuse: never header bytes
        ("x\nX-Injected: 1", None),
    ],
)
def test_only_a_builtin_category_reaches_a_header(
    canned: Canned, category: str, header: bytes | None
) -> None:
    server = canned([sse_ok()], repeat_last=True)
    chat = requester(server)
    record = chat.send(Prompt("p", category, ({"role": "user", "content": "x"},), 10), "c1")
    assert record.ok, record.error_detail
    (request,) = server.requests
    lines = head_of(request)
    assert not any(line.lower().startswith(b"x-injected") for line in lines)
    found = [line for line in lines if line.lower().startswith(b"x-specload-category")]
    assert found == ([header] if header else [])
    chat.close()


def test_bad_request_is_a_fixed_error_class_exported_from_zero() -> None:
    assert "bad_request" in ERROR_KINDS and "bad_request" in FIXED_ERROR_KINDS
