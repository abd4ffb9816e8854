"""Initial history schema: nodes, assignment and anomaly intervals, summaries, gaps.

Revision ID: 0001
Revises:
Create Date: 2026-11-30
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

from exporter.history.schema import IdType, UTCDateTime

revision = "0001"
down_revision = None
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "nodes",
        sa.Column("id", IdType, primary_key=True, autoincrement=True),
        sa.Column("name", sa.String(253), nullable=False),
        sa.Column("first_seen", UTCDateTime(), nullable=False),
        sa.Column("last_seen", UTCDateTime(), nullable=False),
        sa.Column("online_cpus", sa.Integer, nullable=True),
        sa.Column("writer_id", sa.String(64), nullable=False, server_default=""),
        sa.Column("writer_seq", sa.BigInteger, nullable=False, server_default=sa.text("0")),
        sa.PrimaryKeyConstraint("id", name="pk_nodes"),
        sa.UniqueConstraint("name", name="uq_nodes_name"),
    )
    op.create_table(
        "assignment_intervals",
        sa.Column("id", IdType, primary_key=True, autoincrement=True),
        sa.Column("node_id", IdType, nullable=False),
        sa.Column("pod_uid", sa.String(64), nullable=False, server_default=""),
        sa.Column("namespace", sa.String(253), nullable=False),
        sa.Column("pod", sa.String(253), nullable=False),
        sa.Column("container", sa.String(253), nullable=False),
        sa.Column("sidecar", sa.Boolean, nullable=False, server_default=sa.text("false")),
        sa.Column("assignment", sa.String(16), nullable=False),
        sa.Column("memory_assignment", sa.String(16), nullable=False),
        sa.Column("cpuset", sa.Text, nullable=False),
        sa.Column("cpu_count", sa.Integer, nullable=False),
        sa.Column("memory_bytes", sa.BigInteger, nullable=False),
        sa.Column("numa_nodes", sa.String(255), nullable=False, server_default=""),
        sa.Column("valid_from", UTCDateTime(), nullable=False),
        sa.Column("valid_to", UTCDateTime(), nullable=True),
        sa.PrimaryKeyConstraint("id", name="pk_assignment_intervals"),
        sa.ForeignKeyConstraint(["node_id"], ["nodes.id"], ondelete="CASCADE",
                                name="fk_assignment_intervals_node_id_nodes"),
    )
    op.create_index("uq_assignment_intervals_open", "assignment_intervals",
                    ["node_id", "namespace", "pod", "container"], unique=True,
                    sqlite_where=sa.text("valid_to IS NULL"),
                    postgresql_where=sa.text("valid_to IS NULL"))
    op.create_index("ix_assignment_intervals_node_from", "assignment_intervals",
                    ["node_id", "valid_from"])
    op.create_index("ix_assignment_intervals_node_to", "assignment_intervals",
                    ["node_id", "valid_to"])
    op.create_index("ix_assignment_intervals_ns_pod", "assignment_intervals",
                    ["namespace", "pod"])

    op.create_table(
        "anomaly_intervals",
        sa.Column("id", IdType, primary_key=True, autoincrement=True),
        sa.Column("node_id", IdType, nullable=False),
        sa.Column("kind", sa.String(64), nullable=False),
        sa.Column("namespace", sa.String(253), nullable=False, server_default=""),
        sa.Column("pod", sa.String(253), nullable=False, server_default=""),
        sa.Column("container", sa.String(253), nullable=False, server_default=""),
        sa.Column("subject", sa.Text, nullable=False, server_default=""),
        sa.Column("detail", sa.Text, nullable=False, server_default=""),
        sa.Column("first_seen", UTCDateTime(), nullable=False),
        sa.Column("last_seen", UTCDateTime(), nullable=False),
        sa.Column("resolved_at", UTCDateTime(), nullable=True),
        sa.PrimaryKeyConstraint("id", name="pk_anomaly_intervals"),
        sa.ForeignKeyConstraint(["node_id"], ["nodes.id"], ondelete="CASCADE",
                                name="fk_anomaly_intervals_node_id_nodes"),
    )
    op.create_index("ix_anomaly_intervals_node_first", "anomaly_intervals",
                    ["node_id", "first_seen"])
    op.create_index("ix_anomaly_intervals_node_resolved", "anomaly_intervals",
                    ["node_id", "resolved_at"])
    op.create_index("ix_anomaly_intervals_kind", "anomaly_intervals", ["kind"])

    op.create_table(
        "node_summaries",
        sa.Column("id", IdType, primary_key=True, autoincrement=True),
        sa.Column("node_id", IdType, nullable=False),
        sa.Column("at", UTCDateTime(), nullable=False),
        sa.Column("at_epoch", sa.BigInteger, nullable=False),
        *[sa.Column(name, sa.Integer, nullable=False) for name in (
            "online_cpus", "cpus_reserved", "cpus_node_shared", "cpus_node_exclusive",
            "cpus_pod_exclusive", "cpus_pod_shared", "cpus_pod_idle",
            "containers_node_exclusive", "containers_pod_exclusive", "containers_pod_shared",
            "containers_node_shared", "pods", "reclaimed_cpus", "reclaimable_cpus",
            "anomalies")],
        sa.PrimaryKeyConstraint("id", name="pk_node_summaries"),
        sa.ForeignKeyConstraint(["node_id"], ["nodes.id"], ondelete="CASCADE",
                                name="fk_node_summaries_node_id_nodes"),
    )
    op.create_index("uq_node_summaries_node_at", "node_summaries",
                    ["node_id", "at_epoch", "at"], unique=True)
    op.create_index("ix_node_summaries_at_epoch", "node_summaries", ["at_epoch"])

    op.create_table(
        "history_gaps",
        sa.Column("id", IdType, primary_key=True, autoincrement=True),
        sa.Column("node_id", IdType, nullable=False),
        sa.Column("gap_from", UTCDateTime(), nullable=False),
        sa.Column("gap_to", UTCDateTime(), nullable=False),
        sa.Column("dropped_writes", sa.Integer, nullable=False),
        sa.Column("reason", sa.Text, nullable=False, server_default=""),
        sa.PrimaryKeyConstraint("id", name="pk_history_gaps"),
        sa.ForeignKeyConstraint(["node_id"], ["nodes.id"], ondelete="CASCADE",
                                name="fk_history_gaps_node_id_nodes"),
    )
    op.create_index("ix_history_gaps_node_from", "history_gaps", ["node_id", "gap_from"])


def downgrade() -> None:
    for table in ("history_gaps", "node_summaries", "anomaly_intervals",
                  "assignment_intervals", "nodes"):
        op.drop_table(table)
