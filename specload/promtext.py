"""Prometheus text exposition (format 0.0.4) and OpenMetrics parsing: the one implementation.

Used by the exporter (vLLM's ``/metrics``), the simulator's tests, the sweep
(server-side counters around a run) and anyone else who reads ``/metrics``.

    >>> fams = parse('# TYPE x_total counter\\nx_total{a="1"} 2\\nx_total{a="2"} 3\\n')
    >>> fams.get_family("x").total()
    5.0

Samples are grouped into families by the ``# TYPE`` lines: ``_bucket``,
``_sum``, ``_count`` and ``_created`` samples belong to their histogram or
summary, ``_total`` and ``_created`` to their counter (whether the ``# TYPE``
line names the counter with or without ``_total``, as prometheus_client does
for vLLM). A sample without a ``# TYPE`` line is its own ``untyped`` family.
Values may be ``NaN``, ``+Inf``, ``-Inf``; an optional timestamp (ms) is kept.

OpenMetrics 1.0 (``application/openmetrics-text``) reads the same way: ``# UNIT``
lines and the ``# EOF`` end are comments; counters are typed without ``_total``;
an exemplar after a sample's value (`` # {trace_id="…"} 0.04 1700000000.1``) is
checked and dropped (it is not a value); a page that ends with ``# EOF`` has its
timestamps in seconds, kept as ms like the text format's.

Malformed input raises :class:`PromTextError` naming the line. ``keep`` lets a
caller skip label parsing for families it does not need (the exporter's fast
path: a vLLM page is mostly histogram buckets it never reads).
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field

__all__ = [
    "Family",
    "Labels",
    "PromHistogram",
    "PromTextError",
    "Sample",
    "Samples",
    "parse",
]

Labels = dict[str, str]

# Suffixes that attach a sample to a typed family, longest first.
_SUFFIXES = ("_bucket", "_created", "_gcount", "_count", "_total", "_gsum", "_info", "_sum")
_VALUE_TYPES = frozenset({"counter", "gauge", "untyped", "unknown", "info", "stateset"})

_NAME_RE = re.compile(r"[a-zA-Z_:][a-zA-Z0-9_:]*\Z")
# One label pair, with escapes in the value; anchored at a position by .match().
_LABEL_RE = re.compile(r'[ \t]*([a-zA-Z_][a-zA-Z0-9_]*)[ \t]*=[ \t]*"((?:[^"\\]|\\.)*)"[ \t]*(,?)')
# Fast path for a label block without backslashes: validate, then take the pairs.
_PAIR = r'[a-zA-Z_][a-zA-Z0-9_]*[ \t]*=[ \t]*"[^"\\]*"[ \t]*'
_BLOCK_RE = re.compile(rf"[ \t]*(?:{_PAIR},[ \t]*)*(?:{_PAIR},?[ \t]*)?")
_PAIRS_RE = re.compile(r'([a-zA-Z_][a-zA-Z0-9_]*)[ \t]*=[ \t]*"([^"]*)"')
_ESCAPE_RE = re.compile(r"\\(.)")
_ESCAPES = {"n": "\n", "\\": "\\", '"': '"'}


class PromTextError(ValueError):
    """The text is not valid Prometheus exposition; the message names the line."""

    def __init__(self, lineno: int, message: str, line: str = "") -> None:
        snippet = line if len(line) <= 80 else line[:77] + "..."
        detail = f": {snippet!r}" if snippet else ""
        super().__init__(f"line {lineno}: {message}{detail}")
        self.lineno = lineno


@dataclass(slots=True)
class Sample:
    name: str
    labels: Labels
    value: float
    timestamp_ms: float | None = None

    def matches(self, match: Mapping[str, str] | None) -> bool:
        if not match:
            return True
        labels = self.labels
        return all(labels.get(k) == v for k, v in match.items())


Samples = list[Sample]


@dataclass(frozen=True, slots=True)
class PromHistogram:
    """A histogram family's value: cumulative buckets ``(upper_bound, count)``, sum, count.

    Buckets are sorted by bound. Not :class:`specload.histogram.Histogram`, the load
    generator's mergeable latency sketch.
    """

    buckets: tuple[tuple[float, float], ...]
    sum: float
    count: float

    @property
    def mean(self) -> float | None:
        return self.sum / self.count if self.count > 0 else None


@dataclass(slots=True)
class Family:
    """One metric family: name as in ``# TYPE`` (or the sample name), type, help, samples."""

    name: str
    type: str = "untyped"
    help: str = ""
    samples: Samples = field(default_factory=list)

    @property
    def base(self) -> str:
        """The name without a counter's ``_total``."""
        if self.type == "counter" and self.name.endswith("_total"):
            return self.name[:-6]
        return self.name

    def _value_samples(self, match: Mapping[str, str] | None) -> Iterator[Sample]:
        """Samples that carry the family's own value (not ``_created``, buckets, sums)."""
        if self.type in ("histogram", "gaugehistogram", "summary"):
            return
        base = self.base
        created = base + "_created"
        for s in self.samples:
            if s.name != created and s.matches(match):
                yield s

    def total(self, match: Mapping[str, str] | None = None) -> float | None:
        """Sum of a counter's/gauge's values over label sets matching ``match``.

        ``None`` when no sample matches (absent, not zero).
        """
        found = False
        acc = 0.0
        for s in self._value_samples(match):
            acc += s.value
            found = True
        return acc if found else None

    def by_label(self, label: str, match: Mapping[str, str] | None = None) -> dict[str, float]:
        """Values summed per value of ``label`` (e.g. per ``position``)."""
        out: dict[str, float] = {}
        for s in self._value_samples(match):
            key = s.labels.get(label)
            if key is not None:
                out[key] = out.get(key, 0.0) + s.value
        return out

    def label_values(self, label: str) -> set[str]:
        return {s.labels[label] for s in self.samples if label in s.labels}

    def histogram(self, match: Mapping[str, str] | None = None) -> PromHistogram | None:
        """Buckets, sum and count summed over the label sets matching ``match``.

        ``None`` when the family has no ``_count`` sample that matches.
        """
        name = self.name
        b_name, s_name, c_name = name + "_bucket", name + "_sum", name + "_count"
        buckets: dict[float, float] = {}
        total_sum = 0.0
        total_count = 0.0
        found = False
        for s in self.samples:
            n = s.name
            if n == b_name:
                if not s.matches(_without(match, "le")):
                    continue
                le = s.labels.get("le")
                if le is None:
                    continue
                bound = float(le)
                buckets[bound] = buckets.get(bound, 0.0) + s.value
            elif n == s_name:
                if s.matches(match):
                    total_sum += s.value
            elif n == c_name and s.matches(match):
                total_count += s.value
                found = True
        if not found:
            return None
        return PromHistogram(tuple(sorted(buckets.items())), total_sum, total_count)

    def sum_count(self, match: Mapping[str, str] | None = None) -> tuple[float, float] | None:
        """Just a histogram's (or summary's) ``_sum`` and ``_count``: cheaper than buckets."""
        s_name, c_name = self.name + "_sum", self.name + "_count"
        total_sum = 0.0
        total_count = 0.0
        found = False
        for s in self.samples:
            if s.name == s_name:
                if s.matches(match):
                    total_sum += s.value
            elif s.name == c_name and s.matches(match):
                total_count += s.value
                found = True
        return (total_sum, total_count) if found else None


