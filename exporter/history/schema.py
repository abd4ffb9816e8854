"""The history schema (SQLAlchemy Core). Migrations under ``migrations/`` create exactly this;
a test compares the migrated database against it on SQLite and PostgreSQL."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from sqlalchemy import (
    BigInteger,
    Boolean,
    Column,
    DateTime,
    Dialect,
    ForeignKey,
    Index,
    Integer,
    MetaData,
    String,
    Table,
    Text,
    text,
)
from sqlalchemy.types import TypeDecorator

from exporter.history.common import (
    SUMMARY_ASSIGNMENTS,
    SUMMARY_COLUMNS,
    SUMMARY_POOLS,
    VERSION_TABLE,
)
from exporter.history.fleetplan import SERIES_STEPS

# Re-exported: the schema's constants, declared where the SQLAlchemy-free write path can
# read them too.
__all__ = [
    "SERIES_STEPS",
    "SUMMARY_ASSIGNMENTS",
    "SUMMARY_COLUMNS",
    "SUMMARY_POOLS",
    "VERSION_TABLE",
    "anomaly_intervals",
    "assignment_intervals",
    "declare_backend",
    "device_intervals",
    "fleet_summaries",
    "history_gaps",
    "metadata",
    "node_placement",
    "node_summaries",
    "node_summaries_hourly",
    "nodes",
]

# Naming convention so that constraint names are the same on every backend.
metadata = MetaData(naming_convention={
    "ix": "ix_%(table_name)s_%(column_0_N_name)s",
    "uq": "uq_%(table_name)s_%(column_0_N_name)s",
    "fk": "fk_%(table_name)s_%(column_0_name)s_%(referred_table_name)s",
    "pk": "pk_%(table_name)s",
})


class UTCDateTime(TypeDecorator[datetime]):
    """``timestamptz`` on PostgreSQL (for Grafana's ``$__timeFilter``); naive UTC text on
    SQLite (fixed width, so it sorts). Values are always aware UTC datetimes in Python."""

    impl = DateTime(timezone=True)
    cache_ok = True

    def process_bind_param(self, value: datetime | None, dialect: Dialect) -> datetime | None:
        if value is None:
            return None
        value = value.replace(tzinfo=UTC) if value.tzinfo is None else value.astimezone(UTC)
        if dialect.name == "sqlite":
            return value.replace(tzinfo=None)
        return value

    def process_result_value(self, value: Any, dialect: Dialect) -> datetime | None:
        if value is None:
            return None
        assert isinstance(value, datetime)
        return value.replace(tzinfo=UTC) if value.tzinfo is None else value.astimezone(UTC)


# On SQLite an INTEGER PRIMARY KEY must be exactly "INTEGER" to be the rowid alias.
IdType = BigInteger().with_variant(Integer(), "sqlite")

nodes = Table(
    "nodes", metadata,
    Column("id", IdType, primary_key=True, autoincrement=True),
    Column("name", String(253), nullable=False, unique=True),
    Column("first_seen", UTCDateTime(), nullable=False),
    Column("last_seen", UTCDateTime(), nullable=False),
    Column("online_cpus", Integer, nullable=True),
    # Idempotency of retried batches: the writer that last wrote and its sequence number.
    Column("writer_id", String(64), nullable=False, server_default=""),
    Column("writer_seq", BigInteger, nullable=False, server_default=text("0")),
)

assignment_intervals = Table(
    "assignment_intervals", metadata,
    Column("id", IdType, primary_key=True, autoincrement=True),
    Column("node_id", IdType, ForeignKey("nodes.id", ondelete="CASCADE"), nullable=False),
    Column("pod_uid", String(64), nullable=False, server_default=""),
    Column("namespace", String(253), nullable=False),
    Column("pod", String(253), nullable=False),
    Column("container", String(253), nullable=False),
    Column("sidecar", Boolean, nullable=False, server_default=text("false")),
    Column("assignment", String(16), nullable=False),
    Column("memory_assignment", String(16), nullable=False),
    Column("cpuset", Text, nullable=False),
    Column("cpu_count", Integer, nullable=False),
    Column("memory_bytes", BigInteger, nullable=False),
    Column("numa_nodes", String(255), nullable=False, server_default=""),
    Column("valid_from", UTCDateTime(), nullable=False),
    Column("valid_to", UTCDateTime(), nullable=True),
    # At most one open interval per container of a node: duplicates are impossible. Its
    # condition is declared per backend by declare_backend().
    Index("uq_assignment_intervals_open", "node_id", "namespace", "pod", "container",
          unique=True),
    Index("ix_assignment_intervals_node_from", "node_id", "valid_from"),
    Index("ix_assignment_intervals_node_to", "node_id", "valid_to"),
    Index("ix_assignment_intervals_ns_pod", "namespace", "pod"),
)

# The devices of one resource a container held, and when (docs/history.md#devices); kept
# like assignment_intervals, on change only.
device_intervals = Table(
    "device_intervals", metadata,
    Column("id", IdType, primary_key=True, autoincrement=True),
    Column("node_id", IdType, ForeignKey("nodes.id", ondelete="CASCADE"), nullable=False),
    Column("namespace", String(253), nullable=False),
    Column("pod", String(253), nullable=False),
    Column("container", String(253), nullable=False),
    Column("resource", String(253), nullable=False),
    Column("device_ids", Text, nullable=False),
    Column("numa_nodes", String(255), nullable=False, server_default=""),
    Column("valid_from", UTCDateTime(), nullable=False),
    Column("valid_to", UTCDateTime(), nullable=True),
    Index("uq_device_intervals_open", "node_id", "namespace", "pod", "container", "resource",
          unique=True),
    Index("ix_device_intervals_node_from", "node_id", "valid_from"),
    Index("ix_device_intervals_node_to", "node_id", "valid_to"),
)

anomaly_intervals = Table(
    "anomaly_intervals", metadata,
    Column("id", IdType, primary_key=True, autoincrement=True),
    Column("node_id", IdType, ForeignKey("nodes.id", ondelete="CASCADE"), nullable=False),
    Column("kind", String(64), nullable=False),
    Column("namespace", String(253), nullable=False, server_default=""),
    Column("pod", String(253), nullable=False, server_default=""),
    Column("container", String(253), nullable=False, server_default=""),
    Column("subject", Text, nullable=False, server_default=""),
    Column("detail", Text, nullable=False, server_default=""),
    Column("first_seen", UTCDateTime(), nullable=False),
    Column("last_seen", UTCDateTime(), nullable=False),
    Column("resolved_at", UTCDateTime(), nullable=True),
    Index("ix_anomaly_intervals_node_first", "node_id", "first_seen"),
    Index("ix_anomaly_intervals_node_resolved", "node_id", "resolved_at"),
    Index("ix_anomaly_intervals_kind", "kind"),
)

node_summaries = Table(
    "node_summaries", metadata,
    Column("id", IdType, primary_key=True, autoincrement=True),
    Column("node_id", IdType, ForeignKey("nodes.id", ondelete="CASCADE"), nullable=False),
    Column("at", UTCDateTime(), nullable=False),
    Column("at_epoch", BigInteger, nullable=False),  # unix seconds, for portable bucketing
    Column("online_cpus", Integer, nullable=False),
    Column("cpus_reserved", Integer, nullable=False),
    Column("cpus_node_shared", Integer, nullable=False),
    Column("cpus_node_exclusive", Integer, nullable=False),
    Column("cpus_pod_exclusive", Integer, nullable=False),
    Column("cpus_pod_shared", Integer, nullable=False),
    Column("cpus_pod_idle", Integer, nullable=False),
    Column("containers_node_exclusive", Integer, nullable=False),
    Column("containers_pod_exclusive", Integer, nullable=False),
    Column("containers_pod_shared", Integer, nullable=False),
    Column("containers_node_shared", Integer, nullable=False),
    Column("pods", Integer, nullable=False),
    Column("reclaimed_cpus", Integer, nullable=False),
    Column("reclaimable_cpus", Integer, nullable=False),
    Column("anomalies", Integer, nullable=False),
    Index("uq_node_summaries_node_at", "node_id", "at_epoch", "at", unique=True),
    Index("ix_node_summaries_at_epoch", "at_epoch"),
)

history_gaps = Table(
    "history_gaps", metadata,
    Column("id", IdType, primary_key=True, autoincrement=True),
    Column("node_id", IdType, ForeignKey("nodes.id", ondelete="CASCADE"), nullable=False),
    Column("gap_from", UTCDateTime(), nullable=False),
    Column("gap_to", UTCDateTime(), nullable=False),
    Column("dropped_writes", Integer, nullable=False),
    Column("reason", Text, nullable=False, server_default=""),
    Index("ix_history_gaps_node_from", "node_id", "gap_from"),
)

# Hourly roll-up of node_summaries (sums and sample counts), kept by the writer in the same
# transaction as each summary, so that long-range series read 24 rows a day, not 1440.
node_summaries_hourly = Table(
    "node_summaries_hourly", metadata,
    Column("node_id", IdType, ForeignKey("nodes.id", ondelete="CASCADE"), nullable=False,
           primary_key=True),
    Column("hour_epoch", BigInteger, nullable=False, primary_key=True),
    Column("hour", UTCDateTime(), nullable=False),
    Column("samples", Integer, nullable=False),
    *[Column(f"sum_{c}", BigInteger, nullable=False) for c in SUMMARY_COLUMNS],
    Index("ix_node_summaries_hourly_hour_epoch", "hour_epoch"),
)

# Fleet roll-up (exporter/history/fleet.py): per automatic step and bucket, the nodes with
# summaries in it and the sum over them of each node's average CPUs in billionths, kept by
# every writer in the same transaction as its summaries, so that a fleet-wide series reads
# one row per point instead of one per node and point.
fleet_summaries = Table(
    "fleet_summaries", metadata,
    Column("step", Integer, nullable=False, primary_key=True),
    Column("bucket_epoch", BigInteger, nullable=False, primary_key=True),
    Column("nodes", Integer, nullable=False),
    Column("cpus_pod_shared_nano", BigInteger, nullable=False),
    Column("cpus_pod_exclusive_nano", BigInteger, nullable=False),
)

# Each node's placement state as last recorded (exporter/history/placement.py), replaced
# only when its content digest changes: what ``plan --fleet`` models each node from.
node_placement = Table(
    "node_placement", metadata,
    Column("node_id", IdType, ForeignKey("nodes.id", ondelete="CASCADE"), primary_key=True),
    Column("digest", String(32), nullable=False),
    Column("recorded_at", UTCDateTime(), nullable=False),
    Column("topology", Text, nullable=False),
    Column("kubelet_config", Text, nullable=True),
    Column("free_cpus", Text, nullable=False),
    Column("free_memory", Text, nullable=False),
)


_OPEN_INTERVAL = text("valid_to IS NULL")


def declare_backend(backend: str) -> None:
    """Declare the partial unique index's condition for ``backend`` (``sqlite`` or
    ``postgresql``), as the migrations create it. A backend's index options are declared
    only once a database of that backend is opened: declaring one loads SQLAlchemy's
    dialect for it, and PostgreSQL's is some 2 MiB that an agent on SQLite never needs."""
    for table in (assignment_intervals, device_intervals):
        index = next(i for i in table.indexes if i.name == f"uq_{table.name}_open")
        index.dialect_options[backend]["where"] = _OPEN_INTERVAL
