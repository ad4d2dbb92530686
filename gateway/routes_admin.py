"""The admin API under ``/admin``; every route needs the admin credential
(``Authorization: Bearer <admin token>``), and a client API key is refused."""

from __future__ import annotations

import contextlib
import math
import time

import orjson
from fastapi import APIRouter, Request
from starlette.responses import Response

from gateway.context import Gateway
from router.errors import PolicyError, TableError


def _num(value: float) -> float | None:
    return round(value, 4) if math.isfinite(value) else None


def admin_router(gw: Gateway) -> APIRouter:
    """Policy reload and read-only views of the live state."""
    router = APIRouter(prefix="/admin", tags=["admin"])

    def authorize(request: Request) -> None:
        gw.admin_keys.check_bearer(request.headers.get("authorization"))

    @router.post("/policy/reload")
    async def reload_policy(request: Request) -> Response:
        """Reload the policy file. 200 with the new version, or 400 with every problem
        (the running policy stays in force)."""
        authorize(request)
        try:
            compiled = gw.policies.reload()
        except PolicyError as exc:
            problems = [
                {"path": p.path, "line": p.line, "message": p.message} for p in exc.problems
            ]
            body = {
                "error": {
                    "message": str(exc),
                    "type": "invalid_request_error",
                    "param": None,
                    "code": "invalid_policy",
                },
                "problems": problems,
                "running_version": gw.policies.version,
            }
            return Response(orjson.dumps(body), status_code=400, media_type="application/json")
        body2 = {"status": "reloaded", "version": gw.policies.version, "pools": compiled.size}
        return Response(orjson.dumps(body2), media_type="application/json")

    @router.get("/pools")
    async def pools(request: Request) -> Response:
        """Every pool with its live values: state, in-flight, latency, price, replicas."""
        authorize(request)
        snap = gw.state.snapshot
        policy = gw.state.policy
        # Percentiles are not in the routing snapshot; read them live, and fall back to
        # the snapshot's rows when Redis is unreachable.
        rows = dict(snap.rows)
        with contextlib.suppress(TableError):
            rows = await gw.tables.read(
                policy.pool_ids, int(time.time() * 1000), gw.settings.replica_ttl_ms
            )
        out = []
        for i, spec in enumerate(policy.policy.pools):
            row = rows.get(spec.id)
            out.append(
                {
                    "id": spec.id,
                    "provider": spec.provider,
                    "region": spec.region,
                    "model": spec.model,
                    "state": row.state.value if row else "healthy",
                    "available": bool(snap.available[i]),
                    "inflight": float(snap.inflight[i]) + gw.state.inflight.get(spec.id, 0),
                    "ready_replicas": _num(float(snap.ready[i])),
                    "rtt_ms": _num(row.rtt_ms) if row else None,
                    "ttft_ewma_ms": _num(float(snap.ttft_ms[i])),
                    "tpot_ewma_ms": _num(float(snap.tpot_ms[i])),
                    "ttft_p50_ms": _num(row.ttft_p50_ms) if row else None,
                    "ttft_p99_ms": _num(row.ttft_p99_ms) if row else None,
                    "tpot_p50_ms": _num(row.tpot_p50_ms) if row else None,
                    "tpot_p99_ms": _num(row.tpot_p99_ms) if row else None,
                    "usd_per_gpu_hour": _num(float(snap.usd_per_gpu_hour[i])),
                    "price_source": (
                        row.price_source if row and row.price_source else spec.price.source
                    ),
                }
            )
        return Response(
            orjson.dumps({"pools": out, "snapshot_age_s": _num(gw.state.snapshot_age_s())}),
            media_type="application/json",
        )

    return router
