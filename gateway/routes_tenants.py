"""Admin API for tenants, API keys and usage (``/admin/...``, admin credential only).

A key's secret is returned once, by the call that creates it, and never again: only
its SHA-256 is stored.

Tenant and key changes are written through: to the system of record first (``store/``;
503 ``store_unavailable`` if it does not answer, and nothing changes), then to Redis,
so that Redis can always be rebuilt from the store. Just after start-up, while the
store is still opening, a call waits for it (``gateway.store_sync.StoreSync.store``).
"""

from __future__ import annotations

import logging
import math
import re
import secrets
import time
from typing import Any

import orjson
from fastapi import APIRouter, Request
from pydantic import BaseModel, ConfigDict, Field, ValidationError
from starlette.responses import Response

from base.auth_digest import digest_hex
from base.errors import InvalidRequest, ModelNotFound, StoreError
from gateway.context import Gateway
from gateway.openapi_schemas import json_body
from live.access_table import NANO, KeyRecord
from router.policy import Policy, TenantSpec
from store.records import StoredKey

logger = logging.getLogger(__name__)

GROUPS = ("pool", "model", "region", "provider", "total")
# Year 5138: far enough for any query, near enough for datetime to represent.
MAX_TIME_S = 1e11


MAX_KEY_LIFETIME_S = 10 * 365 * 86_400.0
# Tenant names appear in metrics labels, logs and Redis keys: printable, no separators.
TENANT_NAME = re.compile(r"[A-Za-z0-9_.:@\-]{1,128}")


class NewKey(BaseModel):
    """Body of ``POST /admin/keys``."""

    model_config = ConfigDict(extra="forbid")

    tenant: str = Field(min_length=1, max_length=128)
    name: str = Field(default="", max_length=128)
    # At most ten years, and a finite number (JSON allows neither inf nor nan, but a
    # huge exponent overflows to inf).
    expires_in_s: float | None = Field(
        default=None, gt=0, le=MAX_KEY_LIFETIME_S, allow_inf_nan=False
    )


def _json(body: Any, status: int = 200) -> Response:
    return Response(orjson.dumps(body), status_code=status, media_type="application/json")


def _now_ms() -> int:
    return int(time.time() * 1000)


def _key_view(record: KeyRecord) -> dict[str, Any]:
    return {
        "id": record.id,
        "tenant": record.tenant,
        "name": record.name,
        "created_s": record.created_s,
        "expires_s": record.expires_s or None,
        "revoked": record.revoked,
    }


def _check_references(spec: TenantSpec, policy: Policy) -> None:
    """A tenant may only name what the running policy has, as strictly as the policy
    loader checks its own tenants. Raises ModelNotFound or InvalidRequest."""
    unknown = [m for m in spec.allowed_models if m != "*" and m not in policy.models]
    if unknown:
        raise ModelNotFound(unknown[0])
    if spec.default_slo is not None and spec.default_slo not in policy.slo_classes:
        raise InvalidRequest(f"unknown SLO class {spec.default_slo!r}", param="default_slo")
    if spec.client_region is not None and spec.client_region not in policy.client_regions:
        raise InvalidRequest(f"unknown client region {spec.client_region!r}", param="client_region")
    locations = {p.location for p in policy.pools}
    unknown_regions = sorted(set(spec.allowed_regions or []) - locations)
    if unknown_regions:
        raise InvalidRequest(
            f"no pool in {unknown_regions}; pool locations: {sorted(locations)}",
            param="allowed_regions",
        )


