"""Speculative decoding seen per request: the server's own counts, split by channel.

vLLM 0.32 with ``--per-request-spec-decode-metrics summary|detailed`` puts
``metrics.speculative_decoding`` on a non-streamed response and on the last streamed
chunk (the usage chunk, so ``stream_options.include_usage``): ``num_spec_steps``
(verify steps: steps in which the request had draft tokens), ``num_draft_tokens``,
``num_accepted_draft_tokens``, ``acceptance_histogram`` (steps that accepted exactly
``j`` drafts) and, with ``detailed``, ``per_step_accepted`` / ``per_step_drafted`` in
step order. The per-request sums equal the server's counters exactly (both count
drafts accepted past ``max_tokens``).

:func:`record_spec_decode` turns that object into the record's ``spec_decode`` field,
with a **reasoning** and a **content** part where the split is known. A verify step
belongs to the channel of the first token it produces. Its position comes from the
stream: with exact per-chunk counts (continuous usage) every chunk after the first is
one engine step, a chunk of ``n >= 2`` tokens a verify step that accepted ``n - 1``
drafts and a chunk of one token either a step without drafts or a verify step that
accepted none. The detailed steps are matched to the chunks in order
(:func:`place_steps`), as early and as late as the chunks allow; a step whose channel
differs between the two placements (only steps that accepted nothing can move) makes the
split ``estimated`` (the step is placed midway), else it is ``exact``. Where chunks do not match
(the server merged steps into one chunk) or counts are not per chunk, the split is known
only when the request has one channel (``exact``), else it is absent.

Without the server's object, :func:`estimate_from_chunks` reads the same from exact
per-chunk counts alone when asked (the server is known to speculate): verify steps and
steps without drafts are then indistinguishable, so steps, draft tokens and the rate are
unknown and the mean acceptance length is tokens per decode step (a lower bound of
vLLM's, which counts verify steps only); marked ``estimated``.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

CHANNELS = ("reasoning", "content")
SOURCE_SERVER, SOURCE_ESTIMATED = "server", "estimated"
SPLIT_EXACT, SPLIT_ESTIMATED = "exact", "estimated"


class InvalidSpecMetrics(ValueError):
    """The server's ``metrics.speculative_decoding`` is not what vLLM sends."""


@dataclass(frozen=True, slots=True)
class ServerSpec:
    """``metrics.speculative_decoding`` of one request, checked."""

    steps: int
    draft_tokens: int
    accepted: int
    k: int | None
    histogram: tuple[int, ...] | None
    per_step_accepted: tuple[int, ...] | None
    per_step_drafted: tuple[int, ...] | None


def _count(obj: dict[str, Any], key: str) -> int:
    value = obj.get(key)
    if type(value) is not int or value < 0:
        raise InvalidSpecMetrics(f"{key} is not a non-negative integer: {value!r:.40}")
    return value


def _counts(obj: dict[str, Any], key: str) -> tuple[int, ...] | None:
    value = obj.get(key)
    if value is None:
        return None
    if type(value) is not list or not all(type(v) is int and v >= 0 for v in value):
        raise InvalidSpecMetrics(f"{key} is not a list of non-negative integers")
    return tuple(value)


def parse_server_spec(obj: Any) -> ServerSpec:
    """Check the server's object (raises :class:`InvalidSpecMetrics` naming the field)."""
    if type(obj) is not dict:
        raise InvalidSpecMetrics("metrics.speculative_decoding is not an object")
    steps = _count(obj, "num_spec_steps")
    draft_tokens = _count(obj, "num_draft_tokens")
    accepted = _count(obj, "num_accepted_draft_tokens")
    k = obj.get("num_spec_tokens")
    if k is not None and (type(k) is not int or k < 0):
        raise InvalidSpecMetrics(f"num_spec_tokens is not a non-negative integer: {k!r:.40}")
    if accepted > draft_tokens:
        raise InvalidSpecMetrics(
            f"num_accepted_draft_tokens {accepted} is beyond num_draft_tokens {draft_tokens}"
        )
    histogram = _counts(obj, "acceptance_histogram")
    if histogram is not None and (
        sum(histogram) != steps or sum(j * n for j, n in enumerate(histogram)) != accepted
    ):
        raise InvalidSpecMetrics("acceptance_histogram does not add up to the step counts")
    per_acc = _counts(obj, "per_step_accepted")
    per_drafted = _counts(obj, "per_step_drafted")
    if (per_acc is None) != (per_drafted is None):
        raise InvalidSpecMetrics("per_step_accepted and per_step_drafted come together")
    if per_acc is not None and per_drafted is not None:
        if len(per_acc) != steps or len(per_drafted) != steps:
            raise InvalidSpecMetrics("per-step lists are not num_spec_steps long")
        if sum(per_acc) != accepted or sum(per_drafted) != draft_tokens:
            raise InvalidSpecMetrics("per-step lists do not add up to the totals")
        if any(a > d for a, d in zip(per_acc, per_drafted, strict=True)):
            raise InvalidSpecMetrics("a step accepted more drafts than it had")
    return ServerSpec(steps, draft_tokens, accepted, k, histogram, per_acc, per_drafted)


