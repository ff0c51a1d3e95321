"""systemd's command-line syntax for ``ExecStart=`` — not a shell's.

systemd splits a command line into words itself (systemd.syntax(7), "Quoting";
systemd.service(5), "Command lines"): single or double quotes wrap a whole
word, C-style escapes (``\\n``, ``\\x41``, ``\\'``…) work inside and outside
quotes, and there is no globbing, no ``;`` inside a word, no command
substitution. Two more expansions happen before the program sees a word:
specifiers (``%n``; a literal ``%`` is ``%%``) and environment variables
(``$FOO``, ``${FOO}``; a literal ``$`` is ``$$``).

:func:`split_words` reads a command line as systemd does, keeping each word's
span in the text so an editor can leave untouched words byte for byte;
:func:`quote_word` writes any literal value so that systemd hands exactly that
value to the program; :func:`literal_value` undoes the two expansions for a
word that uses neither.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

#: Separators between words (systemd's WHITESPACE).
WHITESPACE = " \t\n\r"

_SIMPLE_ESCAPES = {
    "a": "\a",
    "b": "\b",
    "f": "\f",
    "n": "\n",
    "r": "\r",
    "t": "\t",
    "v": "\v",
    "\\": "\\",
    '"': '"',
    "'": "'",
    "s": " ",
}
_HEX = "0123456789abcdefABCDEF"
# Characters that need no quoting once % and $ are doubled.
_BARE = re.compile(r"[A-Za-z0-9_@+=:,./%$-]+")


class ExecLineError(ValueError):
    """A command line systemd would refuse (unbalanced quotes, bad escapes)."""


@dataclass(frozen=True)
class Word:
    """One word of a command line: its value after unquoting, and its span."""

    value: str
    start: int
    end: int


def _unescape(text: str, i: int) -> tuple[str, int]:
    """The character(s) an escape at ``text[i] == '\\'`` stands for, and its length."""
    if i + 1 >= len(text):
        raise ExecLineError("command line ends in a lone backslash")
    c = text[i + 1]
    if c in _SIMPLE_ESCAPES:
        return _SIMPLE_ESCAPES[c], 2
    width = {"x": 2, "u": 4, "U": 8}.get(c)
    if width is not None:
        digits = text[i + 2 : i + 2 + width]
        if len(digits) == width and all(d in _HEX for d in digits):
            code = int(digits, 16)
            if code == 0 or code > 0x10FFFF:
                raise ExecLineError(f"escape \\{c}{digits} is not a valid character")
            return chr(code), 2 + width
    elif c in "01234567":
        digits = text[i + 1 : i + 4]
        if len(digits) == 3 and all(d in "01234567" for d in digits):
            code = int(digits, 8)
            if code == 0:
                raise ExecLineError("escape \\000 is not allowed")
            return chr(code), 4
    # systemd warns about unknown escapes and keeps them as written.
    return "\\" + c, 2


def split_words(text: str, start: int = 0) -> list[Word]:
    """Split ``text[start:]`` into words the way systemd does for ``ExecStart=``."""
    words: list[Word] = []
    i, n = start, len(text)
    while True:
        while i < n and text[i] in WHITESPACE:
            i += 1
        if i >= n:
            return words
        begin = i
        buf: list[str] = []
        quote = ""
        while i < n:
            c = text[i]
            if quote:
                if c == quote:
                    quote = ""
                    i += 1
                elif c == "\\":
                    ch, used = _unescape(text, i)
                    buf.append(ch)
                    i += used
                else:
                    buf.append(c)
                    i += 1
                continue
            if c in WHITESPACE:
                break
            if c in "'\"":
                quote = c
                i += 1
            elif c == "\\":
                ch, used = _unescape(text, i)
                buf.append(ch)
                i += used
            else:
                buf.append(c)
                i += 1
        if quote:
            raise ExecLineError(f"unbalanced {quote} quote in command line")
        words.append(Word("".join(buf), begin, i))


def check_value(value: str) -> None:
    """Refuse values that have no business in a unit file (control characters)."""
    for ch in value:
        if ord(ch) < 32 or ord(ch) == 127:
            raise ExecLineError(f"value {value!r} contains a control character")


def quote_word(value: str) -> str:
    """Write ``value`` as one ``ExecStart=`` word that reaches the program unchanged.

    ``%`` and ``$`` are doubled (no specifier or variable expansion), anything
    beyond a plain safe set is single-quoted with ``\\`` and ``'`` escaped.
    Control characters are refused (:class:`ExecLineError`).
    """
    check_value(value)
    escaped = value.replace("%", "%%").replace("$", "$$")
    if _BARE.fullmatch(escaped):
        return escaped
    return "'" + escaped.replace("\\", "\\\\").replace("'", "\\'") + "'"


def literal_value(word: str) -> str | None:
    """The value a program receives for an unquoted ``word``, or None if it
    uses a specifier or an environment variable (so it is not a literal)."""
    out: list[str] = []
    i = 0
    while i < len(word):
        c = word[i]
        if c in "%$":
            if word[i + 1 : i + 2] != c:
                return None
            out.append(c)
            i += 2
        else:
            out.append(c)
            i += 1
    return "".join(out)
