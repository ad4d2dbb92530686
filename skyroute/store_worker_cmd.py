"""``skyroute store-worker``: the store's background work in a process of its own.

With ``SKYROUTE_STORE_WORKER=external`` on the gateways, this process (one or more per
deployment) does what every gateway replica would do otherwise (``gateway.store_sync``):
it migrates the store's schema, refills Redis from the store when Redis lost the access
tables, and moves the usage stream from Redis into the ledger. Usage records wait in
the Redis stream while no worker runs, and a worker killed mid-batch leaves its batch
to the next (entries are acknowledged only once their rows are committed; a replayed
batch is stored once). Runs until SIGTERM or SIGINT.

Settings are the gateway's (``SKYROUTE_REDIS_URL``, ``SKYROUTE_REDIS_PREFIX``,
``SKYROUTE_DATABASE_URL``, ``SKYROUTE_REPLICA_ID``: the worker's consumer name, and
``SKYROUTE_LOG_LEVEL``); the Redis URL is required, as the worker has no Redis of
its own to share.
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import signal
from typing import Any

from base.errors import CommandError
from gateway.settings import GatewaySettings
from gateway.store_sync import StoreSync
from live.access_table import AccessTables
from live.redis_client import connect
from skyroute import logs
from store.url import check_database_url, default_database_url

__all__ = ["register"]

logger = logging.getLogger(__name__)


async def _no_republish() -> None:
    # The gateways republish their policy's limits after a refill (they watch for it).
    return None


async def run_worker(settings: GatewaySettings, stop: asyncio.Event) -> None:
    """Run the store's background work until ``stop`` is set, then close the store.
    Raises StoreError for a database URL the store does not support."""
    assert settings.redis_url is not None
    redis = connect(
        settings.redis_url, socket_timeout=5.0, socket_connect_timeout=2.0, health_check_interval=5
    )
    url = check_database_url(settings.database_url or default_database_url())
    tables = AccessTables(redis, prefix=settings.redis_prefix)
    sync = StoreSync(url, tables, settings.replica_id, _no_republish)
    work = asyncio.create_task(sync.run(), name="store-worker")
    stopping = asyncio.create_task(stop.wait())
    logger.info("store worker %s up: redis prefix %s", settings.replica_id, settings.redis_prefix)
    try:
        await asyncio.wait({work, stopping}, return_when=asyncio.FIRST_COMPLETED)
    finally:
        stopping.cancel()
        await sync.stop()  # between steps: no store call is cut in half
        work.cancel()
        await asyncio.gather(work, stopping, return_exceptions=True)
        await sync.close()
        await redis.aclose()
        logger.info("store worker %s stopped: %d usage records written, %d refills",
                    settings.replica_id, sync.written, sync.restores)  # fmt: skip


async def _main(settings: GatewaySettings) -> None:
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    await run_worker(settings, stop)


def cmd_store_worker(_: argparse.Namespace) -> int:
    """Run the worker (see the module docstring)."""
    settings = GatewaySettings()
    if settings.redis_url is None:
        raise CommandError("SKYROUTE_REDIS_URL is required: the worker shares the gateways' Redis")
    logs.configure(settings.log_level, settings.log_json)
    asyncio.run(_main(settings))
    return 0


def register(subparsers: Any) -> None:
    """Add ``store-worker`` to the ``skyroute`` command line."""
    p = subparsers.add_parser(
        "store-worker",
        help="run the store's migration, Redis refill and usage ledger writer on their own",
    )
    p.set_defaults(func=cmd_store_worker)
