"""Fixtures for the live-table tests: a real Redis, one unique key prefix per test."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager
from dataclasses import dataclass

import pytest

from live.redis_client import RedisClient, connect
from live.tables import LiveTables
from skyroute.embedded_redis import EmbeddedRedisCluster


@dataclass(frozen=True)
class RedisTarget:
    """A Redis server and a key prefix that belongs to one test only.

    Redis clients are bound to the event loop that made them, so each test opens its
    clients inside the coroutine it hands to ``asyncio.run``.
    """

    url: str
    prefix: str

    def client(self) -> RedisClient:
        """A new client (one server or a cluster, by the URL); the caller must
        ``await client.aclose()``."""
        return connect(self.url)

    @asynccontextmanager
    async def tables(self) -> AsyncIterator[LiveTables]:
        """LiveTables under this test's prefix, on a client closed on exit."""
        client = self.client()
        try:
            yield LiveTables(client, prefix=self.prefix)
        finally:
            await client.aclose()


async def delete_prefix(target: RedisTarget) -> None:
    client = target.client()
    try:
        keys = [key async for key in client.scan_iter(match=f"{target.prefix}:*", count=500)]
        if keys:
            await client.delete(*keys)
    finally:
        await client.aclose()


# The servers every live-table test runs on: the session's Redis, and the embedded Redis
# 6.2, the oldest skyroute supports.
SERVERS = ("server", "redis-6.2")


def server_target(request: pytest.FixtureRequest, server: str) -> RedisTarget:
    """A fresh ``srtest:<uuid>`` prefix on one of ``SERVERS``; its keys are deleted when
    the requesting test ends."""
    url = request.getfixturevalue("redis_url" if server == "server" else "redis62_url")
    target = RedisTarget(url=url, prefix=f"srtest:{uuid.uuid4().hex}")
    request.addfinalizer(lambda: asyncio.run(delete_prefix(target)))
    return target


@pytest.fixture(params=SERVERS)
def live_redis(request: pytest.FixtureRequest) -> RedisTarget:
    """Each of ``SERVERS`` in turn, with a fresh prefix (``server_target``)."""
    return server_target(request, request.param)


@pytest.fixture
def target(live_redis: RedisTarget) -> RedisTarget:
    """The same as ``live_redis`` (the name the demand-table tests use)."""
    return live_redis


@pytest.fixture
def prefix(request: pytest.FixtureRequest) -> str:
    """A fresh key prefix on the session's Redis, deleted after: the price-table and lease
    tests connect to ``redis_url`` themselves, so they run on that server only."""
    return server_target(request, "server").prefix


@pytest.fixture(scope="session")
def redis_cluster_url() -> Iterator[str]:
    """A 3-master Redis Cluster on free ports, started from the redis-server binary for
    the session and stopped after it (``redis+cluster://`` URL)."""
    with EmbeddedRedisCluster(masters=3) as cluster:
        yield cluster.url


@pytest.fixture
def cluster(redis_cluster_url: str) -> RedisTarget:
    """The session's cluster and a fresh key prefix (every test's keys differ)."""
    return RedisTarget(url=redis_cluster_url, prefix=f"srtest:{uuid.uuid4().hex}")
