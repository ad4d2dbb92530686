"""Measure the network round trip from this gateway to every pool endpoint.

A light ``GET /health`` per endpoint every interval; the times go to the live tables
(``pool:{id}:stats`` ``rtt_ms``) in one pipeline. Off the request path; a failed probe
is simply not recorded (failures are judged from real traffic and, later, by the
health state machine).
"""

from __future__ import annotations

import asyncio
import contextlib
import time

from adapters.upstream import UpstreamClient
from gateway.routing_state import RoutingState
from router.errors import TableError, UpstreamError
from router.tables import LiveTables


async def _time_get(upstream: UpstreamClient, url: str, timeout_s: float) -> float | None:
    started = time.perf_counter()
    try:
        status, _ = await upstream.get(url, timeout_s)
    except UpstreamError:
        return None
    return (time.perf_counter() - started) * 1000.0 if status < 500 else None


async def probe_once(
    state: RoutingState, upstream: UpstreamClient, tables: LiveTables, timeout_s: float
) -> dict[str, float]:
    """Probe every endpoint once; record and return the mean RTT (ms) per reachable pool.

    Raises TableError if the results cannot be written.
    """
    pools = state.policy.policy.pools
    urls = [(p.id, str(e).rstrip("/") + "/health") for p in pools for e in p.endpoints]
    times = await asyncio.gather(*(_time_get(upstream, url, timeout_s) for _, url in urls))
    per_pool: dict[str, list[float]] = {}
    for (pool_id, _), ms in zip(urls, times, strict=True):
        if ms is not None:
            per_pool.setdefault(pool_id, []).append(ms)
    rtt = {pid: sum(v) / len(v) for pid, v in per_pool.items()}
    if rtt:
        await tables.record_rtt(rtt)
    return rtt


async def probe_loop(
    state: RoutingState,
    upstream: UpstreamClient,
    tables: LiveTables,
    interval_s: float,
    timeout_s: float = 1.0,
) -> None:
    """Probe every ``interval_s`` until cancelled. Redis errors are left to the sync loops."""
    while True:
        with contextlib.suppress(TableError):
            await probe_once(state, upstream, tables, timeout_s)
        await asyncio.sleep(interval_s)
