"""The system of record: tenants and API keys set through the admin API, and the ledger.

Writes here come first (write-through): the admin API writes the store, then Redis, so
whatever Redis holds can always be rebuilt from the store (``store.restore``). Every
method is one transaction, raises ``StoreError`` when the database fails (nothing is
then committed), and is safe to retry.
"""

from __future__ import annotations

import sqlalchemy as sa
from sqlalchemy.ext.asyncio import AsyncEngine

from router.policy import TenantSpec
from store.dialect import upsert_insert
from store.engine import make_engine
from store.errors import store_errors
from store.ledger import Ledger
from store.records import StoredKey, StoredTenant
from store.rollouts import RolloutStore
from store.schema import api_keys, tenants


class Store:
    """Tenants, keys, (``.ledger``) usage and (``.rollouts``) rollouts in one database.
    ``await close()`` when done."""

    def __init__(self, engine: AsyncEngine) -> None:
        self.engine = engine
        self.ledger = Ledger(engine)
        self.rollouts = RolloutStore(engine)

    @classmethod
    def open(cls, url: str) -> Store:
        """A store on ``url`` (connects lazily; run ``store.migrate.migrate(url)`` first).
        Raises StoreError for an unsupported URL."""
        return cls(make_engine(url))

    async def close(self) -> None:
        """Close every pooled connection."""
        await self.engine.dispose()

    # -- tenants --------------------------------------------------------------------------
    async def put_tenant(self, name: str, spec: TenantSpec, now_ms: int) -> None:
        """Create or replace tenant ``name`` (un-deleting it). Idempotent."""
        with store_errors("put tenant"):
            async with self.engine.begin() as conn:
                stmt = upsert_insert(conn, tenants).values(
                    name=name, spec=spec.model_dump_json(), updated_ms=now_ms, deleted=False
                )
                await conn.execute(
                    stmt.on_conflict_do_update(
                        index_elements=[tenants.c.name],
                        set_={
                            "spec": stmt.excluded.spec,
                            "updated_ms": stmt.excluded.updated_ms,
                            "deleted": False,
                        },
                    )
                )

    async def delete_tenant(self, name: str, now_ms: int) -> bool:
        """Mark tenant ``name`` deleted; True if it existed and was not deleted. Idempotent."""
        with store_errors("delete tenant"):
            async with self.engine.begin() as conn:
                result = await conn.execute(
                    sa.update(tenants)
                    .where(tenants.c.name == name, tenants.c.deleted == sa.false())
                    .values(deleted=True, updated_ms=now_ms)
                )
        return bool(result.rowcount)

    async def tenants(self) -> list[StoredTenant]:
        """Every tenant ever set through the admin API, deleted ones included, by name."""
        with store_errors("read tenants"):
            async with self.engine.connect() as conn:
                rows = (await conn.execute(sa.select(tenants).order_by(tenants.c.name))).all()
        return [
            StoredTenant(r.name, TenantSpec.model_validate_json(r.spec), r.updated_ms, r.deleted)
            for r in rows
        ]

    # -- keys -----------------------------------------------------------------------------
    async def add_key(self, key: StoredKey) -> None:
        """Store a new key. Idempotent for the same key id (a second call changes nothing)."""
        with store_errors("add key"):
            async with self.engine.begin() as conn:
                stmt = upsert_insert(conn, api_keys).values(
                    key_id=key.key_id, tenant=key.tenant, digest=key.digest, name=key.name,
                    created_ms=key.created_ms, expires_ms=key.expires_ms,
                    revoked_ms=key.revoked_ms,
                )  # fmt: skip
                await conn.execute(stmt.on_conflict_do_nothing(index_elements=[api_keys.c.key_id]))

    async def revoke_key(self, key_id: str, now_ms: int) -> bool:
        """Revoke a key; True if it exists (revoked now or before). A revocation is
        never undone: a second call keeps the first time."""
        with store_errors("revoke key"):
            async with self.engine.begin() as conn:
                await conn.execute(
                    sa.update(api_keys)
                    .where(api_keys.c.key_id == key_id, api_keys.c.revoked_ms.is_(None))
                    .values(revoked_ms=now_ms)
                )
                found = await conn.scalar(
                    sa.select(sa.func.count()).where(api_keys.c.key_id == key_id)
                )
        return bool(found)

    async def keys(
        self, tenant: str | None = None, *, digest: str | None = None
    ) -> list[StoredKey]:
        """Every key (of ``tenant``, or with SHA-256 hex ``digest``, if given), revoked
        and expired ones included, by id."""
        query = sa.select(api_keys).order_by(api_keys.c.key_id)
        if tenant is not None:
            query = query.where(api_keys.c.tenant == tenant)
        if digest is not None:
            query = query.where(api_keys.c.digest == digest)
        with store_errors("read keys"):
            async with self.engine.connect() as conn:
                rows = (await conn.execute(query)).all()
        return [
            StoredKey(r.key_id, r.tenant, r.digest, r.name, r.created_ms, r.expires_ms,
                      r.revoked_ms)
            for r in rows
        ]  # fmt: skip
