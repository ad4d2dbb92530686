"""Routing follows the live tables in Redis: price first, the SLO always."""

from __future__ import annotations

import asyncio
import time

import openai
from redis.asyncio import Redis

from live.tables import LiveTables
from tests.gateway.conftest import CHAT
from tests.gateway.harness import Gateway

MESSAGES = [{"role": "user", "content": "route me"}]


def _pool_of(client: openai.OpenAI) -> str:
    raw = client.chat.completions.with_raw_response.create(
        model=CHAT, messages=MESSAGES, max_tokens=2
    )  # type: ignore[arg-type]
    return raw.headers["x-skyroute-pool"]


def _set_phantom_inflight(gateway: Gateway, pool_id: str, count: int) -> None:
    """Another gateway replica's in-flight share, written through the real table writer."""

    async def write() -> None:
        redis = Redis.from_url(gateway.redis_url)
        try:
            await LiveTables(redis, prefix=gateway.prefix).flush(
                "phantom-replica",
                now_ms=int(time.time() * 1000),
                inflight={pool_id: count},
                observations={},
            )
        finally:
            await redis.aclose()

    asyncio.run(write())


def _wait_for_pool(client: openai.OpenAI, expected: str, timeout_s: float = 5.0) -> str:
    deadline = time.monotonic() + timeout_s
    seen = _pool_of(client)
    while seen != expected and time.monotonic() < deadline:
        time.sleep(0.05)
        seen = _pool_of(client)
    return seen


def test_cheapest_feasible_pool_is_chosen(client: openai.OpenAI) -> None:
    assert {_pool_of(client) for _ in range(5)} == {"gcp:us-central1:cheap"}


def test_loaded_cheap_pool_loses_to_pricier_one_then_wins_when_load_drops(
    client: openai.OpenAI, gateway: Gateway
) -> None:
    # 60 requests in flight on 8 batch slots: the queue alone pushes TTFT past 800 ms.
    _set_phantom_inflight(gateway, "gcp:us-central1:cheap", 60)
    assert _wait_for_pool(client, "aws:us-east-1:mid") == "aws:us-east-1:mid"
    _set_phantom_inflight(gateway, "gcp:us-central1:cheap", 0)
    assert _wait_for_pool(client, "gcp:us-central1:cheap") == "gcp:us-central1:cheap"


def test_cost_header_reflects_the_pool_price(client: openai.OpenAI, gateway: Gateway) -> None:
    cheap = client.chat.completions.with_raw_response.create(
        model=CHAT, messages=MESSAGES, max_tokens=8
    )  # type: ignore[arg-type]
    _set_phantom_inflight(gateway, "gcp:us-central1:cheap", 60)
    assert _wait_for_pool(client, "aws:us-east-1:mid") == "aws:us-east-1:mid"
    mid = client.chat.completions.with_raw_response.create(
        model=CHAT, messages=MESSAGES, max_tokens=8
    )  # type: ignore[arg-type]
    # Same tokens, 2.5x the price per GPU-hour.
    ratio = float(mid.headers["x-skyroute-cost-usd"]) / float(cheap.headers["x-skyroute-cost-usd"])
    assert abs(ratio - 2.5) < 0.01
