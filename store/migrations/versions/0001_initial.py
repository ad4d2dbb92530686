"""The first schema: tenants, API keys, the usage ledger and spend per budget period.

Revision ID: 0001
Revises: (none)
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0001"
down_revision: str | None = None
branch_labels: str | None = None
depends_on: str | None = None

# The tables are spelled out here, not imported from store.schema: an applied
# migration must keep meaning what it meant when it ran, whatever schema.py says later.
_ROW_ID = sa.BigInteger().with_variant(sa.Integer(), "sqlite")


def upgrade() -> None:
    """Create the four tables."""
    op.create_table(
        "tenants",
        sa.Column("name", sa.String(128), primary_key=True),
        sa.Column("spec", sa.Text(), nullable=False),
        sa.Column("updated_ms", sa.BigInteger(), nullable=False),
        sa.Column("deleted", sa.Boolean(), nullable=False, server_default=sa.false()),
    )
    op.create_table(
        "api_keys",
        sa.Column("key_id", sa.String(64), primary_key=True),
        sa.Column("tenant", sa.String(128), nullable=False),
        sa.Column("digest", sa.String(64), nullable=False),
        sa.Column("name", sa.String(128), nullable=False, server_default=""),
        sa.Column("created_ms", sa.BigInteger(), nullable=False),
        sa.Column("expires_ms", sa.BigInteger(), nullable=True),
        sa.Column("revoked_ms", sa.BigInteger(), nullable=True),
        sa.UniqueConstraint("digest", name="uq_api_keys_digest"),
    )
    op.create_index("ix_api_keys_tenant", "api_keys", ["tenant"])
    op.create_table(
        "usage_ledger",
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
    )
    op.create_index("ix_usage_ledger_tenant_ts", "usage_ledger", ["tenant", "ts_ms"])
    op.create_table(
        "spend",
        sa.Column("tenant", sa.String(128), primary_key=True),
        sa.Column("period", sa.String(16), primary_key=True),
        sa.Column("cost_nusd", sa.BigInteger(), nullable=False),
        sa.Column("requests", sa.BigInteger(), nullable=False),
    )


def downgrade() -> None:
    """Drop the four tables (and every record in them)."""
    for table in ("spend", "usage_ledger", "api_keys", "tenants"):
        op.drop_table(table)
