"""The one SQL schema of the system of record (SQLAlchemy Core), for PostgreSQL and SQLite.

    tenants      name PK, spec (TenantSpec JSON), updated_ms, deleted
    api_keys     key_id PK, tenant, digest (SHA-256 hex, UNIQUE), name, created_ms,
                 expires_ms (NULL: never), revoked_ms (NULL: not revoked)
    usage_ledger id PK, idempotency_id UNIQUE, request_id, tenant, model, pool, provider,
                 region, prompt_tokens, completion_tokens, cost_nusd, status, ts_ms
    spend        (tenant, period) PK, cost_nusd, requests
    rollouts     id PK, model, record (live.rollout_table.RolloutRecord JSON), revision,
                 stage, created_ms, updated_ms
    rollout_transitions
                 (rollout_id, revision) PK, at_ms, from_stage, to_stage, step, reason,
                 evidence (JSON list of lines): every move of a rollout, with what it
                 was based on

Times are integer unix milliseconds (UTC) and money integer nano-USD (USD x 1e9), so
that both databases hold exactly the same values and sums reconcile with Redis's
counters. Budget periods are the ids of ``live.usage_rollups.period_ids`` (``h2026112417``,
``d20261124``, ``m202611``). A change to these tables is a new migration in
``store/migrations/versions``, never an edit of an applied one.
"""

from __future__ import annotations

import sqlalchemy as sa

metadata = sa.MetaData()

# SQLite only autoincrements an INTEGER PRIMARY KEY (its rowid); PostgreSQL gets BIGINT.
_ROW_ID = sa.BigInteger().with_variant(sa.Integer(), "sqlite")

tenants = sa.Table(
    "tenants",
    metadata,
    sa.Column("name", sa.String(128), primary_key=True),
    sa.Column("spec", sa.Text(), nullable=False),
    sa.Column("updated_ms", sa.BigInteger(), nullable=False),
    sa.Column("deleted", sa.Boolean(), nullable=False, server_default=sa.false()),
)

api_keys = sa.Table(
    "api_keys",
    metadata,
    sa.Column("key_id", sa.String(64), primary_key=True),
    sa.Column("tenant", sa.String(128), nullable=False, index=True),
    sa.Column("digest", sa.String(64), nullable=False),
    sa.Column("name", sa.String(128), nullable=False, server_default=""),
    sa.Column("created_ms", sa.BigInteger(), nullable=False),
    sa.Column("expires_ms", sa.BigInteger(), nullable=True),
    sa.Column("revoked_ms", sa.BigInteger(), nullable=True),
    sa.UniqueConstraint("digest", name="uq_api_keys_digest"),
)

usage_ledger = sa.Table(
    "usage_ledger",
    metadata,
    sa.Column("id", _ROW_ID, primary_key=True, autoincrement=True),
    sa.Column("idempotency_id", sa.String(200), nullable=False),
    sa.Column("request_id", sa.String(128), nullable=False),
    sa.Column("tenant", sa.String(128), nullable=False),
    sa.Column("model", sa.String(256), nullable=False),
    sa.Column("pool", sa.String(256), nullable=False),
    sa.Column("provider", sa.String(64), nullable=False),
    sa.Column("region", sa.String(128), nullable=False),
    sa.Column("prompt_tokens", sa.BigInteger(), nullable=False),
    sa.Column("completion_tokens", sa.BigInteger(), nullable=False),
    sa.Column("cost_nusd", sa.BigInteger(), nullable=False),
    sa.Column("status", sa.String(32), nullable=False),
    sa.Column("ts_ms", sa.BigInteger(), nullable=False),
    sa.UniqueConstraint("idempotency_id", name="uq_usage_ledger_idempotency_id"),
    sa.Index("ix_usage_ledger_tenant_ts", "tenant", "ts_ms"),
)

spend = sa.Table(
    "spend",
    metadata,
    sa.Column("tenant", sa.String(128), primary_key=True),
    sa.Column("period", sa.String(16), primary_key=True),
    sa.Column("cost_nusd", sa.BigInteger(), nullable=False),
    sa.Column("requests", sa.BigInteger(), nullable=False),
)

rollouts = sa.Table(
    "rollouts",
    metadata,
    sa.Column("id", sa.String(64), primary_key=True),
    sa.Column("model", sa.String(256), nullable=False),
    sa.Column("record", sa.Text(), nullable=False),
    sa.Column("revision", sa.BigInteger(), nullable=False),
    sa.Column("stage", sa.String(32), nullable=False),
    sa.Column("created_ms", sa.BigInteger(), nullable=False),
    sa.Column("updated_ms", sa.BigInteger(), nullable=False),
    sa.Index("ix_rollouts_model_updated", "model", "updated_ms"),
)

rollout_transitions = sa.Table(
    "rollout_transitions",
    metadata,
    sa.Column("rollout_id", sa.String(64), primary_key=True),
    sa.Column("revision", sa.BigInteger(), primary_key=True),
    sa.Column("at_ms", sa.BigInteger(), nullable=False),
    sa.Column("from_stage", sa.String(32), nullable=False),
    sa.Column("to_stage", sa.String(32), nullable=False),
    sa.Column("step", sa.Integer(), nullable=False),
    sa.Column("reason", sa.Text(), nullable=False),
    sa.Column("evidence", sa.Text(), nullable=False),
)
