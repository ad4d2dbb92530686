"""Fixtures for the router tests: a real Redis, one unique key prefix per test."""

from __future__ import annotations

import asyncio
import os
import uuid
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager
from dataclasses import dataclass

import pytest
from redis.asyncio import Redis
from redis.exceptions import RedisError

from router.tables import LiveTables


def _redis_url() -> str:
    """Where the test Redis runs. The one place to change when the URL comes from elsewhere."""
    return os.environ.get("SKYROUTE_TEST_REDIS_URL", "redis://127.0.0.1:6379/0")


@dataclass(frozen=True)
class RedisTarget:
    """A Redis server and a key prefix that belongs to one test only.

    Redis clients are bound to the event loop that made them, so each test opens its
    clients inside the coroutine it hands to ``asyncio.run``.
    """

    url: str
    prefix: str

    def client(self) -> Redis:
        """A new client; the caller must ``await client.aclose()``."""
        return Redis.from_url(self.url)

    @asynccontextmanager
    async def tables(self) -> AsyncIterator[LiveTables]:
        """LiveTables under this test's prefix, on a client closed on exit."""
        client = self.client()
        try:
            yield LiveTables(client, prefix=self.prefix)
        finally:
            await client.aclose()


async def _ping(url: str) -> None:
    client = Redis.from_url(url)
    try:
        await client.ping()
    finally:
        await client.aclose()


async def _delete_prefix(target: RedisTarget) -> None:
    client = target.client()
    try:
        keys = [key async for key in client.scan_iter(match=f"{target.prefix}:*", count=500)]
        if keys:
            await client.delete(*keys)
    finally:
        await client.aclose()


@pytest.fixture
def live_redis() -> Iterator[RedisTarget]:
    """A reachable Redis and a fresh ``srtest:<uuid>`` prefix; its keys are deleted after."""
    url = _redis_url()
    try:
        asyncio.run(_ping(url))
    except RedisError as exc:
        pytest.fail(f"no Redis at {url} (set SKYROUTE_TEST_REDIS_URL): {exc}")
    target = RedisTarget(url=url, prefix=f"srtest:{uuid.uuid4().hex}")
    yield target
    asyncio.run(_delete_prefix(target))
