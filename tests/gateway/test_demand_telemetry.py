"""Every finished request becomes demand telemetry for the autoscaler, per model and
client region, written by the flush loop."""

from __future__ import annotations

import asyncio
import time

import openai
from redis.asyncio import Redis

from live.demand_table import DemandTables
from tests.gateway.conftest import CHAT
from tests.gateway.harness import Gateway


def test_routed_requests_are_recorded_as_demand_per_model_and_client_region(
    client: openai.OpenAI, gateway: Gateway
) -> None:
    started = time.time()
    for _ in range(4):
        client.chat.completions.create(
            model=CHAT, messages=[{"role": "user", "content": "demand"}], max_tokens=3
        )  # type: ignore[arg-type]

    async def read() -> tuple[float, float]:
        redis = Redis.from_url(gateway.redis_url)
        try:
            tables = DemandTables(redis, prefix=gateway.prefix)
            for _ in range(40):  # the flush runs every 50 ms
                series = (await tables.read([(CHAT, "us")], started - 60, time.time() + 60))[
                    (CHAT, "us")
                ]
                if series.requests.sum() >= 4:
                    break
                await asyncio.sleep(0.05)
            return float(series.requests.sum()), float(series.output_tokens.sum())
        finally:
            await redis.aclose()

    requests, output_tokens = asyncio.run(read())
    assert (requests, output_tokens) == (4.0, 12.0)
