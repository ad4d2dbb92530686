"""The gateway's reader of the live tables: a fold it keeps, and hashes it reads when told.

A refresh is one pipelined round trip of, usually, ONE command: XREAD of the
observation entries since the last refresh. The pools' hashes (replicas, health, price,
ejections) are read only when a writer announced a change on the events channel, and
once every ``slow_every_s`` (5 s) in case one was lost (announcements are lost only
with the subscription, and the gateway reads everything again when it resubscribes). Every
``checkpoint_every_s`` the reader also writes its fold as the checkpoint that one-shot
readers and newly started gateways start from, on the same round trip.

So the Redis work of a gateway replica's refresh no longer grows with the number of
pools, and that of a whole fleet grows with its requests, not with replicas x pools.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from live.observations import ObservationFold, stream_went_back
from live.pool_rows import SlowRows, build_rows, entries
from live.redis_client import run_pipeline
from live.tables import LiveTables
from router.snapshot import PoolRow


class TableReader:
    """Reads the live tables for one gateway replica. Not thread-safe; one task calls
    ``read`` at a time (the refresh loop)."""

    def __init__(
        self,
        tables: LiveTables,
        *,
        slow_every_s: float = 5.0,
        checkpoint_every_s: float = 2.0,
    ) -> None:
        self.tables = tables
        self.slow_every_s = slow_every_s
        self.checkpoint_every_s = checkpoint_every_s
        self.fold: ObservationFold | None = None
        self._slow: SlowRows = {}
        self._slow_ids: tuple[str, ...] = ()
        self._slow_due = True
        self._slow_read_at = -float("inf")
        self._checkpoint_at = -float("inf")

    def changed(self) -> None:
        """A pool hash changed (an announcement, or the subscription was re-made and
        announcements may have been missed): the next read reads them."""
        self._slow_due = True

    def written(self, entry_id: str) -> None:
        """This replica's flush created observation entry ``entry_id``. If that is not
        after what the fold has read, the stream was recreated and is read again from
        its beginning (otherwise every new entry would look old)."""
        if self.fold is not None and stream_went_back(entry_id, self.fold.last_id):
            self.fold.last_id = "0-0"

    async def read(
        self,
        pool_ids: Sequence[str],
        now_s: float,
        monotonic_s: float,
        replica_ttl_ms: int,
        exclude_replica: str,
    ) -> dict[str, PoolRow]:
        """Rows for ``pool_ids`` at ``now_s`` (unix s); ``monotonic_s`` paces the pool
        hashes and checkpoints. Raises TableError (the fold keeps what it had)."""
        ids = tuple(pool_ids)
        if self.fold is None:
            self.fold = await self.tables.fold()
        fold = self.fold
        slow = (
            self._slow_due
            or ids != self._slow_ids
            or monotonic_s - self._slow_read_at >= self.slow_every_s
        )
        checkpoint = monotonic_s - self._checkpoint_at >= self.checkpoint_every_s
        pipe = self.tables.redis.pipeline(transaction=False)
        self.tables.queue_tail(pipe, fold.last_id)
        if slow:
            self.tables.queue_slow(pipe, ids)
        if checkpoint:
            # The state as of its own id: a reader starting from it folds what follows.
            pipe.set(self.tables.obs_checkpoint, fold.to_checkpoint())
        replies: list[Any] = await run_pipeline(pipe, "snapshot read failed")
        fold.apply(entries(replies[0]))
        if slow:
            self._slow = LiveTables.parse_slow(ids, replies[1 : 1 + 4 * len(ids)])
            self._slow_ids, self._slow_due, self._slow_read_at = ids, False, monotonic_s
        if checkpoint:
            self._checkpoint_at = monotonic_s
        return build_rows(ids, fold, self._slow, int(now_s * 1000), replica_ttl_ms,
                          exclude_replica, with_samples=False)  # fmt: skip
