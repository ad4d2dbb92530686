"""Restore: when Redis lost the access tables, rebuild them from the system of record.

``restore`` checks the sentinel (``live.access_refill``) and, if it is gone, writes
every API key (digest, expiry; revoked keys stay revoked), the admin-API tenants (and
the deletion of deleted ones), their limits, the spend of the current budget periods,
and the usage stream's consumer group back, in one Redis transaction. ``RestoreLoop``
checks on an interval and whenever ``poke`` says Redis came back.

Known limits: usage records still in the lost stream (not yet consumed) are lost with
it; a consumer batch committed after the store was read here is counted in the ledger
but not in Redis's spend (at most one batch per consumer).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Awaitable, Callable

from base.errors import StoreError, TableError
from live.access_refill import AccessRefill, Refill
from live.access_table import AccessTables, KeyRecord
from live.usage_rollups import period_ids
from store.records import StoredKey
from store.store import Store

logger = logging.getLogger(__name__)


def key_record(key: StoredKey) -> KeyRecord:
    """A stored key as the live tables hold it (seconds; expiry 0.0 for never)."""
    return KeyRecord(
        id=key.key_id,
        tenant=key.tenant,
        name=key.name,
        created_s=key.created_ms / 1000,
        expires_s=key.expires_ms / 1000 if key.expires_ms else 0.0,
        revoked=key.revoked_ms is not None,
    )


async def restore(store: Store, tables: AccessTables, now_s: float) -> bool:
    """Refill Redis from the store if Redis lost it; True if this call refilled.
    Idempotent, and safe from several replicas at once (one refills). Raises
    TableError (Redis) or StoreError (store); nothing is then written."""
    refill = AccessRefill(tables)
    if await refill.filled():
        return False
    keys = await store.keys()
    tenants = await store.tenants()
    spend = await store.ledger.spend(period_ids(now_s))
    done = await refill.refill(
        Refill(
            keys=[(k.digest, key_record(k)) for k in keys],
            tenants={t.name: t.spec for t in tenants if not t.deleted},
            deleted_tenants=[t.name for t in tenants if t.deleted],
            spend=spend,
        ),
        now_s,
    )
    if done and (keys or tenants or spend):
        logger.warning(
            "redis had lost the access tables: refilled %d keys, %d tenants, %d spend counters",
            len(keys), sum(not t.deleted for t in tenants), len(spend),
        )  # fmt: skip
    elif done:
        # An empty store behind an empty Redis is a first start, not a loss: nothing
        # was there to lose, so nobody should be paged for it.
        logger.info("access tables initialised: the store holds no keys, tenants or spend yet")
    return done


class RestoreLoop:
    """Runs ``restore`` every ``interval_s`` and at once after ``poke()``.

    ``on_restored`` runs after a refill (the gateway re-publishes its policy's tenant
    limits and bootstrap key there); ``clock`` gives unix seconds."""

    def __init__(
        self,
        store: Store,
        tables: AccessTables,
        clock: Callable[[], float],
        *,
        interval_s: float = 1.0,
        on_restored: Callable[[], Awaitable[None]] | None = None,
    ) -> None:
        self.store = store
        self.tables = tables
        self.clock = clock
        self.interval_s = interval_s
        self.on_restored = on_restored
        self.restores = 0
        self.raised_spend = 0
        self._wake = asyncio.Event()
        self._stopped = False

    def poke(self) -> None:
        """Check now (Redis is reachable again after an outage)."""
        self._wake.set()

    def stop(self) -> None:
        """Make ``run`` return after the check under way (at once if it is waiting), so
        that shutdown cuts no store call in half. Idempotent."""
        self._stopped = True
        self._wake.set()

    async def check_once(self) -> bool:
        """One check; True if it refilled. Raises TableError or StoreError.

        When Redis still holds the refill, spend counters it lost one by one (eviction)
        are raised back to the store's figures instead (``AccessRefill.raise_spend``),
        so a budget never starts over."""
        now = self.clock()
        if not await restore(self.store, self.tables, now):
            spend = await self.store.ledger.spend(period_ids(now))
            raised = await AccessRefill(self.tables).raise_spend(spend)
            if raised:
                self.raised_spend += raised
                logger.warning("redis had lost %d spend counters; raised to the store's", raised)
            return False
        self.restores += 1
        if self.on_restored is not None:
            await self.on_restored()
        return True

    async def run(self) -> None:
        """Loop until ``stop`` (or cancelled). A failure is logged once per kind until a
        check passes."""
        failing: set[str] = set()
        while not self._stopped:
            try:
                await self.check_once()
                failing.clear()
            except (TableError, StoreError) as exc:
                kind = type(exc).__name__
                if kind not in failing:
                    failing.add(kind)
                    logger.warning("restore check failed (%s: %s); retrying", kind, exc)
            except Exception:
                logger.exception("restore check failed unexpectedly")
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._wake.wait(), timeout=self.interval_s)
            self._wake.clear()
