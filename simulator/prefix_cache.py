"""Automatic prefix caching as vLLM 0.32 counts it: full blocks of prompt ids, hashes chained.

A prompt is cut into blocks of :data:`BLOCK_TOKENS` ids; block i's hash covers its ids and
block i-1's hash, so a block can hit only if every block before it hit. On admission the
engine asks how many leading blocks are cached (:meth:`PrefixCache.cached_tokens`; as vLLM, at
most ``len(prompt) - 1`` tokens, since the last prompt token is always computed to get
logits), then inserts the prompt's full blocks (:meth:`PrefixCache.insert`). The cache holds
at most ``capacity_blocks`` blocks and evicts the least recently used; a request's blocks are
touched last-first, so its tail goes before its head (vLLM frees a request's blocks in
reverse order for the same reason). Only prompt blocks are cached: the simulator's output ids
are not what its tokenizer makes of the same words, so output blocks could never hit.
"""

from __future__ import annotations

from collections import OrderedDict

BLOCK_TOKENS = 16


def block_hashes(ids: list[int], block_tokens: int = BLOCK_TOKENS) -> list[int]:
    """The chained hash of every full block of ``ids``."""
    out: list[int] = []
    parent = 0
    for start in range(0, len(ids) - block_tokens + 1, block_tokens):
        parent = hash((parent, *ids[start : start + block_tokens]))
        out.append(parent)
    return out


class PrefixCache:
    """A bounded LRU set of block hashes."""

    def __init__(self, capacity_blocks: int, block_tokens: int = BLOCK_TOKENS) -> None:
        self.capacity_blocks = max(1, capacity_blocks)
        self.block_tokens = block_tokens
        self._blocks: OrderedDict[int, None] = OrderedDict()

    def __len__(self) -> int:
        return len(self._blocks)

    def cached_tokens(self, hashes: list[int], prompt_tokens: int) -> int:
        """Tokens of a prompt found cached: its leading blocks that are in the cache, at most
        ``prompt_tokens - 1`` tokens' worth."""
        limit = max(0, prompt_tokens - 1) // self.block_tokens
        blocks = self._blocks
        n = 0
        for h in hashes[:limit]:
            if h not in blocks:
                break
            n += 1
        return n * self.block_tokens

    def insert(self, hashes: list[int]) -> None:
        """Cache (or touch) a prompt's blocks; evict the least recently used beyond capacity."""
        blocks = self._blocks
        for h in reversed(hashes):  # the head ends most recent: evicted last
            blocks[h] = None
            blocks.move_to_end(h)
        while len(blocks) > self.capacity_blocks:
            blocks.popitem(last=False)

    def reset(self) -> None:
        self._blocks.clear()
