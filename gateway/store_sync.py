"""The gateway's link to the system of record (``store/``), off the request path.

- At start-up the store's schema is migrated and Redis is refilled from the store if
  it lost the access tables (``store.restore``); a store that does not answer is
  logged and retried in the background: the gateway serves from Redis meanwhile.
- In the background: the restore check every second and whenever Redis comes back
  (``poke``), and the usage consumer moving the Redis usage stream into the ledger.

The admin API writes tenants and keys to the store before Redis (``routes_tenants``);
no request handler of the OpenAI API touches the store.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable

from base.errors import StoreError, TableError
from live.access_table import AccessTables
from live.usage_stream import UsageStream
from store.consumer import UsageConsumer
from store.migrate import migrate
from store.restore import RestoreLoop, key_record
from store.store import Store

logger = logging.getLogger(__name__)

_MAX_BACKOFF_S = 10.0
# The consumer's wait for new entries in Redis; below the gateway client's 0.5 s
# socket timeout, which a blocking read must not outlast.
CONSUMER_BLOCK_MS = 250
# A light load settles into the store once a second, not once per flush of the gateway
# (a commit per handful of records cost ~3 ms of CPU per request at 100 req/s).
CONSUMER_PACE_S = 1.0
# How long a key digest the store does not know either is not looked up again (s).
MISS_TTL_S = 1.0


class StoreSync:
    """Migration, restore and usage consumption for one gateway replica."""

    def __init__(
        self,
        store: Store,
        url: str,
        tables: AccessTables,
        replica_id: str,
        on_restored: Callable[[], Awaitable[None]],
        *,
        restore_interval_s: float = 1.0,
    ) -> None:
        self.store = store
        self.url = url
        self.tables = tables
        self._misses: dict[str, float] = {}
        self.migrated = False
        self.restorer = RestoreLoop(
            store, tables, time.time, interval_s=restore_interval_s, on_restored=on_restored
        )
        self.consumer = UsageConsumer(
            UsageStream(tables, consumer=replica_id),
            store.ledger,
            block_ms=CONSUMER_BLOCK_MS,
            pace_s=CONSUMER_PACE_S,
        )

    async def _migrate(self) -> None:
        if not self.migrated:
            await migrate(self.url)
            self.migrated = True

    async def start(self) -> None:
        """Migrate, then restore once. Never raises: failures are logged, ``run`` retries."""
        try:
            await self._migrate()
            await self.restorer.check_once()
        except (StoreError, TableError) as exc:
            logger.warning("store not ready at start-up (%s: %s); retrying in the background",
                           type(exc).__name__, exc)  # fmt: skip

    async def lookup_key(self, digest_hex: str) -> bool:
        """Put a key Redis does not know back from the store (Redis evicted or lost it);
        True if the store has it (then Redis has it again, revoked or not). A digest the
        store did not know either is not asked again for ``MISS_TTL_S``, so unknown keys
        cannot turn into a query per request. Raises StoreError or TableError."""
        now = time.monotonic()
        if now - self._misses.get(digest_hex, -MISS_TTL_S) < MISS_TTL_S:
            return False
        found = await self.store.keys(digest=digest_hex)
        if not found:
            if len(self._misses) > 10_000:
                self._misses.clear()
            self._misses[digest_hex] = now
            return False
        await self.tables.store_key(digest_hex, key_record(found[0]))
        logger.warning("api key %s was missing from redis; put back from the store",
                       found[0].key_id)  # fmt: skip
        return True

    def poke(self) -> None:
        """Redis is reachable again: check at once whether it must be refilled."""
        self.restorer.poke()

    async def run(self) -> None:
        """Loop: migrate until it succeeds, then run the restore check and the usage
        consumer. Runs until cancelled."""
        backoff = 0.5
        while not self.migrated:
            try:
                await self._migrate()
            except StoreError as exc:
                logger.warning("store migration failed (%s); retrying in %.1f s", exc, backoff)
                await asyncio.sleep(backoff)
                backoff = min(backoff * 2, _MAX_BACKOFF_S)
        await asyncio.gather(self.restorer.run(), self.consumer.run())
