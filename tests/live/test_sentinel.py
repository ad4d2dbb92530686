"""``redis+sentinel://`` reaches the master a real Sentinel names (a redis-server and a
redis-server in sentinel mode, both started here on free ports)."""

from __future__ import annotations

import asyncio
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import redis

from live.redis_client import connect
from live.tables import LiveTables
from skyroute.embedded_redis import EmbeddedRedis, free_port, redis_binary


@pytest.fixture(scope="module")
def sentinel_url(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    with EmbeddedRedis() as master:
        port = free_port()
        conf: Path = tmp_path_factory.mktemp("sentinel") / "sentinel.conf"
        conf.write_text(
            f"port {port}\nbind 127.0.0.1\nsentinel monitor skyroute 127.0.0.1 {master.port} 1\n"
        )
        proc = subprocess.Popen(
            [redis_binary(), str(conf), "--sentinel"], stdout=subprocess.DEVNULL
        )
        try:
            deadline = time.monotonic() + 20
            while True:
                try:
                    probe = redis.Redis(port=port, socket_timeout=1)
                    if probe.sentinel_get_master_addr_by_name("skyroute"):
                        probe.close()
                        break
                except redis.RedisError:
                    pass
                if time.monotonic() > deadline:
                    raise TimeoutError("sentinel did not come up")
                time.sleep(0.05)
            yield f"redis+sentinel://127.0.0.1:{port}/skyroute"
        finally:
            proc.terminate()
            proc.wait(timeout=10)


def test_tables_work_through_the_sentinels_master(sentinel_url: str) -> None:
    async def body() -> float:
        client = connect(sentinel_url, socket_timeout=2)
        try:
            tables = LiveTables(client, prefix="srtest:sentinel")
            now = int(time.time() * 1000)
            await tables.flush("gw", now_ms=now, inflight={"p": 2},
                               observations={})  # fmt: skip
            return (await tables.read(["p"], now, 60_000))["p"].inflight
        finally:
            await client.aclose()

    assert asyncio.run(body()) == 2
