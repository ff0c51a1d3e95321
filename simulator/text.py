"""The simulated model's text: token ids, their words, a tokenizer, and outputs per category.

Every token id stands for one word (:data:`WORDS`; the API writes each token as its word with
a leading space, so token counts can still be checked by splitting the text). Ids below
:data:`N_CORE` are the **core** words of a small first-order Markov language (each core
word has :data:`N_SUCCESSORS` successors, fixed once for all requests); the rest of
:data:`WORDS` is a **tail** of made-up words (names, numbers, identifiers) that rarely recur.

**Prompts** (:func:`prompt_token_ids`): the chat template (:data:`TEMPLATE_IDS`: special
tokens around a fixed system preamble written in the core language), then per
whitespace-separated word of the prompt its core id if the word (lower case, surrounding
punctuation stripped) is a core word, else one id per piece of at most 4 characters, by a
CRC32 of the piece modulo the id space above the emitted words (:data:`VOCAB_SIZE`).

**Outputs** (:class:`TextStream`): reasoning tokens first, then the answer, each channel
written in its category's :class:`Style`: with probability ``copy`` a verbatim copy of an
earlier span of the output starts (mean length ``copy_len``; code and structured answers
repeat what the reasoning drafted), with ``fresh`` a tail word (one of the request's topic
words with probability ``topic``, else any), with ``follow`` the next word follows the chain
(successor i with weight ``beta``^i), otherwise a core word by frequency (Zipf).
Repetition — and so the n-gram proposer's acceptance — emerges from these choices: the
reasoning channel follows the chain loosely and copies little, answers copy more. The
calibration of the styles is in docs/simulator.md.
"""

from __future__ import annotations

import random
import zlib
from bisect import bisect_left
from dataclasses import dataclass
from itertools import accumulate, product
from typing import Final

_CORE_TEXT = """
the a of to and is in that it we for this be so if then not with as on by at or but can
need check let me now next step value case each one all two which what when how first wait
maybe also just same since because thus hence means gives get use used number sum term
result answer function list return loop index array key string type call set add take find
make try look see note know think say show compute count time data input output node edge
size length left right start end true false zero other both only more less than equal
there here have has was are were will would should could must may might do does done
again still already every any some no yes
"""
CORE_WORDS: Final[tuple[str, ...]] = tuple(dict.fromkeys(_CORE_TEXT.split()))
N_CORE: Final = len(CORE_WORDS)
N_TAIL: Final = 8192
N_SUCCESSORS: Final = 12
#: Ids are below VOCAB_SIZE: emitted words, then hashed prompt pieces, then 16 special tokens.
VOCAB_SIZE: Final = 65536
N_SPECIAL: Final = 16
LANGUAGE_SEED: Final = 20240611
CORE_ZIPF: Final = 1.6
PREAMBLE_TOKENS: Final = 64


def _tail_words() -> tuple[str, ...]:
    """Made-up words of 2-3 syllables, deterministic, none a core word."""
    onsets = ("b", "d", "f", "g", "h", "k", "l", "m", "n", "p", "r", "s", "t", "v", "z")
    vowels = ("a", "e", "i", "o", "u")
    syllables = [c + v for c, v in product(onsets, vowels)]
    rng = random.Random(LANGUAGE_SEED)
    seen = set(CORE_WORDS)
    out: list[str] = []
    while len(out) < N_TAIL:
        word = "".join(rng.choice(syllables) for _ in range(rng.choice((2, 2, 3))))
        if word not in seen:
            seen.add(word)
            out.append(word)
    return tuple(out)


WORDS: Final[tuple[str, ...]] = CORE_WORDS + _tail_words()
N_WORDS: Final = len(WORDS)
_CORE_INDEX: Final = {w: i for i, w in enumerate(CORE_WORDS)}


def _cumulative(weights: list[float]) -> list[float]:
    total = sum(weights)
    cum = [w / total for w in accumulate(weights)]
    cum[-1] = 1.0
    return cum


#: P(core word of rank r) ∝ 1 / (r + 1)^CORE_ZIPF.
_CORE_CUM: Final = _cumulative([1.0 / (r + 1) ** CORE_ZIPF for r in range(N_CORE)])


def _successors() -> tuple[tuple[int, ...], ...]:
    """Each core word's successors, most likely first: distinct core words by frequency."""
    rng = random.Random(LANGUAGE_SEED + 1)
    out: list[tuple[int, ...]] = []
    for _ in range(N_CORE):
        picked: list[int] = []
        while len(picked) < N_SUCCESSORS:
            w = bisect_left(_CORE_CUM, rng.random())
            if w not in picked:
                picked.append(w)
        out.append(tuple(picked))
    return tuple(out)