def _without(match: Mapping[str, str] | None, key: str) -> Mapping[str, str] | None:
    if not match or key not in match:
        return match
    return {k: v for k, v in match.items() if k != key}


class Exposition(dict[str, Family]):
    """Families by name as written in ``# TYPE`` (or the sample name when untyped)."""

    def get_family(self, name: str) -> Family | None:
        """Look up tolerantly: a counter by ``x``, ``x_total`` alike."""
        fam = self.get(name)
        if fam is not None:
            return fam
        if name.endswith("_total"):
            return self.get(name[:-6])
        return self.get(name + "_total")

    def samples(self) -> Iterator[Sample]:
        for fam in self.values():
            yield from fam.samples


def _unescape(text: str) -> str:
    return _ESCAPE_RE.sub(lambda m: _ESCAPES.get(m.group(1), "\\" + m.group(1)), text)


def _parse_labels(text: str, start: int, lineno: int, line: str) -> tuple[Labels, int]:
    """Parse ``k="v",...}`` from ``start`` (after ``{``); return labels, index after ``}``."""
    labels: Labels = {}
    pos = start
    end = len(text)
    match = _LABEL_RE.match
    while True:
        while pos < end and text[pos] in " \t":
            pos += 1
        if pos < end and text[pos] == "}":
            return labels, pos + 1
        m = match(text, pos)
        if m is None:
            raise PromTextError(lineno, "malformed labels", line)
        value = m.group(2)
        if "\\" in value:
            value = _unescape(value)
        labels[m.group(1)] = value
        pos = m.end()
        if not m.group(3):
            while pos < end and text[pos] in " \t":
                pos += 1
            if pos < end and text[pos] == "}":
                return labels, pos + 1
            raise PromTextError(lineno, "expected ',' or '}' in labels", line)


