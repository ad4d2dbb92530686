"""AccessControl while Redis, back but empty, waits for the store's refill: keys this
replica admitted keep working, the admin-API tenants are kept, and the refill is asked
for; a key never seen is still refused."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from base.auth_digest import digest_hex
from base.errors import AuthenticationError
from gateway.access import AccessControl
from live.access_refill import AccessRefill, Refill
from live.access_table import AccessTables, KeyRecord
from router.policy import TenantSpec
from router.policy_loader import parse_policy
from tests.aio import run_async
from tests.live import conftest as live_fixtures
from tests.live.conftest import RedisTarget, delete_prefix

POLICY = parse_policy((Path(__file__).parents[1] / "fixtures" / "router_policy.yaml").read_text())
SPEC = TenantSpec(rpm=1000)
# The live-table tests' fixture: a real Redis and a key prefix of the test's own.
live_redis = live_fixtures.live_redis


async def filled_access(tables: AccessTables) -> tuple[AccessControl, list[int]]:
    """Access control over a refilled Redis with tenant acme and one key, admitted once."""
    refill = AccessRefill(tables)
    record = KeyRecord("key_1", "acme", "", time.time(), 0.0, False)
    assert await refill.refill(Refill(keys=[(digest_hex("s1"), record)], tenants={"acme": SPEC}), 0)
    access = AccessControl(tables, POLICY, None)
    pokes: list[int] = []
    access.on_data_loss = lambda: pokes.append(1)
    access.filled = refill.filled
    await access.refresh()
    assert (await access.admit(digest_hex("s1"), 1)).tenant == "acme"
    return access, pokes


@run_async
async def test_a_known_key_is_served_from_memory_after_redis_lost_it(
    live_redis: RedisTarget,
) -> None:
    client = live_redis.client()
    try:
        access, pokes = await filled_access(AccessTables(client, prefix=live_redis.prefix))
        await delete_prefix(live_redis)
        caller = await access.admit(digest_hex("s1"), 1)
        assert (caller.tenant, caller.key_id, pokes) == ("acme", "key_1", [1])
        with pytest.raises(AuthenticationError):
            await access.admit(digest_hex("never-seen"), 1)
    finally:
        await client.aclose()


@run_async
async def test_admin_tenants_are_kept_until_the_refill_and_changes_apply_after(
    live_redis: RedisTarget,
) -> None:
    client = live_redis.client()
    try:
        tables = AccessTables(client, prefix=live_redis.prefix)
        access, pokes = await filled_access(tables)
        await delete_prefix(live_redis)
        await access.refresh()
        assert (access.tenants.get("acme"), pokes) == (SPEC, [1])
        # The refill (here: without acme, deleted meanwhile) is a change that applies.
        assert await AccessRefill(tables).refill(Refill(deleted_tenants=["acme"]), 0)
        await access.refresh()
        assert "acme" not in access.tenants
    finally:
        await client.aclose()
