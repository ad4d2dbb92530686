"""With Redis gone the gateway keeps routing from its last snapshot."""

from __future__ import annotations

import time
from collections.abc import Iterator

import httpx
import openai
import pytest

from skyroute.embedded_redis import EmbeddedRedis
from tests.gateway.conftest import CHAT, Fleet
from tests.gateway.harness import API_KEY, Gateway, unique_prefix

MESSAGES = [{"role": "user", "content": "no redis"}]


@pytest.fixture
def own_redis() -> Iterator[EmbeddedRedis]:
    """A Redis this test may stop."""
    with EmbeddedRedis() as server:
        yield server


def test_requests_succeed_from_snapshot_while_redis_is_down(
    fleet: Fleet, own_redis: EmbeddedRedis
) -> None:
    gw = Gateway(fleet.policy_path, own_redis.url, unique_prefix()).start()
    client = openai.OpenAI(base_url=f"{gw.base}/v1", api_key=API_KEY, max_retries=0, timeout=30)
    try:
        assert client.chat.completions.create(model=CHAT, messages=MESSAGES, max_tokens=2).choices  # type: ignore[arg-type]
        own_redis.stop()
        statuses = []
        for _ in range(20):
            raw = client.chat.completions.with_raw_response.create(
                model=CHAT, messages=MESSAGES, max_tokens=2
            )  # type: ignore[arg-type]
            statuses.append(raw.status_code)
        assert statuses == [200] * 20
        deadline = time.monotonic() + 10
        ready = httpx.get(f"{gw.base}/readyz").json()
        while ready["redis"] != "unreachable" and time.monotonic() < deadline:
            time.sleep(0.1)
            ready = httpx.get(f"{gw.base}/readyz").json()
        assert ready["status"] == "degraded"
        assert httpx.get(f"{gw.base}/readyz").status_code == 200
    finally:
        client.close()
        gw.stop()
