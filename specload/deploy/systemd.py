"""Rewrite a vLLM systemd unit into a variant's unit, changing nothing else.

Only the words of ``ExecStart=`` that carry speculation are removed and, for a
speculative variant, one ``--speculative-config '<json>'`` is put where the old
flag stood (or appended). Every other byte of the unit — ``Environment=``,
``EnvironmentFile=``, ``User=``, limits, comments, the other flags and their
spacing — stays as it was; lines of ``ExecStart=`` that hold no removed word
are kept verbatim.
"""

from __future__ import annotations

import difflib
import posixpath
from dataclasses import dataclass, field
from pathlib import Path

from specload.deploy.execline import ExecLineError, Word, quote_word, split_words
from specload.deploy.speculative import PER_REQUEST_FLAG, Variant, flag_name, speculative_flag
from specload.deploy.unitfile import Setting, UnitFile, UnitFileError, parse_unit
from specload.errors import UsageError

_SHELLS = frozenset({"sh", "bash", "dash", "zsh", "ksh"})


@dataclass(frozen=True)
class Rewrite:
    text: str
    removed: list[str] = field(default_factory=list)
    added: list[str] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)


def _program(word: str) -> str:
    """Basename of argv[0] without systemd's ``@-:+!`` prefixes."""
    return posixpath.basename(word.lstrip("@-:+!"))


def _find_vllm(words: list[Word], where: str) -> int:
    if not words:
        raise UsageError(f"{where}: ExecStart= is empty")
    if _program(words[0].value) in _SHELLS and any(w.value == "-c" for w in words[1:]):
        raise UsageError(
            f"{where}: ExecStart= runs a shell ({words[0].value} -c); "
            "specload edits units whose ExecStart= runs vllm directly"
        )
    for index, word in enumerate(words):
        value = word.value
        if _program(value) == "vllm" or value.startswith("vllm.entrypoints"):
            return index
    raise UsageError(f"{where}: ExecStart= does not run vllm (no 'vllm' or 'vllm.entrypoints')")


def _exec_start(unit: UnitFile, where: str) -> Setting:
    settings = [s for s in unit.get("Service", "ExecStart") if s.value]
    if not settings:
        raise UsageError(f"{where}: no ExecStart= in [Service]")
    if len(settings) > 1:
        raise UsageError(f"{where}: several ExecStart= lines; expected one vllm command")
    return settings[0]


def _segment_of(setting: Setting, word: Word, where: str) -> int:
    index = 0
    for i, seg in enumerate(setting.segments):
        if seg.offset <= word.start:
            index = i
    seg = setting.segments[index]
    if word.end > seg.offset + len(seg.body):
        raise UsageError(
            f"{where}: a quoted word of ExecStart= spans continuation lines; join it on one line"
        )
    return index


def rewrite_unit(text: str, variant: Variant, *, where: str = "unit") -> Rewrite:
    """The unit ``text`` rewritten for ``variant``; ``where`` names it in errors."""
    try:
        unit = parse_unit(text)
    except UnitFileError as exc:
        raise UsageError(f"{where}: {exc}") from None
    setting = _exec_start(unit, where)
    try:
        words = split_words(setting.logical, setting.value_start)
    except ExecLineError as exc:
        raise UsageError(f"{where}: ExecStart=: {exc}") from None
    first = _find_vllm(words, where)

    warnings: list[str] = []
    if any("$" in setting.logical[w.start : w.end].replace("$$", "") for w in words):
        warnings.append(
            "ExecStart= uses environment variables; speculative flags inside them are not seen"
        )
    remove: list[int] = []
    per_request: str | None = None  # the unit's own --per-request-spec-decode-metrics
    i = first + 1
    while i < len(words):
        name = flag_name(words[i].value)
        if name == "--config":
            warnings.append("ExecStart= reads --config FILE; speculation set there is not edited")
        is_spec, takes_next = speculative_flag(words[i].value)
        if is_spec:
            remove.append(i)
            if name == PER_REQUEST_FLAG and "=" in words[i].value:
                per_request = words[i].value.split("=", 1)[1]
            if takes_next and i + 1 < len(words) and not words[i + 1].value.startswith("--"):
                if name == PER_REQUEST_FLAG:
                    per_request = words[i + 1].value
                remove.append(i + 1)
                i += 1
        i += 1

    new_raw: list[str] = []
    if variant.speculative_config is not None:
        new_raw = ["--speculative-config", quote_word(variant.config_json())]
        # The per-request counts need speculation: kept for a speculative variant (or set).
        level = variant.per_request_metrics or per_request
        if level and level != "none":
            new_raw += [PER_REQUEST_FLAG, quote_word(level)]

    lines = _edit_block(
        unit, setting=setting, words=words, remove=set(remove), new_raw=new_raw, where=where
    )
    new_text = "\n".join(lines) + ("\n" if unit.trailing_newline else "")
    _self_check(new_text, words, set(remove), new_raw, where)
    return Rewrite(
        new_text,
        removed=[setting.logical[words[i].start : words[i].end] for i in remove],
        added=new_raw,
        warnings=warnings,
    )


