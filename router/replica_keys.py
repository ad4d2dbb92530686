"""Per replica set constants of the replica choice, and the prefix index's matches
translated from index slots to table positions.

``ReplicaKeys`` is computed once per tuple of replica ids (a pool's membership changes
rarely; its loads change every request) and memoised by the chooser. Pure: no I/O.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np
import numpy.typing as npt

from router.prefix_index import PrefixIndex, stable_hash64

__all__ = ["Matched", "ReplicaKeys"]

IntArray = npt.NDArray[np.intp]
# Replicas holding a prefix ``blocks`` deep: their positions in the table.
Matched = tuple[int, "list[int] | IntArray"]

# Above this many replicas in one match level, unpacking the mask beats walking its bits.
_FEW_BITS = 16
_MEMO_MASKS = 4096


@dataclass(frozen=True, eq=False)
class ReplicaKeys:
    """One replica set as the chooser sees it.

    ``salts``: rendezvous salt per position. ``at``: position of each replica id.
    ``position``: position of each index slot, and ``slots`` the reverse (all present
    slots as one mask in ``present``). ``unpacked`` memoises wide masks as positions.
    """

    salts: npt.NDArray[np.uint64]
    at: dict[str, int]
    position: dict[int, int]
    slots: npt.NDArray[np.intp]
    present: int
    nbytes: int
    unpacked: dict[int, IntArray] = field(default_factory=dict)

    @classmethod
    def build(cls, ids: Sequence[str], index: PrefixIndex) -> ReplicaKeys:
        """Keys for ``ids`` (assigns index slots to replicas not yet seen)."""
        slots = [index.slot(rid) for rid in ids]
        return cls(
            salts=np.array([stable_hash64(rid) for rid in ids], dtype=np.uint64),
            at={rid: i for i, rid in enumerate(ids)},
            position={slot: i for i, slot in enumerate(slots)},
            slots=np.array(slots, dtype=np.intp),
            present=sum(1 << slot for slot in slots),
            nbytes=max(slots, default=0) // 8 + 1,
        )

    def matched(self, levels: Sequence[tuple[int, int]]) -> list[Matched]:
        """``PrefixIndex.match`` levels (blocks, slot mask; deepest first, disjoint) as
        ``(blocks, positions)`` for the replicas of this set, levels none of them holds
        left out. Positions ascend; a wide level's are a (shared, read-only) array, a
        narrow one's a list."""
        out: list[Matched] = []
        present = self.present
        position = self.position
        for blocks, level in levels:
            rest = level & present
            if not rest:
                continue
            if rest.bit_count() > _FEW_BITS:
                # A prefix many replicas hold (a common system prompt): unpack the mask,
                # once per distinct mask, as the same few recur request after request.
                held = self.unpacked.get(rest)
                if held is None:
                    if len(self.unpacked) >= _MEMO_MASKS:
                        self.unpacked.clear()
                    raw = np.frombuffer(rest.to_bytes(self.nbytes, "little"), dtype=np.uint8)
                    held = np.flatnonzero(np.unpackbits(raw, bitorder="little")[self.slots])
                    self.unpacked[rest] = held
                out.append((blocks, held))
                continue
            few: list[int] = []
            while rest:
                low = rest & -rest
                few.append(position[low.bit_length() - 1])
                rest ^= low
            few.sort()
            out.append((blocks, few))
        return out
