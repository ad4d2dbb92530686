"""``skyroute explain``: the router's ranking for one hypothetical request, as a table,
against the live tables (or the policy's defaults when no Redis URL is set)."""

from __future__ import annotations

import asyncio
import time

from live.redis_client import connect
from live.tables import LiveTables
from router.compiled import CompiledPolicy
from router.scoring import Ranking, RouteRequest, rank
from router.snapshot import Snapshot
from skyroute.columns import cell


async def live_snapshot(policy: CompiledPolicy, redis_url: str, prefix: str) -> Snapshot:
    """Read the live tables once into a Snapshot. Raises TableError."""
    redis = connect(redis_url, socket_timeout=2, socket_connect_timeout=2)
    try:
        now = time.time()
        rows = await LiveTables(redis, prefix=prefix).read(
            policy.pool_ids, int(now * 1000), replica_ttl_ms=3000
        )
        return Snapshot.build(policy, rows, now)
    finally:
        await redis.aclose()


def render(ranking: Ranking) -> str:
    """The ranking as a fixed-width table, tried pools first."""
    req = ranking.request
    header = (
        f"model={req.model} prompt_tokens={req.prompt_tokens} max_tokens={req.max_output_tokens} "
        f"slo={req.slo_class} (ttft<={ranking.slo_ttft_ms:.0f}ms "
        f"tpot<={ranking.slo_tpot_ms:.0f}ms) "
        f"client_region={req.client_region}\ndecision: {ranking.reason}\n"
    )
    cols = (
        f"{'#':>2}  {'pool':<36} {'ttft_ms':>8} {'tpot_ms':>8} {'cost_usd':>11} {'load':>6}  reason"
    )
    lines = [header, cols, "-" * len(cols)]
    tried = {int(i) for i in ranking.order}
    for n, entry in enumerate(ranking.explain(), start=1):
        idx = ranking.pool_ids.index(entry.pool_id)
        mark = str(n) if idx in tried else "x"
        lines.append(
            f"{mark:>2}  {entry.pool_id:<36} {cell(entry.ttft_ms, '8.0f')} "
            f"{cell(entry.tpot_ms, '8.1f')} "
            f"{cell(entry.cost_usd, '11.3e')} {cell(entry.load, '6.2f')}  {entry.reason}"
        )
    return "\n".join(lines)


def explain(
    policy: CompiledPolicy, request: RouteRequest, redis_url: str | None, prefix: str
) -> str:
    """Rank ``request`` against the live tables (policy defaults without Redis)."""
    snapshot = (
        asyncio.run(live_snapshot(policy, redis_url, prefix))
        if redis_url
        else Snapshot.empty(policy)
    )
    return render(rank(request, policy, snapshot))