def part(drafts: int | None, draft_tokens: int | None, accepted: int) -> dict[str, Any]:
    """Counts and the two vLLM formulas: acceptance rate = accepted / draft tokens, mean
    acceptance length = 1 + accepted / drafts (None where the denominator is 0 or
    unknown)."""
    return {
        "drafts": drafts,
        "draft_tokens": draft_tokens,
        "accepted_tokens": accepted,
        "acceptance_rate": accepted / draft_tokens if draft_tokens else None,
        "mean_acceptance_length": 1.0 + accepted / drafts if drafts else None,
    }


def accepted_per_position(histogram: Sequence[int]) -> list[int]:
    """Drafts accepted at each position (1-based order): steps that accepted >= i."""
    out: list[int] = []
    running = 0
    for n in reversed(histogram[1:]):
        running += n
        out.append(running)
    return out[::-1]


def _greedy(
    accepted: Sequence[int], sizes: Sequence[int], reverse: bool, cut: bool = True
) -> list[int] | None:
    """Chunk index of each verify step, as early (or as late) as the chunks allow.

    ``sizes``: tokens per chunk, the first (the prefill's token) excluded. A chunk of
    ``n >= 2`` tokens must be a verify step that accepted ``n - 1``, except the last
    chunk, which may be a verify step cut short (``max_tokens``, a stop token); a chunk
    of one token is a step without drafts or a verify step that accepted none (or a cut
    one). ``cut``: the last chunk may be the last verify step cut short (placing from the
    end, the other choice is a last chunk without drafts). None: the chunks cannot be
    these steps.
    """
    s, m = len(accepted), len(sizes)
    out = [0] * s
    order_steps = range(s - 1, -1, -1) if reverse else range(s)
    steps = iter(order_steps)
    j = next(steps, None)
    chunk_order = range(m - 1, -1, -1) if reverse else range(m)
    for i in chunk_order:
        n = sizes[i]
        last = i == m - 1
        if j is None:
            if n >= 2:
                return None
            continue
        a = accepted[j]
        fits = n == a + 1 or (cut and last and j == s - 1 and 1 <= n <= a + 1)
        if fits and (n >= 2 or a == 0 or last):
            out[j] = i
            j = next(steps, None)
        elif n >= 2:
            return None
    return out if j is None else None


def place_steps(
    accepted: Sequence[int], sizes: Sequence[int]
) -> tuple[list[int], list[int]] | None:
    """Token position of each verify step's first token, placed early and late
    (``sizes``: tokens per chunk, the first chunk included); None if they cannot match."""
    if not sizes or sizes[0] != 1:
        return None
    rest = sizes[1:]
    early = _greedy(accepted, rest, reverse=False)
    late = _greedy(accepted, rest, reverse=True) or _greedy(accepted, rest, True, cut=False)
    if early is None or late is None or any(e > lt for e, lt in zip(early, late, strict=True)):
        return None
    starts = [1]
    for n in rest[:-1]:
        starts.append(starts[-1] + n)
    return [starts[i] for i in early], [starts[i] for i in late]


def _split(
    spec: ServerSpec, content_start: int, tokens_output: int, sizes: Sequence[int] | None
) -> tuple[dict[str, dict[str, Any]], str] | None:
    acc, drafted = spec.per_step_accepted, spec.per_step_drafted
    if content_start >= tokens_output or content_start <= 0:
        # One channel: every step is in it.
        whole = part(spec.steps, spec.draft_tokens, spec.accepted)
        empty = part(0, 0, 0)
        reasoning_only = content_start >= tokens_output
        parts = {
            "reasoning": whole if reasoning_only else empty,
            "content": empty if reasoning_only else whole,
        }
        return parts, SPLIT_EXACT
    if acc is None or drafted is None or sizes is None:
        return None
    placed = place_steps(acc, sizes)
    if placed is None:
        return None
    early, late = placed
    counts = {c: [0, 0, 0] for c in CHANNELS}
    split = SPLIT_EXACT
    for a, d, pe, pl in zip(acc, drafted, early, late, strict=True):
        if (pl < content_start) != (pe < content_start):
            split = SPLIT_ESTIMATED  # placed midway between its earliest and latest token
        channel = "reasoning" if pe + pl < 2 * content_start else "content"
        tally = counts[channel]
        tally[0] += 1
        tally[1] += d
        tally[2] += a
    return {c: part(*counts[c]) for c in CHANNELS}, split


