"""A usage consumer process that stops dead right after its first batch commits:
``python -m tests.store.crash_consumer DB_URL REDIS_URL PREFIX``. It prints
``committed N`` and then waits on stdin, so the test can SIGKILL it between the
store's commit and the Redis acknowledgement."""

from __future__ import annotations

import asyncio
import sys
from collections.abc import Sequence

from redis.asyncio import Redis

from live.access_table import AccessTables
from live.usage_stream import UsageStream
from store.consumer import UsageConsumer
from store.ledger import Ledger
from store.records import LedgerRow
from store.store import Store


class StopAfterCommit:
    """Commits, says so, then blocks (the process is killed here)."""

    def __init__(self, ledger: Ledger) -> None:
        self.ledger = ledger

    async def write(self, rows: Sequence[LedgerRow]) -> list[LedgerRow]:
        new = await self.ledger.write(rows)
        print(f"committed {len(new)}", flush=True)
        sys.stdin.readline()  # blocks the whole process: no ack can happen
        raise SystemExit("not killed")


async def main(db_url: str, redis_url: str, prefix: str) -> None:
    redis = Redis.from_url(redis_url)
    store = Store.open(db_url)
    stream = UsageStream(AccessTables(redis, prefix=prefix), consumer="doomed")
    await UsageConsumer(stream, StopAfterCommit(store.ledger), batch=10, block_ms=None).run_once()


if __name__ == "__main__":
    asyncio.run(main(*sys.argv[1:4]))
