"""Placement state (``node_placement``): each node's topology, kubelet configuration and free
CPUs and memory as last recorded, for ``plan --fleet`` (docs/history.md#placement-state).

Revision ID: 0004
Revises: 0003
Create Date: 2026-12-02
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

from exporter.history.schema import IdType, UTCDateTime

revision = "0004"
down_revision = "0003"
branch_labels = None
depends_on = None


def upgrade() -> None:
    # Nothing to back-fill: each exporter writes its node's row with its next ledger.
    op.create_table(
        "node_placement",
        sa.Column("node_id", IdType, nullable=False),
        sa.Column("digest", sa.String(32), nullable=False),
        sa.Column("recorded_at", UTCDateTime(), nullable=False),
        sa.Column("topology", sa.Text, nullable=False),
        sa.Column("kubelet_config", sa.Text, nullable=True),
        sa.Column("free_cpus", sa.Text, nullable=False),
        sa.Column("free_memory", sa.Text, nullable=False),
        sa.ForeignKeyConstraint(["node_id"], ["nodes.id"], ondelete="CASCADE",
                                name="fk_node_placement_node_id_nodes"),
        sa.PrimaryKeyConstraint("node_id", name="pk_node_placement"),
    )


def downgrade() -> None:
    op.drop_table("node_placement")
