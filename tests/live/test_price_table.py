"""The price table's Redis schema against a real Redis, and the per-pool price fields."""

from __future__ import annotations

from typing import Any

from redis.asyncio import Redis

from live.lease import Fence, Lease
from live.price_table import FeedStatus, PriceKey, PriceRow, PriceTable
from live.tables import LiveTables, PriceEntry
from tests.pricing.helpers import run

ROW = PriceRow("aws", "us-east-1", "p5.48xlarge", "H100", 8, "on_demand", 55.04, 6.88, "aws", 1.0)
OTHER = PriceRow("gcp", "us-central1", "g2-standard-4", "L4", 1, "spot", 0.3973, 0.3973, "gcp", 2.0)
STATUS = FeedStatus("aws", "partial", "missing", "no valid price", 5.0, 4.0, 1, 2, ("a|b|c|d",))


async def _with_table(redis_url: str, prefix: str, scenario: Any) -> Any:
    client = Redis.from_url(redis_url)
    try:
        return await scenario(PriceTable(client, prefix), client)
    finally:
        await client.aclose()


def test_rows_and_statuses_round_trip(redis_url: str, prefix: str) -> None:
    async def scenario(table: PriceTable, _: Redis) -> Any:
        await table.write([ROW, OTHER], [STATUS])
        return await table.read_rows(), await table.read_statuses()

    rows, statuses = run(_with_table(redis_url, prefix, scenario))

    assert rows == {ROW.key: ROW, OTHER.key: OTHER} and statuses == {"aws": STATUS}


def test_replace_drops_rows_not_written_again(redis_url: str, prefix: str) -> None:
    async def scenario(table: PriceTable, _: Redis) -> Any:
        await table.write([ROW, OTHER], [])
        await table.write([ROW], [], replace=True)
        return await table.read_rows()

    assert list(run(_with_table(redis_url, prefix, scenario))) == [ROW.key]


def test_write_with_the_current_fence_succeeds(redis_url: str, prefix: str) -> None:
    async def scenario(table: PriceTable, client: Redis) -> Any:
        lease = Lease(client, "prices", "sidecar-a", 10_000, prefix=prefix)
        await lease.acquire()
        return await table.write([ROW], [], fence=lease.fence)

    assert run(_with_table(redis_url, prefix, scenario)) is True


def test_write_with_a_stale_fence_is_refused(redis_url: str, prefix: str) -> None:
    async def scenario(table: PriceTable, client: Redis) -> Any:
        old = Lease(client, "prices", "sidecar-a", 10_000, prefix=prefix)
        await old.acquire()
        fence = old.fence
        await old.release()
        await Lease(client, "prices", "sidecar-b", 10_000, prefix=prefix).acquire()
        assert fence is not None
        written = await table.write([ROW], [], fence=fence)
        return written, await table.read_rows()

    written, rows = run(_with_table(redis_url, prefix, scenario))

    assert written is False and rows == {}


def test_undecodable_row_is_skipped(redis_url: str, prefix: str) -> None:
    async def scenario(table: PriceTable, client: Redis) -> Any:
        await table.write([ROW], [])
        await client.hset(f"{prefix}:{{control}}:prices:rows", "x|y|z|w", "{not json")
        return await table.read_rows()

    assert list(run(_with_table(redis_url, prefix, scenario))) == [ROW.key]


def test_stale_flag_of_a_pool_price_reaches_the_pool_row(redis_url: str, prefix: str) -> None:
    async def scenario(_: PriceTable, client: Redis) -> Any:
        tables = LiveTables(client, prefix)
        entry = PriceEntry(6.88, "aws", 1.0, stale=True, usd_per_hour=55.04,
                           instance_type="p5.48xlarge", purchase="on_demand")  # fmt: skip
        await tables.set_price("pool-a", entry)
        return (await tables.read(["pool-a"], 0, 3000))["pool-a"]

    row = run(_with_table(redis_url, prefix, scenario))

    assert row.price_stale and row.usd_per_gpu_hour == 6.88 and row.price_source == "aws"


def test_price_key_round_trips_through_its_text() -> None:
    assert PriceKey.parse(str(ROW.key)) == ROW.key


def test_fence_names_the_lease_key(redis_url: str, prefix: str) -> None:
    async def scenario(_: PriceTable, client: Redis) -> Fence | None:
        lease = Lease(client, "prices", "sidecar-a", 10_000, prefix=prefix)
        await lease.acquire()
        return lease.fence

    fence = run(_with_table(redis_url, prefix, scenario))

    assert fence is not None and fence.key == f"{prefix}:{{control}}:lease:prices"
