"""The history store: an SQLAlchemy engine on SQLite (default) or PostgreSQL with the
schema's migrations, the write path used by :class:`HistoryWriter` and the connections the
read queries use. :func:`exporter.history.connect.open_store` opens one.

Everything here is synchronous; async callers run it in a thread (``asyncio.to_thread``)."""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from sqlalchemy import (
    Connection,
    Engine,
    and_,
    bindparam,
    delete,
    func,
    inspect,
    or_,
    select,
    text,
    update,
)

from exporter.errors import UserError
from exporter.history.changes import (
    AnomalyKey,
    AssignmentKey,
    AssignmentRow,
    ChangeSet,
    Diff,
    anomaly_subject,
    diff_states,
)
from exporter.history.fleet import FleetRollup, prune_fleet_rollup, rebuild_fleet_rollup
from exporter.history.schema import (
    SUMMARY_COLUMNS,
    anomaly_intervals,
    assignment_intervals,
    fleet_summaries,
    history_gaps,
    node_summaries,
    node_summaries_hourly,
    nodes,
)
from exporter.history.timeutil import utc

MIGRATIONS = Path(__file__).with_name("migrations")
# The newest migration. A store already there is opened without loading Alembic at all
# (about 10 MiB of a node agent's memory); a test keeps this equal to Alembic's own head.
HEAD_REVISION = "0003"
_PG_MIGRATION_LOCK = 0x706F647265730001  # "podres" + 1: pg_advisory_xact_lock key


class MigrationUnreachable(Exception):
    """The database did not answer a migration; migrate again on first use."""


def describe_error(exc: BaseException) -> str:
    """One line for a log field or a message: the driver's error, not SQLAlchemy's
    wrapping of it (which adds the statement and a link)."""
    reason = str(getattr(exc, "orig", None) or exc).strip().splitlines()
    return reason[0] if reason else type(exc).__name__


@dataclass(frozen=True, slots=True)
class PruneResult:
    assignments: int
    anomalies: int
    summaries: int
    gaps: int

    def to_json(self) -> dict[str, int]:
        return {"assignments": self.assignments, "anomalies": self.anomalies,
                "summaries": self.summaries, "gaps": self.gaps}


class _WriteStatements:
    """The write path's statements, built once per store and executed with parameters.

    Building a statement per write made cyclic garbage on every change-set (the roll-up's
    ``excluded`` alias alone proxies 19 columns), which only the cyclic collector frees; at
    a change every few seconds that kept the resident set of ``serve`` creeping up between
    collections (``python -m bench.soak --debug``)."""

    def __init__(self, dialect: str) -> None:
        def insert(table: Any) -> Any:  # with on_conflict_* for this backend
            if dialect == "postgresql":
                from sqlalchemy.dialects.postgresql import insert as pg_insert
                return pg_insert(table)
            from sqlalchemy.dialects.sqlite import insert as sqlite_insert
            return sqlite_insert(table)

        a, n, h = assignment_intervals, anomaly_intervals, node_summaries_hourly
        self.node_insert = insert(nodes).on_conflict_do_nothing(index_elements=["name"])
        self.node_by_name = select(nodes.c.id).where(nodes.c.name == bindparam("b_name"))
        self.node_for_update = (
            select(nodes.c.writer_id, nodes.c.writer_seq, nodes.c.last_seen,
                   nodes.c.online_cpus)
            .where(nodes.c.id == bindparam("b_node")).with_for_update())
        self.node_update = update(nodes).where(nodes.c.id == bindparam("b_node")).values(
            writer_id=bindparam("b_writer"), writer_seq=bindparam("b_seq"),
            last_seen=bindparam("b_last"), online_cpus=bindparam("b_online"))
        self.gap_insert = history_gaps.insert()
        # The returned id tells whether the row was inserted. The rowcount does not: on
        # PostgreSQL the insert returns the new id anyway, and psycopg reports -1 (true)
        # when the conflict inserted nothing, which counted a repeated summary twice.
        self.summary_insert = (insert(node_summaries).on_conflict_do_nothing()
                               .returning(node_summaries.c.id))
        rollup = insert(h)
        sums = [f"sum_{c}" for c in SUMMARY_COLUMNS]
        self.rollup_upsert = rollup.on_conflict_do_update(
            index_elements=["node_id", "hour_epoch"],
            set_={"samples": h.c.samples + 1, **{k: h.c[k] + rollup.excluded[k] for k in sums}})
        self.anomalies_seen = update(n).where(
            n.c.node_id == bindparam("b_node"), n.c.resolved_at.is_(None),
            n.c.last_seen < bindparam("b_at")).values(last_seen=bindparam("b_at"))
        self.assignment_close = (
            update(a).where(a.c.node_id == bindparam("b_node"),
                            a.c.namespace == bindparam("b_ns"), a.c.pod == bindparam("b_pod"),
                            a.c.container == bindparam("b_container"), a.c.valid_to.is_(None))
            .values(valid_to=bindparam("b_to")))
        self.assignment_insert = a.insert()
        self.anomaly_resolve = (
            update(n).where(n.c.node_id == bindparam("b_node"), n.c.kind == bindparam("b_kind"),
                            n.c.namespace == bindparam("b_ns"), n.c.pod == bindparam("b_pod"),
                            n.c.container == bindparam("b_container"),
                            n.c.detail == bindparam("b_detail"), n.c.resolved_at.is_(None))
            .values(resolved_at=bindparam("b_at"), last_seen=bindparam("b_last")))
        self.anomaly_insert = n.insert()
        self.fleet = FleetRollup(insert(fleet_summaries))


