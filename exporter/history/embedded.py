"""The embedded write path: ``serve``'s history on SQLite through the stdlib ``sqlite3``,
without SQLAlchemy (some 13 MiB of every node agent's memory; docs/design.md#history).

:class:`EmbeddedStore` writes exactly the rows the SQLAlchemy store writes (same schema,
same values, same text for times), by the logic both share (``common.WritePath``); only
the statements are its own. The schema is still created and upgraded by the Alembic
migrations, run in a child process (``exporter.history.child``), and the dashboard API
reads through the SQLAlchemy store, opened on its first request."""

from __future__ import annotations

import logging
import sqlite3
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from exporter.errors import UserError
from exporter.history.child import child_migrator
from exporter.history.common import (
    ANOMALY_COLUMNS,
    ASSIGNMENT_COLUMNS,
    DEVICE_COLUMNS,
    FLEET_SUM_COLUMNS,
    GAP_COLUMNS,
    HEAD_REVISION,
    HOURLY_COLUMNS,
    OPEN_ANOMALY_COLUMNS,
    OPEN_ASSIGNMENT_COLUMNS,
    OPEN_DEVICE_COLUMNS,
    PLACEMENT_COLUMNS,
    SUMMARY_COLUMNS,
    SUMMARY_ROW_COLUMNS,
    VERSION_TABLE,
    MigrationUnreachable,
    PruneResult,
    WritePath,
    describe_error,
)
from exporter.history.fleetplan import FLEET_COLUMNS
from exporter.history.location import (
    check_sqlite_path,
    default_history_url,
    plain_sqlite_database,
    sqlite_settings,
)

log = logging.getLogger("podres.history")


def _insert(table: str, columns: tuple[str, ...]) -> str:
    return (f"INSERT INTO {table} ({', '.join(columns)}) "
            f"VALUES ({', '.join(':' + c for c in columns)})")


def _add_on_conflict(key: str, columns: tuple[str, ...]) -> str:
    return (f" ON CONFLICT ({key}) DO UPDATE SET "
            + ", ".join(f"{c} = {c} + excluded.{c}" for c in columns))


_OPEN_ASSIGNMENT = ("node_id = :b_node AND namespace = :b_ns AND pod = :b_pod "
                    "AND container = :b_container AND valid_to IS NULL")
_OPEN_ANOMALY = ("node_id = :b_node AND kind = :b_kind AND namespace = :b_ns AND pod = :b_pod "
                 "AND container = :b_container AND detail = :b_detail AND resolved_at IS NULL")
_OPEN_DEVICE = ("node_id = :b_node AND namespace = :b_ns AND pod = :b_pod "
                "AND container = :b_container AND resource = :b_resource AND valid_to IS NULL")
_FLEET_KEY = ("step", "bucket_epoch")

