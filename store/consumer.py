"""The usage consumer: moves per-request records from the Redis usage stream into the
ledger, each exactly once.

One step (``run_once``) takes a batch (this reader's own unacknowledged entries first,
then entries a dead reader left idle, then new ones), writes it to the store in ONE
transaction that inserts each row at most once (its idempotency id is unique) and adds
to the spend exactly the rows it inserted, and only then acknowledges the batch in
Redis. A crash anywhere leaves the entries pending: they are delivered again and the
replayed write inserts nothing twice. If the store is down, entries stay pending in
Redis (the buffer) and are written once it is back.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Sequence
from typing import Protocol

from base.errors import StoreError, TableError
from live.usage_stream import Entry, UsageStream
from store.records import LedgerRow
from store.usage_rows import to_batch

logger = logging.getLogger(__name__)

_MAX_BACKOFF_S = 5.0


class LedgerWriter(Protocol):
    """Where batches go (``store.ledger.Ledger``): stores rows idempotently in one
    transaction and returns those that were new. Raises StoreError."""

    async def write(self, rows: Sequence[LedgerRow]) -> list[LedgerRow]: ...


class UsageConsumer:
    """Runs one reader of the usage stream against one ledger.

    ``batch``: stream entries per step (each holds one gateway flush's records, so a step writes
    up to ``batch`` × records per flush rows); ``claim_idle_ms``: how long another reader's
    entry must have been pending before this one takes it over (longer than a step normally
    takes, so a live reader keeps its own); ``block_ms``: how long a step waits in Redis for
    new entries when there are none (None: not at all); ``pace_s``: after a step that did
    not fill its batch, how long to let entries gather before the next one, so a light load
    costs one store transaction per ``pace_s`` rather than one per handful of requests (a
    full batch goes on at once: a backlog is never held back).
    """

    def __init__(
        self,
        stream: UsageStream,
        ledger: LedgerWriter,
        *,
        batch: int = 64,
        claim_idle_ms: int = 30_000,
        block_ms: int | None = 1000,
        pace_s: float = 0.0,
    ) -> None:
        self.stream = stream
        self.ledger = ledger
        self.batch = batch
        self.claim_idle_ms = claim_idle_ms
        self.block_ms = block_ms
        self.pace_s = pace_s
        # Whether this reader may hold unacknowledged entries (at start: from a previous
        # life under the same name; after a failed step: that step's entries).
        self._own_pending = True
        self.written = 0
        self.malformed = 0
        self._stopped = asyncio.Event()

    def stop(self) -> None:
        """Make ``run`` return after the step under way (at once if it is pausing).
        Stopping between steps, not by cancellation, leaves no store transaction or
        connection cut in half at shutdown. Idempotent."""
        self._stopped.set()

    async def _pause(self, seconds: float) -> None:
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self._stopped.wait(), seconds)

    async def _next(self) -> list[Entry]:
        if self._own_pending:
            entries = await self.stream.read_own_pending(self.batch)
            if entries:
                return entries
            self._own_pending = False
        entries = await self.stream.claim_idle(self.claim_idle_ms, self.batch)
        if entries:
            return entries
        return await self.stream.read_new(self.batch, self.block_ms)

    async def run_once(self) -> int:
        """One step: returns how many stream entries it settled (0: none waiting).
        Raises TableError or StoreError; the step's entries then stay pending and
        the next step takes them again."""
        try:
            entries = await self._next()
            if not entries:
                return 0
            batch = to_batch(entries)
            if batch.malformed:
                # Acknowledged with the batch: an entry that can never be a row would
                # otherwise be delivered forever and hold up everything behind it.
                logger.error(
                    "dropping %d malformed usage entries or records, e.g. %s",
                    len(batch.malformed), batch.malformed[0],
                )  # fmt: skip
                self.malformed += len(batch.malformed)
            new = await self.ledger.write(batch.rows)
            await self.stream.ack(batch.entry_ids)
        except (TableError, StoreError):
            self._own_pending = True
            raise
        self.written += len(new)
        return len(entries)

    async def drain(self) -> int:
        """Steps until no entry is waiting; returns the entries settled. Raises like
        ``run_once``. Used at shutdown and by tests, with ``block_ms`` None."""
        total = 0
        while settled := await self.run_once():
            total += settled
        return total

    async def run(self) -> None:
        """Loop: settle the stream into the store, until ``stop`` (or cancelled). Redis
        and store outages are logged once each and retried with backoff."""
        backoff = 0.1
        failing: set[str] = set()
        while not self._stopped.is_set():
            try:
                while not self._stopped.is_set():
                    settled = await self.run_once()
                    if not settled and self.block_ms is None:
                        await self._pause(0.1)  # nothing waiting, and Redis did not wait
                    elif settled < self.batch and self.pace_s > 0:
                        await self._pause(self.pace_s)
                    backoff = 0.1
                    if failing:
                        logger.info("usage consumer caught up again")
                        failing.clear()
                return
            except (TableError, StoreError) as exc:
                kind = type(exc).__name__
                if kind not in failing:
                    failing.add(kind)
                    logger.warning("usage consumer waiting: %s: %s", kind, exc)
            except Exception:
                logger.exception("usage consumer step failed")
            await self._pause(backoff)
            backoff = min(backoff * 2, _MAX_BACKOFF_S)