class HistoryStore:
    """A history database. Thread-safe (one engine, pooled connections).

    ``migrator``, when given, brings the schema to the newest revision instead of running
    Alembic in this process (``serve`` migrates in a child process and never loads it)."""

    def __init__(self, engine: Engine, *, readonly: bool = False,
                 migrator: Callable[[], None] | None = None) -> None:
        self.engine = engine
        self._migrator = migrator
        self.readonly = readonly
        self.dialect = engine.dialect.name
        self.url = engine.url.render_as_string(hide_password=True)
        self._node_ids: dict[str, int] = {}
        self._stmts = _WriteStatements(self.dialect)
        self._lock = threading.Lock()
        # Set when the database was unreachable at open: migrate before the first use.
        self.migration_pending = False

    def ensure_migrated(self) -> None:
        if not self.migration_pending:
            return
        with self._lock:
            if self.migration_pending:
                self.migrate()
                self.migration_pending = False

    # -- lifecycle ---------------------------------------------------------------------

    def migrate(self, revision: str = "head") -> None:
        """Bring the schema to ``revision`` (default the newest; Alembic, programmatically)."""
        if revision == "head" and self._stored_revision() == HEAD_REVISION:
            return
        if self._migrator is not None and revision == "head":
            self._migrator()
            return
        from alembic import command
        from alembic.config import Config

        cfg = Config()
        cfg.set_main_option("script_location", str(MIGRATIONS))
        with self.engine.connect() as conn:
            conn.execution_options(podres_write=True)
            if self.dialect == "postgresql":
                # Many exporters of a fleet may start at once: one migrates, the others wait
                # and then find the schema current. The lock ends with the transaction.
                with conn.begin():
                    conn.execute(text("SELECT pg_advisory_xact_lock(:k)"),
                                 {"k": _PG_MIGRATION_LOCK})
                    cfg.attributes["connection"] = conn
                    command.upgrade(cfg, revision)
            else:
                cfg.attributes["connection"] = conn
                command.upgrade(cfg, revision)
                conn.commit()

    def _stored_revision(self) -> str | None:
        with self.engine.connect() as conn:
            if not inspect(conn).has_table("podres_alembic_version"):
                return None
            value = conn.execute(text("SELECT version_num FROM podres_alembic_version")).scalar()
            return str(value) if value is not None else None

    def revision(self) -> str | None:
        from alembic.runtime.migration import MigrationContext

        with self.engine.connect() as conn:
            ctx = MigrationContext.configure(
                conn, opts={"version_table": "podres_alembic_version"})
            return ctx.get_current_revision()

    def close(self) -> None:
        self.engine.dispose()

    # -- connections -------------------------------------------------------------------

    @contextmanager
    def write_transaction(self) -> Iterator[Connection]:
        if self.readonly:
            raise UserError("the history store was opened read-only")
        self.ensure_migrated()
        with self.engine.connect() as conn:
            conn.execution_options(podres_write=True)
            with conn.begin():
                yield conn

    @contextmanager
    def read(self) -> Iterator[Connection]:
        self.ensure_migrated()
        with self.engine.connect() as conn, conn.begin():
            yield conn

    # -- writes ------------------------------------------------------------------------

    def _node_id(self, conn: Connection, name: str, at: datetime) -> int:
        cached = self._node_ids.get(name)
        if cached is not None:
            return cached
        conn.execute(self._stmts.node_insert, {"name": name, "first_seen": at, "last_seen": at})
        node_id = conn.execute(self._stmts.node_by_name, {"b_name": name}).scalar_one()
        with self._lock:
            self._node_ids[name] = int(node_id)
        return int(node_id)

    def write(self, node: str, writer_id: str, changesets: Sequence[ChangeSet]) -> int:
        """Apply change-sets in order, in one transaction; change-sets this writer already
        applied (a retry after a lost commit acknowledgement) are skipped. Returns the
        number of rows written."""
        if not changesets:
            return 0
        rows = 0
        with self.write_transaction() as conn:
            node_id = self._node_id(conn, node, changesets[0].at)
            current = conn.execute(self._stmts.node_for_update, {"b_node": node_id}).one()
            last_seen = current.last_seen
            online = current.online_cpus
            applied = 0
            summaries: list[tuple[int, dict[str, int]]] = []  # inserted: for the fleet
            for cs in changesets:
                if current.writer_id == writer_id and cs.seq <= current.writer_seq:
                    continue
                rows += self._apply(conn, node_id, cs, summaries)
                applied = cs.seq
                last_seen = max(last_seen, cs.at)
                if cs.state is not None:
                    online = cs.state.online_cpus
                elif cs.summary is not None:
                    online = cs.summary.get("online_cpus", online)
            if applied:
                conn.execute(self._stmts.node_update, {
                    "b_node": node_id, "b_writer": writer_id, "b_seq": applied,
                    "b_last": last_seen, "b_online": online})
            # Last, so that the shared fleet rows stay locked for the shortest time.
            self._stmts.fleet.add_samples(conn, node_id, summaries)
        return rows

    def _apply(self, conn: Connection, node_id: int, cs: ChangeSet,
               summaries: list[tuple[int, dict[str, int]]]) -> int:
        rows = 0
        if cs.gap is not None:
            conn.execute(self._stmts.gap_insert, {
                "node_id": node_id, "gap_from": cs.gap.gap_from, "gap_to": cs.gap.gap_to,
                "dropped_writes": cs.gap.dropped_writes, "reason": cs.gap.reason})
            rows += 1
        diff = self._full_diff(conn, node_id, cs) if cs.state is not None else cs.diff
        if diff:
            assert diff is not None
            rows += self._apply_diff(conn, node_id, diff, cs.at, cs.prev_at)
        if cs.summary is not None:
            # A restarted exporter may repeat the last summary's time: keep the first.
            epoch = int(cs.at.timestamp())
            inserted = conn.execute(self._stmts.summary_insert, {
                "node_id": node_id, "at": cs.at, "at_epoch": epoch, **cs.summary}).first()
            if inserted is not None:
                self._roll_up(conn, node_id, epoch, cs.summary)
                summaries.append((epoch, cs.summary))
            conn.execute(self._stmts.anomalies_seen, {"b_node": node_id, "b_at": cs.at})
            rows += 1
        return rows

    def _roll_up(self, conn: Connection, node_id: int, epoch: int,
                 summary: dict[str, int]) -> None:
        hour_epoch = epoch - epoch % 3600
        conn.execute(self._stmts.rollup_upsert, {
            "node_id": node_id, "hour_epoch": hour_epoch,
            "hour": datetime.fromtimestamp(hour_epoch, UTC), "samples": 1,
            **{f"sum_{c}": int(summary.get(c, 0)) for c in SUMMARY_COLUMNS}})

    def rebuild_rollup(self, node: str | None = None) -> int:
        """Recompute the hourly roll-up (of ``node``, or of all) and the fleet roll-up
        from the raw summaries (after a bulk import, a manual repair or deleting a node);
        returns the number of hours written."""
        s, h = node_summaries, node_summaries_hourly
        hour = (s.c.at_epoch - s.c.at_epoch % 3600).label("hour_epoch")
        with self.write_transaction() as conn:
            node_ids: Any = None
            if node is not None:
                node_ids = [conn.execute(select(nodes.c.id).where(nodes.c.name == node))
                            .scalar_one_or_none()]
            stmt = (select(s.c.node_id, hour, func.count().label("samples"),
                           *[func.sum(s.c[c]).label(f"sum_{c}") for c in SUMMARY_COLUMNS])
                    .group_by(s.c.node_id, hour))
            dele = delete(h)
            if node_ids is not None:
                stmt = stmt.where(s.c.node_id.in_(node_ids))
                dele = dele.where(h.c.node_id.in_(node_ids))
            rows = [dict(r._mapping) for r in conn.execute(stmt)]
            conn.execute(dele)
            for r in rows:
                r["hour_epoch"] = int(r["hour_epoch"])
                r["hour"] = datetime.fromtimestamp(r["hour_epoch"], UTC)
                for c in SUMMARY_COLUMNS:
                    r[f"sum_{c}"] = int(r[f"sum_{c}"] or 0)
            if rows:
                conn.execute(h.insert(), rows)
            rebuild_fleet_rollup(conn)
        return len(rows)

    def _full_diff(self, conn: Connection, node_id: int, cs: ChangeSet) -> Diff:
        assert cs.state is not None
        a = assignment_intervals
        old: dict[AssignmentKey, AssignmentRow] = {}
        for r in conn.execute(select(
                a.c.namespace, a.c.pod, a.c.container, a.c.pod_uid, a.c.sidecar,
                a.c.assignment, a.c.memory_assignment, a.c.cpuset, a.c.cpu_count,
                a.c.memory_bytes, a.c.numa_nodes)
                .where(a.c.node_id == node_id, a.c.valid_to.is_(None))):
            row = AssignmentRow(r.namespace, r.pod, r.container, r.pod_uid, bool(r.sidecar),
                                r.assignment, r.memory_assignment, r.cpuset, r.cpu_count,
                                r.memory_bytes, r.numa_nodes)
            old[row.key] = row
        n = anomaly_intervals
        old_anomalies: set[AnomalyKey] = {
            (r.kind, r.namespace, r.pod, r.container, r.detail)
            for r in conn.execute(select(n.c.kind, n.c.namespace, n.c.pod, n.c.container,
                                         n.c.detail)
                                  .where(n.c.node_id == node_id, n.c.resolved_at.is_(None)))}
        return diff_states(old, old_anomalies, cs.state)

    def _apply_diff(self, conn: Connection, node_id: int, diff: Diff, at: datetime,
                    prev_at: datetime) -> int:
        if diff.close:
            conn.execute(self._stmts.assignment_close, [
                {"b_node": node_id, "b_ns": ns, "b_pod": pod, "b_container": c, "b_to": at}
                for ns, pod, c in diff.close])
        if diff.open:
            conn.execute(self._stmts.assignment_insert, [{
                "node_id": node_id, "pod_uid": r.pod_uid, "namespace": r.namespace,
                "pod": r.pod, "container": r.container, "sidecar": r.sidecar,
                "assignment": r.assignment, "memory_assignment": r.memory_assignment,
                "cpuset": r.cpuset, "cpu_count": r.cpu_count, "memory_bytes": r.memory_bytes,
                "numa_nodes": r.numa_nodes, "valid_from": at, "valid_to": None}
                for r in diff.open])
        if diff.resolve:
            conn.execute(self._stmts.anomaly_resolve, [
                {"b_node": node_id, "b_kind": k, "b_ns": ns, "b_pod": pod,
                 "b_container": c, "b_detail": d, "b_at": at, "b_last": min(prev_at, at)}
                for k, ns, pod, c, d in diff.resolve])
        if diff.raise_:
            conn.execute(self._stmts.anomaly_insert, [{
                "node_id": node_id, "kind": k, "namespace": ns, "pod": pod, "container": c,
                "subject": anomaly_subject(ns, pod, c), "detail": d, "first_seen": at,
                "last_seen": at, "resolved_at": None} for k, ns, pod, c, d in diff.raise_])
        return diff.rows

    def prune(self, before: datetime, node: str | None = None) -> PruneResult:
        """Delete closed intervals, resolved anomalies, summaries and gaps that ended before
        ``before`` (of one node, or of all)."""
        before = utc(before)
        with self.write_transaction() as conn:
            node_filter: Any = True
            if node is not None:
                node_id = conn.execute(select(nodes.c.id).where(nodes.c.name == node)) \
                    .scalar_one_or_none()
                if node_id is None:
                    return PruneResult(0, 0, 0, 0)

                def node_filter_of(table: Any) -> Any:
                    return table.c.node_id == node_id
            else:
                def node_filter_of(table: Any) -> Any:
                    return node_filter

            a, n, s, g = assignment_intervals, anomaly_intervals, node_summaries, history_gaps
            ra = conn.execute(delete(a).where(node_filter_of(a), a.c.valid_to.is_not(None),
                                              a.c.valid_to < before)).rowcount
            rn = conn.execute(delete(n).where(node_filter_of(n), n.c.resolved_at.is_not(None),
                                              n.c.resolved_at < before)).rowcount
            cutoff = int(before.timestamp())
            rs = conn.execute(delete(s).where(node_filter_of(s),
                                              s.c.at_epoch < cutoff)).rowcount
            h = node_summaries_hourly
            conn.execute(delete(h).where(node_filter_of(h), h.c.hour_epoch + 3600 <= cutoff))
            prune_fleet_rollup(conn, cutoff)
            rg = conn.execute(delete(g).where(node_filter_of(g), g.c.gap_to < before)).rowcount
        return PruneResult(ra, rn, rs, rg)

    # -- reads -------------------------------------------------------------------------

    def has_history(self) -> bool:
        """Whether an exporter ever created the schema here (without migrating anything)."""
        with self.engine.connect() as conn:
            return inspect(conn).has_table("podres_alembic_version")


# Small helpers shared by the queries module.
def overlap_filter(valid_from: Any, valid_to: Any, start: datetime | None,
                   end: datetime | None) -> Any:
    """Intervals [valid_from, valid_to) that overlap [start, end)."""
    clauses = []
    if end is not None:
        clauses.append(valid_from < end)
    if start is not None:
        clauses.append(or_(valid_to.is_(None), valid_to > start))
    return and_(True, *clauses)


def at_filter(valid_from: Any, valid_to: Any, at: datetime) -> Any:
    return and_(valid_from <= at, or_(valid_to.is_(None), valid_to > at))


def count_rows(store: HistoryStore) -> dict[str, int]:
    """Rows per table (tests and benchmarks)."""
    out: dict[str, int] = {}
    with store.read() as conn:
        for table in (nodes, assignment_intervals, anomaly_intervals, node_summaries,
                      node_summaries_hourly, fleet_summaries, history_gaps):
            out[table.name] = int(conn.execute(select(func.count()).select_from(table))
                                  .scalar_one())
    return out