# The statements of ``common.WritePath``, as the SQLAlchemy store's (store._WriteStatements)
# are on SQLite. ``FOR UPDATE`` has no SQLite form: the transaction holds the write lock.
STATEMENTS: dict[str, str] = {
    "node_insert": _insert("nodes", ("name", "first_seen", "last_seen"))
    + " ON CONFLICT (name) DO NOTHING",
    "node_by_name": "SELECT id FROM nodes WHERE name = :b_name",
    "node_for_update":
        "SELECT writer_id, writer_seq, last_seen, online_cpus FROM nodes WHERE id = :b_node",
    "node_update": "UPDATE nodes SET writer_id = :b_writer, writer_seq = :b_seq, "
                   "last_seen = :b_last, online_cpus = :b_online WHERE id = :b_node",
    "gap_insert": _insert("history_gaps", GAP_COLUMNS),
    "summary_insert": _insert("node_summaries", SUMMARY_ROW_COLUMNS)
    + " ON CONFLICT DO NOTHING RETURNING id",
    "rollup_upsert": _insert("node_summaries_hourly", HOURLY_COLUMNS)
    + _add_on_conflict("node_id, hour_epoch",
                       ("samples", *[f"sum_{c}" for c in SUMMARY_COLUMNS])),
    "anomalies_seen": "UPDATE anomaly_intervals SET last_seen = :b_at WHERE node_id = :b_node "
                      "AND resolved_at IS NULL AND last_seen < :b_at",
    "open_assignments": f"SELECT {', '.join(OPEN_ASSIGNMENT_COLUMNS)} FROM "
                        "assignment_intervals WHERE node_id = :b_node AND valid_to IS NULL",
    "open_anomalies": f"SELECT {', '.join(OPEN_ANOMALY_COLUMNS)} FROM anomaly_intervals "
                      "WHERE node_id = :b_node AND resolved_at IS NULL",
    "assignment_close":
        f"UPDATE assignment_intervals SET valid_to = :b_to WHERE {_OPEN_ASSIGNMENT}",
    "assignment_insert": _insert("assignment_intervals", ASSIGNMENT_COLUMNS),
    "anomaly_resolve": "UPDATE anomaly_intervals SET resolved_at = :b_at, "
                       f"last_seen = :b_last WHERE {_OPEN_ANOMALY}",
    "anomaly_insert": _insert("anomaly_intervals", ANOMALY_COLUMNS),
    "open_devices": f"SELECT {', '.join(OPEN_DEVICE_COLUMNS)} FROM device_intervals "
                    "WHERE node_id = :b_node AND valid_to IS NULL",
    "device_close": f"UPDATE device_intervals SET valid_to = :b_to WHERE {_OPEN_DEVICE}",
    "device_insert": _insert("device_intervals", DEVICE_COLUMNS),
    "fleet_raw": f"SELECT at_epoch, 1, {', '.join(FLEET_COLUMNS)} FROM node_summaries "
                 "WHERE node_id = :b_node AND at_epoch >= :b_lo AND at_epoch < :b_hi",
    "fleet_hourly": "SELECT hour_epoch, samples, "
                    f"{', '.join('sum_' + c for c in FLEET_COLUMNS)} FROM node_summaries_hourly "
                    "WHERE node_id = :b_node AND hour_epoch >= :b_lo AND hour_epoch < :b_hi",
    "fleet_add": _insert("fleet_summaries", (*_FLEET_KEY, *FLEET_SUM_COLUMNS))
    + _add_on_conflict(", ".join(_FLEET_KEY), FLEET_SUM_COLUMNS),
    "placement_upsert": _insert("node_placement", PLACEMENT_COLUMNS)
    + " ON CONFLICT (node_id) DO UPDATE SET "
    + ", ".join(f"{c} = excluded.{c}" for c in PLACEMENT_COLUMNS[1:])
    + " WHERE node_placement.digest <> excluded.digest",
}

# Retention, of one node (``{mine}`` the node's condition) or of all (``1``).
_PRUNE = (
    "DELETE FROM assignment_intervals WHERE {mine} AND valid_to IS NOT NULL "
    "AND valid_to < :b_before",
    "DELETE FROM anomaly_intervals WHERE {mine} AND resolved_at IS NOT NULL "
    "AND resolved_at < :b_before",
    "DELETE FROM node_summaries WHERE {mine} AND at_epoch < :b_cutoff",
    "DELETE FROM history_gaps WHERE {mine} AND gap_to < :b_before",
    "DELETE FROM node_summaries_hourly WHERE {mine} AND hour_epoch + 3600 <= :b_cutoff",
    "DELETE FROM fleet_summaries WHERE bucket_epoch + step <= :b_cutoff",
    "DELETE FROM device_intervals WHERE {mine} AND valid_to IS NOT NULL "
    "AND valid_to < :b_before",
)


def db_time(value: datetime) -> str:
    """A time as the schema stores it on SQLite (``schema.UTCDateTime``: naive UTC, fixed
    width with microseconds, as SQLAlchemy's SQLite ``DATETIME`` writes it)."""
    v = value.replace(tzinfo=UTC) if value.tzinfo is None else value.astimezone(UTC)
    return (f"{v.year:04d}-{v.month:02d}-{v.day:02d} "
            f"{v.hour:02d}:{v.minute:02d}:{v.second:02d}.{v.microsecond:06d}")


def _bind(params: dict[str, Any]) -> dict[str, Any]:
    return {k: db_time(v) if isinstance(v, datetime) else v for k, v in params.items()}