def tenants_router(gw: Gateway) -> APIRouter:
    """Tenants, keys and usage."""
    router = APIRouter(prefix="/admin", tags=["admin"])

    def authorize(request: Request) -> None:
        gw.admin_keys.check_bearer(request.headers.get("authorization"))

    @router.get("/tenants")
    async def list_tenants(request: Request) -> Response:
        """Every effective tenant (policy, overridden by the admin API)."""
        authorize(request)
        return _json({name: spec.model_dump() for name, spec in gw.access.tenants.items()})

    @router.put("/tenants/{name}", openapi_extra=json_body(TenantSpec))
    async def put_tenant(request: Request, name: str) -> Response:
        """Create or replace a tenant; applies on every replica within a second."""
        authorize(request)
        if not TENANT_NAME.fullmatch(name):
            raise InvalidRequest("a tenant name is 1-128 letters, digits and '_.:@-'", param="name")
        try:
            spec = TenantSpec.model_validate_json(await request.body())
        except ValidationError as exc:
            first = exc.errors()[0]
            param = ".".join(str(p) for p in first["loc"]) or None
            raise InvalidRequest(f"invalid tenant: {first['msg']}", param=param) from exc
        _check_references(spec, gw.state.policy.policy)
        store = await gw.store_sync.store()
        await store.put_tenant(name, spec, now_ms=_now_ms())
        await gw.access.tables.put_tenant(name, spec)
        await gw.access.refresh()
        return _json({"tenant": name, **spec.model_dump()})

    @router.delete("/tenants/{name}")
    async def delete_tenant(request: Request, name: str) -> Response:
        """Forget an admin-API tenant (the policy's definition, if any, applies again)."""
        authorize(request)
        store = await gw.store_sync.store()
        in_store = await store.delete_tenant(name, now_ms=_now_ms())
        existed = await gw.access.tables.delete_tenant(name) or in_store
        await gw.access.refresh()
        return _json({"tenant": name, "deleted": existed})

    @router.post("/keys", status_code=201, openapi_extra=json_body(NewKey))
    async def create_key(request: Request) -> Response:
        """Create an API key for a tenant. The secret is in this reply and nowhere else."""
        authorize(request)
        try:
            body = NewKey.model_validate_json(await request.body())
        except ValidationError as exc:
            raise InvalidRequest(f"invalid key request: {exc.errors()[0]['msg']}") from exc
        if body.tenant not in gw.access.tenants:
            raise InvalidRequest(f"unknown tenant {body.tenant!r}", param="tenant")
        secret = f"sk-sr-{secrets.token_urlsafe(32)}"
        now = time.time()
        record = KeyRecord(
            id=f"key_{secrets.token_hex(8)}",
            tenant=body.tenant,
            name=body.name,
            created_s=now,
            expires_s=now + body.expires_in_s if body.expires_in_s else 0.0,
            revoked=False,
        )
        digest = digest_hex(secret)
        store = await gw.store_sync.store()
        await store.add_key(
            StoredKey(
                key_id=record.id,
                tenant=record.tenant,
                digest=digest,
                name=record.name,
                created_ms=round(record.created_s * 1000),
                expires_ms=round(record.expires_s * 1000) if record.expires_s else None,
            )
        )
        await gw.access.tables.store_key(digest, record)
        return _json({**_key_view(record), "secret": secret}, status=201)

    @router.get("/keys")
    async def list_keys(request: Request, tenant: str) -> Response:
        """A tenant's keys, without secrets."""
        authorize(request)
        return _json({"keys": [_key_view(k) for k in await gw.access.tables.list_keys(tenant)]})

    @router.delete("/keys/{key_id}")
    async def revoke_key(request: Request, key_id: str) -> Response:
        """Revoke a key: refused on every replica from the next request on."""
        authorize(request)
        # The bootstrap key lives in Redis only (the environment re-creates it).
        store = await gw.store_sync.store()
        in_store = await store.revoke_key(key_id, now_ms=_now_ms())
        found = await gw.access.tables.revoke_key(key_id) or in_store
        if not found:
            raise InvalidRequest(f"no key {key_id!r}", param="key_id")
        return _json({"id": key_id, "revoked": True})

    @router.get("/usage")
    async def usage(
        request: Request,
        tenant: str,
        group_by: str = "total",
        from_s: float | None = None,
        to_s: float | None = None,
    ) -> Response:
        """Spend and tokens of ``tenant`` over [from_s, to_s) (unix s; default the last
        24 h), grouped by pool, model, region, provider or total. Costs in USD.

        Read from the store's ledger (``source: store``; it trails the gateways by the
        usage consumer's latency, normally milliseconds), or, when the store does not
        answer, from Redis's hourly roll-ups (``source: redis``; whole hours)."""
        authorize(request)
        if group_by not in GROUPS:
            raise InvalidRequest(f"group_by must be one of {GROUPS}", param="group_by")
        for name, value in (("from_s", from_s), ("to_s", to_s)):
            if value is not None and not 0 <= value <= MAX_TIME_S:
                raise InvalidRequest(
                    f"{name} must be unix seconds in [0, {MAX_TIME_S:.0f}]", param=name
                )
        end = to_s if to_s is not None else time.time() + 1
        start = from_s if from_s is not None else end - 86400
        source = "store"
        try:
            store = await gw.store_sync.store()
            groups = await store.ledger.totals(
                tenant, math.floor(start * 1000), math.ceil(end * 1000), group_by
            )
        except StoreError as exc:
            # An answer from Redis's hourly roll-ups beats none; ``source`` says which.
            logger.warning("usage from redis roll-ups: the store failed: %s", exc)
            source = "redis"
            groups = await gw.access.tables.usage(tenant, start, end, group_by)
        out = {
            name: {**m, "cost_usd": m.get("cost_nusd", 0) / NANO}
            for name, m in sorted(groups.items())
        }
        return _json(
            {"tenant": tenant, "from_s": start, "to_s": end, "group_by": group_by,
             "source": source, "groups": out}
        )  # fmt: skip

    return router
