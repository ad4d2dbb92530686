"""The history reader: settled days are read once and joined to the fresh ones."""

from __future__ import annotations

import asyncio
import time

from autoscaler.history import HistoryReader
from live.demand_table import DemandRecord, DemandTables
from tests.autoscaler.conftest import RedisTarget

DAY = 86_400.0


def test_history_joins_settled_days_to_today(target: RedisTarget) -> None:
    now = time.time()
    today = now // DAY * DAY

    async def main() -> tuple[float, float, int, float]:
        redis = target.client()
        try:
            tables = DemandTables(redis, target.prefix, bucket_s=60)
            await tables.record([DemandRecord(today - 3 * DAY + 30, "m", "us", 1, 7)])
            reader = HistoryReader(tables, history_s=5 * DAY)
            await reader.read(now)  # fills the cache of settled days
            await tables.record([DemandRecord(today + 30, "m", "us", 1, 5)])
            series = (await reader.read(now)).series[("m", "us")]
            return series.start_s, series.output_tokens.sum(), len(series.requests), series.end_s
        finally:
            await redis.aclose()

    start, tokens, buckets, end = asyncio.run(main())
    assert tokens == 12
    assert start <= today - 3 * DAY and end >= now - 60
    assert buckets == round((end - start) / 60)
