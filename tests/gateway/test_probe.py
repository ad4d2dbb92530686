"""The RTT probe measures each reachable pool and records it in the live tables."""

from __future__ import annotations

import asyncio
import math
import time
from pathlib import Path

from redis.asyncio import Redis

from adapters.upstream import UpstreamClient
from gateway.probe import probe_once
from gateway.routing_state import RoutingState
from live.policy_file import load_policy
from live.tables import LiveTables
from router.compiled import compile_policy
from skyroute.embedded_redis import free_port
from tests.gateway.harness import Engine, policy_doc, pool, unique_prefix, write_policy


def test_probe_records_rtt_for_live_pools_and_skips_dead_ones(
    tmp_path: Path, redis_url: str
) -> None:
    engine = Engine("a10g-llama-3.1-8b", "m", 1.0).start()
    dead = Engine("a10g-llama-3.1-8b", "m", 1.0, port=free_port())  # never started
    try:
        doc = policy_doc(
            [
                pool(
                    "aws:us-east-1:live",
                    engine,
                    provider="aws",
                    region="us-east-1",
                    model="m",
                    usd_per_gpu_hour=1,
                ),
                pool(
                    "gcp:us-east4:dead",
                    dead,
                    provider="gcp",
                    region="us-east4",
                    model="m",
                    usd_per_gpu_hour=1,
                ),
            ],
            ["m"],
        )
        state = RoutingState(compile_policy(load_policy(write_policy(tmp_path / "p.yaml", doc))))

        async def run() -> dict[str, float]:
            redis = Redis.from_url(redis_url)
            upstream = UpstreamClient()
            tables = LiveTables(redis, prefix=unique_prefix())
            try:
                measured = await probe_once(state, upstream, tables, timeout_s=1.0)
                rows = await tables.read(state.policy.pool_ids, int(time.time() * 1000), 3000)
                assert rows["aws:us-east-1:live"].rtt_ms == measured["aws:us-east-1:live"]
                assert math.isnan(rows["gcp:us-east4:dead"].rtt_ms)
                return measured
            finally:
                await upstream.close()
                await redis.aclose()

        measured = asyncio.run(run())
        assert set(measured) == {"aws:us-east-1:live"}
        assert measured["aws:us-east-1:live"] > 0
    finally:
        engine.kill()
