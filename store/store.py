"""The system of record: tenants and API keys set through the admin API, and the ledger.

Writes here come first (write-through): the admin API writes the store, then Redis, so
whatever Redis holds can always be rebuilt from the store (``store.restore``). Every
method is one transaction, raises ``StoreError`` when the database fails (nothing is
then committed), and is safe to retry.
"""

from __future__ import annotations

from router.policy import TenantSpec
from store.database import Database, open_database
from store.errors import store_errors
from store.ledger import Ledger
from store.records import StoredKey, StoredTenant
from store.rollouts import RolloutStore

_PUT_TENANT = (
    "INSERT INTO tenants (name, spec, updated_ms, deleted) VALUES ($1, $2, $3, $4)"
    " ON CONFLICT (name) DO UPDATE SET spec = excluded.spec,"
    " updated_ms = excluded.updated_ms, deleted = excluded.deleted"
)
_DELETE_TENANT = "UPDATE tenants SET deleted = $1, updated_ms = $2 WHERE name = $3 AND NOT deleted"
_TENANTS = "SELECT name, spec, updated_ms, deleted FROM tenants ORDER BY name"
_KEY_COLUMNS = "key_id, tenant, digest, name, created_ms, expires_ms, revoked_ms"
_ADD_KEY = (
    f"INSERT INTO api_keys ({_KEY_COLUMNS}) VALUES ($1, $2, $3, $4, $5, $6, $7)"
    " ON CONFLICT (key_id) DO NOTHING"
)
_REVOKE_KEY = "UPDATE api_keys SET revoked_ms = $1 WHERE key_id = $2 AND revoked_ms IS NULL"
_KEY_EXISTS = "SELECT count(*) FROM api_keys WHERE key_id = $1"


class Store:
    """Tenants, keys, (``.ledger``) usage and (``.rollouts``) rollouts in one database.
    ``await close()`` when done."""

    def __init__(self, db: Database) -> None:
        self.db = db
        self.ledger = Ledger(db)
        self.rollouts = RolloutStore(db)

    @classmethod
    def open(cls, url: str) -> Store:
        """A store on ``url`` (connects lazily; run ``store.migrate.migrate(url)`` first).
        Raises StoreError for an unsupported URL."""
        return cls(open_database(url))

    async def close(self) -> None:
        """Close every connection."""
        await self.db.close()

    # -- tenants --------------------------------------------------------------------------
    async def put_tenant(self, name: str, spec: TenantSpec, now_ms: int) -> None:
        """Create or replace tenant ``name`` (un-deleting it). Idempotent."""
        with store_errors("put tenant"):
            async with self.db.transaction() as conn:
                await conn.execute(_PUT_TENANT, name, spec.model_dump_json(), now_ms, False)

    async def delete_tenant(self, name: str, now_ms: int) -> bool:
        """Mark tenant ``name`` deleted; True if it existed and was not deleted. Idempotent."""
        with store_errors("delete tenant"):
            async with self.db.transaction() as conn:
                changed = await conn.execute(_DELETE_TENANT, True, now_ms, name)
        return bool(changed)

    async def tenants(self) -> list[StoredTenant]:
        """Every tenant ever set through the admin API, deleted ones included, by name."""
        with store_errors("read tenants"):
            async with self.db.connection() as conn:
                rows = await conn.fetch(_TENANTS)
        return [
            StoredTenant(name, TenantSpec.model_validate_json(spec), int(updated), bool(deleted))
            for name, spec, updated, deleted in rows
        ]

    # -- keys -----------------------------------------------------------------------------
    async def add_key(self, key: StoredKey) -> None:
        """Store a new key. Idempotent for the same key id (a second call changes nothing)."""
        with store_errors("add key"):
            async with self.db.transaction() as conn:
                await conn.execute(
                    _ADD_KEY, key.key_id, key.tenant, key.digest, key.name, key.created_ms,
                    key.expires_ms, key.revoked_ms,
                )  # fmt: skip

    async def revoke_key(self, key_id: str, now_ms: int) -> bool:
        """Revoke a key; True if it exists (revoked now or before). A revocation is
        never undone: a second call keeps the first time."""
        with store_errors("revoke key"):
            async with self.db.transaction() as conn:
                await conn.execute(_REVOKE_KEY, now_ms, key_id)
                found = await conn.fetch(_KEY_EXISTS, key_id)
        return bool(found[0][0])

    async def keys(
        self, tenant: str | None = None, *, digest: str | None = None
    ) -> list[StoredKey]:
        """Every key (of ``tenant``, or with SHA-256 hex ``digest``, if given), revoked
        and expired ones included, by id."""
        where, args = [], []
        for column, value in (("tenant", tenant), ("digest", digest)):
            if value is not None:
                args.append(value)
                where.append(f"{column} = ${len(args)}")
        query = f"SELECT {_KEY_COLUMNS} FROM api_keys"
        if where:
            query += " WHERE " + " AND ".join(where)
        with store_errors("read keys"):
            async with self.db.connection() as conn:
                rows = await conn.fetch(query + " ORDER BY key_id", *args)
        return [StoredKey(*row) for row in rows]
