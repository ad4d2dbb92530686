"""Operational endpoints: liveness, readiness and Prometheus metrics.

``/healthz`` and ``/readyz`` answer kubelet probes without a credential and reveal
nothing beyond state; ``/metrics`` needs the admin credential.
"""

from __future__ import annotations

import math

import orjson
from fastapi import APIRouter, Request
from prometheus_client import CONTENT_TYPE_LATEST
from starlette.responses import Response

from base.errors import TableError
from gateway.context import Gateway
from live.usage_stream import backlog as usage_backlog
from router.health import PoolState
from router.rollout import Stage


def ops_router(gw: Gateway) -> APIRouter:
    """Routes ``/healthz``, ``/readyz`` and ``/metrics``."""
    router = APIRouter(tags=["ops"])

    @router.get("/healthz")
    async def healthz() -> Response:
        """200 while the process runs."""
        return Response(b'{"status":"ok"}', media_type="application/json")

    @router.get("/readyz")
    async def readyz() -> Response:
        """200 while the gateway takes traffic (degraded when Redis is unreachable: it
        then routes from its last snapshot); 503 once shutdown has begun."""
        age = gw.state.snapshot_age_s()
        body = {
            "status": "draining" if gw.draining else ("ready" if gw.state.redis_ok else "degraded"),
            "redis": "ok" if gw.state.redis_ok else "unreachable",
            "snapshot_age_s": round(age, 3) if age != float("inf") else None,
            "policy_version": gw.policies.version,
        }
        return Response(
            orjson.dumps(body),
            status_code=503 if gw.draining else 200,
            media_type="application/json",
        )

    @router.get("/metrics")
    async def metrics(request: Request) -> Response:
        """Prometheus text exposition."""
        gw.admin_keys.check_bearer(request.headers.get("authorization"))
        m = gw.metrics
        age = gw.state.snapshot_age_s()
        m.snapshot_age.set(age if age != float("inf") else -1)
        m.redis_up.set(1 if gw.state.redis_ok else 0)
        m.sync_redis_errors(gw.sync.redis_errors)
        store = gw.store_sync
        m.store_ready.set(1 if store.migrated else 0)
        try:
            lag, pending = await usage_backlog(gw.access.tables)
            m.usage_backlog.set(lag)
            m.usage_pending.set(pending)
        except TableError:  # Redis is down (skyroute_redis_up says so): unknown
            m.usage_backlog.set(math.nan)
            m.usage_pending.set(math.nan)
        m.sync_total(m.ledger_records, store.written)
        m.sync_total(m.ledger_malformed, store.malformed)
        m.sync_total(m.redis_refills, store.restores)
        if gw.journal is not None:
            m.sync_total(m.usage_journal_errors, gw.journal.errors)
        for model, record in gw.state.rollout_records.items():
            for stage in Stage:
                m.rollout_stage.labels(model, stage.value).set(
                    1 if record.rollout.stage is stage else 0
                )
            m.rollout_transitions.labels(model).set(record.revision - 1)
            m.rollout_exposed.labels(model).set(record.rollout.exposed)
        for pid, n in gw.state.inflight.items():
            m.inflight.labels(pid).set(n)
        for pid, row in gw.state.snapshot.rows.items():
            for state in PoolState:
                m.pool_state.labels(pid, state.value).set(1 if row.state is state else 0)
            m.pool_needs_replacement.labels(pid).set(1 if row.health.needs_replacement else 0)
        return Response(m.render(), media_type=CONTENT_TYPE_LATEST)

    return router
