"""Active probes: ``GET /health`` (or ``/v1/models``) on every endpoint of a pool.

A pool passes a probe when at least half of its endpoints answer below 500 within the
timeout. The round trip of the answering endpoints is the gateway-to-pool RTT, recorded
in the live tables (an observations-stream entry, folded into ``rtt_ms``). Off the
request path.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Sequence
from dataclasses import dataclass

from adapters.upstream import UpstreamClient
from base.errors import UpstreamError, UpstreamTimeout
from gateway.routing_state import RoutingState
from live.tables import LiveTables
from router.policy import PoolSpec


@dataclass(frozen=True)
class ProbeResult:
    """One pool's probe: passed or not, mean RTT of the endpoints that answered (ms),
    and the endpoints (base URLs) that gave no answer at all within the timeout."""

    ok: bool
    rtt_ms: float | None
    detail: str
    silent: tuple[str, ...] = ()


async def _time_get(
    upstream: UpstreamClient, url: str, timeout_s: float
) -> tuple[float | None, str, bool]:
    """(RTT ms or None, the error, whether the endpoint stayed silent past the timeout)."""
    started = time.perf_counter()
    try:
        status, _ = await upstream.get(url, timeout_s)
    except UpstreamTimeout as exc:
        return None, str(exc), True
    except UpstreamError as exc:
        return None, str(exc), False
    if status >= 500:
        return None, f"{url} answered {status}", False
    return (time.perf_counter() - started) * 1000.0, "", False


def endpoint_bases(pool: PoolSpec, discovered: Sequence[str] = ()) -> Sequence[str]:
    """The base URLs of ``pool``'s engines: its ``discovered`` replicas (from its node
    group or DNS) if any, else the policy's endpoints."""
    return discovered or [str(e).rstrip("/") for e in pool.endpoints]


async def probe_pool(
    upstream: UpstreamClient,
    pool: PoolSpec,
    path: str,
    timeout_s: float,
    discovered: Sequence[str] = (),
) -> ProbeResult:
    """Probe every endpoint of ``pool`` concurrently: its ``discovered`` replicas (from
    its node group) if any, else the policy's. Never raises for endpoint failures."""
    bases = endpoint_bases(pool, discovered)
    urls = [base + path for base in bases]
    results = await asyncio.gather(*(_time_get(upstream, url, timeout_s) for url in urls))
    times = [ms for ms, _, _ in results if ms is not None]
    errors = [err for ms, err, _ in results if ms is None]
    silent = tuple(base for base, (_, _, hung) in zip(bases, results, strict=True) if hung)
    ok = len(times) * 2 >= len(urls)
    rtt = sum(times) / len(times) if times else None
    return ProbeResult(ok, rtt, "; ".join(errors) if errors else "ok", silent)


async def probe_once(
    state: RoutingState, upstream: UpstreamClient, tables: LiveTables, timeout_s: float
) -> dict[str, float]:
    """Probe every pool once; record and return the mean RTT (ms) per reachable pool.

    Raises TableError if the results cannot be written.
    """
    pools = state.policy.policy.pools
    path = state.policy.policy.health.probe_path
    rows = state.snapshot.rows
    results = await asyncio.gather(
        *(
            probe_pool(upstream, p, path, timeout_s, rows[p.id].endpoints if p.id in rows else ())
            for p in pools
        )
    )
    rtt = {p.id: r.rtt_ms for p, r in zip(pools, results, strict=True) if r.rtt_ms is not None}
    if rtt:
        await tables.record_rtt(rtt)
    return rtt
