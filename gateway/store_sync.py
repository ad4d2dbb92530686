"""The gateway's link to the system of record (``store/``), off the request path and off
the start-up path.

- The store opens after the gateway is ready (``run``, a background task of the app):
  its modules and drivers are imported off the event loop (``gateway.lazy_modules``;
  with SQLAlchemy they were a quarter of a worker's start-up; SQLAlchemy and Alembic now
  come only when the schema must change), then the schema is migrated and Redis
  is refilled from the store if it lost the access tables (``store.restore``). A store
  that does not answer is logged and retried in the background: the gateway serves
  from Redis meanwhile.
- Until that first attempt has finished, nothing is lost or answered wrongly: usage
  records wait in the Redis usage stream (the consumer's buffer at all times), and
  callers of ``store()`` (the admin API, and the look-up of a key Redis does not know)
  wait for it, up to ``open_wait_s``, then get StoreError (503 ``store_unavailable``).
- Then, in the background: the restore check every second and whenever Redis comes
  back (``poke``), and the usage consumer moving the Redis usage stream into the ledger.

The admin API writes tenants and keys to the store before Redis (``routes_tenants``);
no request handler of the OpenAI API touches the store.

With ``external=True`` (``SKYROUTE_STORE_WORKER=external``) the restore loop and the
usage consumer run in their own process (``skyroute store-worker``, this same class
with ``external=False``), not in every gateway replica. The gateway then opens the
store only when a caller needs it (an admin call, an unknown key's look-up), so an idle
replica never loads the store's modules and drivers, and no ledger writes share its CPU. It
still watches for a refill it did not do itself (``AccessRefill.filled`` once a
second, and at once when poked): after one, it republishes what only it knows (the
policy's tenant limits, the bootstrap key) through ``on_restored``.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import math
import time
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING

from base.errors import StoreError, TableError
from gateway.lazy_modules import import_off_loop
from live.access_refill import AccessRefill
from live.access_table import AccessTables

if TYPE_CHECKING:
    from store.consumer import UsageConsumer
    from store.restore import RestoreLoop
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
# How long a caller of ``store()`` waits for the store's first opening (s). Opening
# takes a fraction of a second; the bound is for a database that does not answer, whose
# callers then get the 503 the database's own failure would give them.
STORE_OPEN_WAIT_S = 10.0
# External mode: how soon after a failed opening a caller may start another (s), so that
# requests with unknown keys cannot turn a database outage into an opening per request.
_RETRY_OPEN_S = 1.0
# What opening the store imports (the rest of ``store/`` comes with them).
_STORE_MODULES = ("store.restore", "store.migrate", "store.consumer")


class StoreSync:
    """The store of one gateway replica: opening, migration, restore and usage
    consumption. ``url`` has passed ``store.url.check_database_url``."""

    def __init__(
        self,
        url: str,
        tables: AccessTables,
        replica_id: str,
        on_restored: Callable[[], Awaitable[None]],
        *,
        restore_interval_s: float = 1.0,
        open_wait_s: float = STORE_OPEN_WAIT_S,
        external: bool = False,
    ) -> None:
        self.url = url
        self.external = external
        self.tables = tables
        self.replica_id = replica_id
        self.on_restored = on_restored
        self.restore_interval_s = restore_interval_s
        self.open_wait_s = open_wait_s
        # Called once the store's modules are loaded (``skyroute serve`` freezes them
        # with its other start-up objects, out of the garbage collector's walks).
        self.on_loaded: Callable[[], None] | None = None
        # If set, the opening waits for it: ``skyroute serve`` sets it once its socket
        # listens, so that the import does not compete with the last of the start-up.
        self.not_before: asyncio.Event | None = None
        self.migrated = False
        self._store: Store | None = None
        self._restorer: RestoreLoop | None = None
        self._consumer: UsageConsumer | None = None
        self._failure: str | None = None
        self._opening: asyncio.Task[bool] | None = None
        self._opened = asyncio.Event()
        self._misses: dict[str, float] = {}
        self._poked = asyncio.Event()
        self._failed_at = -math.inf
        self._stopping = False
        self._run_task: asyncio.Task[None] | None = None

    # -- counters for /metrics (zero until the store is open) -----------------------------
    @property
    def written(self) -> int:
        """Usage records this replica's consumer wrote to the ledger."""
        return self._consumer.written if self._consumer is not None else 0

    @property
    def malformed(self) -> int:
        """Usage records this replica's consumer dropped as malformed."""
        return self._consumer.malformed if self._consumer is not None else 0

    @property
    def restores(self) -> int:
        """Refills of Redis from the store by this replica."""
        return self._restorer.restores if self._restorer is not None else 0

    # -- for callers ----------------------------------------------------------------------
    async def store(self) -> Store:
        """The store, once its first opening has finished; waits for that up to
        ``open_wait_s``. Raises StoreError if it has not finished by then, or if the
        store cannot be opened at all."""
        if self.external and self._store is None:
            self._open_for_callers()
        if not self._opened.is_set():
            try:
                await asyncio.wait_for(self._opened.wait(), self.open_wait_s)
            except TimeoutError:
                raise StoreError(
                    f"the store is still opening (waited {self.open_wait_s:g} s); retry"
                ) from None
        if self._store is None:
            reason = self._failure or "its opening was cancelled"
            raise StoreError(f"the store could not be opened: {reason}")
        return self._store

    async def lookup_key(self, digest_hex: str) -> bool:
        """Put a key Redis does not know back from the store (Redis evicted or lost it);
        True if the store has it (then Redis has it again, revoked or not). A digest the
        store did not know either is not asked again for ``MISS_TTL_S``, so unknown keys
        cannot turn into a query per request. While the store is still opening (just
        after start-up) it waits for it, as ``store`` does. Raises StoreError or
        TableError."""
        now = time.monotonic()
        if now - self._misses.get(digest_hex, -MISS_TTL_S) < MISS_TTL_S:
            return False
        store = await self.store()
        found = await store.keys(digest=digest_hex)
        if not found:
            if len(self._misses) > 10_000:
                self._misses.clear()
            self._misses[digest_hex] = now
            return False
        from store.restore import key_record  # noqa: PLC0415 - loaded with the store

        await self.tables.store_key(digest_hex, key_record(found[0]))
        logger.warning("api key %s was missing from redis; put back from the store",
                       found[0].key_id)  # fmt: skip
        return True

    def poke(self) -> None:
        """Redis is reachable again, or has evidently lost its data: check at once
        whether it must be (or has been) refilled."""
        if self._restorer is not None:
            self._restorer.poke()
        self._poked.set()

    # -- the background task --------------------------------------------------------------
    async def _open(self) -> None:
        """Load the store's modules and build the store, its restore loop and consumer.
        Raises what the import raises, or StoreError for a URL the engine refuses."""
        for name in _STORE_MODULES:
            await import_off_loop(name)
        if self.on_loaded is not None:
            self.on_loaded()
        from live.usage_stream import UsageStream  # noqa: PLC0415 - loaded just above
        from store.consumer import UsageConsumer  # noqa: PLC0415
        from store.restore import RestoreLoop  # noqa: PLC0415
        from store.store import Store  # noqa: PLC0415

        store = Store.open(self.url)
        if self.external:
            self._store = store
            return
        self._restorer = RestoreLoop(
            store,
            self.tables,
            time.time,
            interval_s=self.restore_interval_s,
            on_restored=self.on_restored,
        )
        self._consumer = UsageConsumer(
            UsageStream(self.tables, consumer=self.replica_id),
            store.ledger,
            block_ms=CONSUMER_BLOCK_MS,
            pace_s=CONSUMER_PACE_S,
        )
        self._store = store

    async def _migrate(self) -> None:
        if not self.migrated:
            from store.migrate import migrate  # noqa: PLC0415 - loaded by _open

            await migrate(self.url, before_upgrade=self._load_alembic)
            self.migrated = True

    async def _load_alembic(self) -> None:
        # Only a database behind the shipped schema needs Alembic (0.2 s of CPU to import
        # on a slow core): off the event loop, which serves by now.
        from store.migrate import ALEMBIC_MODULES  # noqa: PLC0415 - loaded by _open

        for name in ALEMBIC_MODULES:
            await import_off_loop(name)

    async def _first_attempt(self) -> bool:
        """Open, migrate, then restore once; False if the store cannot be opened at all
        (logged). Failures of the database or of Redis are logged; ``run`` retries them."""
        try:
            await self._open()
        except Exception as exc:  # a broken install or a URL the engine refuses
            self._failure = f"{type(exc).__name__}: {exc}"
            logger.exception("the store cannot be opened; the admin API answers 503")
            return False
        assert self._restorer is not None
        try:
            await self._migrate()
            await self._restorer.check_once()
        except (StoreError, TableError) as exc:
            logger.warning("store not ready (%s: %s); retrying in the background",
                           type(exc).__name__, exc)  # fmt: skip
        return True

    async def _open_on_demand(self) -> bool:
        """External mode: open the store for a caller; False if that failed (logged; a
        caller after ``_RETRY_OPEN_S`` tries again). The schema is the worker's to
        migrate: two processes migrating a fresh database at once collide, and a
        gateway older or newer than the worker must not move it. Until the worker has
        migrated, store calls fail with StoreError (503)."""
        try:
            await self._open()
        except Exception as exc:  # a broken install, a URL the engine refuses, a DB down
            self._failure = f"{type(exc).__name__}: {exc}"
            logger.warning("the store cannot be opened (%s); the admin API answers 503",
                           self._failure)  # fmt: skip
            if self._store is not None:
                await self._store.close()
            self._store = None
            self._failed_at = time.monotonic()
            return False
        return True

    def _open_for_callers(self) -> None:
        """External mode: start an opening unless one is under way or the last one
        failed less than ``_RETRY_OPEN_S`` ago (then callers get that failure)."""
        opening = self._opening
        if opening is not None and not opening.done():
            return
        if time.monotonic() - self._failed_at < _RETRY_OPEN_S:
            return
        self._opened.clear()
        self._opening = asyncio.create_task(self._open_on_demand(), name="store-open")
        self._opening.add_done_callback(lambda _: self._opened.set())

    async def _watch_refills(self) -> None:
        """External mode: call ``on_restored`` after every refill of Redis another
        process (the worker) did, seen as a new mark of the refill sentinel; checks
        every ``restore_interval_s`` and at a poke. Runs until cancelled."""
        refill = AccessRefill(self.tables)
        seen: str | None = None
        started = False
        while True:
            try:
                mark = await refill.last_refill()
            except TableError:
                mark = seen  # Redis is down: the sync loops report it
            else:
                if mark is None and (seen is not None or not started):
                    logger.warning("redis lacks the access tables; waiting for the store "
                                   "worker's refill")  # fmt: skip
                elif mark is not None and started and mark != seen:
                    try:
                        await self.on_restored()
                    except TableError as exc:
                        logger.warning("redis was refilled from the store; republishing "
                                       "this replica's tenant limits failed: %s", exc)  # fmt: skip
                    else:
                        logger.info("redis was refilled from the store; this replica's "
                                    "tenant limits are republished")  # fmt: skip
                seen, started = mark, True
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._poked.wait(), self.restore_interval_s)
            self._poked.clear()

    async def run(self) -> None:
        """Open the store, then loop: migrate until it succeeds, then run the restore
        check and the usage consumer. Runs until ``stop`` or cancelled, unless the store
        cannot be opened at all (then it returns, having logged why). External mode:
        only watch for refills; the store opens when a caller needs it."""
        self._run_task = asyncio.current_task()
        if self.not_before is not None:
            await self.not_before.wait()
        if self.external:
            await self._watch_refills()
            return
        self._opening = asyncio.create_task(self._first_attempt(), name="store-open")
        self._opening.add_done_callback(lambda _: self._opened.set())
        # Shielded: a shutdown lets the opening finish (``close``) rather than cut a
        # migration or a connection in half, as it let the start-up finish when the
        # store opened there. (A call on aiosqlite cancelled, then cancelled again
        # while it closes the connection, can leave a task waiting forever on the
        # connection's stopped thread, and the process with it.)
        if not await asyncio.shield(self._opening) or self._stopping:
            return
        backoff = 0.5
        while not self.migrated:
            try:
                await self._migrate()
            except StoreError as exc:
                logger.warning("store migration failed (%s); retrying in %.1f s", exc, backoff)
                await asyncio.sleep(backoff)
                backoff = min(backoff * 2, _MAX_BACKOFF_S)
            if self._stopping:
                return
        assert self._restorer is not None and self._consumer is not None
        logger.info("store migrated; restore check and usage consumer running")
        await asyncio.gather(self._restorer.run(), self._consumer.run())

    async def stop(self, timeout_s: float = 5.0) -> None:
        """Stop the restore check and the usage consumer between steps, waiting up to
        ``timeout_s`` for the steps under way; ``run`` then returns. Call before
        cancelling ``run``'s task: cancelling a call on aiosqlite mid-way,
        then again as it closes its connection, can leave a task waiting forever on the
        connection's stopped thread, and the process with it. Idempotent."""
        self._stopping = True
        if self._restorer is not None and self._consumer is not None:
            self._restorer.stop()
            self._consumer.stop()
        task = self._run_task
        # Waiting for the server to listen, or (external mode) watching Redis: nothing
        # of the store's is under way, and cancelling is safe.
        if task is None or task.done() or self._opening is None or self.external:
            return
        await asyncio.wait({task}, timeout=timeout_s)

    async def close(self) -> None:
        """Let an opening under way finish, then close the store's pooled connections (if
        it was opened). An opening still under way after ``open_wait_s`` is cancelled and
        its connections are left to the process's exit. Idempotent."""
        opening = self._opening
        if opening is not None and not opening.done():
            _, pending = await asyncio.wait({opening}, timeout=self.open_wait_s)
            if pending:
                logger.warning("the store's opening did not finish in %g s; cancelled",
                               self.open_wait_s)  # fmt: skip
                opening.cancel()
                return
        if self._store is not None:
            await self._store.close()
