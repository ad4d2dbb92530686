"""The admin API under ``/admin``; every route needs the admin credential
(``Authorization: Bearer <admin token>``), and a client API key is refused."""

from __future__ import annotations

import asyncio
import math
import time
from typing import Any

import orjson
from fastapi import APIRouter, Request
from starlette.responses import Response

from base.errors import NotFound, TableError
from gateway.context import Gateway
from gateway.rollout_views import with_evidence
from live.rollout_table import RolloutTable
from router.health import HealthEvent
from router.snapshot import PoolRow


def _num(value: float) -> float | None:
    return round(value, 4) if math.isfinite(value) else None


def _opt(value: float | None) -> float | None:
    return None if value is None else _num(value)


def admin_router(gw: Gateway) -> APIRouter:
    """Policy reload and read-only views of the live state."""
    router = APIRouter(prefix="/admin", tags=["admin"])
    rollouts = RolloutTable(gw.tables.redis, prefix=gw.settings.redis_prefix)

    def authorize(request: Request) -> None:
        gw.admin_keys.check_bearer(request.headers.get("authorization"))

    @router.post("/policy/reload")
    async def reload_policy(request: Request) -> Response:
        """Reload the policy file. 200 with the version in force (``unchanged`` when the
        file's contents are), or 400 with every problem (the running policy stays)."""
        authorize(request)
        # An invalid file raises PolicyError: 400 with every problem (http_errors).
        changed = await gw.policies.reload_async()
        body2 = {
            "status": "reloaded" if changed else "unchanged",
            "version": gw.policies.version,
            "pools": gw.state.policy.size,
        }
        return Response(orjson.dumps(body2), media_type="application/json")

    async def live_rows(with_samples: bool) -> tuple[dict[str, PoolRow], bool]:
        # Read every replica's share (own included) live; the snapshot if Redis is down.
        policy = gw.state.policy
        try:
            rows = await gw.tables.read(
                policy.pool_ids,
                int(time.time() * 1000),
                gw.settings.replica_ttl_ms,
                with_samples=with_samples,
            )
        except TableError:
            return dict(gw.state.snapshot.rows), False
        return rows, True

    async def pool_views() -> tuple[list[dict[str, Any]], bool]:
        snap = gw.state.snapshot
        policy = gw.state.policy
        rows, live = await live_rows(with_samples=True)
        out = []
        for i, spec in enumerate(policy.policy.pools):
            row = rows.get(spec.id, PoolRow())
            health = row.health
            inflight = (
                row.inflight
                if live
                else float(snap.inflight[i]) + gw.state.inflight.get(spec.id, 0)
            )
            out.append(
                {
                    "id": spec.id,
                    "provider": spec.provider,
                    "region": spec.region,
                    "model": spec.model,
                    "state": health.state.value,
                    "reason": health.reason,
                    "since_s": _num(health.since_s),
                    "weight": _num(health.weight(time.time(), policy.policy.health.ramp_s)),
                    "needs_replacement": health.needs_replacement,
                    "inflight": inflight,
                    "ready_replicas": _num(float(snap.ready[i])),
                    "target_replicas": _num(row.target_replicas),
                    "rtt_ms": _num(row.rtt_ms),
                    "ttft_ewma_ms": _num(float(snap.ttft_ms[i])),
                    "tpot_ewma_ms": _num(float(snap.tpot_ms[i])),
                    "ttft_p50_ms": _num(row.ttft_p50_ms),
                    "ttft_p99_ms": _num(row.ttft_p99_ms),
                    "tpot_p50_ms": _num(row.tpot_p50_ms),
                    "tpot_p99_ms": _num(row.tpot_p99_ms),
                    "usd_per_gpu_hour": _num(float(snap.usd_per_gpu_hour[i])),
                    "usd_per_1m_tokens": _num(
                        float(snap.usd_per_gpu_hour[i])
                        * spec.gpus_per_replica
                        / (spec.goodput.tokens_per_s * 3600.0)
                        * 1e6
                    ),
                    "price_source": row.price_source or spec.price.source,
                }
            )
        return out, live

    @router.get("/pools")
    async def pools(request: Request) -> Response:
        """Every pool with its live values: state, in-flight (all replicas), latency,
        price, $/1M output tokens, replicas."""
        authorize(request)
        out, live = await pool_views()
        body = {"pools": out, "snapshot_age_s": _num(gw.state.snapshot_age_s()), "live": live}
        return Response(orjson.dumps(body), media_type="application/json")

    @router.get("/pools/{pool_id}")
    async def pool_detail(request: Request, pool_id: str) -> Response:
        """One pool as ``/admin/pools`` shows it, plus the requests its engines report
        beyond this fleet's (``engine_extra``) and each replica as this gateway process
        sees it: address, state (``ready``, ``ejected`` after failed requests,
        ``scrape_failing``), this process's in-flight requests there, the engine's
        running and waiting requests and KV-cache use (0-1) from the last good scrape,
        its age (s), failures in a row, errors and requests served. 404 if unknown."""
        authorize(request)
        known_pool(pool_id)
        out, live = await pool_views()
        body = next(p for p in out if p["id"] == pool_id)
        body["engine_extra"] = gw.state.engine_extra(pool_id)
        body["replicas"] = replica_views(pool_id)
        body["live"] = live
        return Response(orjson.dumps(body), media_type="application/json")

    def replica_views(pool_id: str) -> list[dict[str, Any]]:
        pool = gw.state.replicas.by_id.get(pool_id)
        if pool is None:
            return []
        now = time.monotonic()
        views = []
        for i, r in enumerate(pool.replicas):
            load = r.load
            views.append(
                {
                    "address": r.address,
                    "state": pool.state_of(i, now),
                    "inflight": float(pool.inflight[i]),
                    "engine": load.kind.value if load else None,
                    "engine_running": load.running if load else None,
                    "engine_waiting": load.waiting if load else None,
                    "kv_cache_usage": _opt(load.kv_cache_usage if load else None),
                    "prefix_cache_hit_rate": _opt(load.prefix_cache_hit_rate if load else None),
                    "has_metrics": r.has_metrics,
                    "scrape_age_s": _num(now - r.scraped_at) if r.scraped_at else None,
                    "ttft_ms": _opt(r.ttft_ms),
                    "tpot_ms": _opt(r.tpot_ms),
                    "ejected_for_s": _num(r.out_until - now) if r.out_until > now else None,
                    "ejected_reason": (r.last_error if r.ejected_until > now else r.shared_reason)
                    or None,
                    "scrape_failures": r.scrape_failures,
                    "request_failures": r.request_failures,
                    "errors": r.errors,
                    "last_error": r.last_error or None,
                    "served": r.served,
                }
            )
        return views

    @router.get("/dashboard/data")
    async def dashboard_data(request: Request) -> Response:
        """What the live dashboard shows: pools and each one's replicas (as this gateway
        sees them), this replica's recent routing decisions with their reasons, spend per
        provider and traffic per provider per second."""
        authorize(request)
        out, live = await pool_views()
        decisions = gw.forwarder.finisher.decisions if gw.forwarder else None
        body = {
            "pools": out,
            "replicas": {p["id"]: replica_views(p["id"]) for p in out},
            "live": live,
            "decisions": decisions.recent(50) if decisions else [],
            "spend_usd_by_provider": decisions.spend_usd() if decisions else {},
            "traffic": decisions.traffic() if decisions else [],
            "replica": gw.settings.replica_id,
            "rollouts": [
                await with_evidence(rollouts, record)
                for _, record in sorted(gw.state.rollout_records.items())
            ],
        }
        return Response(orjson.dumps(body), media_type="application/json")

    def known_pool(pool_id: str) -> None:
        if pool_id not in gw.state.policy.index:
            raise NotFound(f"no pool {pool_id!r} in the running policy", param="pool_id")

    @router.post("/pools/{pool_id}/drain")
    async def drain(
        request: Request, pool_id: str, wait: bool = False, deadline_s: float | None = None
    ) -> Response:
        """Cordon a pool on every replica at once; with ``wait=true``, also wait (up to
        ``deadline_s``, default the policy's drain deadline) until its in-flight count,
        summed over all gateway replicas, reaches zero. Idempotent."""
        authorize(request)
        known_pool(pool_id)
        await gw.health.apply(pool_id, HealthEvent.DRAIN, "drained by operator")
        await gw.sync.refresh_now()  # this replica stops routing to it before we answer
        deadline = (
            deadline_s if deadline_s is not None else gw.state.policy.policy.health.drain_deadline_s
        )
        started = time.monotonic()
        inflight = await drain_count(pool_id)
        while wait and inflight > 0 and time.monotonic() - started < deadline:
            await asyncio.sleep(0.05)
            inflight = await drain_count(pool_id)
        body = {
            "pool": pool_id,
            "state": "draining",
            "inflight": inflight,
            "drained": inflight == 0,
            "waited_s": round(time.monotonic() - started, 3),
        }
        return Response(orjson.dumps(body), media_type="application/json")

    async def drain_count(pool_id: str) -> float:
        # Own share counted live, the others from Redis: in-flight over all replicas.
        rows = await gw.tables.read(
            [pool_id], int(time.time() * 1000), gw.settings.replica_ttl_ms,
            exclude_replica=gw.settings.replica_id, with_samples=False,
        )  # fmt: skip
        return rows[pool_id].inflight + gw.state.inflight.get(pool_id, 0)

    @router.post("/pools/{pool_id}/uncordon")
    async def uncordon(request: Request, pool_id: str) -> Response:
        """Bring a drained pool back (traffic ramps up); also clears needs-replacement."""
        authorize(request)
        known_pool(pool_id)
        record = await gw.health.apply(pool_id, HealthEvent.UNCORDON, "uncordoned by operator")
        await gw.sync.refresh_now()
        state = record.state.value if record else (await gw.tables.read_health(pool_id)).state.value
        return Response(
            orjson.dumps({"pool": pool_id, "state": state}), media_type="application/json"
        )

    return router
