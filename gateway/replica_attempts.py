"""One request's replica choices across its attempts (``gateway.proxy`` uses one each).

The request is described once for the choice (``ReplicaRequest``): its prompt size, its
session (``x-session-id``), and, only for models with ``prefix_affinity`` on, the
chained hashes of its prompt's leading blocks, so a request of a model without affinity
hashes nothing. Each attempt picks a replica of its pool, never one this request already
failed on; a failed attempt tells whether the same pool still has another replica to
try before the request moves on to the next pool.
"""

from __future__ import annotations

import time
from collections.abc import Callable

from gateway.openai_request import ParsedRequest
from gateway.replica_set import ReplicaSet
from gateway.replicas import ReplicaPick, prompt_text
from router.prefix_index import prompt_block_hashes
from router.replica_choice import ReplicaRequest

__all__ = ["SESSION_HEADER", "RequestReplicas"]

# The header a client names its session by: a session's requests stay on one replica.
SESSION_HEADER = "x-session-id"


class RequestReplicas:
    """The replica side of one request's attempts."""

    __slots__ = ("_failed", "_monotonic", "_set", "request")

    def __init__(
        self,
        replicas: ReplicaSet,
        parsed: ParsedRequest,
        session_id: str | None,
        *,
        prefix_affinity: bool,
        monotonic: Callable[[], float] = time.monotonic,
    ) -> None:
        hashes = prompt_block_hashes(prompt_text(parsed.payload)) if prefix_affinity else []
        self.request = ReplicaRequest(parsed.prompt_tokens, hashes, session_id)
        self._set = replicas
        self._failed: dict[str, list[int]] | None = None
        self._monotonic = monotonic

    def pick(self, pool_id: str) -> ReplicaPick | None:
        """The replica of ``pool_id`` for the next attempt; None when the pool has no
        usable replica left for this request (or left the policy)."""
        pool = self._set.by_id.get(pool_id)
        if pool is None:
            return None
        failed = self._failed.get(pool_id, ()) if self._failed is not None else ()
        return pool.pick(self.request, self._monotonic(), failed)

    def another(self, pick: ReplicaPick) -> bool:
        """An attempt on ``pick`` failed (its replica was charged by the forwarder): True
        when the same pool has another usable replica this request has not tried, to be
        tried before the request moves on to the next pool."""
        pool = pick.pool
        if self._failed is None:
            self._failed = {}
        tried = self._failed.setdefault(pool.pool_id, [])
        tried.append(pick.index)
        if self._set.by_id.get(pool.pool_id) is not pool:
            return False
        avail = pool.table.available
        return any(bool(avail[i]) for i in range(len(avail)) if i not in tried)