SUCCESSORS: Final = _successors()


@dataclass(frozen=True)
class Style:
    """How one channel of one category writes (see the module doc)."""

    follow: float  # P(the next word follows the chain)
    beta: float  # successor i has weight beta^i
    fresh: float  # P(a tail word)
    topic: float = 0.5  # P(a fresh word is one of the request's topic words)
    copy: float = 0.0  # P(a copy of an earlier span of the output starts here)
    copy_len: float = 8.0  # mean copy length (at least 3)

    def successor_cum(self) -> list[float]:
        return _cumulative([self.beta**i for i in range(N_SUCCESSORS)])


@dataclass(frozen=True)
class CategoryText:
    reasoning: Style
    answer: Style


#: Calibrated so that vLLM's n-gram rule (k 5, lookup 2..4) over these texts accepts about
#: what the seed's probabilistic model did per category (docs/simulator.md); the answer
#: channel repeats more than the reasoning one.
STYLES: Final[dict[str, CategoryText]] = {
    "coding": CategoryText(
        Style(follow=1.0, beta=0.52, fresh=0.03, topic=0.6),
        Style(follow=1.0, beta=0.42, fresh=0.05, topic=0.8, copy=0.045, copy_len=12),
    ),
    "math": CategoryText(
        Style(follow=1.0, beta=0.54, fresh=0.03, topic=0.5),
        Style(follow=1.0, beta=0.45, fresh=0.04, topic=0.6, copy=0.02, copy_len=6),
    ),
    "structured": CategoryText(
        Style(follow=1.0, beta=0.56, fresh=0.03, topic=0.5),
        Style(follow=1.0, beta=0.40, fresh=0.05, topic=0.8, copy=0.035, copy_len=10),
    ),
    "explanation": CategoryText(
        Style(follow=1.0, beta=0.66, fresh=0.03, topic=0.4),
        Style(follow=1.0, beta=0.58, fresh=0.04, topic=0.4, copy=0.005, copy_len=5),
    ),
    "long_reasoning": CategoryText(
        Style(follow=1.0, beta=0.60, fresh=0.03, topic=0.4),
        Style(follow=1.0, beta=0.55, fresh=0.04, topic=0.5, copy=0.01, copy_len=6),
    ),
}
_DEFAULT_CATEGORY: Final = "explanation"
_STYLE_CUMS: dict[Style, list[float]] = {}
N_TOPIC_WORDS: Final = 16
_TOPIC_CUM: Final = _cumulative([1.0 / (r + 1) for r in range(N_TOPIC_WORDS)])


def _style_cum(style: Style) -> list[float]:
    cum = _STYLE_CUMS.get(style)
    if cum is None:
        cum = _STYLE_CUMS[style] = style.successor_cum()
    return cum


class TextStream:
    """One request's output token ids, generated on demand (:meth:`ensure`), reasoning
    (``reasoning_tokens`` of them) first, then the answer; deterministic given ``seed``."""

    __slots__ = (
        "_answer",
        "_copy_left",
        "_copy_src",
        "_reasoning",
        "_rng",
        "_topics",
        "ids",
        "reasoning_tokens",
    )

    def __init__(self, category: str, reasoning_tokens: int, seed: int) -> None:
        text = STYLES.get(category) or STYLES[_DEFAULT_CATEGORY]
        self._reasoning = text.reasoning
        self._answer = text.answer
        self.reasoning_tokens = reasoning_tokens
        self._rng = random.Random(seed)
        self._topics = [N_CORE + self._rng.randrange(N_TAIL) for _ in range(N_TOPIC_WORDS)]
        self._copy_left = 0
        self._copy_src = 0
        self.ids: list[int] = []

    def ensure(self, n: int) -> list[int]:
        """At least ``n`` ids generated (in blocks of at least 64); returns them all."""
        ids = self.ids
        if len(ids) < n:
            want = max(n, len(ids) + 64)
            r = self.reasoning_tokens
            if len(ids) < r:
                self._write(self._reasoning, min(r, want))
            if len(ids) < want:
                self._write(self._answer, want)
        return ids

    def _write(self, style: Style, until: int) -> None:
        ids = self.ids
        rng = self._rng
        random_ = rng.random
        succ_cum = _style_cum(style)
        core_cum = _CORE_CUM
        topics = self._topics
        follow, fresh, topic = style.follow, style.fresh, style.topic
        copy, copy_len = style.copy, style.copy_len
        scale = 1.0 / (1.0 - fresh)
        successors = SUCCESSORS
        append = ids.append
        copy_left, copy_src = self._copy_left, self._copy_src
        n = len(ids)
        last = ids[-1] if ids else 0
        while n < until:
            if copy_left:
                last = ids[copy_src]
                copy_src += 1
                copy_left -= 1
            elif copy and n > 24 and random_() < copy:
                length = 3 + int(rng.expovariate(1.0 / max(copy_len - 3.0, 0.5)))
                copy_left = min(length, n - 1)
                copy_src = rng.randrange(0, n - copy_left)
                continue
            else:
                x = random_()
                if x < fresh:
                    if random_() < topic:
                        last = topics[bisect_left(_TOPIC_CUM, random_())]
                    else:
                        last = N_CORE + int(random_() * N_TAIL)
                else:
                    u = (x - fresh) * scale  # uniform again: one draw serves both choices
                    if last < N_CORE and (follow >= 1.0 or random_() < follow):
                        last = successors[last][bisect_left(succ_cum, u)]
                    else:
                        last = bisect_left(core_cum, u)
            append(last)
            n += 1
        self._copy_left, self._copy_src = copy_left, copy_src


