"""A systemd unit file as its physical lines, with its settings located.

The parser follows systemd.syntax(7): ``[Section]`` headers, ``Key=Value``
settings, comment lines starting with ``#`` or ``;`` (ignored also inside a
continuation), and continuation lines ending in an odd number of backslashes
(the backslash becomes a space and the next line is appended). Each setting
keeps the physical lines it spans so an editor can rewrite one setting and
leave every other byte as it was.
"""

from __future__ import annotations

from dataclasses import dataclass, field

_COMMENTS = "#;"


@dataclass(frozen=True)
class Segment:
    """One physical line of a setting, as a piece of the setting's logical line.

    ``offset`` is where the line's text starts in the logical line; ``body``
    is the line without its continuation backslash.
    """

    line: int
    offset: int
    body: str
    continued: bool


@dataclass
class Setting:
    section: str
    key: str
    #: The logical line: continuation backslashes replaced by spaces, joined.
    logical: str
    #: Offset in ``logical`` where the value starts (after ``=`` and blanks).
    value_start: int
    segments: list[Segment] = field(default_factory=list)

    @property
    def value(self) -> str:
        return self.logical[self.value_start :].strip()

    @property
    def first_line(self) -> int:
        return self.segments[0].line

    @property
    def last_line(self) -> int:
        return self.segments[-1].line


@dataclass
class UnitFile:
    lines: list[str]
    settings: list[Setting]
    trailing_newline: bool

    def get(self, section: str, key: str) -> list[Setting]:
        return [s for s in self.settings if s.section == section and s.key == key]

    def render(self) -> str:
        return "\n".join(self.lines) + ("\n" if self.trailing_newline else "")


class UnitFileError(ValueError):
    """Text that is not a unit file."""


def _ends_in_continuation(line: str) -> bool:
    """An odd run of trailing backslashes continues the line."""
    run = len(line) - len(line.rstrip("\\"))
    return run % 2 == 1


def parse_unit(text: str) -> UnitFile:
    lines = text.split("\n")
    trailing_newline = text.endswith("\n")
    if trailing_newline:
        lines.pop()
    settings: list[Setting] = []
    section = ""
    current: Setting | None = None
    for index, line in enumerate(lines):
        stripped = line.strip()
        if stripped.startswith(tuple(_COMMENTS)):
            continue
        if current is not None:
            # A continuation of the previous setting.
            continued = _ends_in_continuation(line)
            body = line[:-1] if continued else line
            current.segments.append(Segment(index, len(current.logical), body, continued))
            current.logical += body + (" " if continued else "")
            if not continued:
                current = None
            continue
        if not stripped:
            continue
        if stripped.startswith("["):
            if not stripped.endswith("]"):
                raise UnitFileError(f"line {index + 1}: bad section header {stripped!r}")
            section = stripped[1:-1]
            continue
        if "=" not in line:
            raise UnitFileError(f"line {index + 1}: expected Key=Value, got {stripped!r}")
        if not section:
            raise UnitFileError(f"line {index + 1}: setting outside any [Section]")
        continued = _ends_in_continuation(line)
        body = line[:-1] if continued else line
        eq = body.index("=") if "=" in body else len(body)
        key = body[:eq].strip()
        value_start = eq + 1
        while value_start < len(body) and body[value_start] in " \t":
            value_start += 1
        setting = Setting(section, key, body + (" " if continued else ""), value_start)
        setting.segments.append(Segment(index, 0, body, continued))
        settings.append(setting)
        current = setting if continued else None
    return UnitFile(lines, settings, trailing_newline)
