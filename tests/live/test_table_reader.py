"""The gateway's reader of the live tables against a real Redis: it keeps its fold,
reads pool hashes when told, and writes checkpoints that one-shot readers start from."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any

from live.table_reader import TableReader
from live.tables import LiveTables, PoolObservations

if TYPE_CHECKING:
    from tests.live.conftest import RedisTarget

NOW_MS = 1_700_000_000_000
POOL = "aws:us-east-1:h100-llama70b"


def _run(target: RedisTarget, scenario: Callable[[LiveTables], Awaitable[Any]]) -> Any:
    async def main() -> Any:
        async with target.tables() as tables:
            return await scenario(tables)

    return asyncio.run(main())


async def _flush(tables: LiveTables, replica: str, inflight: int, ttft: float) -> str:
    return await tables.flush(
        replica, now_ms=NOW_MS, inflight={POOL: inflight},
        observations={POOL: PoolObservations([ttft], [ttft / 10], ok=1)},
    )  # fmt: skip


async def _reader_read(reader: TableReader, mono: float) -> Any:
    return (await reader.read([POOL], NOW_MS / 1000, mono, 5_000, ""))[POOL]


def test_the_reader_folds_only_what_is_new_and_agrees_with_a_one_shot_read(
    live_redis: RedisTarget,
) -> None:
    async def scenario(tables: LiveTables) -> Any:
        reader = TableReader(tables)
        await _flush(tables, "gw-a", 2, 100.0)
        first = await _reader_read(reader, 0.0)
        for n in range(5):
            await _flush(tables, "gw-b", n, 200.0 + n)
        kept = await _reader_read(reader, 0.1)
        return first, kept, (await tables.read([POOL], NOW_MS, 5_000, with_samples=False))[POOL]

    first, kept, one_shot = _run(live_redis, scenario)

    assert (first.ttft_ewma_ms, first.inflight) == (100.0, 2.0)
    assert repr(kept) == repr(one_shot)  # NaN fields compare equal as text
    assert kept.inflight == 6.0 and kept.samples == 6


def test_pool_hashes_are_read_when_announced_or_once_a_period(live_redis: RedisTarget) -> None:
    async def scenario(tables: LiveTables) -> Any:
        reader = TableReader(tables, slow_every_s=1.0)
        before = await _reader_read(reader, 0.0)
        # Written without an announcement, as a lost PUBLISH would leave it:
        await tables.redis.hset(f"{tables.prefix}:pool:{{{POOL}}}:replicas", "ready", "3")
        unseen = await _reader_read(reader, 0.5)
        by_period = await _reader_read(reader, 1.0)
        await tables.redis.hset(f"{tables.prefix}:pool:{{{POOL}}}:replicas", "ready", "4")
        reader.changed()  # what an announcement does
        announced = await _reader_read(reader, 1.1)
        return before, unseen, by_period, announced

    rows = _run(live_redis, scenario)

    assert [r.ready_replicas for r in rows[1:]] == [rows[0].ready_replicas, 3.0, 4.0]


def test_a_checkpoint_lets_a_new_reader_start_after_the_stream_is_trimmed(
    live_redis: RedisTarget,
) -> None:
    async def scenario(tables: LiveTables) -> Any:
        reader = TableReader(tables, checkpoint_every_s=1.0)
        for n in range(3):
            await _flush(tables, "gw-a", 1, 100.0 * (n + 1))
        await _reader_read(reader, 0.0)  # writes the checkpoint of the three entries
        await tables.redis.xtrim(tables.obs_stream, maxlen=0)
        await _flush(tables, "gw-a", 4, 400.0)
        kept = await _reader_read(reader, 0.5)
        fresh = await _reader_read(TableReader(tables), 0.0)
        return kept, fresh

    kept, fresh = _run(live_redis, scenario)

    assert repr(fresh) == repr(kept)
    assert fresh.samples == 4 and fresh.inflight == 4.0


def test_a_recreated_stream_is_read_from_its_start(live_redis: RedisTarget) -> None:
    async def scenario(tables: LiveTables) -> Any:
        reader = TableReader(tables)
        await _flush(tables, "gw-a", 1, 100.0)
        await _reader_read(reader, 0.0)
        assert reader.fold is not None
        # As if Redis came back empty on a host whose clock is behind the old ids:
        reader.fold.last_id = "99999999999999-0"
        await tables.redis.delete(tables.obs_stream)
        reader.written(await _flush(tables, "gw-a", 7, 100.0))
        return await _reader_read(reader, 0.1)

    assert _run(live_redis, scenario).inflight == 7.0
