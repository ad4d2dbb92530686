"""Admin API for one replica of a pool: drain it (no new requests, optionally waiting
for its work to finish) and bring it back. The drain lives in the live tables, so it
applies on every gateway replica from its next snapshot (at once, by the change event).
"""

from __future__ import annotations

import asyncio
import time

import orjson
from fastapi import APIRouter, Request
from starlette.responses import Response

from base.errors import NotFound
from gateway.context import Gateway
from gateway.replicas import PoolReplicas

_POLL_S = 0.1


def replicas_router(gw: Gateway) -> APIRouter:
    """Routes under ``/admin/pools/{pool_id}/replicas``; admin credential."""
    router = APIRouter(prefix="/admin/pools/{pool_id}/replicas", include_in_schema=True)

    def find(request: Request, pool_id: str, address: str) -> tuple[PoolReplicas, int]:
        gw.admin_keys.check_bearer(request.headers.get("authorization"))
        pool = gw.state.replicas.by_id.get(pool_id)
        if pool is None:
            raise NotFound(f"no pool {pool_id!r} in the running policy", param="pool_id")
        base = address.rstrip("/")
        for i, replica in enumerate(pool.replicas):
            if replica.address == base:
                return pool, i
        known = [r.address for r in pool.replicas]
        raise NotFound(
            f"pool {pool_id} has no replica {address!r}; it has {known}", param="address"
        )

    def busy(pool_id: str, address: str, since: float) -> float | None:
        """Requests still on the replica: the engine's own count (it covers every
        gateway replica, and clients that bypass skyroute) or this process's in-flight
        for an engine without metrics; None until a scrape newer than ``since``."""
        pool = gw.state.replicas.by_id.get(pool_id)
        replica = next((r for r in pool.replicas if r.address == address), None) if pool else None
        if pool is None or replica is None:
            return 0.0  # gone from the pool: nothing of it is left to wait for
        i = pool.replicas.index(replica)
        load = replica.load
        engine = (load.running + load.waiting) if load is not None else 0.0
        if replica.has_metrics and replica.scraped_at < since:
            return None
        return max(engine, float(pool.inflight[i]))

    @router.post("/drain")
    async def drain_replica(
        request: Request,
        pool_id: str,
        address: str,
        wait: bool = False,
        deadline_s: float | None = None,
    ) -> Response:
        """Stop new requests to one replica (by its base URL) on every gateway. With
        ``wait=true``, wait (up to ``deadline_s``, default the policy's drain deadline)
        until the replica reports no running or waiting request. Idempotent. 404 for an
        unknown pool or replica."""
        pool, i = find(request, pool_id, address)
        base = pool.replicas[i].address
        await gw.tables.set_replica_drained(pool_id, base, True)
        await gw.sync.refresh_now()  # this replica stops choosing it before we answer
        health = gw.state.policy.policy.health
        limit = deadline_s if deadline_s is not None else health.drain_deadline_s
        started = time.monotonic()
        remaining = busy(pool_id, base, started)
        # Work that started before the drain shows in a scrape taken after it.
        while wait and time.monotonic() - started < limit and remaining != 0:
            await asyncio.sleep(_POLL_S)
            remaining = busy(pool_id, base, started)
        body = {
            "pool": pool_id,
            "address": base,
            "state": "drained",
            "inflight": remaining,
            "drained": remaining == 0,
            "waited_s": round(time.monotonic() - started, 3),
        }
        return Response(orjson.dumps(body), media_type="application/json")

    @router.post("/uncordon")
    async def uncordon_replica(request: Request, pool_id: str, address: str) -> Response:
        """Let a drained replica take requests again, on every gateway. Idempotent."""
        pool, i = find(request, pool_id, address)
        await gw.tables.set_replica_drained(pool_id, pool.replicas[i].address, False)
        await gw.sync.refresh_now()
        state = pool.state_of(i, time.monotonic())
        body = {"pool": pool_id, "address": pool.replicas[i].address, "state": state}
        return Response(orjson.dumps(body), media_type="application/json")

    return router
