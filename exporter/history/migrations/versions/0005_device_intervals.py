"""Device intervals (``device_intervals``): the devices of one resource each container held,
and when (docs/history.md#devices).

Revision ID: 0005
Revises: 0004
Create Date: 2026-12-02
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

from exporter.history.schema import IdType, UTCDateTime

revision = "0005"
down_revision = "0004"
branch_labels = None
depends_on = None


def upgrade() -> None:
    # Nothing to back-fill: the first ledger after the upgrade opens the current holders.
    op.create_table(
        "device_intervals",
        sa.Column("id", IdType, primary_key=True, autoincrement=True),
        sa.Column("node_id", IdType, nullable=False),
        sa.Column("namespace", sa.String(253), nullable=False),
        sa.Column("pod", sa.String(253), nullable=False),
        sa.Column("container", sa.String(253), nullable=False),
        sa.Column("resource", sa.String(253), nullable=False),
        sa.Column("device_ids", sa.Text, nullable=False),
        sa.Column("numa_nodes", sa.String(255), nullable=False, server_default=""),
        sa.Column("valid_from", UTCDateTime(), nullable=False),
        sa.Column("valid_to", UTCDateTime(), nullable=True),
        sa.PrimaryKeyConstraint("id", name="pk_device_intervals"),
        sa.ForeignKeyConstraint(["node_id"], ["nodes.id"], ondelete="CASCADE",
                                name="fk_device_intervals_node_id_nodes"),
    )
    op.create_index("uq_device_intervals_open", "device_intervals",
                    ["node_id", "namespace", "pod", "container", "resource"], unique=True,
                    sqlite_where=sa.text("valid_to IS NULL"),
                    postgresql_where=sa.text("valid_to IS NULL"))
    op.create_index("ix_device_intervals_node_from", "device_intervals",
                    ["node_id", "valid_from"])
    op.create_index("ix_device_intervals_node_to", "device_intervals", ["node_id", "valid_to"])


def downgrade() -> None:
    op.drop_table("device_intervals")
