"""The history store: an SQLAlchemy engine on SQLite (default) or PostgreSQL with the
schema's migrations, the write path used by :class:`HistoryWriter` and the connections the
read queries use. :func:`exporter.history.connect.open_store` opens one.

Everything here is synchronous; async callers run it in a thread (``asyncio.to_thread``)."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
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
from exporter.history.common import (
    HEAD_REVISION,
    OPEN_ANOMALY_COLUMNS,
    OPEN_ASSIGNMENT_COLUMNS,
    OPEN_DEVICE_COLUMNS,
    VERSION_TABLE,
    MigrationUnreachable,
    PruneResult,
    WritePath,
    describe_error,
)
from exporter.history.fleet import FleetStatements, prune_fleet_rollup, rebuild_fleet_rollup
from exporter.history.schema import (
    SUMMARY_COLUMNS,
    anomaly_intervals,
    assignment_intervals,
    device_intervals,
    fleet_summaries,
    history_gaps,
    node_placement,
    node_summaries,
    node_summaries_hourly,
    nodes,
)

MIGRATIONS = Path(__file__).with_name("migrations")
_PG_MIGRATION_LOCK = 0x706F647265730001  # "podres" + 1: pg_advisory_xact_lock key
# Importable from here as before; declared in common.py, which SQLAlchemy does not load.
__all__ = ["HEAD_REVISION", "MIGRATIONS", "HistoryStore", "MigrationUnreachable",
           "PruneResult", "at_filter", "count_rows", "describe_error", "overlap_filter"]


class _WriteStatements(FleetStatements):
    """The write path's statements (named as ``common.WritePath`` runs them), built once
    per store and executed with parameters.

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
        self.open_assignments = select(*[a.c[c] for c in OPEN_ASSIGNMENT_COLUMNS]).where(
            a.c.node_id == bindparam("b_node"), a.c.valid_to.is_(None))
        self.open_anomalies = select(*[n.c[c] for c in OPEN_ANOMALY_COLUMNS]).where(
            n.c.node_id == bindparam("b_node"), n.c.resolved_at.is_(None))
        d = device_intervals
        self.device_close = (
            update(d).where(d.c.node_id == bindparam("b_node"),
                            d.c.namespace == bindparam("b_ns"), d.c.pod == bindparam("b_pod"),
                            d.c.container == bindparam("b_container"),
                            d.c.resource == bindparam("b_resource"), d.c.valid_to.is_(None))
            .values(valid_to=bindparam("b_to")))
        self.device_insert = d.insert()
        self.open_devices = select(*[d.c[c] for c in OPEN_DEVICE_COLUMNS]).where(
            d.c.node_id == bindparam("b_node"), d.c.valid_to.is_(None))
        placement = insert(node_placement)
        self.placement_upsert = placement.on_conflict_do_update(
            index_elements=["node_id"],
            set_={c.name: placement.excluded[c.name] for c in node_placement.columns
                  if c.name != "node_id"},
            where=node_placement.c.digest != placement.excluded.digest)
        super().__init__(insert(fleet_summaries))


def _revision_on(conn: Connection) -> str | None:
    if not inspect(conn).has_table(VERSION_TABLE):
        return None
    value = conn.execute(text(f"SELECT version_num FROM {VERSION_TABLE}")).scalar()
    return str(value) if value is not None else None


class HistoryStore(WritePath[Connection]):
    """A history database. Thread-safe (one engine, pooled connections).

    ``migrator``, when given, brings the schema to the newest revision instead of running
    Alembic in this process (``serve`` migrates in a child process and never loads it)."""

    def __init__(self, engine: Engine, *, readonly: bool = False,
                 migrator: Callable[[], None] | None = None) -> None:
        super().__init__()
        self.engine = engine
        self._migrator = migrator
        self.readonly = readonly
        self.dialect = engine.dialect.name
        self.url = engine.url.render_as_string(hide_password=True)
        self._stmts = _WriteStatements(self.dialect)
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
        """Bring the schema to ``revision`` (default the newest; Alembic, programmatically).

        Exporters of a fleet may start at the same instant on one new database: the whole
        upgrade runs in one transaction that holds the database's migration lock (an
        advisory lock on PostgreSQL, the write lock on SQLite) and reads the stored revision
        only once it holds it, so one process migrates and the others find the schema
        current. Alembic, handed a transaction already begun, runs every step inside it
        (on SQLite it would otherwise commit after each step and let another process in
        between two steps of this one, whose next step then made its tables again)."""
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
            conn.execution_options(podres_write=True)  # SQLite: BEGIN IMMEDIATE
            with conn.begin():
                if self.dialect == "postgresql":
                    # Ends with the transaction.
                    conn.execute(text("SELECT pg_advisory_xact_lock(:k)"),
                                 {"k": _PG_MIGRATION_LOCK})
                if revision == "head" and _revision_on(conn) == HEAD_REVISION:
                    return
                cfg.attributes["connection"] = conn
                command.upgrade(cfg, revision)

    def _stored_revision(self) -> str | None:
        with self.engine.connect() as conn:
            return _revision_on(conn)

    def revision(self) -> str | None:
        from alembic.runtime.migration import MigrationContext

        with self.engine.connect() as conn:
            ctx = MigrationContext.configure(
                conn, opts={"version_table": VERSION_TABLE})
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

    # -- writes (common.WritePath) -----------------------------------------------------

    def _run(self, conn: Connection, name: str, params: Any) -> list[Any]:
        result = conn.execute(getattr(self._stmts, name), params)
        return list(result.all()) if result.returns_rows else []

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

    def _prune(self, conn: Connection, node_id: int | None, before: datetime
               ) -> PruneResult:
        def mine(table: Any) -> Any:
            return table.c.node_id == node_id if node_id is not None else True

        a, n, s, g = assignment_intervals, anomaly_intervals, node_summaries, history_gaps
        ra = conn.execute(delete(a).where(mine(a), a.c.valid_to.is_not(None),
                                          a.c.valid_to < before)).rowcount
        d = device_intervals
        conn.execute(delete(d).where(mine(d), d.c.valid_to.is_not(None), d.c.valid_to < before))
        rn = conn.execute(delete(n).where(mine(n), n.c.resolved_at.is_not(None),
                                          n.c.resolved_at < before)).rowcount
        cutoff = int(before.timestamp())
        rs = conn.execute(delete(s).where(mine(s), s.c.at_epoch < cutoff)).rowcount
        h = node_summaries_hourly
        conn.execute(delete(h).where(mine(h), h.c.hour_epoch + 3600 <= cutoff))
        prune_fleet_rollup(conn, cutoff)
        rg = conn.execute(delete(g).where(mine(g), g.c.gap_to < before)).rowcount
        return PruneResult(ra, rn, rs, rg)

    # -- reads -------------------------------------------------------------------------

    def has_history(self) -> bool:
        """Whether an exporter ever created the schema here (without migrating anything)."""
        with self.engine.connect() as conn:
            return inspect(conn).has_table(VERSION_TABLE)


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