class EmbeddedStore(WritePath[sqlite3.Connection]):
    """The write path of a history on SQLite, on one ``sqlite3`` connection (the writer
    writes from one thread; a lock serialises any other caller)."""

    def __init__(self, path: Path, url: str, *, timeout: float = 10.0) -> None:
        super().__init__()
        self.path = path
        self.url = url
        self.readonly = False
        self._conn = connect(path, timeout)
        self._conn_lock = threading.Lock()

    @contextmanager
    def write_transaction(self) -> Iterator[sqlite3.Connection]:
        with self._conn_lock:
            conn = self._conn
            conn.execute("BEGIN IMMEDIATE")  # the write lock up front, not on upgrade
            try:
                yield conn
                conn.execute("COMMIT")
            except BaseException:
                if conn.in_transaction:
                    conn.execute("ROLLBACK")
                raise

    def _run(self, conn: sqlite3.Connection, name: str, params: Any) -> list[Any]:
        if isinstance(params, list):
            conn.executemany(STATEMENTS[name], [_bind(p) for p in params])
            return []
        return conn.execute(STATEMENTS[name], _bind(params)).fetchall()

    def _time(self, value: Any) -> datetime:
        return datetime.fromisoformat(value).replace(tzinfo=UTC)

    def _prune(self, conn: sqlite3.Connection, node_id: int | None, before: datetime
               ) -> PruneResult:
        mine = "node_id = :b_node" if node_id is not None else "1"
        params = {"b_node": node_id, "b_before": db_time(before),
                  "b_cutoff": int(before.timestamp())}
        counts = [conn.execute(sql.format(mine=mine), params).rowcount for sql in _PRUNE]
        return PruneResult(*counts[:4])

    def revision(self) -> str | None:
        return stored_revision(self._conn)

    def close(self) -> None:
        with self._conn_lock:
            self._conn.close()


def connect(path: Path, timeout: float) -> sqlite3.Connection:
    """A connection as the SQLAlchemy store's writers configure theirs
    (``connect.configure_sqlite``, mode ``create``)."""
    # Transactions are begun explicitly (BEGIN IMMEDIATE), not by the sqlite3 module.
    conn = sqlite3.connect(path, timeout=timeout, isolation_level=None,
                           check_same_thread=False)
    try:
        # A writer's statements touch a few pages each: 256 KiB of page cache instead of
        # SQLite's 2 MiB saves some 0.8 MiB of every node agent (docs/performance.md).
        sqlite_settings(conn, "create", timeout=timeout, cache_kib=256)
    except BaseException:
        conn.close()
        raise
    return conn


def stored_revision(conn: sqlite3.Connection) -> str | None:
    """The schema's revision (None: no history schema yet)."""
    if conn.execute("SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = ?",
                    (VERSION_TABLE,)).fetchone() is None:
        return None
    row = conn.execute(f"SELECT version_num FROM {VERSION_TABLE}").fetchone()
    return str(row[0]) if row is not None else None


def _check_writable(conn: sqlite3.Connection) -> None:
    """Refuse a file this process may read but not write; a lock held by another writer
    is not a refusal (the writer retries)."""
    try:
        conn.execute("BEGIN")
        conn.execute("DELETE FROM nodes WHERE 0")
    except sqlite3.OperationalError as exc:
        if exc.sqlite_errorcode & 0xFF == sqlite3.SQLITE_READONLY:
            raise
    finally:
        if conn.in_transaction:
            conn.execute("ROLLBACK")


def open_embedded(url: str, *, timeout: float = 10.0,
                  migrate: Callable[[], None] | None = None) -> EmbeddedStore:
    """Open the SQLite history of the plain ``sqlite:///`` ``url`` for writing, as
    ``open_store(url, isolated_migrations=True)`` does (create the file in an existing
    directory, bring the schema to the newest revision in a child process, WAL mode);
    every failure is a one-line :class:`UserError`. ``timeout``: how long a statement
    waits for another writer's lock. ``migrate`` replaces the migration child (tests)."""
    database = plain_sqlite_database(url)
    if database is None:
        raise ValueError(f"not a plain sqlite:/// URL: {url!r}")
    created = check_sqlite_path(database, "create", url == default_history_url())
    path = Path(database).expanduser()
    store: EmbeddedStore | None = None
    try:
        store = EmbeddedStore(path, url, timeout=timeout)
        if store.revision() != HEAD_REVISION:
            (migrate or child_migrator(url))()
        _check_writable(store._conn)
    except (sqlite3.Error, MigrationUnreachable) as exc:
        if store is not None:
            store.close()
        raise UserError(f"history database {url}: {describe_error(exc)}") from None
    except BaseException:
        if store is not None:
            store.close()
        raise
    if created is not None:
        log.info("history store created", extra={"path": str(created)})
    return store