def output_token_ids(category: str, reasoning_tokens: int, n: int, seed: int) -> list[int]:
    """The first ``n`` output ids of a request (what :class:`TextStream` generates)."""
    return TextStream(category, reasoning_tokens, seed).ensure(n)[:n]


def _preamble() -> tuple[int, ...]:
    """The chat template's system preamble: PREAMBLE_TOKENS words of the core language."""
    rng = random.Random(LANGUAGE_SEED + 2)
    cum = Style(follow=1.0, beta=0.55, fresh=0.0).successor_cum()
    out = [0]
    while len(out) < PREAMBLE_TOKENS:
        out.append(SUCCESSORS[out[-1]][bisect_left(cum, rng.random())])
    return tuple(out)


# Special tokens live at the top of the id space (never emitted, never hashed to).
_SPECIAL = {
    name: VOCAB_SIZE - N_SPECIAL + i
    for i, name in enumerate(
        (
            "<|im_system|>",
            "<|im_middle|>",
            "<|im_end|>",
            "<|im_user|>",
            "<|im_assistant|>",
            "<think>",
        )
    )
}
PREAMBLE: Final = _preamble()
TEMPLATE_HEAD: Final = (
    _SPECIAL["<|im_system|>"],
    _SPECIAL["<|im_middle|>"],
    *PREAMBLE,
    _SPECIAL["<|im_end|>"],
    _SPECIAL["<|im_user|>"],
    _SPECIAL["<|im_middle|>"],
)
TEMPLATE_TAIL: Final = (
    _SPECIAL["<|im_end|>"],
    _SPECIAL["<|im_assistant|>"],
    _SPECIAL["<|im_middle|>"],
    _SPECIAL["<think>"],
)
#: Tokens the chat template adds to every prompt.
TEMPLATE_TOKENS: Final = len(TEMPLATE_HEAD) + len(TEMPLATE_TAIL)
_HASHED = VOCAB_SIZE - N_SPECIAL - N_WORDS
_PUNCT = "\"'()[]{}.,;:!?`*_-"


def word_token_ids(text: str) -> list[int]:
    """The ids of ``text`` without the template: a core word is one id, any other word one id
    per piece of at most 4 characters (CRC32 modulo the ids above the emitted words)."""
    out: list[int] = []
    for word in text.split():
        core = _CORE_INDEX.get(word.strip(_PUNCT).lower())
        if core is not None:
            out.append(core)
            continue
        data = word.encode("utf-8", "replace")
        for i in range(0, len(data), 4):
            out.append(N_WORDS + zlib.crc32(data[i : i + 4]) % _HASHED)
    return out


def prompt_token_ids(text: str) -> list[int]:
    """A prompt as the simulated model's tokenizer sees it: template head, text, template tail."""
    return [*TEMPLATE_HEAD, *word_token_ids(text), *TEMPLATE_TAIL]


def synthetic_prompt_ids(n: int, seed: int) -> list[int]:
    """A prompt of exactly ``n`` ids (at least the template) whose text part is made-up words
    (calibration runs, which have no prompt text)."""
    rng = random.Random(seed)
    body = [N_WORDS + rng.randrange(_HASHED) for _ in range(max(0, n - TEMPLATE_TOKENS))]
    return [*TEMPLATE_HEAD, *body, *TEMPLATE_TAIL][: max(n, 1)]


def words_of(ids: list[int]) -> str:
    """The text of emitted ids: each id's word with a leading space."""
    words = WORDS
    return "".join(" " + words[i] for i in ids)
