"""What the store holds, as frozen dataclasses (times in unix ms, money in nano-USD)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import NamedTuple

from router.policy import TenantSpec


@dataclass(frozen=True)
class StoredTenant:
    """A tenant set through the admin API. ``deleted``: removed through the admin API
    (the row stays so that a refill also removes it from Redis)."""

    name: str
    spec: TenantSpec
    updated_ms: int
    deleted: bool = False


@dataclass(frozen=True)
class StoredKey:
    """An API key: its SHA-256 (hex), never the secret. ``expires_ms`` None: never;
    ``revoked_ms`` None: not revoked."""

    key_id: str
    tenant: str
    digest: str
    name: str
    created_ms: int
    expires_ms: int | None = None
    revoked_ms: int | None = None


class LedgerRow(NamedTuple):
    """One served request in the usage ledger. ``idempotency_id`` is unique in the
    ledger: writing the same row twice stores it once (see ``store.usage_rows``).

    A named tuple, in the order of the ledger's columns: the consumer builds one per
    request, and the tuple is what the database driver binds (a frozen dataclass cost
    ~2 us to build and another copy to bind)."""

    idempotency_id: str
    request_id: str
    tenant: str
    model: str
    pool: str
    provider: str
    region: str
    prompt_tokens: int
    completion_tokens: int
    cost_nusd: int
    status: str
    ts_ms: int