def _parse_float(text: str, lineno: int, line: str) -> float:
    try:
        return float(text)
    except ValueError:
        raise PromTextError(lineno, f"bad value {text!r}", line) from None


def parse(
    text: str, keep: Callable[[str], bool] | None = None, *, buckets: bool = True
) -> Exposition:
    """Parse exposition text into families.

    ``buckets=False`` leaves out histograms' ``_bucket`` samples (their labels are
    not parsed): enough for means from ``_sum``/``_count``.

    ``keep(family_name)`` returning False skips that family cheaply: a block of
    lines that follows its ``# HELP``/``# TYPE`` header and whose lines all
    start with the family's name is passed over without reading each line
    (so a value error inside a skipped family goes unnoticed); anything else is
    parsed line by line. Raises :class:`PromTextError` on malformed input.
    """
    state = _ParseState(keep, buckets)
    if text.rstrip().endswith("# EOF"):
        state.ts_scale = 1000.0  # OpenMetrics: timestamps in seconds
    if keep is None:
        state.feed(text.split("\n"), 1)
        return state.families
    # Segments begin at comment lines; a # HELP/# TYPE segment of an unwanted family
    # whose lines all start with its name is skipped with a few C-level counts.
    find, count, startswith = text.find, text.count, text.startswith
    n = len(text)
    seg = 0
    lineno = 1
    while seg < n:
        nxt = find("\n#", seg + 1)
        end = n if nxt == -1 else nxt + 1
        if startswith(_HEADERS, seg):
            head = seg
            # HELP, TYPE (and OpenMetrics' UNIT) lines of one family in a row: one segment
            # whose header is read from the TYPE line; its samples follow the last of them.
            last = seg
            while (
                end < n
                and startswith(_HEADERS, end)
                and find("\n", last, end) == end - 1
                and _same_header_name(text, seg, end)
            ):
                if startswith("# TYPE ", end):
                    head = end
                last = end
                nxt = find("\n#", end + 1)
                end = n if nxt == -1 else nxt + 1
            eol = find("\n", head, end)
            if eol == -1:
                eol = end
            body = find("\n", last, end)
            body = end if body == -1 else body + 1
            parts = text[head:eol].split(None, 3)
            if (
                len(parts) > 2
                and not state.wanted(parts[2])
                and _only_family_lines(text, body, end, parts, state)
            ):
                lineno += count("\n", seg, end)
                seg = end
                continue
        lines = text[seg:end].split("\n")
        state.feed(lines, lineno)
        lineno += len(lines) - 1
        seg = end
    return state.families


def _same_header_name(text: str, a: int, b: int) -> bool:
    """The header lines (``# HELP``/``# TYPE``/``# UNIT``, 7 characters) at ``a`` and ``b``
    name the same family (``a``'s line ends before ``b``)."""
    end = text.find(" ", a + 7, b)
    if end == -1:
        end = b - 1  # a line with the name only: up to its newline
    size = end - a - 7
    return (
        size > 0
        and text.startswith(text[a + 7 : end], b + 7)
        and text[b + 7 + size : b + 8 + size] in (" ", "\t", "\r", "\n", "")
    )


