"""Every key pattern and script of ``live/`` once against a real 3-master Redis Cluster
(the single-server suite covers the same code in depth): a script touching a key it
did not declare, keys of one script in different slots (CROSSSLOT), EVALSHA or PUBLISH
pipelined to the wrong node, or a SCAN of one node only, each fails one of these."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from dataclasses import replace
from math import nan
from typing import Any, TypeVar

import pytest
from redis.asyncio import RedisCluster

from base.auth_digest import digest_hex
from live import usage_codec
from live.access_refill import AccessRefill, Refill
from live.access_table import AccessTables, AdmitCode, KeyRecord, UsageRecord
from live.demand_table import DemandRecord, DemandTables
from live.lease import Fence, Lease
from live.price_table import FeedStatus, PriceKey, PriceRow, PriceTable
from live.redis_client import RedisClient, connect, is_cluster, pubsub
from live.replica_health import ReplicaEjection
from live.table_reader import TableReader
from live.tables import LiveTables, PoolObservations, PriceEntry
from live.usage_stream import UsageStream, backlog
from router.health import HealthRecord, PoolState
from router.policy import TenantSpec
from tests.live.conftest import RedisTarget

T = TypeVar("T")
POOLS = [f"aws:us-east-{i}:h100-llama70b" for i in range(6)]  # spread over the slots


def run(target: RedisTarget, body: Callable[[RedisClient], Awaitable[T]]) -> T:
    async def main() -> T:
        client = connect(target.url)
        try:
            return await body(client)
        finally:
            await client.aclose()

    return asyncio.run(main())


def test_the_cluster_url_gives_a_cluster_client(cluster: RedisTarget) -> None:
    async def body(client: RedisClient) -> bool:
        assert isinstance(client, RedisCluster)
        return len(client.get_primaries()) == 3 if await client.ping() else False

    assert run(cluster, body)


def test_flush_and_read_of_every_pool_table(cluster: RedisTarget) -> None:
    async def body(client: RedisClient) -> Any:
        tables = LiveTables(client, prefix=cluster.prefix)
        now = int(time.time() * 1000)
        obs = {p: PoolObservations(ttft_ms=[100.0], tpot_ms=[10.0], ok=1) for p in POOLS}
        await tables.flush("gw-a", now_ms=now, inflight={p: 2 for p in POOLS}, observations=obs)  # fmt: skip
        await tables.flush("gw-b", now_ms=now, inflight={POOLS[0]: 3}, observations={})  # fmt: skip
        await tables.record_rtt({p: 7.0 for p in POOLS})
        for p in POOLS:
            await tables.set_replicas(p, ready=1)
        await tables.set_replicas(POOLS[1], ready=2, target=3, endpoints=["http://10.0.0.1:8000"])
        await tables.set_price(POOLS[2], PriceEntry(2.5, "test", time.time()))
        rows = await tables.read(POOLS, now, 60_000, exclude_replica="gw-b")
        # The gateway's reader: its refresh and checkpoint in one cluster pipeline.
        reader = TableReader(tables)
        kept = await reader.read(POOLS, now / 1000, 0.0, 60_000, "gw-b")
        assert await client.exists(tables.obs_checkpoint)
        assert isinstance(client, RedisCluster)
        found = [k async for k in client.scan_iter(match=f"{cluster.prefix}:pool:*:replicas")]
        nodes = {client.get_node_from_key(k).name for k in found}
        assert len(found) == len(POOLS) and len(nodes) > 1  # SCAN walked every node
        own = await tables.read_own_inflight("gw-b")
        await tables.release("gw-a")
        after = await tables.read(POOLS, now, 60_000, with_samples=False)
        await tables.clear_pool(POOLS[1])
        cleared = await tables.read([POOLS[1]], now, 60_000)
        return rows, own, after, cleared, kept

    rows, own, after, cleared, kept = run(cluster, body)

    assert repr(kept) == repr({p: replace(r, ttft_p50_ms=nan, ttft_p99_ms=nan, tpot_p50_ms=nan,
                                          tpot_p99_ms=nan) for p, r in rows.items()})  # fmt: skip
    assert rows[POOLS[0]].inflight == 2  # gw-b's own 3 left out
    assert all(rows[p].samples == 1 and rows[p].ttft_p50_ms == 100.0 for p in POOLS)
    assert all(rows[p].rtt_ms == 7.0 for p in POOLS)
    assert rows[POOLS[1]].ready_replicas == 2 and rows[POOLS[1]].endpoints
    assert rows[POOLS[2]].usd_per_gpu_hour == 2.5
    assert own == {POOLS[0]: 3}
    assert after[POOLS[0]].inflight == 3 and after[POOLS[1]].inflight == 0
    assert cleared[POOLS[1]].ready_replicas != cleared[POOLS[1]].ready_replicas  # NaN


def test_health_cas_and_drain_are_announced_on_the_events_channel(cluster: RedisTarget) -> None:
    async def body(client: RedisClient) -> Any:
        tables = LiveTables(client, prefix=cluster.prefix)
        events = await pubsub(client)
        await events.subscribe(tables.events_channel)

        def sick(rec: HealthRecord) -> HealthRecord:
            return HealthRecord(state=PoolState.EJECTED, since_s=1.0, reason="test")

        changed = await tables.update_health(POOLS[3], sick)
        await tables.set_replica_drained(POOLS[4], "http://10.0.0.9:8000", True)
        got: list[bytes] = []
        drained_key = f"{{{POOLS[4]}}}:replicas".encode()
        deadline = time.monotonic() + 10

        def complete() -> bool:
            return b"health" in got and any(m.endswith(drained_key) for m in got)

        # A cluster relays PUBLISH between nodes over its bus, so an earlier test's
        # announcements may still arrive: wait for these two, whatever else comes.
        while not complete() and time.monotonic() < deadline:
            msg = await events.get_message(ignore_subscribe_messages=True, timeout=1)
            if msg is not None:
                got.append(msg["data"])
        await events.aclose()
        health = await tables.read_health(POOLS[3])
        rows = await tables.read([POOLS[4]], int(time.time() * 1000), 60_000)
        return changed, got, health, rows

    changed, got, health, rows = run(cluster, body)

    assert changed is not None and health.state == PoolState.EJECTED and health.version == 1
    assert b"health" in got and any(m.endswith(b":replicas") for m in got)
    assert rows[POOLS[4]].drained == frozenset({"http://10.0.0.9:8000"})


def test_replica_ejections_ride_the_flush_and_are_announced(cluster: RedisTarget) -> None:
    async def body(client: RedisClient) -> Any:
        tables = LiveTables(client, prefix=cluster.prefix)
        events = await pubsub(client)
        await events.subscribe(tables.events_channel)
        now = time.time()
        out = [ReplicaEjection(POOLS[5], "http://10.0.0.7:8000", now + 30, "upstream 503"),
               ReplicaEjection(POOLS[1], "http://10.0.0.8:8000", now + 30, "timeout")]  # fmt: skip
        await tables.flush("gw-a", now_ms=int(now * 1000), inflight={},
                           observations={},
                           extra=lambda pipe: tables.add_replica_ejections(pipe, out))  # fmt: skip
        got: list[bytes] = []
        wanted = {f"{cluster.prefix}:pool:{{{p}}}:ejections".encode() for p in (POOLS[5], POOLS[1])}
        deadline = time.monotonic() + 10
        # Only these two matter: an earlier test's announcements may still be relayed.
        while not wanted <= set(got) and time.monotonic() < deadline:
            msg = await events.get_message(ignore_subscribe_messages=True, timeout=1)
            if msg is not None:
                got.append(msg["data"])
        await events.aclose()
        rows = await tables.read([POOLS[5], POOLS[1]], int(now * 1000), 60_000)
        ttl_ms = await client.pttl(f"{cluster.prefix}:pool:{{{POOLS[5]}}}:ejections")
        return got, rows, ttl_ms

    got, rows, ttl_ms = run(cluster, body)

    assert {
        f"{cluster.prefix}:pool:{{{p}}}:ejections".encode() for p in (POOLS[5], POOLS[1])
    } <= set(got)
    assert set(rows[POOLS[5]].ejected) == {"http://10.0.0.7:8000"}
    assert rows[POOLS[1]].ejected["http://10.0.0.8:8000"][1] == "timeout"
    assert 25_000 < ttl_ms <= 31_000  # expires with the ejection, not before


def test_admission_rate_limits_revocation_and_tenant_scan(cluster: RedisTarget) -> None:
    digest = digest_hex("sk-cluster-test")

    async def body(client: RedisClient) -> Any:
        tables = AccessTables(client, prefix=cluster.prefix)
        await tables.store_key(digest, KeyRecord("k1", "acme", "n", time.time(), 0.0, False))
        await tables.write_limits({"acme": TenantSpec(rpm=2, budget_usd=1.0)})
        for n in range(20):  # enough names that SCAN must walk every node's cursor
            await tables.put_tenant(f"t{n}", TenantSpec(rpm=n + 1))
        now = time.time()
        codes = [(await tables.admit(digest, now, 10)).code for _ in range(3)]
        overrides = await tables.tenant_overrides()
        keys = await tables.list_keys("acme")
        assert await tables.revoke_key("k1")
        revoked = (await tables.admit(digest, now, 10)).code
        return codes, overrides, keys, revoked

    codes, overrides, keys, revoked = run(cluster, body)

    assert codes == [AdmitCode.OK, AdmitCode.OK, AdmitCode.RPM]
    assert set(overrides) == {f"t{n}" for n in range(20)}
    assert [k.id for k in keys] == ["k1"]
    assert revoked == AdmitCode.REVOKED


def test_usage_flush_stream_consumer_and_refill(cluster: RedisTarget) -> None:
    async def body(client: RedisClient) -> Any:
        tables = LiveTables(client, prefix=cluster.prefix)
        access = AccessTables(client, prefix=cluster.prefix)
        demand = DemandTables(client, prefix=cluster.prefix)
        refill = AccessRefill(access)
        now = time.time()
        filled = await refill.refill(
            Refill(
                keys=[(digest_hex("sk-x"), KeyRecord("k2", "acme", "", now, 0.0, False))],
                tenants={"acme": TenantSpec(tpm=1000)},
                spend={},
            ),
            now,
        )
        again = await refill.refill(Refill(), now)
        record = UsageRecord(now, "r1", "acme", "m", POOLS[0], "aws", "us-east-0", 5, 7,
                             1000, "200", est_tokens=50)  # fmt: skip

        def extra(pipe: Any) -> None:
            access.add_usage(pipe, [record])
            demand.add(pipe, [DemandRecord(now, "m", "us", 5, 7)])

        await tables.flush("gw-a", now_ms=int(now * 1000), inflight={},
                           observations={}, extra=extra)  # fmt: skip
        stream = UsageStream(access, consumer="c1")
        unread = await backlog(access)
        entries = await stream.read_new(10)
        await stream.ack([e[0] for e in entries])
        pending = await stream.pending_count()
        usage = await access.usage("acme", now - 3600, now + 3600, "total")
        series = await demand.read([("m", "us")], now - 120, now + 60)
        return (filled, again, unread, entries, pending, await backlog(access), usage, series,
                await refill.filled())  # fmt: skip

    filled, again, unread, entries, pending, caught_up, usage, series, sentinel = run(cluster, body)

    assert filled and not again and sentinel
    assert unread == (1.0, 0) and caught_up == (0.0, 0)
    assert [r["id"] for e in entries for r in usage_codec.decode(e[1])] == ["r1"]
    assert pending == 0
    assert usage["all"]["requests"] == 1 and usage["all"]["cost_nusd"] == 1000
    assert series[("m", "us")].requests.sum() == 1


def test_lease_and_fenced_writes(cluster: RedisTarget) -> None:
    async def body(client: RedisClient) -> Any:
        lease = Lease(client, "prices", "one", 60_000, cluster.prefix)
        other = Lease(client, "prices", "two", 60_000, cluster.prefix)
        token = await lease.acquire()
        lost = await other.acquire()
        renewed = await lease.renew()
        prices = PriceTable(client, prefix=cluster.prefix)
        row = PriceRow("aws", "us-east-1", "p5.48xlarge", "H100", 8, "on_demand", 98.3, 12.3,
                       "test", 1.0)  # fmt: skip
        wrote = await prices.write([row], [FeedStatus("test", "ok")], lease.fence)
        state = DemandTables(client, prefix=cluster.prefix)
        saved = await state.save_state('{"a": 1}', lease.fence)
        released = await lease.release()
        refused = await state.save_state('{"a": 2}', Fence(lease.key, "one|1", 1))
        return token, lost, renewed, wrote, await prices.read_rows(), saved, released, refused

    token, lost, renewed, wrote, rows, saved, released, refused = run(cluster, body)

    assert token == 1 and lost is None and renewed and released
    assert wrote and PriceKey("aws", "us-east-1", "p5.48xlarge", "on_demand") in rows
    assert saved and not refused


def test_is_cluster_tells_the_kinds_apart(cluster: RedisTarget, redis_url: str) -> None:
    async def body(_: RedisClient) -> tuple[bool, bool]:
        single = connect(redis_url)
        try:
            return is_cluster(single), is_cluster(connect(cluster.url))
        finally:
            await single.aclose()

    assert run(cluster, body) == (False, True)


@pytest.mark.parametrize("url", ["http://x", "redis+sentinel://127.0.0.1:1"])
def test_an_unusable_url_is_refused(url: str) -> None:
    with pytest.raises(ValueError):
        connect(url)
