"""What both history stores share, without SQLAlchemy: the write path's logic, the rows it
writes, the schema's constants and the classification of database errors.

Two stores implement the write path (docs/history.md, "Two write paths"): the SQLAlchemy
store (:mod:`exporter.history.store`; PostgreSQL, and every command) and the embedded one
(:mod:`exporter.history.embedded`; ``serve`` on SQLite, stdlib ``sqlite3`` only, because
importing SQLAlchemy costs every node agent of a fleet some 13 MiB). Each supplies its
statements by name; :class:`WritePath` runs them, so the rows, their order and the
idempotence checks are written once."""

from __future__ import annotations

import sqlite3
import threading
from abc import ABC, abstractmethod
from collections.abc import Sequence
from contextlib import AbstractContextManager
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, Generic, TypeVar

from exporter.history.changes import (
    AnomalyKey,
    AssignmentKey,
    AssignmentRow,
    ChangeSet,
    DeviceKey,
    DeviceRow,
    Diff,
    Gap,
    anomaly_subject,
    diff_states,
)
from exporter.history.fleetplan import fleet_additions
from exporter.history.timeutil import utc

# The newest migration. A store already there is opened without loading Alembic at all
# (about 10 MiB of a node agent's memory); a test keeps this equal to Alembic's own head.
HEAD_REVISION = "0005"
VERSION_TABLE = "podres_alembic_version"

SUMMARY_POOLS = ("reserved", "node_shared", "node_exclusive", "pod_exclusive", "pod_shared",
                 "pod_idle")
SUMMARY_ASSIGNMENTS = ("node_exclusive", "pod_exclusive", "pod_shared", "node_shared")
SUMMARY_COLUMNS = ("online_cpus", *[f"cpus_{p}" for p in SUMMARY_POOLS],
                   *[f"containers_{a}" for a in SUMMARY_ASSIGNMENTS], "pods",
                   "reclaimed_cpus", "reclaimable_cpus", "anomalies")

# Columns each insert of the write path gives, in the order of the rows built below.
ASSIGNMENT_COLUMNS = ("node_id", "pod_uid", "namespace", "pod", "container", "sidecar",
                      "assignment", "memory_assignment", "cpuset", "cpu_count",
                      "memory_bytes", "numa_nodes", "valid_from", "valid_to")
# An open interval as :class:`AssignmentRow` holds it (the full reconcile reads these).
OPEN_ASSIGNMENT_COLUMNS: tuple[str, ...] = AssignmentRow._fields
ANOMALY_COLUMNS = ("node_id", "kind", "namespace", "pod", "container", "subject", "detail",
                   "first_seen", "last_seen", "resolved_at")
OPEN_ANOMALY_COLUMNS = ("kind", "namespace", "pod", "container", "detail")
DEVICE_COLUMNS = ("node_id", "namespace", "pod", "container", "resource", "device_ids",
                  "numa_nodes", "valid_from", "valid_to")
OPEN_DEVICE_COLUMNS: tuple[str, ...] = DeviceRow._fields
GAP_COLUMNS = ("node_id", "gap_from", "gap_to", "dropped_writes", "reason")
SUMMARY_ROW_COLUMNS = ("node_id", "at", "at_epoch", *SUMMARY_COLUMNS)
HOURLY_COLUMNS = ("node_id", "hour_epoch", "hour", "samples",
                  *[f"sum_{c}" for c in SUMMARY_COLUMNS])
FLEET_SUM_COLUMNS = ("nodes", "cpus_pod_shared_nano", "cpus_pod_exclusive_nano")
PLACEMENT_COLUMNS = ("node_id", "digest", "recorded_at", "topology", "kubelet_config",
                     "free_cpus", "free_memory")


class MigrationUnreachable(Exception):
    """The database did not answer a migration; migrate again on first use."""


def describe_error(exc: BaseException) -> str:
    """One line for a log field or a message: the driver's error, not SQLAlchemy's
    wrapping of it (which adds the statement and a link)."""
    reason = str(getattr(exc, "orig", None) or exc).strip().splitlines()
    return reason[0] if reason else type(exc).__name__


