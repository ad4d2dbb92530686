"""The live tables against a real Redis server, each test under its own key prefix."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from dataclasses import replace
from typing import TYPE_CHECKING, Any

import numpy as np
import pytest
from redis.asyncio import Redis
from redis.asyncio.client import PubSub
from redis.exceptions import RedisError

from base.errors import TableError
from live.observations import SAMPLES_KEPT
from live.replica_health import ReplicaEjection
from live.tables import LiveTables, PoolObservations, PriceEntry
from router.health import HealthRecord
from router.snapshot import EWMA_ALPHA, PoolState

if TYPE_CHECKING:
    from tests.live.conftest import RedisTarget

NOW_MS = 1_700_000_000_000
POOL = "aws:us-east-1:h100-llama70b"
OTHER = "gcp:us-central1:a100-llama70b"


async def _flush(
    tables: LiveTables,
    replica: str,
    inflight: dict[str, int] | None = None,
    observations: dict[str, PoolObservations] | None = None,
    now_ms: int = NOW_MS,
) -> None:
    await tables.flush(
        replica,
        now_ms=now_ms,
        inflight=inflight or {},
        observations=observations or {},
    )


async def _read(tables: LiveTables, *pool_ids: str, replica_ttl_ms: int = 5_000) -> Any:
    return await tables.read(pool_ids or (POOL,), NOW_MS, replica_ttl_ms)


def _run(target: RedisTarget, scenario: Callable[[LiveTables], Awaitable[Any]]) -> Any:
    async def main() -> Any:
        async with target.tables() as tables:
            return await scenario(tables)

    return asyncio.run(main())


# -- in-flight shares ----------------------------------------------------------------------


def test_read_sums_inflight_across_replicas(live_redis: RedisTarget) -> None:
    async def scenario(tables: LiveTables) -> Any:
        await _flush(tables, "gw-a", {POOL: 3, OTHER: 1})
        await _flush(tables, "gw-b", {POOL: 4})
        return await _read(tables, POOL, OTHER)

    rows = _run(live_redis, scenario)

    assert rows[POOL].inflight == 7
    assert rows[OTHER].inflight == 1


def test_replica_with_a_stale_heartbeat_is_not_counted(live_redis: RedisTarget) -> None:
    async def scenario(tables: LiveTables) -> Any:
        await _flush(tables, "gw-live", {POOL: 3})
        await _flush(tables, "gw-stale", {POOL: 40}, now_ms=NOW_MS - 30_000)
        long = await _read(tables, replica_ttl_ms=60_000)
        short = await _read(tables, replica_ttl_ms=5_000)
        return long, short

    long, short = _run(live_redis, scenario)

    assert long[POOL].inflight == 43
    assert short[POOL].inflight == 3


def test_a_dead_replica_that_flushes_again_counts_again(live_redis: RedisTarget) -> None:
    async def scenario(tables: LiveTables) -> Any:
        await _flush(tables, "gw-a", {POOL: 3})
        await _flush(tables, "gw-b", {POOL: 5}, now_ms=NOW_MS - 30_000)
        await _read(tables, replica_ttl_ms=5_000)  # reaps gw-b
        await _flush(tables, "gw-b", {POOL: 5})
        return await _read(tables)

    assert _run(live_redis, scenario)[POOL].inflight == 8


def test_observations_lost_to_eviction_are_rebuilt_not_skewed(live_redis: RedisTarget) -> None:
    async def scenario(tables: LiveTables) -> Any:
        await _flush(tables, "gw-a", {POOL: 3})
        await _flush(tables, "gw-b", {POOL: 4})
        # As maxmemory eviction (or a Redis restarted empty) would:
        await tables.redis.delete(tables.obs_stream, tables.obs_checkpoint)
        await _flush(tables, "gw-a", {POOL: 2})
        first = await _read(tables)
        await _flush(tables, "gw-b", {POOL: 4})
        return first, await _read(tables)

    first, second = _run(live_redis, scenario)

    assert first[POOL].inflight == 2  # gw-b's share went with the stream: not yet back
    assert second[POOL].inflight == 6


def test_reader_can_leave_out_its_own_share(live_redis: RedisTarget) -> None:
    async def scenario(tables: LiveTables) -> Any:
        await _flush(tables, "gw-a", {POOL: 3})
        await _flush(tables, "gw-b", {POOL: 4})
        return await tables.read([POOL], NOW_MS, 5_000, exclude_replica="gw-a")

    rows = _run(live_redis, scenario)

    assert rows[POOL].inflight == 4


def test_repeating_a_flush_does_not_double_inflight(live_redis: RedisTarget) -> None:
    async def scenario(tables: LiveTables) -> Any:
        await _flush(tables, "gw-a", {POOL: 3})
        await _flush(tables, "gw-a", {POOL: 3})
        return await _read(tables)

    rows = _run(live_redis, scenario)

    assert rows[POOL].inflight == 3


def test_a_later_flush_replaces_the_replicas_count(live_redis: RedisTarget) -> None:
    async def scenario(tables: LiveTables) -> Any:
        await _flush(tables, "gw-a", {POOL: 9})
        await _flush(tables, "gw-a", {POOL: 2}, now_ms=NOW_MS + 50)
        return await _read(tables), await tables.read_own_inflight("gw-a")

    rows, own = _run(live_redis, scenario)

    assert rows[POOL].inflight == 2
    assert own == {POOL: 2}


def test_release_removes_the_replicas_share(live_redis: RedisTarget) -> None:
    async def scenario(tables: LiveTables) -> Any:
        await _flush(tables, "gw-a", {POOL: 3})
        await _flush(tables, "gw-b", {POOL: 4})
        await tables.release("gw-a")
        return await _read(tables), await tables.read_own_inflight("gw-a")

    rows, own = _run(live_redis, scenario)

    assert rows[POOL].inflight == 4
    assert own == {}


def test_release_of_an_unknown_replica_is_harmless(live_redis: RedisTarget) -> None:
    async def scenario(tables: LiveTables) -> Any:
        await _flush(tables, "gw-b", {POOL: 4})
        await tables.release("gw-never-seen")
        await tables.release("gw-never-seen")
        return await _read(tables)

    assert _run(live_redis, scenario)[POOL].inflight == 4


# -- latency observations ------------------------------------------------------------------


def _ewma_by_single_updates(start: float, value: float, n: int) -> float:
    x = start
    for _ in range(n):
        x += EWMA_ALPHA * (value - x)
    return x


def test_ewma_over_a_batch_equals_n_single_updates(live_redis: RedisTarget) -> None:
    n = 5

    async def scenario(tables: LiveTables) -> Any:
        # Both pools start from one observation of 100 ms TTFT and 20 ms TPOT.
        for pool in (POOL, OTHER):
            await _flush(tables, "gw-a", observations={pool: PoolObservations([100.0], [20.0])})
        await _flush(tables, "gw-a", observations={POOL: PoolObservations([200.0] * n, [50.0] * n)})
        for _ in range(n):
            await _flush(tables, "gw-a", observations={OTHER: PoolObservations([200.0], [50.0])})
        return await _read(tables, POOL, OTHER)

    rows = _run(live_redis, scenario)

    ttft = _ewma_by_single_updates(100.0, 200.0, n)
    tpot = _ewma_by_single_updates(20.0, 50.0, n)
    assert rows[POOL].ttft_ewma_ms == pytest.approx(ttft, rel=1e-9)
    assert rows[POOL].tpot_ewma_ms == pytest.approx(tpot, rel=1e-9)
    assert rows[OTHER].ttft_ewma_ms == pytest.approx(ttft, rel=1e-9)
    assert rows[OTHER].tpot_ewma_ms == pytest.approx(tpot, rel=1e-9)


def test_first_observation_batch_sets_the_ewma_to_its_mean(live_redis: RedisTarget) -> None:
    async def scenario(tables: LiveTables) -> Any:
        await _flush(tables, "gw-a", observations={POOL: PoolObservations([100.0, 300.0], [])})
        return await _read(tables)

    row = _run(live_redis, scenario)[POOL]

    assert row.ttft_ewma_ms == 200.0
    assert np.isnan(row.tpot_ewma_ms)


def test_observation_counts_add_up_across_flushes(live_redis: RedisTarget) -> None:
    async def scenario(tables: LiveTables) -> Any:
        batch = PoolObservations([100.0], [20.0], ok=3, errors=1)
        await _flush(tables, "gw-a", observations={POOL: batch})
        await _flush(tables, "gw-b", observations={POOL: batch})
        return await _read(tables)

    row = _run(live_redis, scenario)[POOL]

    assert (row.samples, row.errors) == (6, 2)


def test_percentiles_come_from_the_samples(live_redis: RedisTarget) -> None:
    ttft = [float(v) for v in range(1, 101)]
    tpot = [float(v) / 4 for v in range(40, 0, -1)]

    async def scenario(tables: LiveTables) -> Any:
        await _flush(tables, "gw-a", observations={POOL: PoolObservations(ttft, tpot)})
        return await _read(tables)

    row = _run(live_redis, scenario)[POOL]

    assert row.ttft_p50_ms == pytest.approx(np.percentile(ttft, 50))
    assert row.ttft_p99_ms == pytest.approx(np.percentile(ttft, 99))
    assert row.tpot_p50_ms == pytest.approx(np.percentile(tpot, 50))
    assert row.tpot_p99_ms == pytest.approx(np.percentile(tpot, 99))


def test_read_without_samples_keeps_every_other_field_and_skips_percentiles(
    live_redis: RedisTarget,
) -> None:
    async def scenario(tables: LiveTables) -> Any:
        await _flush(
            tables,
            "gw-a",
            inflight={POOL: 3},
            observations={POOL: PoolObservations([100.0], [20.0])},
        )
        await tables.set_replicas(POOL, ready=2)
        lean = await tables.read([POOL], NOW_MS, 5_000, with_samples=False)
        full = await tables.read([POOL], NOW_MS, 5_000)
        return lean[POOL], full[POOL]

    lean, full = _run(live_redis, scenario)

    assert (lean.inflight, lean.ready_replicas, lean.ttft_ewma_ms) == (3.0, 2.0, 100.0)
    assert np.isnan(lean.ttft_p50_ms) and full.ttft_p50_ms == 100.0


def test_only_the_newest_samples_kept_count_toward_percentiles(live_redis: RedisTarget) -> None:
    # Consecutive values: the median of what is kept pins down exactly how many are kept.
    older = [float(v) for v in range(1, 101)]
    newer = [float(v) for v in range(101, 101 + SAMPLES_KEPT)]

    async def scenario(tables: LiveTables) -> Any:
        await _flush(tables, "gw-a", observations={POOL: PoolObservations(older, [])})
        await _flush(tables, "gw-a", observations={POOL: PoolObservations(newer, [])})
        return await _read(tables)

    row = _run(live_redis, scenario)[POOL]

    kept = (older + newer)[-SAMPLES_KEPT:]
    assert row.ttft_p50_ms == pytest.approx(np.percentile(kept, 50))
    assert row.ttft_p99_ms == pytest.approx(np.percentile(kept, 99))


def test_pool_without_data_reads_as_not_known(live_redis: RedisTarget) -> None:
    row = _run(live_redis, _read)[POOL]

    assert np.isnan(row.ttft_ewma_ms)
    assert np.isnan(row.ttft_p50_ms)
    assert np.isnan(row.ready_replicas)
    assert np.isnan(row.usd_per_gpu_hour)
    assert row.state is PoolState.HEALTHY
    assert row.inflight == 0


# -- fleet, health and price writers -------------------------------------------------------


def test_set_price_shows_up_in_read(live_redis: RedisTarget) -> None:
    async def scenario(tables: LiveTables) -> Any:
        await tables.set_price(POOL, PriceEntry(2.345, "aws", 1_700_000_123.5))
        return await _read(tables)

    row = _run(live_redis, scenario)[POOL]

    assert row.usd_per_gpu_hour == 2.345
    assert row.price_source == "aws"
    assert row.price_fetched_at_s == 1_700_000_123.5


def test_set_replicas_shows_up_in_read(live_redis: RedisTarget) -> None:
    async def scenario(tables: LiveTables) -> Any:
        await tables.set_replicas(POOL, ready=3, target=5)
        return await _read(tables)

    row = _run(live_redis, scenario)[POOL]

    assert (row.ready_replicas, row.target_replicas) == (3, 5)
    assert row.endpoints == ()  # nothing published: the policy's endpoints apply


def test_published_replica_urls_show_up_in_read_and_bad_ones_are_dropped(
    live_redis: RedisTarget,
) -> None:
    async def scenario(tables: LiveTables) -> Any:
        await tables.set_replicas(
            POOL, ready=2, target=2, endpoints=["http://10.0.0.2:8000", "http://10.0.0.1:8000"]
        )
        first = (await _read(tables))[POOL]
        await tables.redis.hset(tables._pool(POOL, "replicas"), "endpoints", '["ftp://x", 3]')
        return first, (await _read(tables))[POOL]

    first, garbled = _run(live_redis, scenario)

    assert first.endpoints == ("http://10.0.0.1:8000", "http://10.0.0.2:8000")
    assert garbled.endpoints == ()


def _eject(record: HealthRecord) -> HealthRecord:
    return replace(record, state=PoolState.EJECTED, reason="5xx burst", until_s=99.5)


def test_update_health_shows_up_in_read_with_a_new_version(live_redis: RedisTarget) -> None:
    async def scenario(tables: LiveTables) -> Any:
        before_after = await tables.update_health(POOL, _eject)
        return before_after, (await _read(tables))[POOL]

    (before, after), row = _run(live_redis, scenario)

    assert (before.version, after.version) == (0, 1)
    assert row.health == after
    assert (row.state, row.health.until_s, row.health.reason) == (
        PoolState.EJECTED,
        99.5,
        "5xx burst",
    )


def test_update_health_that_changes_nothing_writes_nothing(live_redis: RedisTarget) -> None:
    async def scenario(tables: LiveTables) -> Any:
        result = await tables.update_health(POOL, lambda record: None)
        return result, await tables.read_health(POOL)

    result, record = _run(live_redis, scenario)

    assert result is None
    assert record.version == 0


def test_concurrent_health_updates_are_all_applied_once(live_redis: RedisTarget) -> None:
    def bump(record: HealthRecord) -> HealthRecord:
        return replace(record, probe_ok=record.probe_ok + 1)

    async def scenario(tables: LiveTables) -> Any:
        await asyncio.gather(*(tables.update_health(POOL, bump) for _ in range(5)))
        return await tables.read_health(POOL)

    record = _run(live_redis, scenario)

    assert (record.probe_ok, record.version) == (5, 5)


async def _event_after(
    target: RedisTarget, write: Callable[[LiveTables], Awaitable[None]]
) -> dict[str, Any]:
    """Subscribe to the events channel, run ``write``, return the first event it caused."""
    listener = target.client()
    pubsub: PubSub = listener.pubsub()
    try:
        async with target.tables() as tables:
            await pubsub.subscribe(tables.events_channel)
            # Bounded waits: a lost event fails the test instead of hanging it.
            async with asyncio.timeout(5):
                while (await pubsub.get_message(timeout=1.0) or {}).get("type") != "subscribe":
                    pass
            await write(tables)
            async with asyncio.timeout(5):
                while True:
                    message: dict[str, Any] | None = await pubsub.get_message(
                        ignore_subscribe_messages=True, timeout=1.0
                    )
                    if message is not None:
                        return message
    finally:
        await pubsub.aclose()  # type: ignore[no-untyped-call]
        await listener.aclose()


async def _ignore(result: Awaitable[Any]) -> None:
    await result


WRITERS: dict[str, Callable[[LiveTables], Awaitable[None]]] = {
    "set_price": lambda t: t.set_price(POOL, PriceEntry(2.0, "static", 0.0)),
    "set_replicas": lambda t: t.set_replicas(POOL, ready=2),
    "update_health": lambda t: _ignore(t.update_health(POOL, _eject)),
}


@pytest.mark.parametrize("writer", list(WRITERS))
def test_table_writers_publish_on_the_events_channel(live_redis: RedisTarget, writer: str) -> None:
    message = asyncio.run(_event_after(live_redis, WRITERS[writer]))

    assert message["type"] == "message"
    assert message["channel"].decode() == f"{live_redis.prefix}:events"


def test_set_price_event_names_the_written_pool(live_redis: RedisTarget) -> None:
    message = asyncio.run(
        _event_after(live_redis, lambda t: t.set_price(OTHER, PriceEntry(2.0, "static", 0.0)))
    )

    assert OTHER in message["data"].decode()


def test_a_pools_ejections_expire_with_the_latest_and_an_earlier_one_never_shortens_it(
    live_redis: RedisTarget,
) -> None:
    async def scenario(tables: LiveTables) -> Any:
        now = time.time()
        key = f"{live_redis.prefix}:pool:{{{POOL}}}:ejections"
        ttls = []
        for address, until_s in (("http://a:1", now + 30), ("http://b:1", now + 10),
                                 ("http://c:1", now + 60)):  # fmt: skip
            ejection = ReplicaEjection(POOL, address, until_s, "upstream 503")
            await tables.flush("gw-a", now_ms=int(now * 1000), inflight={}, observations={},
                               extra=lambda pipe, e=ejection: tables.add_replica_ejections(pipe, [e]))  # fmt: skip
            ttls.append(await tables.redis.pttl(key))
        return ttls, await tables.read([POOL], int(now * 1000), 60_000)

    ttls, rows = _run(live_redis, scenario)

    # Each until, plus the second the writer adds, from now: 31 s, still 31 s, then 61 s.
    assert 29_000 < ttls[0] <= 31_000
    assert 29_000 < ttls[1] <= 31_000
    assert 59_000 < ttls[2] <= 61_000
    assert set(rows[POOL].ejected) == {"http://a:1", "http://b:1", "http://c:1"}


def test_clear_pool_forgets_its_live_values(live_redis: RedisTarget) -> None:
    async def scenario(tables: LiveTables) -> Any:
        await tables.set_price(POOL, PriceEntry(2.0, "static", 0.0))
        await tables.set_replicas(POOL, ready=3)
        await _flush(tables, "gw-a", observations={POOL: PoolObservations([100.0], [20.0])})
        await tables.clear_pool(POOL)
        return await _read(tables)

    row = _run(live_redis, scenario)[POOL]

    assert np.isnan(row.usd_per_gpu_hour)
    assert np.isnan(row.ready_replicas)
    assert np.isnan(row.ttft_ewma_ms)


def test_prefixes_keep_two_table_sets_apart(live_redis: RedisTarget) -> None:
    async def main() -> Any:
        client = live_redis.client()
        try:
            mine = LiveTables(client, prefix=live_redis.prefix)
            theirs = LiveTables(client, prefix=f"{live_redis.prefix}:other")
            await theirs.set_replicas(POOL, ready=7)
            await _flush(theirs, "gw-a", {POOL: 5})
            return await _read(mine)
        finally:
            await client.aclose()

    row = asyncio.run(main())[POOL]

    assert np.isnan(row.ready_replicas)
    assert row.inflight == 0


# -- Redis down ------------------------------------------------------------------------------

DOWN_URL = "redis://127.0.0.1:1/0"

OPERATIONS: dict[str, Callable[[LiveTables], Awaitable[Any]]] = {
    "read": _read,
    "flush": lambda t: _flush(t, "gw-a", {POOL: 1}, {POOL: PoolObservations([1.0], [1.0])}),
    "release": lambda t: t.release("gw-a"),
    "read_own_inflight": lambda t: t.read_own_inflight("gw-a"),
    "set_price": lambda t: t.set_price(POOL, PriceEntry(1.0, "static", 0.0)),
    "set_replicas": lambda t: t.set_replicas(POOL, ready=1),
    "update_health": lambda t: t.update_health(POOL, _eject),
    "read_health": lambda t: t.read_health(POOL),
    "clear_pool": lambda t: t.clear_pool(POOL),
}


@pytest.mark.parametrize("operation", list(OPERATIONS))
def test_redis_down_raises_table_error_not_a_redis_exception(operation: str) -> None:
    async def main() -> BaseException:
        client = Redis.from_url(DOWN_URL)
        try:
            with pytest.raises(TableError) as info:
                await OPERATIONS[operation](LiveTables(client, prefix="srtest:down"))
            return info.value
        finally:
            await client.aclose()

    error = asyncio.run(main())

    assert not isinstance(error, RedisError)
    assert isinstance(error.__cause__, RedisError)
