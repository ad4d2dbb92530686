"""Choose a replica inside the chosen pool: least predicted wait, prefix and session affinity.

``ReplicaChooser.choose(request, table, timing, prefix_affinity=...)`` is pure arithmetic
over one pool's replicas (no I/O, no clock): NumPy over the whole pool for the load
bound, the hash and the least wait, and a scalar pass over one candidate per matched
prefix depth for affinity. The only state is what ``record`` taught it: the approximate
prefix index and the session map.

1. Bounded load (consistent hashing with bounded loads, Mirrokni et al. 2018): a replica
   is eligible only if taking the request keeps its load within ``load_factor`` (c) x the
   mean load after the request, rounded up: ``load + 1 <= ceil(c (total + 1) / n)`` over
   the ``n`` available replicas, or within ``min_bound`` requests (see
   :class:`AffinitySettings`). Rounding up keeps the least loaded replica eligible (with
   whole-request loads), so the set is never empty. Load is the larger of the gateway's
   in-flight count and the engine's running + waiting, so work from elsewhere counts.
   Should fractional loads leave no replica eligible, the least loaded ones are.
2. Among eligible replicas, in this order:
   - ``session``: the replica this session used last;
   - ``prefix`` (affinity on): least predicted time to first token, where a replica's
     matched prefix (from the index) is prefill it skips; so the longest match wins
     unless its queue costs more than the prefill it saves;
   - ``hash``: rendezvous hashing of the session id, or (affinity on) of the prompt's
     first block, so gateways that never talked agree on where a new prefix or session
     goes, and removing a replica moves only its own keys;
   - ``least_wait``: least predicted time to first token.

   Replicas with equal least predicted wait take turns.

Predicted time to first token, ms: queueing for a batch slot (requests beyond the slots,
each holding one for ``mean_output_tokens`` decode steps of a full batch, ``slots`` at a
time) + one decode step at the occupancy the request joins + prefill of the uncached
prompt tokens.
"""

from __future__ import annotations

import math
from collections import OrderedDict
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from base.errors import RoutingError
from base.types import BoolArray, FloatArray
from router.prefix_index import PrefixIndex, stable_hash64
from router.replica_keys import Matched, ReplicaKeys
from router.replica_timing import PoolTiming, WaitCurve, wait_ms

__all__ = [
    "AffinitySettings",
    "PoolTiming",
    "ReplicaChoice",
    "ReplicaChooser",
    "ReplicaRequest",
    "ReplicaTable",
]

_U64 = (1 << 64) - 1
# murmur3's 64-bit finaliser constants: rendezvous weights need well-mixed bits.
_M1 = np.uint64(0xFF51AFD7ED558CCD)
_M2 = np.uint64(0xC4CEB9FE1A85EC53)
_S33 = np.uint64(33)
_MEMO_TABLES = 1024
# Scores this close (ms) are equal: such replicas take turns.
_TIE_MS = 1e-6


@dataclass(frozen=True, slots=True)
class AffinitySettings:
    """How the choice trades affinity for balance.

    ``load_factor`` (c > 1) bounds any replica's load to c x the mean.

    ``min_bound`` (requests, capped at the pool's batch slots) is a load no replica is
    refused for: at a handful of requests per replica the relative bound would move a
    shared prefix, and pay its whole prefill again elsewhere, to avoid an imbalance of one
    or two requests that costs nothing while batch slots are free.

    ``block_tokens`` is the prompt tokens one block hash stands for (256 characters ~ 64
    tokens for ``prompt_block_hashes``; 512 for the Mooncake trace's ``hash_ids``).
    ``blocks_per_replica`` sizes each replica's share of the index, ``max_sessions`` the
    session map (least recently used dropped first).
    """

    load_factor: float = 1.25
    min_bound: int = 4
    block_tokens: int = 64
    blocks_per_replica: int = 8192
    max_sessions: int = 100_000

    def __post_init__(self) -> None:
        if self.load_factor <= 1.0:
            raise ValueError("load_factor must be > 1")
        if min(self.min_bound, self.block_tokens, self.blocks_per_replica, self.max_sessions) < 1:
            raise ValueError(
                "min_bound, block_tokens, blocks_per_replica and max_sessions must be >= 1"
            )


@dataclass(frozen=True, eq=False)
class ReplicaTable:
    """One pool's replicas as the choice sees them; arrays aligned with ``ids``.

    ``inflight``: requests this gateway fleet has in flight there. ``engine_queue``:
    running + waiting as the engine last reported (NaN: not known). ``available``: may
    take traffic (healthy, not draining or cordoned).
    """

    ids: tuple[str, ...]
    inflight: FloatArray
    engine_queue: FloatArray
    available: BoolArray

    @classmethod
    def build(
        cls,
        ids: Sequence[str],
        inflight: npt.ArrayLike | None = None,
        engine_queue: npt.ArrayLike | None = None,
        available: npt.ArrayLike | None = None,
    ) -> ReplicaTable:
        """A table with defaults: nothing in flight, engine load unknown, all available."""
        n = len(ids)

        def floats(values: npt.ArrayLike | None, fill: float) -> FloatArray:
            if values is None:
                return np.full(n, fill)
            return np.asarray(values, dtype=np.float64).reshape(n)

        avail = np.ones(n, dtype=np.bool_) if available is None else np.asarray(available)
        return cls(
            tuple(ids), floats(inflight, 0.0), floats(engine_queue, math.nan), avail.astype(bool)
        )