def _sqlalchemy_error(exc: BaseException, name: str) -> bool:
    """Whether ``exc`` is SQLAlchemy's ``name`` error, without importing SQLAlchemy (the
    embedded write path never loads it; an error of its class means it is loaded)."""
    return any(cls.__name__ == name and cls.__module__ == "sqlalchemy.exc"
               for cls in type(exc).__mro__)


def is_transient(exc: BaseException) -> bool:
    """Errors worth retrying as they are: connection loss, locks, timeouts. SQLite's
    OperationalError (locked, busy, disk I/O) is what SQLAlchemy wraps in its own."""
    if isinstance(exc, sqlite3.OperationalError) or _sqlalchemy_error(exc, "OperationalError"):
        return True
    if _sqlalchemy_error(exc, "DBAPIError") and getattr(exc, "connection_invalidated", False):
        return True
    return isinstance(exc, OSError | TimeoutError)


def is_database_error(exc: BaseException) -> bool:
    """An error of the database (or of reaching it), as opposed to a bug."""
    return isinstance(exc, sqlite3.Error) or _sqlalchemy_error(exc, "SQLAlchemyError")


@dataclass(frozen=True, slots=True)
class PruneResult:
    assignments: int
    anomalies: int
    summaries: int
    gaps: int

    def to_json(self) -> dict[str, int]:
        return {"assignments": self.assignments, "anomalies": self.anomalies,
                "summaries": self.summaries, "gaps": self.gaps}


# -- rows --------------------------------------------------------------------------------

def gap_row(node_id: int, gap: Gap) -> dict[str, Any]:
    return {"node_id": node_id, "gap_from": gap.gap_from, "gap_to": gap.gap_to,
            "dropped_writes": gap.dropped_writes, "reason": gap.reason}


def summary_row(node_id: int, at: datetime, epoch: int, summary: dict[str, int]
                ) -> dict[str, Any]:
    return {"node_id": node_id, "at": at, "at_epoch": epoch, **summary}


def hourly_row(node_id: int, epoch: int, summary: dict[str, int]) -> dict[str, Any]:
    """One sample of the hourly roll-up (added to the hour's row when there is one)."""
    hour_epoch = epoch - epoch % 3600
    return {"node_id": node_id, "hour_epoch": hour_epoch,
            "hour": datetime.fromtimestamp(hour_epoch, UTC), "samples": 1,
            **{f"sum_{c}": int(summary.get(c, 0)) for c in SUMMARY_COLUMNS}}


def assignment_rows(node_id: int, rows: list[AssignmentRow], at: datetime
                    ) -> list[dict[str, Any]]:
    return [{"node_id": node_id, "pod_uid": r.pod_uid, "namespace": r.namespace,
             "pod": r.pod, "container": r.container, "sidecar": r.sidecar,
             "assignment": r.assignment, "memory_assignment": r.memory_assignment,
             "cpuset": r.cpuset, "cpu_count": r.cpu_count, "memory_bytes": r.memory_bytes,
             "numa_nodes": r.numa_nodes, "valid_from": at, "valid_to": None} for r in rows]


def device_rows(node_id: int, rows: list[DeviceRow], at: datetime) -> list[dict[str, Any]]:
    return [{"node_id": node_id, **r._asdict(), "valid_from": at, "valid_to": None}
            for r in rows]


def anomaly_rows(node_id: int, keys: list[AnomalyKey], at: datetime) -> list[dict[str, Any]]:
    return [{"node_id": node_id, "kind": k, "namespace": ns, "pod": pod, "container": c,
             "subject": anomaly_subject(ns, pod, c), "detail": d, "first_seen": at,
             "last_seen": at, "resolved_at": None} for k, ns, pod, c, d in keys]


# -- the write path ----------------------------------------------------------------------

Conn = TypeVar("Conn")


