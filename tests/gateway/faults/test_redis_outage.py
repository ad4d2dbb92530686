"""Stop Redis under load, then restart it: no 5xx, and the shared counters are
consistent afterwards (nothing negative, nothing leaked)."""

from __future__ import annotations

import asyncio
import time

import httpx
from redis.asyncio import Redis

from live.tables import LiveTables
from skyroute.embedded_redis import EmbeddedRedis
from tests.figures import report
from tests.gateway.conftest import Fleet
from tests.gateway.faults.conftest import CHAT_BODY
from tests.gateway.faults.loadgen import Load
from tests.gateway.harness import Gateway, unique_prefix


async def _inflight(url: str, prefix: str, pool_ids: list[str]) -> dict[str, float]:
    redis = Redis.from_url(url)
    try:
        rows = await LiveTables(redis, prefix=prefix).read(pool_ids, int(time.time() * 1000), 3000)
        return {pid: row.inflight for pid, row in rows.items()}
    finally:
        await redis.aclose()


def test_redis_outage_causes_no_5xx_and_counters_resync(fast_fleet: Fleet) -> None:
    server = EmbeddedRedis()
    server.start()
    prefix = unique_prefix()
    gw = Gateway(fast_fleet.policy_path, server.url, prefix).start()
    try:
        with Load(f"{gw.base}/v1/chat/completions", CHAT_BODY, workers=8, max_s=30) as load:
            time.sleep(1.5)
            server.stop()
            down_at = time.monotonic()
            time.sleep(0.5)
            degraded = httpx.get(f"{gw.base}/readyz").json()
            time.sleep(2.0)
            server = EmbeddedRedis(port=server.port)
            server.start()
            up_at = time.monotonic()
            ready = httpx.get(f"{gw.base}/readyz").json()
            while ready["redis"] != "ok" and time.monotonic() - up_at < 10:
                time.sleep(0.05)
                ready = httpx.get(f"{gw.base}/readyz").json()
            resynced_after = time.monotonic() - up_at
            time.sleep(1.0)
            result = load.stop()
        during = [o for o in result.outcomes if down_at <= o.started < up_at]
        time.sleep(0.5)  # one flush after the load stopped
        inflight = asyncio.run(_inflight(server.url, prefix, list(gw_pool_ids(gw))))
        report(
            f"redis outage: {result.sent} requests ({len(during)} while Redis was down), "
            f"{len(result.failures)} failed; /readyz during outage: {degraded['status']}; "
            f"re-synced {resynced_after:.2f}s after Redis returned; in-flight after: {inflight}"
        )
        assert result.failures == [], result.failures[:3]
        assert len(during) > 50
        assert degraded["status"] == "degraded"
        assert ready["redis"] == "ok"
        assert all(v == 0 for v in inflight.values()), inflight
    finally:
        gw.stop()
        server.stop()


def gw_pool_ids(gw: Gateway) -> list[str]:
    return [p["id"] for p in gw.admin("GET", "/admin/pools").json()["pools"]]
