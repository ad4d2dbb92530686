"""Which replicas probably hold a prompt's prefix in their KV cache: an approximate index.

The gateway cannot see an engine's cache. Like llm-d's approximate prefix-cache scorer
(Gateway API Inference Extension, ``prefix`` plugin), it remembers where it sent each
prompt: the prompt is cut into blocks, each block keyed by a hash chained over every
block before it (so one hash stands for the whole prefix up to it), and every hash maps
to the replicas that recently served a prompt containing it. Each replica's share is an
LRU bounded like the engine's own cache, so the index forgets roughly when the engine
evicts.

Pure and in-memory: no I/O, no clock (recency is insertion order). Each gateway replica
keeps its own; they agree on new prefixes because the replica choice falls back to
rendezvous hashing of the first block (:mod:`router.replica_choice`).
"""

from __future__ import annotations

import zlib
from collections import OrderedDict
from collections.abc import Sequence

__all__ = ["PrefixIndex", "prompt_block_hashes", "stable_hash64"]

# 256 characters ~ 64 tokens (4 vLLM blocks): coarser than the engine's blocks, so a long
# prompt costs tens of hashes, not hundreds, on the request path.
DEFAULT_BLOCK_CHARS = 256
# 128 blocks ~ 8k tokens: prompts sharing more than that are indistinguishable.
DEFAULT_MAX_BLOCKS = 128
# Per replica, ~ a 55 GB KV cache of Llama 3.1 8B (440k tokens) in 64-token blocks.
DEFAULT_BLOCKS_PER_REPLICA = 8192


def prompt_block_hashes(
    text: str, block_chars: int = DEFAULT_BLOCK_CHARS, max_blocks: int = DEFAULT_MAX_BLOCKS
) -> list[int]:
    """Chained hashes of the first ``max_blocks`` full ``block_chars``-character blocks of
    ``text`` (UTF-8 bytes); a trailing partial block is not hashed.

    Hash ``i`` identifies the whole prefix up to the end of block ``i``: its high 32 bits
    are the CRC-32 of that prefix (extended block by block), its low 32 bits the CRC-32 of
    the block alone, so two different prefixes collide only if both halves do.
    Deterministic across processes (unlike ``hash()``), so every gateway and the
    simulator compute the same values.
    """
    data = text.encode()
    count = min(len(data) // block_chars, max_blocks)
    out: list[int] = []
    prefix = 0
    for start in range(0, count * block_chars, block_chars):
        block = data[start : start + block_chars]
        prefix = zlib.crc32(block, prefix)
        out.append((prefix << 32) | zlib.crc32(block))
    return out


def stable_hash64(text: str) -> int:
    """A 64-bit hash of ``text`` that is the same in every process (a session id's key)."""
    data = text.encode()
    return (zlib.crc32(data) << 32) | zlib.adler32(data)


class PrefixIndex:
    """Block hash -> replicas that recently served a prompt with that block.

    Replicas are numbered by slot (a bit in the masks ``match`` returns) on first sight;
    ``forget`` frees a slot for reuse.

    Args:
        blocks_per_replica: hashes remembered per replica, least recently used evicted
            first (the engine's KV capacity in blocks is the natural size).
    """

    __slots__ = ("_by_hash", "_free", "_lrus", "_slots", "blocks_per_replica")

    def __init__(self, blocks_per_replica: int = DEFAULT_BLOCKS_PER_REPLICA) -> None:
        if blocks_per_replica < 1:
            raise ValueError("blocks_per_replica must be >= 1")
        self.blocks_per_replica = blocks_per_replica
        self._by_hash: dict[int, int] = {}
        self._slots: dict[str, int] = {}
        self._lrus: dict[int, OrderedDict[int, None]] = {}
        self._free: list[int] = []

    def __len__(self) -> int:
        """Distinct block hashes remembered."""
        return len(self._by_hash)

    def slot(self, replica_id: str) -> int:
        """The replica's slot, assigned on first call."""
        found = self._slots.get(replica_id)
        if found is not None:
            return found
        new = self._free.pop() if self._free else len(self._slots)
        self._slots[replica_id] = new
        self._lrus[new] = OrderedDict()
        return new

    def blocks_of(self, replica_id: str) -> int:
        """Hashes remembered for one replica."""
        found = self._slots.get(replica_id)
        return 0 if found is None else len(self._lrus[found])

    def match(self, hashes: Sequence[int]) -> list[tuple[int, int]]:
        """Longest matched prefix per replica, as ``(blocks, slot mask)`` pairs, deepest
        first, masks disjoint. A replica's depth is the deepest leading block it holds;
        the walk stops at the first block no replica holds (as llm-d's scorer does)."""
        by_hash = self._by_hash
        masks: list[int] = []
        for h in hashes:
            mask = by_hash.get(h)
            if mask is None:
                break
            masks.append(mask)
        out: list[tuple[int, int]] = []
        seen = 0
        for depth in range(len(masks), 0, -1):
            mask = masks[depth - 1] & ~seen
            if mask:
                out.append((depth, mask))
                seen |= mask
        return out

    def record(self, hashes: Sequence[int], replica_id: str) -> None:
        """Remember that ``replica_id`` served a prompt with these leading block hashes.

        Touched tail first, so a prefix's head is its most recent block and the LRU drops
        tails before heads, as vLLM evicts (a lost head would orphan the rest).
        """
        slot = self.slot(replica_id)
        bit = 1 << slot
        lru = self._lrus[slot]
        by_hash = self._by_hash
        for h in reversed(hashes[: self.blocks_per_replica]):
            if h in lru:
                lru.move_to_end(h)
            else:
                lru[h] = None
                by_hash[h] = by_hash.get(h, 0) | bit
        while len(lru) > self.blocks_per_replica:
            old, _ = lru.popitem(last=False)
            self._drop(old, bit)

    def forget(self, replica_id: str) -> None:
        """Drop everything remembered of a replica (it left the pool); frees its slot."""
        slot = self._slots.pop(replica_id, None)
        if slot is None:
            return
        bit = 1 << slot
        for h in self._lrus.pop(slot):
            self._drop(h, bit)
        self._free.append(slot)

    def _drop(self, h: int, bit: int) -> None:
        rest = self._by_hash.get(h, 0) & ~bit
        if rest:
            self._by_hash[h] = rest
        else:
            self._by_hash.pop(h, None)