def _only_family_lines(
    text: str, body: int, end: int, header: list[str], state: _ParseState
) -> bool:
    """True if every line in ``text[body:end]`` starts with the header's family name (or is blank).

    Registers the family (empty, with its type) so later lookups agree.
    """
    name = header[2]
    kind = header[3].strip() if header[1] == "TYPE" and len(header) > 3 else ""
    if kind and kind not in _VALUE_TYPES and kind not in _DIST_TYPES:
        return False  # let the line parser report it
    base = name[:-6] if kind == "counter" and name.endswith("_total") else name
    if body < end:
        total = text.count("\n", body, end) + (0 if text[end - 1] == "\n" else 1)
        blank = text.count("\n\n", body - 1, end)
        starting = text.count("\n" + base, body - 1, end)
        if starting + blank != total:
            return False
    state.skipped(name, kind)
    return True


_DIST_TYPES = frozenset({"histogram", "gaugehistogram", "summary"})
_HEADERS = ("# HELP ", "# TYPE ", "# UNIT ")


class _ParseState:
    """Families found so far; :meth:`feed` parses lines into them."""

    def __init__(self, keep: Callable[[str], bool] | None, buckets: bool = True) -> None:
        self.keep = keep
        self.buckets = buckets
        self.families = Exposition()
        # sample name -> family, learnt from # TYPE lines (and cached per sample name).
        self.owner: dict[str, Family | None] = {}
        self.typed: dict[str, Family] = {}
        self.kept: dict[str, bool] = {}
        # Identical label blocks share one dict: treat Sample.labels as read-only.
        self.block_cache: dict[str, Labels] = {}
        self.ts_scale = 1.0  # timestamp -> ms (1000 for OpenMetrics' seconds)

    def wanted(self, fam_name: str) -> bool:
        want = self.kept.get(fam_name)
        if want is None:
            want = self.keep is None or self.keep(fam_name)
            self.kept[fam_name] = want
        return want

    def skipped(self, name: str, kind: str) -> None:
        """A family passed over by the segment filter: known (empty), not parsed."""
        fam = self.typed.get(name)
        if fam is None:
            fam = Family(name, kind or "untyped")
            self.families[name] = fam
            self.typed[name] = fam
            self.owner.clear()
        elif kind:
            fam.type = kind

    def feed(self, lines: list[str], first_lineno: int) -> None:
        families, typed, owner = self.families, self.typed, self.owner
        block_cache = self.block_cache
        wanted = self.wanted
        skip_buckets = not self.buckets
        lineno = first_lineno - 1
        for raw in lines:
            lineno += 1
            line = raw
            if not line:
                continue
            first = line[0]
            if first == "#":
                _parse_comment(line, lineno, families, typed, owner)
                continue
            if first in " \t\r":
                line = line.strip()
                if not line:
                    continue
                if line[0] == "#":
                    _parse_comment(line, lineno, families, typed, owner)
                    continue
            brace = line.find("{")
            space = line.find(" ")
            if brace != -1 and (space == -1 or brace < space):
                name = line[:brace]
                rest_start = -1  # labels to parse
            else:
                if space == -1:
                    raise PromTextError(lineno, "sample without a value", line)
                name = line[:space]
                rest_start = space
            fam = owner.get(name, _MISSING)
            if fam is _MISSING:
                fam = _resolve(name, typed)
                owner[name] = fam
            if fam is None:
                if not _NAME_RE.match(name):
                    raise PromTextError(lineno, f"bad metric name {name!r}", line)
                fam = Family(name)
                families[name] = fam
                typed[name] = fam
                owner[name] = fam
            want = wanted(fam.name)
            if want and skip_buckets and name.endswith("_bucket") and fam.type in _DIST_TYPES:
                want = False
            if rest_start == -1 and "#" in line:
                # An exemplar's braces may follow (or a '#' sit in a label value): find
                # the end of the label block exactly.
                labels, after = _parse_labels(line, brace + 1, lineno, line)
                rest = line[after:]
            elif rest_start == -1:
                close = line.rfind("}")
                if not want:
                    # Cheap check only: the value follows the last '}'.
                    if close == -1:
                        raise PromTextError(lineno, "unterminated labels", line)
                    parts = line[close + 1 :].split()
                    if not parts or len(parts) > 2:
                        raise PromTextError(
                            lineno, "expected a value (and optional timestamp)", line
                        )
                    _parse_float(parts[0], lineno, line)
                    continue
                if close > brace and "\\" not in line:
                    block = line[brace + 1 : close]
                    cached = block_cache.get(block)
                    if cached is None:
                        if _BLOCK_RE.fullmatch(block) is None:
                            raise PromTextError(lineno, "malformed labels", line)
                        cached = dict(_PAIRS_RE.findall(block))
                        block_cache[block] = cached
                    labels = cached
                    rest = line[close + 1 :]
                else:
                    labels, after = _parse_labels(line, brace + 1, lineno, line)
                    rest = line[after:]
            else:
                labels = {}
                rest = line[rest_start:]
            if "#" in rest:
                rest, _, exemplar = rest.partition("#")
                _check_exemplar(exemplar, lineno, line)
            parts = rest.split()
            n = len(parts)
            if n == 1:
                value = _parse_float(parts[0], lineno, line)
                ts = None
            elif n == 2:
                value = _parse_float(parts[0], lineno, line)
                ts = _parse_float(parts[1], lineno, line)
                if not math.isfinite(ts):
                    raise PromTextError(lineno, "bad timestamp", line)
                ts *= self.ts_scale
            else:
                raise PromTextError(lineno, "expected a value (and optional timestamp)", line)
            if want:
                fam.samples.append(Sample(name, labels, value, ts))