def _edit_block(
    unit: UnitFile,
    *,
    setting: Setting,
    words: list[Word],
    remove: set[int],
    new_raw: list[str],
    where: str,
) -> list[str]:
    segs = setting.segments
    seg_of = [_segment_of(setting, w, where) for w in words]
    # Per segment: (raw, separator before it or None when first in its line).
    items: list[list[tuple[str, str | None]]] = [[] for _ in segs]
    changed = [False] * len(segs)
    insert_at = min(remove) if remove else None
    prev_end: list[int | None] = [None] * len(segs)
    for i, word in enumerate(words):
        s = seg_of[i]
        sep = setting.logical[prev_end[s] : word.start] if prev_end[s] is not None else None
        prev_end[s] = word.end
        if i == insert_at:
            changed[s] = True
            for j, raw in enumerate(new_raw):
                items[s].append((raw, sep if j == 0 else " "))
        if i in remove:
            changed[s] = True
            continue
        items[s].append((setting.logical[word.start : word.end], sep))

    extra_line: str | None = None
    if new_raw and insert_at is None:
        last = len(segs) - 1
        if last > 0:
            body = segs[last].body
            indent = body[: len(body) - len(body.lstrip())]
            extra_line = indent + " ".join(new_raw)
        else:
            changed[0] = True
            items[0].extend((raw, " ") for raw in new_raw)

    # Bodies of the lines that remain, in order: (segment index or -1, body, original line).
    kept: list[tuple[int, str, bool]] = []
    for s, seg in enumerate(segs):
        if not changed[s]:
            kept.append((s, seg.body, True))
            continue
        first_word = next((w for i, w in enumerate(words) if seg_of[i] == s), None)
        cut = (first_word.start if first_word else seg.offset + len(seg.body)) - seg.offset
        prefix = seg.body[:cut]
        parts: list[str] = []
        for raw, sep in items[s]:
            parts.append(raw if not parts else (sep if sep is not None else " ") + raw)
        body = prefix + "".join(parts)
        if s > 0 and not parts:
            continue  # the line held only removed words
        kept.append((s, body, False))
    if extra_line is not None:
        kept.append((-1, extra_line, False))

    rendered: dict[int, str] = {}
    appended: list[str] = []
    for n, (s, body, original) in enumerate(kept):
        continued = n < len(kept) - 1
        if original and segs[s].continued == continued:
            line = unit.lines[segs[s].line]
        else:
            line = body.rstrip() + " \\" if continued else body.rstrip()
        if s < 0:
            appended.append(line)
        else:
            rendered[segs[s].line] = line

    segment_lines = {seg.line for seg in segs}
    out = list(unit.lines[: setting.first_line])
    for index in range(setting.first_line, setting.last_line + 1):
        if index not in segment_lines:
            out.append(unit.lines[index])  # a comment inside the continuation
        elif index in rendered:
            out.append(rendered[index])
        if index == setting.last_line:
            out.extend(appended)
    out.extend(unit.lines[setting.last_line + 1 :])
    return out


def _self_check(
    new_text: str, words: list[Word], remove: set[int], new_raw: list[str], where: str
) -> None:
    """The rewritten ExecStart= must split into exactly the expected words."""
    expected = [w.value for i, w in enumerate(words) if i not in remove]
    insert = min(remove) if remove else len(words)
    position = sum(1 for i in range(insert) if i not in remove)
    added = [w.value for raw in new_raw for w in split_words(raw)]
    expected[position:position] = added
    setting = _exec_start(parse_unit(new_text), where)
    got = [w.value for w in split_words(setting.logical, setting.value_start)]
    if got != expected:  # pragma: no cover - a bug, not a user error
        raise AssertionError(f"rewritten ExecStart= splits into {got!r}, expected {expected!r}")


def variant_unit_path(source: Path, variant: str) -> Path:
    """``vllm.service`` → ``vllm-ngram.service``; ``vllm@.service`` → ``vllm-ngram@.service``."""
    name = source.name
    if not name.endswith(".service"):
        raise UsageError(f"--from: {str(source)!r} is not a .service unit")
    stem = name[: -len(".service")]
    if stem.endswith("@"):
        return source.with_name(f"{stem[:-1]}-{variant}@.service")
    return source.with_name(f"{stem}-{variant}.service")


def unified_diff(old: str, new: str, old_name: str, new_name: str) -> str:
    return "".join(
        difflib.unified_diff(
            old.splitlines(keepends=True), new.splitlines(keepends=True), old_name, new_name
        )
    )