class WritePath(ABC, Generic[Conn]):
    """The write path of a store: ``write`` and ``prune`` as :class:`HistoryWriter` calls
    them, over the store's statements, each run by name with :meth:`_run`:

    ``node_insert``, ``node_by_name``, ``node_for_update``, ``node_update``, ``gap_insert``,
    ``summary_insert`` (returns the id when inserted), ``rollup_upsert``,
    ``anomalies_seen``, ``open_assignments`` and ``open_anomalies`` (columns as
    ``OPEN_*_COLUMNS``), ``assignment_close``, ``assignment_insert``, ``anomaly_resolve``,
    ``anomaly_insert``, ``fleet_raw``, ``fleet_hourly``, ``fleet_add``,
    ``placement_upsert``, ``open_devices`` (columns as ``OPEN_DEVICE_COLUMNS``),
    ``device_close``, ``device_insert``. Parameters named ``b_*`` are the statements'
    own; the others are columns. Times are aware datetimes; each store binds them as its
    schema stores them."""

    def __init__(self) -> None:
        self._node_ids: dict[str, int] = {}
        self._lock = threading.Lock()

    @abstractmethod
    def write_transaction(self) -> AbstractContextManager[Conn]:
        """A transaction holding the database's write lock from its start."""

    @abstractmethod
    def _run(self, conn: Conn, name: str, params: Any) -> list[Any]:
        """Execute statement ``name`` with ``params`` (a list: once per element); returns
        the rows it returns (none for a list)."""

    @abstractmethod
    def _prune(self, conn: Conn, node_id: int | None, before: datetime) -> PruneResult:
        """Delete what ended before ``before`` (of ``node_id``, or of all nodes)."""

    def _time(self, value: Any) -> datetime:
        """A time as the driver returns it."""
        assert isinstance(value, datetime)
        return value

    def _node_id(self, conn: Conn, name: str, at: datetime) -> int:
        cached = self._node_ids.get(name)
        if cached is not None:
            return cached
        self._run(conn, "node_insert", {"name": name, "first_seen": at, "last_seen": at})
        return int(self._run(conn, "node_by_name", {"b_name": name})[0][0])

    def write(self, node: str, writer_id: str, changesets: Sequence[ChangeSet]) -> int:
        """Apply change-sets in order, in one transaction; change-sets this writer already
        applied (a retry after a lost commit acknowledgement) are skipped. Returns the
        number of rows written."""
        if not changesets:
            return 0
        rows = 0
        with self.write_transaction() as conn:
            node_id = self._node_id(conn, node, changesets[0].at)
            ((last_writer, last_seq, last_seen, online),) = self._run(
                conn, "node_for_update", {"b_node": node_id})
            last_seen = self._time(last_seen)
            applied = 0
            summaries: list[tuple[int, dict[str, int]]] = []  # inserted: for the fleet
            for cs in changesets:
                if last_writer == writer_id and cs.seq <= last_seq:
                    continue
                rows += self._apply(conn, node_id, cs, summaries)
                applied = cs.seq
                last_seen = max(last_seen, cs.at)
                if cs.state is not None:
                    online = cs.state.online_cpus
                elif cs.summary is not None:
                    online = cs.summary.get("online_cpus", online)
            if applied:
                self._run(conn, "node_update", {
                    "b_node": node_id, "b_writer": writer_id, "b_seq": applied,
                    "b_last": last_seen, "b_online": online})
            # Last, so that the shared fleet rows stay locked for the shortest time.
            if summaries:
                self._run(conn, "fleet_add", fleet_additions(summaries, lambda name, lo, hi:
                          self._run(conn, name, {"b_node": node_id, "b_lo": lo, "b_hi": hi})))
        # Remembered once committed: a rolled-back first write takes the node's row with it.
        with self._lock:
            self._node_ids[node] = node_id
        return rows

    def _apply(self, conn: Conn, node_id: int, cs: ChangeSet,
               summaries: list[tuple[int, dict[str, int]]]) -> int:
        rows = 0
        if cs.gap is not None:
            self._run(conn, "gap_insert", gap_row(node_id, cs.gap))
            rows += 1
        diff = self._full_diff(conn, node_id, cs) if cs.state is not None else cs.diff
        if diff:
            rows += self._apply_diff(conn, node_id, diff, cs.at, cs.prev_at)
        if cs.summary is not None:
            # A restarted exporter may repeat the last summary's time: keep the first.
            epoch = int(cs.at.timestamp())
            if self._run(conn, "summary_insert", summary_row(node_id, cs.at, epoch, cs.summary)):
                self._run(conn, "rollup_upsert", hourly_row(node_id, epoch, cs.summary))
                summaries.append((epoch, cs.summary))
            self._run(conn, "anomalies_seen", {"b_node": node_id, "b_at": cs.at})
            rows += 1
        if cs.placement is not None:
            # Replaced only when the digest differs: a restarted writer's first state,
            # unchanged, keeps the row (and its time) as it was.
            self._run(conn, "placement_upsert", {"node_id": node_id, "recorded_at": cs.at,
                                                 **cs.placement.values()})
            rows += 1
        return rows

    def _full_diff(self, conn: Conn, node_id: int, cs: ChangeSet) -> Diff:
        assert cs.state is not None
        node = {"b_node": node_id}
        old: dict[AssignmentKey, AssignmentRow] = {}
        for (namespace, pod, container, uid, sidecar, assignment, memory, cpuset, count,
             memory_bytes, numa) in self._run(conn, "open_assignments", node):
            old[(namespace, pod, container)] = AssignmentRow(
                namespace, pod, container, uid, bool(sidecar), assignment, memory, cpuset,
                count, memory_bytes, numa)
        old_anomalies: set[AnomalyKey] = {
            (k, ns, pod, c, d) for k, ns, pod, c, d in self._run(conn, "open_anomalies", node)}
        devices: dict[DeviceKey, DeviceRow] = {
            (ns, pod, c, r): DeviceRow(ns, pod, c, r, ids, numa)
            for ns, pod, c, r, ids, numa in self._run(conn, "open_devices", node)}
        return diff_states(old, old_anomalies, cs.state, devices)

    def _apply_diff(self, conn: Conn, node_id: int, diff: Diff, at: datetime,
                    prev_at: datetime) -> int:
        if diff.close:
            self._run(conn, "assignment_close", [
                {"b_node": node_id, "b_ns": ns, "b_pod": pod, "b_container": c, "b_to": at}
                for ns, pod, c in diff.close])
        if diff.open:
            self._run(conn, "assignment_insert", assignment_rows(node_id, diff.open, at))
        if diff.resolve:
            self._run(conn, "anomaly_resolve", [
                {"b_node": node_id, "b_kind": k, "b_ns": ns, "b_pod": pod,
                 "b_container": c, "b_detail": d, "b_at": at, "b_last": min(prev_at, at)}
                for k, ns, pod, c, d in diff.resolve])
        if diff.raise_:
            self._run(conn, "anomaly_insert", anomaly_rows(node_id, diff.raise_, at))
        if diff.close_devices:
            self._run(conn, "device_close", [
                {"b_node": node_id, "b_ns": ns, "b_pod": pod, "b_container": c,
                 "b_resource": r, "b_to": at}
                for ns, pod, c, r in diff.close_devices])
        if diff.open_devices:
            self._run(conn, "device_insert", device_rows(node_id, diff.open_devices, at))
        return diff.rows

    def prune(self, before: datetime, node: str | None = None) -> PruneResult:
        """Delete closed intervals, resolved anomalies, summaries and gaps that ended before
        ``before`` (of one node, or of all)."""
        before = utc(before)
        with self.write_transaction() as conn:
            node_id: int | None = None
            if node is not None:
                found = self._run(conn, "node_by_name", {"b_name": node})
                if not found:
                    return PruneResult(0, 0, 0, 0)
                node_id = int(found[0][0])
            return self._prune(conn, node_id, before)
