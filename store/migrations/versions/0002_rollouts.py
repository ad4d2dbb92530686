"""Rollouts of model versions: the current record of each, and every transition.

Revision ID: 0002
Revises: 0001
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0002"
down_revision: str | None = "0001"
branch_labels: str | None = None
depends_on: str | None = None


def upgrade() -> None:
    """Create ``rollouts`` and ``rollout_transitions``."""
    op.create_table(
        "rollouts",
        sa.Column("id", sa.String(64), primary_key=True),
        sa.Column("model", sa.String(256), nullable=False),
        sa.Column("record", sa.Text(), nullable=False),
        sa.Column("revision", sa.BigInteger(), nullable=False),
        sa.Column("stage", sa.String(32), nullable=False),
        sa.Column("created_ms", sa.BigInteger(), nullable=False),
        sa.Column("updated_ms", sa.BigInteger(), nullable=False),
    )
    op.create_index("ix_rollouts_model_updated", "rollouts", ["model", "updated_ms"])
    op.create_table(
        "rollout_transitions",
        sa.Column("rollout_id", sa.String(64), primary_key=True),
        sa.Column("revision", sa.BigInteger(), primary_key=True),
        sa.Column("at_ms", sa.BigInteger(), nullable=False),
        sa.Column("from_stage", sa.String(32), nullable=False),
        sa.Column("to_stage", sa.String(32), nullable=False),
        sa.Column("step", sa.Integer(), nullable=False),
        sa.Column("reason", sa.Text(), nullable=False),
        sa.Column("evidence", sa.Text(), nullable=False),
    )


def downgrade() -> None:
    """Drop both tables."""
    op.drop_table("rollout_transitions")
    op.drop_index("ix_rollouts_model_updated", table_name="rollouts")
    op.drop_table("rollouts")
