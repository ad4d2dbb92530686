"""A Redis that evicts keys (maxmemory) degrades to a refill from the store: an evicted
API key is put back and served, never refused with a 401, and an evicted spend counter
is raised back to the store's figure, so an exhausted budget stays exhausted. The
evictions are real deletions in the real Redis the gateway processes use."""

from __future__ import annotations

import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest
import redis

from live.keyspace import tagged
from live.usage_rollups import period_ids
from tests.gateway.harness import (
    ADMIN_TOKEN,
    Engine,
    Gateway,
    policy_doc,
    pool,
    unique_prefix,
    wait_for,
    write_policy,
)

MODEL = "chat-model"
BODY = {"model": MODEL, "messages": [{"role": "user", "content": "hi"}], "max_tokens": 2}
ADMIN = {"Authorization": f"Bearer {ADMIN_TOKEN}"}


@dataclass
class Deployment:
    one: Gateway
    two: Gateway
    redis: redis.Redis

    def key(self, *parts: str) -> str:
        return tagged(self.one.prefix, "access", *parts)

    def new_key(self, tenant: str, **limits: object) -> tuple[str, str]:
        put = httpx.put(f"{self.one.base}/admin/tenants/{tenant}", json=limits, headers=ADMIN)
        assert put.is_success, put.text
        made = httpx.post(f"{self.one.base}/admin/keys", json={"tenant": tenant}, headers=ADMIN)
        assert made.status_code == 201, made.text
        return made.json()["id"], made.json()["secret"]

    def chat(self, gw: Gateway, secret: str) -> httpx.Response:
        headers = {"Authorization": f"Bearer {secret}"}
        return httpx.post(f"{gw.base}/v1/chat/completions", json=BODY, headers=headers, timeout=20)


@pytest.fixture(scope="module")
def deployment(tmp_path_factory: pytest.TempPathFactory, redis_url: str) -> Iterator[Deployment]:
    tmp: Path = tmp_path_factory.mktemp("eviction")
    engine = Engine("a10g-llama-3.1-8b", "upstream-chat", 0.05).start()
    doc = policy_doc(
        [pool("aws:us-east-1:p", engine, provider="aws", region="us-east-1", model=MODEL,
              usd_per_gpu_hour=1.0)],
        [MODEL],
    )  # fmt: skip
    policy = write_policy(tmp / "policy.yaml", doc)
    prefix = unique_prefix()
    one = two = None
    client = redis.Redis.from_url(redis_url)
    try:
        one = Gateway(policy, redis_url, prefix).start()
        two = Gateway(policy, redis_url, prefix).start()
        yield Deployment(one, two, client)
    finally:
        for gw in (one, two):
            if gw is not None:
                gw.stop()
        engine.kill()
        client.close()


def test_an_evicted_key_is_put_back_not_refused(deployment: Deployment) -> None:
    d = deployment
    key_id, secret = d.new_key("evict-key")
    assert d.chat(d.one, secret).status_code == 200
    digest = d.redis.get(d.key("keyid", key_id))
    assert digest is not None
    assert d.redis.delete(d.key("key", digest.decode())) == 1  # as maxmemory eviction would

    statuses = [d.chat(gw, secret).status_code for gw in (d.two, d.one, d.two)]

    assert statuses == [200, 200, 200]  # replica two never saw the key before
    assert d.redis.exists(d.key("key", digest.decode()))


def test_a_revoked_key_evicted_from_redis_stays_revoked(deployment: Deployment) -> None:
    d = deployment
    key_id, secret = d.new_key("evict-revoked")
    assert httpx.delete(f"{d.one.base}/admin/keys/{key_id}", headers=ADMIN).is_success
    digest = d.redis.get(d.key("keyid", key_id))
    assert digest is not None
    d.redis.delete(d.key("key", digest.decode()))

    response = d.chat(d.two, secret)

    assert response.status_code == 401 and "revoked" in response.text


def test_an_evicted_spend_counter_does_not_reset_the_budget(deployment: Deployment) -> None:
    d = deployment
    _, secret = d.new_key("evict-budget", budget_usd=1e-8, budget_period="month")
    assert d.chat(d.one, secret).status_code == 200
    wait_for(lambda: d.chat(d.one, secret).status_code == 429, "the budget to be exhausted")
    spend = d.key("spend", "evict-budget", period_ids(time.time())[2])

    def in_store() -> bool:
        usage = httpx.get(f"{d.one.base}/admin/usage?tenant=evict-budget", headers=ADMIN).json()
        return usage["source"] == "store" and usage["groups"].get("all", {}).get("requests", 0) > 0

    wait_for(in_store, "the spend to reach the store")
    before = int(d.redis.get(spend) or 0)
    assert d.redis.delete(spend) == 1  # as maxmemory eviction would

    wait_for(lambda: int(d.redis.get(spend) or 0) > 0, "the counter to be raised from the store")

    assert int(d.redis.get(spend) or 0) <= before  # raised to the store's figure, not added
    response = d.chat(d.two, secret)
    assert response.status_code == 429 and "insufficient_quota" in response.text
