"""Redis work against simulated gateway replicas at a fixed total load. Prints numbers.

    python loadtests/bench_redis_replicas.py [--rate 400] [--seconds 5] [--replicas 1,4,16]
        [--redis-cluster]

Each simulated replica runs what a gateway replica sends to Redis, through the real
``live`` tables: an admission per request (a tenant with limits: one script each), the
flush every 50 ms (in-flight share and observations; usage records and roll-ups when due,
every 1 s or 256 records: one pipeline)
and the snapshot refresh every 100 ms (the gateway's ``TableReader``: the new observations,
and the pool hashes once a second as no writer announces a change here). The total request rate is
split evenly over the replicas, so what grows with their number is background work only.
Redis commands are counted by INFO commandstats over every node (commands run inside
Lua scripts included). Redis: ``SKYROUTE_REDIS_URL``, else an embedded one, or with
``--redis-cluster`` an embedded 3-master cluster.
"""

from __future__ import annotations

import argparse
import asyncio
import functools
import os
import random
import secrets
import sys
import time
from pathlib import Path

from base.auth_digest import digest_hex
from gateway.settings import GatewaySettings
from gateway.sync import USAGE_BATCH
from live.access_table import AccessTables, KeyRecord, UsageRecord
from live.redis_client import commands_run, connect
from live.table_reader import TableReader
from live.tables import LiveTables, PoolObservations
from router.policy import TenantSpec
from skyroute.embedded_redis import EmbeddedRedis, EmbeddedRedisCluster

# ``python loadtests/bench_redis_replicas.py`` puts this directory, not the project, on sys.path.
_ROOT = Path(__file__).resolve().parents[1]
if str(_ROOT) not in sys.path:
    sys.path.insert(0, str(_ROOT))

from loadtests.bench_procs import stop_on_sigterm  # noqa: E402

POOLS = [f"{p}:r{i}:bench" for p in ("aws", "gcp", "azure") for i in range(2)]
FLUSH_S, REFRESH_S, TTL_MS = 0.05, 0.1, 3000
USAGE_S = GatewaySettings.model_fields["usage_flush_interval_ms"].default / 1000


async def _replica(
    n: int, tables: LiveTables, access: AccessTables, digest: str, rate: float, end: float
) -> int:
    replica = f"bench-gw-{n}"
    inflight = {p: 0 for p in POOLS}
    obs: dict[str, PoolObservations] = {}
    records: list[UsageRecord] = []
    served = 0

    async def requests() -> None:
        nonlocal served
        t = time.monotonic()
        while t < end:
            await asyncio.sleep(max(t - time.monotonic(), 0))
            await access.admit(digest, time.time(), 40)
            pool = random.choice(POOLS)
            o = obs.setdefault(pool, PoolObservations())
            o.ttft_ms.append(random.uniform(50, 200))
            o.ok += 1
            inflight[pool] = random.randint(0, 4)
            records.append(UsageRecord(time.time(), secrets.token_hex(6), "bench", "m", pool,
                                       pool.split(":")[0], "r", 20, 20, 1000, "200"))  # fmt: skip
            served += 1
            t += 1.0 / rate

    async def flush() -> None:
        since: float | None = None
        while time.monotonic() < end:
            await asyncio.sleep(FLUSH_S)
            # The gateway's rule (gateway.sync): records go out in batches, at the
            # latest USAGE_S after the first of them waited.
            now = time.monotonic()
            since = since if since is not None or not records else now
            due = since is not None and (len(records) >= USAGE_BATCH or now - since >= USAGE_S)
            batch, recs = dict(obs), list(records) if due else []
            obs.clear()
            if due:
                records.clear()
                since = None
            await tables.flush(replica, now_ms=int(time.time() * 1000), inflight=dict(inflight),
                               observations=batch,
                               extra=functools.partial(access.add_usage, records=recs))  # fmt: skip

    async def refresh() -> None:
        reader = TableReader(tables)
        while time.monotonic() < end:
            await asyncio.sleep(REFRESH_S)
            await reader.read(POOLS, time.time(), time.monotonic(), TTL_MS, replica)

    await asyncio.gather(requests(), flush(), refresh())
    await tables.release(replica)
    return served


async def measure(url: str, replicas: int, rate: float, seconds: float) -> tuple[float, float]:
    """(Redis commands/s, commands per request) for ``replicas`` at ``rate`` req/s in all."""
    client = connect(url)
    prefix = f"benchrep{secrets.token_hex(4)}"
    tables, access = LiveTables(client, prefix), AccessTables(client, prefix)
    digest = digest_hex("sk-bench")
    await access.store_key(digest, KeyRecord("k", "bench", "", time.time(), 0.0, False))
    await access.write_limits({"bench": TenantSpec(rpm=10**9)})
    try:
        c0, t0 = await commands_run(client), time.monotonic()
        end = t0 + seconds
        served = await asyncio.gather(
            *(_replica(n, tables, access, digest, rate / replicas, end) for n in range(replicas))
        )
        c1, t1 = await commands_run(client), time.monotonic()
    finally:
        keys = [k async for k in client.scan_iter(match=f"{prefix}:*", count=1000)]
        for k in keys:
            await client.delete(k)
        await client.aclose()
    return (c1 - c0) / (t1 - t0), (c1 - c0) / max(sum(served), 1)


def main() -> None:
    stop_on_sigterm()
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rate", type=float, default=400.0, help="total req/s (400)")
    parser.add_argument("--seconds", type=float, default=5.0, help="per replica count (5)")
    parser.add_argument("--replicas", default="1,4,16", help="replica counts (1,4,16)")
    parser.add_argument("--redis-cluster", action="store_true", help="a local 3-master cluster")
    args = parser.parse_args()
    server: EmbeddedRedis | EmbeddedRedisCluster | None = None
    url = os.environ.get("SKYROUTE_REDIS_URL", "")
    if args.redis_cluster:
        server = EmbeddedRedisCluster()
        url = server.start()
    elif not url:
        server = EmbeddedRedis()
        url = server.start()
    try:
        print(f"redis {url}; {args.rate:g} req/s in total, {args.seconds:g} s per run")
        print("replicas | redis commands/s | commands/request")
        for n in (int(x) for x in args.replicas.split(",")):
            per_s, per_req = asyncio.run(measure(url, n, args.rate, args.seconds))
            print(f"{n:8} | {per_s:16.0f} | {per_req:16.2f}", flush=True)
    finally:
        if server is not None:
            server.stop()


if __name__ == "__main__":
    main()
