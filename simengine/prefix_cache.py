"""The simulated engine's prefix KV cache: an LRU of prompt blocks, as vLLM's prefix caching.

vLLM splits a prompt into blocks of ``block_size`` tokens (16 by default) and keys each
full block by a hash that chains the previous block's hash, so a block hash stands for
the whole prefix up to it. A new request reuses the KV of its longest run of leading
blocks already cached and prefills only the rest. Freed blocks stay cached until their
memory is needed, evicted least recently used first, tails before heads.

Here blocks are of text (``block_tokens * 4`` characters, the engine's 4 characters per
token) and the chained hash is CRC-32 over the prefix, which ``zlib.crc32`` extends block
by block at C speed. 32 bits are plenty for a simulator: a false hit needs a collision
with one of the cached blocks (~1e-5 per request with 40k blocks cached).

Simplifications, on purpose: the cache holds up to the replica's whole KV capacity in
blocks (vLLM keeps cached blocks only in memory running requests do not use), and only
prompt blocks are cached (vLLM also caches full blocks of generated text).
"""

from __future__ import annotations

import zlib
from collections import OrderedDict
from collections.abc import Sequence

from simengine.parsing import CHARS_PER_TOKEN

# vLLM's default --block-size.
DEFAULT_BLOCK_TOKENS = 16


def chained_block_hashes(text: str, block_chars: int, limit: int | None = None) -> list[int]:
    """Hash of every full ``block_chars``-character block of ``text``, each covering the
    whole prefix up to the end of its block (so equal hashes mean equal prefixes).

    At most ``limit`` blocks (all if None); a trailing partial block is not hashed.
    """
    data = text.encode()
    count = len(data) // block_chars
    if limit is not None:
        count = min(count, limit)
    out: list[int] = []
    h = 0
    view = memoryview(data)
    for i in range(count):
        h = zlib.crc32(view[i * block_chars : (i + 1) * block_chars], h)
        out.append(h)
    return out


class PrefixCache:
    """LRU of cached prompt blocks of one replica, with vLLM's hit accounting.

    Args:
        capacity_blocks: blocks the cache may hold (the replica's KV capacity / block
            size); 0 disables caching (every lookup misses, nothing is kept).
        block_tokens: tokens per block (vLLM's ``block_size``).

    Attributes:
        queries_tokens: prompt tokens looked up so far (vLLM ``prefix_cache_queries``).
        hits_tokens: prompt tokens found cached (vLLM ``prefix_cache_hits``).
    """

    __slots__ = ("_lru", "block_tokens", "capacity_blocks", "hits_tokens", "queries_tokens")

    def __init__(self, capacity_blocks: int, block_tokens: int = DEFAULT_BLOCK_TOKENS) -> None:
        if capacity_blocks < 0 or block_tokens < 1:
            raise ValueError("capacity_blocks must be >= 0 and block_tokens >= 1")
        self.capacity_blocks = capacity_blocks
        self.block_tokens = block_tokens
        self.queries_tokens = 0
        self.hits_tokens = 0
        self._lru: OrderedDict[int, None] = OrderedDict()

    @property
    def enabled(self) -> bool:
        """Whether the cache can hold anything."""
        return self.capacity_blocks > 0

    @property
    def block_chars(self) -> int:
        """Characters of prompt text per block."""
        return self.block_tokens * CHARS_PER_TOKEN

    def __len__(self) -> int:
        return len(self._lru)

    def hashes(self, prompt_text: str) -> list[int]:
        """The chained block hashes of a prompt (none when caching is off)."""
        if not self.enabled:
            return []
        return chained_block_hashes(prompt_text, self.block_chars, self.capacity_blocks)

    def admit(self, hashes: Sequence[int], prompt_tokens: int) -> int:
        """Schedule a prompt: count the lookup, cache its blocks, and return the prompt
        tokens whose KV is reused (prefill runs only on the rest).

        As in vLLM, at least the last prompt token is always computed (its logits give the
        first output token), so the reuse is at most ``prompt_tokens - 1``.
        """
        lru = self._lru
        matched = 0
        for h in hashes:
            if h not in lru:
                break
            matched += 1
        cached = min(matched * self.block_tokens, max(prompt_tokens - 1, 0))
        self.queries_tokens += max(prompt_tokens, 0)
        self.hits_tokens += cached
        if self.capacity_blocks:
            # Touch tail first, so a chain's head is its most recent block and eviction
            # takes tails before heads (a lost head makes the rest of the chain useless).
            for h in reversed(hashes[: self.capacity_blocks]):
                if h in lru:
                    lru.move_to_end(h)
                else:
                    lru[h] = None
            while len(lru) > self.capacity_blocks:
                lru.popitem(last=False)
        return cached