@dataclass(frozen=True, slots=True)
class ReplicaRequest:
    """What the choice needs of a request: prompt size (tokens), the prompt's chained
    block hashes (``prompt_block_hashes``, or a trace's block ids), and a session id
    (the ``x-session-id`` header) if the client sent one."""

    prompt_tokens: int
    block_hashes: Sequence[int] = ()
    session_id: str | None = None


@dataclass(frozen=True, slots=True)
class ReplicaChoice:
    """The chosen replica: position in the table, id, why (``session``, ``prefix``,
    ``hash``, ``least_wait``), prompt tokens it likely has cached, and its predicted time
    to first token (ms)."""

    index: int
    replica_id: str
    reason: str
    matched_tokens: int
    predicted_ms: float


class ReplicaChooser:
    """Chooses replicas of one pool and learns from what it chose (one per pool)."""

    def __init__(self, settings: AffinitySettings | None = None) -> None:
        self.settings = settings or AffinitySettings()
        self.index = PrefixIndex(self.settings.blocks_per_replica)
        self._sessions: OrderedDict[str, str] = OrderedDict()
        self._keys: dict[tuple[str, ...], ReplicaKeys] = {}
        self._waits: dict[PoolTiming, WaitCurve] = {}
        self._turn = 0

    def choose(
        self,
        request: ReplicaRequest,
        table: ReplicaTable,
        timing: PoolTiming,
        *,
        prefix_affinity: bool,
    ) -> ReplicaChoice:
        """The replica for ``request``. Reads the index and the sessions and learns
        nothing (only ``record`` does); it may fill its caches of per-pool constants.

        Raises:
            RoutingError: if no replica of the table is available.
        """
        load = np.fmax(table.inflight, table.engine_queue)
        avail = table.available
        n = int(np.count_nonzero(avail))
        if n == 0:
            raise RoutingError("no replica of the pool is available")
        if n == len(load):
            total = float(load.sum())
            low_at = int(load.argmin())
        else:
            total = float(np.dot(load, avail))
            low_at = int(np.where(avail, load, np.inf).argmin())
        low = float(load[low_at])
        bound = math.ceil(self.settings.load_factor * (total + 1.0) / n)
        bound = max(bound, min(self.settings.min_bound, timing.slots))
        # Eligible: available with load <= cap. Whole-request loads always leave the least
        # loaded replica under the bound; should fractional ones not, the least loaded are.
        cap = bound - 1.0 if low <= bound - 1.0 else low

        keys = self._keys_of(table.ids)
        hashes = request.block_hashes
        matched: list[Matched] = []
        if prefix_affinity and hashes:
            levels = self.index.match(hashes)
            if levels:
                matched = keys.matched(levels)
        sid = request.session_id
        if sid is not None:
            last = self._sessions.get(sid)
            at = keys.at.get(last) if last is not None else None
            if at is not None and avail[at] and load[at] <= cap:
                blocks = next((b for b, where in matched if at in where), 0)
                return self._answer(table, at, "session", request, float(load[at]), timing, blocks)
        wait = self._waits.get(timing) or self._wait_of(timing)
        if matched:
            if wait.strict:
                at, blocks = self._best_matched(request, matched, load, avail, cap, wait, low_at)
            else:
                at, blocks = self._best_matched_all(request, matched, load, avail, cap, wait)
            reason = "prefix" if blocks > 0 else "least_wait"
            return self._answer(table, at, reason, request, float(load[at]), timing, blocks)

        eligible = avail & (load <= cap)
        key = stable_hash64(sid) if sid is not None else None
        if key is None and prefix_affinity and hashes:
            key = hashes[0] & _U64
        if key is not None:
            # Rendezvous: the eligible replica whose mixed (key, replica) weight is highest.
            x = keys.salts ^ np.uint64(key)
            x ^= x >> _S33
            x *= _M1
            x ^= x >> _S33
            x *= _M2
            x ^= x >> _S33
            at = int(np.where(eligible, x, np.uint64(0)).argmax())
            return self._answer(table, at, "hash", request, float(load[at]), timing, 0)

        at = self._best(eligible, np.interp(load, wait.xs, wait.ys))
        return self._answer(table, at, "least_wait", request, float(load[at]), timing, 0)

    def record(self, request: ReplicaRequest, replica_id: str, *, prefix_affinity: bool) -> None:
        """Learn that ``replica_id`` served ``request`` (call it with the replica that
        actually took the request, after any failover): its prefix goes into the index
        (affinity on) and its session now belongs there."""
        self._turn += 1
        if prefix_affinity and request.block_hashes:
            self.index.record(request.block_hashes, replica_id)
        sid = request.session_id
        if sid is not None:
            sessions = self._sessions
            sessions[sid] = replica_id
            sessions.move_to_end(sid)
            if len(sessions) > self.settings.max_sessions:
                sessions.popitem(last=False)

    def pick(
        self,
        request: ReplicaRequest,
        table: ReplicaTable,
        timing: PoolTiming,
        *,
        prefix_affinity: bool,
    ) -> ReplicaChoice:
        """``choose`` then ``record`` the choice: the common path."""
        choice = self.choose(request, table, timing, prefix_affinity=prefix_affinity)
        self.record(request, choice.replica_id, prefix_affinity=prefix_affinity)
        return choice

    def forget(self, replica_id: str) -> None:
        """A replica left the pool: drop its prefixes (sessions move on their next request)."""
        self.index.forget(replica_id)
        self._keys.clear()

    def _best_matched(
        self,
        request: ReplicaRequest,
        matched: list[Matched],
        load: FloatArray,
        avail: BoolArray,
        cap: float,
        wait: WaitCurve,
        low_at: int,
    ) -> tuple[int, int]:
        """Least predicted time to first token among the eligible replicas: ``(position,
        matched blocks)``, ties to the lower position, as an argmin over the pool would.

        The wait being strict, the best replica holding a given depth is its least loaded
        eligible one, and the best unmatched one is the least loaded (``low_at``); so
        only one candidate per depth is scored, where whole-pool arrays cost ~10 NumPy
        calls."""
        block_tokens = self.settings.block_tokens
        limit = max(request.prompt_tokens - 1, 0)
        prefill = wait.prefill_ms_per_token
        best_at, best_blocks = low_at, 0
        best = wait.ms(float(load[low_at]))
        for blocks, positions in matched:
            # Equal depth, equal prefill saved: the least loaded eligible one is the best.
            at, held = -1, math.inf
            if isinstance(positions, list):
                for i in positions:
                    here = float(load[i])
                    if here < held and here <= cap and avail[i]:
                        at, held = i, here
            else:
                loads = np.where(avail[positions], load[positions], np.inf)
                j = int(loads.argmin())
                if loads[j] <= cap:
                    at, held = int(positions[j]), float(loads[j])
            if at < 0:
                continue
            score = wait.ms(held) - prefill * min(blocks * block_tokens, limit)
            if score < best or (score == best and at < best_at):
                best_at, best_blocks, best = at, blocks, score
        return best_at, best_blocks

    def _best_matched_all(
        self,
        request: ReplicaRequest,
        matched: list[Matched],
        load: FloatArray,
        avail: BoolArray,
        cap: float,
        wait: WaitCurve,
    ) -> tuple[int, int]:
        """As ``_best_matched`` for a wait that is not strict: the same scores over the
        whole pool as arrays."""
        depth = np.zeros(len(load))
        for blocks, positions in matched:
            depth[positions] = blocks
        limit = float(max(request.prompt_tokens - 1, 0))
        cached = np.minimum(depth * float(self.settings.block_tokens), limit)
        score = np.interp(load, wait.xs, wait.ys) - wait.prefill_ms_per_token * cached
        # Plain argmin: matched replicas rarely tie, and turns cost ~3 µs here.
        at = int(np.where(avail & (load <= cap), score, np.inf).argmin())
        return at, int(depth[at])

    def _best(self, eligible: BoolArray, score: FloatArray) -> int:
        """The eligible replica of least score; equal bests take turns (one turn per
        ``record``), so an idle pool is not filled from its first replica up."""
        masked = np.where(eligible, score, np.inf)
        ties = np.flatnonzero(masked <= masked.min() + _TIE_MS)
        return int(ties[self._turn % len(ties)]) if len(ties) > 1 else int(ties[0])

    def _keys_of(self, ids: tuple[str, ...]) -> ReplicaKeys:
        found = self._keys.get(ids)
        if found is not None:
            return found
        if len(self._keys) >= _MEMO_TABLES:
            self._keys.clear()
        keys = ReplicaKeys.build(ids, self.index)
        self._keys[ids] = keys
        return keys

    def _wait_of(self, timing: PoolTiming) -> WaitCurve:
        wait = self._waits[timing] = WaitCurve.of(timing)
        return wait

    def _answer(
        self,
        table: ReplicaTable,
        at: int,
        reason: str,
        request: ReplicaRequest,
        load: float,
        timing: PoolTiming,
        blocks: int,
    ) -> ReplicaChoice:
        prompt = request.prompt_tokens
        matched = min(blocks * self.settings.block_tokens, max(prompt - 1, 0))
        predicted = (
            wait_ms(load, timing)
            + timing.tpot_base_ms
            + timing.prefill_ms_per_token * (prompt - matched)
        )
        return ReplicaChoice(at, table.ids[at], reason, matched, predicted)