def record_spec_decode(
    raw: Any,
    *,
    content_start: int | None,
    tokens_output: int,
    sizes: Sequence[int] | None,
) -> dict[str, Any]:
    """The record's ``spec_decode`` from the server's object (see the module doc).

    ``content_start``: output tokens before the first content token (exact counts; None
    when the channel split is not exact); ``sizes``: tokens per chunk (None unless
    exact per chunk). An object that does not check out gives ``{"error": ...}``.
    """
    try:
        spec = parse_server_spec(raw)
    except InvalidSpecMetrics as exc:
        return {"source": SOURCE_SERVER, "error": str(exc)}
    out: dict[str, Any] = {"source": SOURCE_SERVER}
    out.update(part(spec.steps, spec.draft_tokens, spec.accepted))
    out["num_speculative_tokens"] = spec.k
    out["detailed"] = spec.per_step_accepted is not None
    if spec.histogram is not None:
        out["accepted_per_position"] = accepted_per_position(spec.histogram)
    split = _split(spec, content_start, tokens_output, sizes) if content_start is not None else None
    out["split"] = None
    if split is not None:
        parts, how = split
        out.update(parts)
        out["split"] = how
    return out


def estimate_from_chunks(sizes: Sequence[int], content_start: int | None) -> dict[str, Any] | None:
    """``spec_decode`` estimated from exact per-chunk counts alone (see the module doc)."""
    if len(sizes) < 2:
        return None
    steps = len(sizes) - 1
    accepted = sum(n - 1 for n in sizes[1:])
    out: dict[str, Any] = {"source": SOURCE_ESTIMATED}
    out.update(_estimated_part(steps, accepted))
    out["split"] = None
    if content_start is not None:
        counts = {c: [0, 0] for c in CHANNELS}
        position = sizes[0]
        for n in sizes[1:]:
            tally = counts["reasoning" if position < content_start else "content"]
            tally[0] += 1
            tally[1] += n - 1
            position += n
        for c in CHANNELS:
            out[c] = _estimated_part(*counts[c])
        out["split"] = SPLIT_EXACT
    return out


def _estimated_part(steps: int, accepted: int) -> dict[str, Any]:
    return {
        "drafts": None,
        "draft_tokens": None,
        "accepted_tokens": accepted,
        "acceptance_rate": None,
        "mean_acceptance_length": 1.0 + accepted / steps if steps else None,
    }


# Per-request acceptance rates binned for the level's histogram: [0, 0.1), ..., [0.9, 1.0].
RATE_BINS = 10


@dataclass
class _Counts:
    drafts: int = 0
    draft_tokens: int = 0
    accepted: int = 0
    requests: int = 0
    # Per request, where defined: acceptance rates, mean acceptance lengths.
    rates: list[float] = field(default_factory=list)
    lengths: list[float] = field(default_factory=list)

    def add(self, p: dict[str, Any]) -> None:
        self.requests += 1
        self.drafts += p.get("drafts") or 0
        self.draft_tokens += p.get("draft_tokens") or 0
        self.accepted += p.get("accepted_tokens") or 0
        rate, length = p.get("acceptance_rate"), p.get("mean_acceptance_length")
        if rate is not None:
            self.rates.append(rate)
        if length is not None:
            self.lengths.append(length)

    def merge(self, other: _Counts) -> None:
        self.drafts += other.drafts
        self.draft_tokens += other.draft_tokens
        self.accepted += other.accepted
        self.requests += other.requests
        self.rates.extend(other.rates)
        self.lengths.extend(other.lengths)

    def result(self, estimated: bool = False) -> dict[str, Any]:
        out = part(self.drafts, self.draft_tokens, self.accepted)
        if estimated:  # steps and drafts unknown: the mean length is per decode step
            out.update(drafts=None, draft_tokens=None, acceptance_rate=None)
            out["mean_acceptance_length"] = _mean(self.lengths)
        out["requests"] = self.requests
        out["acceptance_rate_request_mean"] = _mean(self.rates)
        out["mean_acceptance_length_request_mean"] = _mean(self.lengths)
        return out