def _check_exemplar(text: str, lineno: int, line: str) -> None:
    """An OpenMetrics exemplar after a sample (``{labels} value [timestamp]``): checked, dropped."""
    start = len(text) - len(text.lstrip(" \t"))
    if start == len(text) or text[start] != "{":
        raise PromTextError(lineno, "malformed exemplar", line)
    _, after = _parse_labels(text, start + 1, lineno, line)
    parts = text[after:].split()
    if not 1 <= len(parts) <= 2:
        raise PromTextError(lineno, "malformed exemplar: expected a value (and timestamp)", line)
    for part in parts:
        _parse_float(part, lineno, line)


class _Missing(Family):
    pass


_MISSING: Family = _Missing("")


def _resolve(name: str, typed: Mapping[str, Family]) -> Family | None:
    """The typed family a sample name belongs to, if any."""
    fam = typed.get(name)
    if fam is not None:
        return fam
    for suffix in _SUFFIXES:
        if name.endswith(suffix):
            base = name[: -len(suffix)]
            fam = typed.get(base)
            if fam is not None and _suffix_fits(fam.type, suffix):
                return fam
            if suffix == "_created":
                # Counter typed with its _total name: x_total's created is x_created.
                fam = typed.get(base + "_total")
                if fam is not None and fam.type == "counter":
                    return fam
            return None
    return None


def _suffix_fits(kind: str, suffix: str) -> bool:
    if kind in ("histogram", "gaugehistogram"):
        return suffix in ("_bucket", "_sum", "_count", "_created", "_gcount", "_gsum")
    if kind == "summary":
        return suffix in ("_sum", "_count", "_created")
    if kind == "counter":
        return suffix in ("_total", "_created")
    if kind == "info":
        return suffix == "_info"
    return False


def _parse_comment(
    line: str,
    lineno: int,
    families: Exposition,
    typed: dict[str, Family],
    owner: dict[str, Family | None],
) -> None:
    parts = line[1:].lstrip().split(None, 2)
    if len(parts) < 2 or parts[0] not in ("TYPE", "HELP"):
        return  # an ordinary comment
    kind, name = parts[0], parts[1]
    if not _NAME_RE.match(name):
        raise PromTextError(lineno, f"bad metric name {name!r}", line)
    fam = typed.get(name)
    if kind == "TYPE":
        mtype = parts[2].strip() if len(parts) > 2 else ""
        if mtype not in _VALUE_TYPES and mtype not in ("histogram", "gaugehistogram", "summary"):
            raise PromTextError(lineno, f"unknown metric type {mtype!r}", line)
        if fam is None:
            fam = Family(name, mtype)
            families[name] = fam
            typed[name] = fam
        elif fam.samples and fam.type != mtype:
            raise PromTextError(lineno, f"TYPE for {name} after its samples", line)
        else:
            fam.type = mtype
        # Sample names resolved before this TYPE line may now belong here.
        owner.clear()
    else:
        text = parts[2] if len(parts) > 2 else ""
        if "\\" in text:
            text = text.replace("\\\\", "\0").replace("\\n", "\n").replace("\0", "\\")
        if fam is None:
            fam = Family(name)
            families[name] = fam
            typed[name] = fam
            owner.clear()
        fam.help = text
