"""The system of record behind real gateway replicas: admin-API tenants and keys are in
the store, every served request reaches its ledger once, and after Redis lost the
prefix the replica refills it within seconds (keys work again, a revoked key stays
revoked, the tenant and the spend so far are back)."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Iterator
from typing import TypeVar

import pytest
from redis.asyncio import Redis

from live.usage_rollups import period_ids
from skyroute.embedded_redis import free_port
from store.store import Store
from tests.gateway.access.conftest import (
    access_policy,
    admin,
    create_key,
    post_chat,
    put_tenant,
    replicas,
    tenant_name,
)
from tests.gateway.conftest import Fleet
from tests.gateway.harness import API_KEY, Gateway
from tests.live.conftest import RedisTarget, delete_prefix

T = TypeVar("T")
# How long a refill may take after Redis lost the prefix (restore check: every second).
REFILL_BOUND_S = 10.0


def eventually(probe: Callable[[], T], done: Callable[[T], bool], timeout_s: float) -> T:
    """``probe()`` until ``done`` says yes or the deadline passes; the last result."""
    deadline = time.monotonic() + timeout_s
    result = probe()
    while not done(result) and time.monotonic() < deadline:
        time.sleep(0.05)
        result = probe()
    return result


def in_store(gw: Gateway, tenant: str) -> tuple[int, int, int]:
    """(requests in the ledger, keys, month's spend in nano-USD) of ``tenant``."""

    async def read() -> tuple[int, int, int]:
        store = Store.open(f"sqlite+aiosqlite:///{gw.store_path}")
        try:
            totals = await store.ledger.totals(tenant, 0, 2**62, "total")
            keys = await store.keys(tenant)
            month = period_ids(time.time())[2]
            spend = await store.ledger.spend([month])
        finally:
            await store.close()
        return totals.get("all", {}).get("requests", 0), len(keys), spend.get((tenant, month), 0)

    return asyncio.run(read())


def redis_spend(gw: Gateway, tenant: str) -> int:
    async def read() -> int:
        redis = Redis.from_url(gw.redis_url)
        try:
            raw = await redis.get(
                f"{gw.prefix}:{{access}}:spend:{tenant}:{period_ids(time.time())[2]}"
            )
        finally:
            await redis.aclose()
        return int(raw or 0)

    return asyncio.run(read())


@pytest.fixture(scope="module")
def replica(
    access_fleet: Fleet, redis_url: str, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Gateway]:
    with replicas(tmp_path_factory.mktemp("store"), access_policy(access_fleet), redis_url, 1) as (
        gw,
    ):
        yield gw


def test_redis_losing_the_prefix_loses_no_key_tenant_or_spend(replica: Gateway) -> None:
    tenant = tenant_name("durable")
    spec = put_tenant([replica], tenant, budget_usd=1000.0, budget_period="month")
    live = str(create_key(replica, tenant)["secret"])
    old = create_key(replica, tenant)
    assert admin(replica, "DELETE", f"/admin/keys/{old['id']}").status_code == 200
    assert [post_chat(replica, live).status_code for _ in range(3)] == [200] * 3
    requests, keys, spent = eventually(lambda: in_store(replica, tenant), lambda s: s[0] >= 3, 10)
    assert (requests, keys) == (3, 2)
    assert spent == redis_spend(replica, tenant) > 0

    asyncio.run(delete_prefix(RedisTarget(replica.redis_url, replica.prefix)))
    # A key this replica admitted before keeps working while Redis waits for the refill.
    assert post_chat(replica, live).status_code == 200
    refilled = eventually(
        lambda: admin(replica, "GET", "/admin/tenants").json().get(tenant),
        lambda got: got == spec,
        REFILL_BOUND_S,
    )
    assert refilled == spec, f"the tenant is not back {REFILL_BOUND_S} s after the loss"
    assert post_chat(replica, str(old["secret"])).status_code == 401
    # The spend so far came back, and the requests served since the loss added to it.
    assert post_chat(replica, live).status_code == 200
    requests, _, spent = eventually(lambda: in_store(replica, tenant), lambda s: s[0] >= 5, 10)
    assert requests == 5
    assert redis_spend(replica, tenant) == spent
    metrics = {
        line.split()[0]: float(line.split()[1])
        for line in replica.admin("GET", "/metrics").text.splitlines()
        if line.startswith("skyroute_") and " " in line
    }
    assert metrics["skyroute_redis_refills_total"] == 2  # at start-up, and after the loss
    assert metrics["skyroute_ledger_records_total"] == 5
    assert metrics["skyroute_store_ready"] == 1


def test_with_the_store_down_requests_are_served_and_admin_writes_refused(
    access_fleet: Fleet, redis_url: str, tmp_path_factory: pytest.TempPathFactory
) -> None:
    down = f"postgresql+asyncpg://postgres@127.0.0.1:{free_port()}/none"
    tmp = tmp_path_factory.mktemp("store-down")
    with replicas(tmp, access_policy(access_fleet), redis_url, 1, SKYROUTE_DATABASE_URL=down) as (
        gw,
    ):
        assert post_chat(gw, API_KEY).status_code == 200
        reply = admin(gw, "PUT", f"/admin/tenants/{tenant_name('nope')}", {})
        assert (reply.status_code, reply.json()["error"]["code"]) == (503, "store_unavailable")
        usage = admin(gw, "GET", "/admin/usage?tenant=default")
        assert (usage.status_code, usage.json()["source"]) == (200, "redis")
