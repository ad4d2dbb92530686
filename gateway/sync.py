"""Background loops that keep the in-process state and Redis in step, off the request path.

- ``refresh``: reads the live tables into a new snapshot every interval (≤ 250 ms), or
  at once when the events channel announces a change (``live.table_reader``: the new
  observations each time, the announced pool hashes when announced or once a second).
- ``flush``: writes this replica's in-flight counts, observations, health changes and
  the engine replicas it ejected in one pipeline every interval.
- ``listen``: the pub/sub subscription that wakes ``refresh``.

When Redis is down each loop keeps going with backoff: routing continues from the last
snapshot, and since in-flight counts are written as absolute values the first flush
after Redis returns re-syncs them.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Callable

from redis.exceptions import RedisError

from base.errors import TableError
from gateway.routing_state import RoutingState
from gateway.usage import UsageLog
from live.access_table import AccessTables, UsageRecord
from live.demand_table import DemandRecord, DemandTables
from live.redis_client import AnyPipeline, RedisClient, pubsub
from live.rollout_table import RolloutTable
from live.table_reader import TableReader
from live.tables import LiveTables

logger = logging.getLogger(__name__)

_MAX_BACKOFF_S = 2.0

# How often the rollout records are read when no announcement came (seconds).
ROLLOUT_READ_INTERVAL_S = 1.0

# Records written at the next flush once this many wait, whatever their age.
USAGE_BATCH = 256


class TableSync:
    """Runs the refresh, flush and listen loops for one gateway replica."""

    def __init__(
        self,
        state: RoutingState,
        tables: LiveTables,
        access_tables: AccessTables,
        usage: UsageLog[UsageRecord],
        demand_tables: DemandTables,
        demand: UsageLog[DemandRecord],
        replica_id: str,
        *,
        refresh_interval_s: float,
        flush_interval_s: float,
        replica_ttl_ms: int,
        usage_interval_s: float = 1.0,
        rollout_table: RolloutTable | None = None,
        monotonic: Callable[[], float] = time.monotonic,
    ) -> None:
        self.state = state
        self.rollout_table = rollout_table
        # Rollout records change rarely and announce themselves ('rollouts' on the events
        # channel): read them then, and once a second in case an announcement was missed,
        # rather than in every 100 ms refresh.
        self._rollouts_due = True
        self._rollouts_read_at = -float("inf")
        # The clock of the flush-skipping rule (seconds; injectable for tests).
        self.monotonic = monotonic
        self.tables = tables
        self.reader = TableReader(tables)
        self.access_tables = access_tables
        self.usage = usage
        self.demand_tables = demand_tables
        self.demand = demand
        self.replica_id = replica_id
        self.refresh_interval_s = refresh_interval_s
        self.flush_interval_s = flush_interval_s
        self.usage_interval_s = usage_interval_s
        self._usage_since: float | None = None
        self.replica_ttl_ms = replica_ttl_ms
        self._wake = asyncio.Event()
        self.redis_errors = 0
        self._failing: set[str] = set()
        self.dropped_observations = 0
        self.skipped_flushes = 0
        self._flushed_inflight: dict[str, int] | None = None
        self._flushed_at = -float("inf")
        # Called when Redis answers again after failing (the store's restore check).
        self.on_recovery: Callable[[], None] | None = None

    def _mark(self, ok: bool, what: str, exc: BaseException | None = None) -> None:
        # The first failure of each kind is logged with its exception, also when Redis
        # was never reachable (a gateway started against a wrong URL must say so), and
        # again after a recovery; repeats while it stays down are only counted.
        if ok:
            if not self.state.redis_ok and self._failing:
                logger.info("redis reachable again; live tables re-synced")
                if self.on_recovery is not None:
                    self.on_recovery()
            self._failing.clear()
        else:
            self.redis_errors += 1
            if what not in self._failing:
                self._failing.add(what)
                logger.warning(
                    "redis unreachable (%s): routing from the last snapshot: %s: %s",
                    what, type(exc).__name__ if exc else "error", exc,
                )  # fmt: skip
        self.state.redis_ok = ok

    def wake(self) -> None:
        """Refresh now, rollout records included (this replica changed one)."""
        self._rollouts_due = True
        self._wake.set()

    async def first_refresh(self) -> None:
        """The start-up read of the tables; a failure is logged (the gateway then routes
        from the policy's defaults until Redis answers). Never raises."""
        try:
            await self.refresh_once()
        except TableError as exc:
            self._mark(False, "first refresh", exc)
        except Exception as exc:
            logger.exception("first snapshot refresh failed unexpectedly")
            self._mark(False, "first refresh", exc)
        else:
            self._mark(True, "first refresh")

    async def refresh_now(self) -> None:
        """Read everything into a new snapshot at once, the pools' hashes included: for
        an admin route that just wrote one and answers once this replica follows it.
        Raises TableError."""
        self.reader.changed()
        await self.refresh_once()

    async def refresh_once(self) -> None:
        """Read the tables into a new snapshot. Raises TableError."""
        now, mono = time.time(), self.monotonic()
        rows = await self.reader.read(
            self.state.policy.pool_ids, now, mono, self.replica_ttl_ms, self.replica_id
        )
        self.state.swap_snapshot(rows, now)
        if self.rollout_table is not None and (
            self._rollouts_due or mono - self._rollouts_read_at >= ROLLOUT_READ_INTERVAL_S
        ):
            self.state.set_rollouts(await self.rollout_table.read_all())
            self._rollouts_due, self._rollouts_read_at = False, mono

    def _records_due(self, now: float, final: bool) -> bool:
        # Records wait for a batch (USAGE_BATCH) or for usage_interval_s after the first
        # of them: a batch's roll-ups and spend cost a dozen commands, so writing them
        # every 50 ms made Redis work per request grow with the number of replicas.
        if not len(self.usage) and not len(self.demand):
            self._usage_since = None
            return False
        if self._usage_since is None:
            self._usage_since = now
        return (
            final
            or len(self.usage) + len(self.demand) >= USAGE_BATCH
            or now - self._usage_since >= self.usage_interval_s
        )

    async def flush_once(self, *, final: bool = False) -> None:
        """Write in-flight counts, observations and, when due (or ``final``: shutdown),
        usage and demand records. Raises TableError.

        With nothing new to write (no observation, record or demand, the same in-flight
        counts as the last successful flush) the write is skipped until a quarter of the
        replica TTL has passed, when it goes out anyway to keep this replica's share and
        liveness from expiring. An idle gateway then writes 1.3 times a second instead of
        20 (measured: about 10 ms/s less idle CPU)."""
        pending = self.state.take_pending()
        now = self.monotonic()
        records: list[UsageRecord] = []
        demand: list[DemandRecord] = []
        journal = self.usage.journal
        journaled = 0
        if self._records_due(now, final):
            records, demand = self.usage.take(), self.demand.take()
            # Every journaled record before this position is in ``records`` (or was dropped).
            journaled = journal.position if journal is not None else 0
            self._usage_since = None
        inflight = dict(self.state.inflight)
        # The replica set's clock is time.monotonic, whatever the skipping rule's is.
        mono, wall = time.monotonic(), time.time()
        ejections = self.state.replicas.take_ejections(mono, wall)
        counts = self.state.rollouts.take()
        if (
            not pending
            and not records
            and not demand
            and not ejections
            and not counts
            and inflight == self._flushed_inflight
            and now - self._flushed_at < self.replica_ttl_ms / 4000
        ):
            self.skipped_flushes += 1
            return

        def extra(pipe: AnyPipeline) -> None:
            self.access_tables.add_usage(pipe, records)
            self.demand_tables.add(pipe, demand)
            self.tables.add_replica_ejections(pipe, ejections)
            if counts and self.rollout_table is not None:
                self.rollout_table.add_counts(pipe, counts)

        try:
            entry_id = await self.tables.flush(
                self.replica_id,
                now_ms=int(time.time() * 1000),
                inflight=inflight,
                observations=pending,
                extra=extra if records or demand or ejections or counts else None,
            )
        except TableError:
            # Observations are statistics: dropping a batch during an outage only makes
            # the EWMA a little staler.
            self.dropped_observations += sum(o.ok + o.errors for o in pending.values())
            # Usage records are money: they wait for the next flush, due at once.
            self.usage.give_back(records)
            if records or demand:
                self._usage_since = now - self.usage_interval_s
            # Demand too: dropping it would make an outage look like no demand at all.
            self.demand.give_back(demand)
            self.state.replicas.give_back(ejections, mono, wall)
            # Rollout counts are statistics too, but HINCRBY is not idempotent: a batch
            # that may have been applied is dropped rather than risk counting it twice.
            self.state.rollouts.lost(counts)
            raise
        self.reader.written(entry_id)
        if records and journal is not None:
            journal.flushed(journaled)
        self._flushed_inflight, self._flushed_at = inflight, now

    async def refresh(self) -> None:
        """Loop: refresh the snapshot. Runs until cancelled."""
        backoff = self.refresh_interval_s
        while True:
            try:
                await self.refresh_once()
                self._mark(True, "refresh")
                backoff = self.refresh_interval_s
            except TableError as exc:
                self._mark(False, "refresh", exc)
                backoff = min(backoff * 2, _MAX_BACKOFF_S)
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._wake.wait(), timeout=backoff)
            self._wake.clear()

    async def flush(self) -> None:
        """Loop: flush local state. Runs until cancelled."""
        backoff = self.flush_interval_s
        while True:
            await asyncio.sleep(backoff)
            try:
                await self.flush_once()
                backoff = self.flush_interval_s
            except TableError as exc:
                self._mark(False, "flush", exc)
                backoff = min(backoff * 2, _MAX_BACKOFF_S)

    async def listen(self, redis: RedisClient) -> None:
        """Loop: wake ``refresh`` on every table-change event. Runs until cancelled."""
        backoff = 0.1
        listen_failing = False
        while True:
            try:
                async with await pubsub(redis) as events:
                    await events.subscribe(self.tables.events_channel)
                    backoff, listen_failing = 0.1, False
                    # Announcements made while unsubscribed are lost: read everything.
                    self.reader.changed()
                    self._rollouts_due = True
                    async for message in events.listen():
                        if message.get("data") in (b"rollouts", "rollouts"):
                            self._rollouts_due = True
                        else:
                            self.reader.changed()
                        self._wake.set()
            except (RedisError, OSError) as exc:
                # Readiness is the refresh loop's to judge; here only the first failure
                # of a run of them is logged (the refresh loop's poll still wakes it).
                if not listen_failing:
                    logger.warning("table-event subscription lost (%s: %s); resubscribing",
                                   type(exc).__name__, exc)  # fmt: skip
                listen_failing = True
                await asyncio.sleep(backoff)
                backoff = min(backoff * 2, _MAX_BACKOFF_S)
            except Exception:
                logger.exception("table-event listener failed; resubscribing")
                await asyncio.sleep(backoff)
                backoff = min(backoff * 2, _MAX_BACKOFF_S)

    async def release(self) -> None:
        """Drop this replica's in-flight share from Redis (shutdown). Never raises."""
        try:
            await self.tables.release(self.replica_id)
        except TableError as exc:
            logger.warning("could not release in-flight share: %s", exc)
