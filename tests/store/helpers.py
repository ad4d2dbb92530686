"""Helpers of the store tests: an opened store, usage records in the real stream."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

from live.access_table import AccessTables, UsageRecord
from store.migrate import migrate
from store.store import Store
from tests.live.conftest import RedisTarget

TS_S = 1_764_000_000.0


@asynccontextmanager
async def opened(url: str) -> AsyncIterator[Store]:
    """A migrated store on ``url``, closed on exit."""
    await migrate(url)
    store = Store.open(url)
    try:
        yield store
    finally:
        await store.close()


@asynccontextmanager
async def access_tables(target: RedisTarget) -> AsyncIterator[AccessTables]:
    """The access tables under the test's prefix, on a client closed on exit."""
    client = target.client()
    try:
        yield AccessTables(client, prefix=target.prefix)
    finally:
        await client.aclose()


def usage(n: int, tenant: str = "acme", cost_nusd: int = 1_000) -> UsageRecord:
    """The ``n``-th request's usage record."""
    return UsageRecord(
        ts_s=TS_S + n, request_id=f"req-{n}", tenant=tenant, model="llama", pool="aws:p",
        provider="aws", region="us-east-1", prompt_tokens=10, completion_tokens=n,
        cost_nusd=cost_nusd, status="ok",
    )  # fmt: skip


async def publish(tables: AccessTables, records: list[UsageRecord]) -> None:
    """Write the records as the gateway's flushes do (with roll-ups and spend), one
    flush, and so one stream entry, per record: the consumer tests count entries."""
    pipe = tables.redis.pipeline(transaction=False)
    for record in records:
        tables.add_usage(pipe, [record])
    await pipe.execute()


async def publish_flush(tables: AccessTables, records: list[UsageRecord]) -> None:
    """Write the records as ONE gateway flush: one stream entry holding them all."""
    pipe = tables.redis.pipeline(transaction=False)
    tables.add_usage(pipe, records)
    await pipe.execute()
