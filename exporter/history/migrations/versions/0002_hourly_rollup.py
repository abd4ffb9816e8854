"""Hourly roll-up of node summaries, back-filled from the existing summaries.

Revision ID: 0002
Revises: 0001
Create Date: 2026-11-30
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

from exporter.history.schema import SUMMARY_COLUMNS, IdType, UTCDateTime

revision = "0002"
down_revision = "0001"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "node_summaries_hourly",
        sa.Column("node_id", IdType, nullable=False),
        sa.Column("hour_epoch", sa.BigInteger, nullable=False),
        sa.Column("hour", UTCDateTime(), nullable=False),
        sa.Column("samples", sa.Integer, nullable=False),
        *[sa.Column(f"sum_{c}", sa.BigInteger, nullable=False) for c in SUMMARY_COLUMNS],
        sa.PrimaryKeyConstraint("node_id", "hour_epoch", name="pk_node_summaries_hourly"),
        sa.ForeignKeyConstraint(["node_id"], ["nodes.id"], ondelete="CASCADE",
                                name="fk_node_summaries_hourly_node_id_nodes"),
    )
    op.create_index("ix_node_summaries_hourly_hour_epoch", "node_summaries_hourly",
                    ["hour_epoch"])
    # Back-fill: one row per node and hour that has summaries (``hour`` in each backend's
    # own timestamp representation).
    hour_expr = ("to_timestamp(hour_epoch)" if op.get_context().dialect.name == "postgresql"
                 else "strftime('%Y-%m-%d %H:%M:%S.000000', hour_epoch, 'unixepoch')")
    cols = ", ".join(f"sum_{c}" for c in SUMMARY_COLUMNS)
    op.execute(
        f"INSERT INTO node_summaries_hourly (node_id, hour_epoch, hour, samples, {cols}) "
        f"SELECT node_id, hour_epoch, {hour_expr}, samples, {cols} FROM ("
        f"  SELECT node_id, at_epoch - at_epoch % 3600 AS hour_epoch, COUNT(*) AS samples, "
        f"  {', '.join(f'SUM({c}) AS sum_{c}' for c in SUMMARY_COLUMNS)} "
        f"  FROM node_summaries GROUP BY node_id, at_epoch - at_epoch % 3600) AS h")


def downgrade() -> None:
    op.drop_table("node_summaries_hourly")
