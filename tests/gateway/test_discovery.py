"""Replica discovery from the node group: when the autoscaler publishes a pool's running
replicas (``LiveTables.set_replicas(..., endpoints=...)``), the gateway sends the pool's
requests and probes there instead of to the policy's static endpoints."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from redis.asyncio import Redis

from live.tables import LiveTables
from skyroute.embedded_redis import free_port
from tests.gateway.conftest import CHAT
from tests.gateway.harness import (
    API_KEY,
    Engine,
    Gateway,
    policy_doc,
    pool,
    unique_prefix,
    wait_for,
    write_policy,
)

POOL = "aws:us-east-1:discovered"


@pytest.fixture(scope="module")
def engine() -> Iterator[Engine]:
    made = Engine("a10g-llama-3.1-8b", "upstream-chat", 0.0, seed=3).start()
    try:
        yield made
    finally:
        made.kill()


def _publish(redis_url: str, prefix: str, urls: list[str]) -> None:
    async def main() -> None:
        redis = Redis.from_url(redis_url)
        try:
            await LiveTables(redis, prefix).set_replicas(POOL, len(urls), len(urls), urls)
        finally:
            await redis.aclose()

    asyncio.run(main())


def test_requests_go_to_the_replicas_the_node_group_reports(
    engine: Engine, redis_url: str, tmp_path: Path
) -> None:
    # The policy's own endpoint is a port nothing listens on: only a discovered replica
    # can answer.
    dead = f"http://127.0.0.1:{free_port()}"
    entry = pool(POOL, engine, provider="aws", region="us-east-1", model=CHAT,
                 usd_per_gpu_hour=1.0, endpoints=[dead])  # fmt: skip
    prefix = unique_prefix()
    gw = Gateway(
        write_policy(tmp_path / "policy.yaml", policy_doc([entry], [CHAT])), redis_url, prefix
    ).start()
    url = f"{gw.base}/v1/chat/completions"
    body = {"model": CHAT, "messages": [{"role": "user", "content": "hi"}], "max_tokens": 2}
    headers = {"Authorization": f"Bearer {API_KEY}"}
    try:
        _publish(redis_url, prefix, [engine.url])

        def served() -> bool:
            return httpx.post(url, json=body, headers=headers, timeout=10).status_code == 200

        # Within a snapshot refresh or two every request reaches the discovered replica.
        wait_for(served, "a request served by the discovered replica")
        assert all(served() for _ in range(10))
    finally:
        gw.stop()