def _mean(values: list[float]) -> float | None:
    return sum(values) / len(values) if values else None


@dataclass
class SpecTally:
    """Speculative decoding of a set of completed requests (mergeable, like ``Stats``).

    Token-weighted figures are vLLM's formulas over the summed counts; request-weighted
    ones the mean of the requests' own rates; per position, drafts accepted at position
    i over verify steps; the ideal speedup is what the acceptance alone would give if a
    verify step cost a plain step: decode tokens / (decode tokens - accepted tokens),
    a request's decode tokens being its output tokens but the prefill's one.
    """

    source: dict[str, int] | None = None
    errors: int = 0
    whole: _Counts | None = None
    channels: dict[str, _Counts] | None = None
    split: dict[str, int] | None = None
    per_position: list[int] | None = None
    position_drafts: int = 0
    decode_tokens: int = 0
    decode_accepted: int = 0

    def add(self, sd: dict[str, Any], tokens_output: int) -> None:
        if sd.get("error") is not None:
            self.errors += 1
            return
        src = str(sd.get("source"))
        self.source = self.source or {}
        self.source[src] = self.source.get(src, 0) + 1
        if self.whole is None:
            self.whole = _Counts()
        self.whole.add(sd)
        per_pos = sd.get("accepted_per_position")
        if per_pos is not None:
            have = self.per_position or []
            if len(have) < len(per_pos):
                have = have + [0] * (len(per_pos) - len(have))
            self.per_position = [
                h + (per_pos[i] if i < len(per_pos) else 0) for i, h in enumerate(have)
            ]
            self.position_drafts += sd.get("drafts") or 0
        decode = max(tokens_output - 1, 0)
        self.decode_tokens += decode
        self.decode_accepted += min(sd.get("accepted_tokens") or 0, decode)
        how = sd.get("split")
        if how is not None:
            self.split = self.split or {}
            self.split[how] = self.split.get(how, 0) + 1
            channels = self.channels
            if channels is None:
                channels = self.channels = {c: _Counts() for c in CHANNELS}
            for c in CHANNELS:
                p = sd.get(c)
                if p is not None:
                    channels[c].add(p)

    def merge(self, other: SpecTally) -> None:
        self.errors += other.errors
        if other.source:
            self.source = self.source or {}
            for k, v in other.source.items():
                self.source[k] = self.source.get(k, 0) + v
        if other.whole is not None:
            if self.whole is None:
                self.whole = _Counts()
            self.whole.merge(other.whole)
        if other.split:
            self.split = self.split or {}
            for k, v in other.split.items():
                self.split[k] = self.split.get(k, 0) + v
        if other.channels is not None:
            if self.channels is None:
                self.channels = {c: _Counts() for c in CHANNELS}
            for c in CHANNELS:
                self.channels[c].merge(other.channels[c])
        if other.per_position is not None:
            a, b = self.per_position or [], other.per_position
            n = max(len(a), len(b))
            self.per_position = [
                (a[i] if i < len(a) else 0) + (b[i] if i < len(b) else 0) for i in range(n)
            ]
            self.position_drafts += other.position_drafts
        self.decode_tokens += other.decode_tokens
        self.decode_accepted += other.decode_accepted

    def result(self) -> dict[str, Any] | None:
        """The ``spec_decode`` block of a level or category (None: no request carried one)."""
        whole = self.whole
        if whole is None:
            return {"requests": 0, "invalid": self.errors} if self.errors else None
        sources = self.source or {}
        estimated = set(sources) == {SOURCE_ESTIMATED}
        out: dict[str, Any] = {"source": dict(sorted(sources.items()))}
        out.update(whole.result(estimated))
        out["invalid"] = self.errors
        out["acceptance_per_position"] = (
            [n / self.position_drafts for n in self.per_position]
            if self.per_position is not None and self.position_drafts
            else None
        )
        steps = self.decode_tokens - self.decode_accepted
        out["ideal_speedup"] = self.decode_tokens / steps if steps > 0 else None
        counts = [0] * RATE_BINS
        for rate in whole.rates or []:
            counts[min(int(rate * RATE_BINS), RATE_BINS - 1)] += 1
        out["acceptance_rate_histogram"] = {
            "edges": [i / RATE_BINS for i in range(RATE_BINS + 1)],
            "counts": counts,
        }
        out["split"] = dict(sorted(self.split.items())) if self.split else {}
        if self.channels is not None:
            for c in CHANNELS:
                out[c] = self.channels[c].result(estimated)
        return out
