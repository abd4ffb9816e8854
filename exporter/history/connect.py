"""Opening a history database: the URL, what a command may do to it, the engine.

Three modes, one per kind of caller:

- ``create`` (``serve`` and its writer): create the SQLite file if it is missing, in a
  directory that must already exist (only the default location's directory, the exporter's
  own state directory, is created), and bring the schema to the newest revision. A
  PostgreSQL server that is down at start does not stop the exporter: the migration waits
  for the first write.
- ``readonly`` (``history events``/``at``, ``api``): the store must exist and hold a
  history; sessions are read-only.
- ``maintenance`` (``history prune``): the store must exist and hold a history; it is
  upgraded if its schema is older, and written to.

Read and maintenance commands never create a file or a directory, and every failure is a
:class:`UserError` of one line.
"""

from __future__ import annotations

import logging
import os
import sys
from pathlib import Path
from typing import Any

from sqlalchemy import Connection, Engine, create_engine, event
from sqlalchemy.engine import make_url
from sqlalchemy.exc import (
    ArgumentError,
    DBAPIError,
    NoSuchModuleError,
    OperationalError,
    SQLAlchemyError,
)

from exporter.errors import UserError
from exporter.history.child import MIGRATE_UNREACHABLE, MIGRATE_URL_ENV, child_migrator
from exporter.history.common import MigrationUnreachable, describe_error
from exporter.history.location import (
    MODES,
    Mode,
    check_sqlite_path,
    default_history_url,
    sqlite_settings,
)
from exporter.history.schema import declare_backend
from exporter.history.store import HistoryStore

log = logging.getLogger("podres.history")

# Importable from here as before.
__all__ = ["MIGRATE_URL_ENV", "MODES", "Mode", "configure_sqlite", "default_history_url",
           "migrate_main", "open_store", "redact_url"]


def redact_url(url: str) -> str:
    try:
        return make_url(url).render_as_string(hide_password=True)
    except ArgumentError:
        return "<invalid url>"


def open_store(url: str | None = None, *, mode: Mode = "create",
               isolated_migrations: bool = False) -> HistoryStore:
    """Open the history database at ``url`` (default :func:`default_history_url`) in
    ``mode`` (see the module's description). With ``isolated_migrations`` a schema change
    runs in a short-lived child process, so the caller never loads Alembic."""
    if mode not in MODES:
        raise ValueError(f"mode must be one of {', '.join(MODES)}")
    url = url or default_history_url()
    try:
        parsed = make_url(url)
    except ArgumentError:
        raise UserError(f"invalid --history.url {url!r} (examples: sqlite:///path/history.db, "
                        "postgresql+psycopg://user@host/db)") from None
    backend = parsed.get_backend_name()
    created: Path | None = None
    if backend == "sqlite":
        created = check_sqlite_path(parsed.database, mode, url == default_history_url())
        kwargs: dict[str, Any] = {
            "connect_args": {"timeout": 10, "check_same_thread": False}}
    elif backend == "postgresql":
        kwargs = _postgres_options(mode)
    else:
        raise UserError(f"--history.url: unsupported database {backend!r} "
                        "(use sqlite:/// or postgresql+psycopg://)")
    try:
        engine = create_engine(parsed, **kwargs)
    except (ArgumentError, NoSuchModuleError, ImportError) as exc:
        raise UserError(f"--history.url {redact_url(url)}: {exc}") from None
    declare_backend(backend)
    if backend == "sqlite":
        configure_sqlite(engine, mode)
    migrator = child_migrator(url) if isolated_migrations else None
    store = HistoryStore(engine, readonly=mode == "readonly", migrator=migrator)
    try:
        _prepare(store, mode)
    except UserError:
        engine.dispose()
        raise
    except (DBAPIError, SQLAlchemyError) as exc:
        engine.dispose()
        raise UserError(f"history database {redact_url(url)}: {describe_error(exc)}"
                        ) from None
    if created is not None:
        log.info("history store created", extra={"path": str(created)})
    return store


def _postgres_options(mode: Mode) -> dict[str, Any]:
    connect_args: dict[str, Any] = {"connect_timeout": 5}
    if mode == "readonly":
        connect_args["options"] = "-c default_transaction_read_only=on"
    return {"connect_args": connect_args, "pool_pre_ping": True, "pool_size": 5,
            "max_overflow": 10}


def _prepare(store: HistoryStore, mode: Mode) -> None:
    if mode != "create":
        # Before any migration: an empty or foreign database is refused, not initialised.
        if not store.has_history():
            raise UserError(f"{store.url} holds no podres-exporter history (never written "
                            "to by an exporter)")
        if mode == "maintenance":
            store.migrate()
        return
    try:
        store.migrate()
    except (OperationalError, MigrationUnreachable) as exc:
        if store.dialect != "postgresql":
            raise
        # A fleet database that is down must not stop the exporter from serving metrics:
        # the writer buffers and retries, and migrates on its first successful write.
        log.warning("history database unreachable; migrating on first write",
                    extra={"url": store.url, "error": describe_error(exc)})
        store.migration_pending = True


def configure_sqlite(engine: Engine, mode: Mode) -> None:
    @event.listens_for(engine, "connect")
    def _connect(dbapi_conn: Any, _record: Any) -> None:
        # Let SQLAlchemy (not the sqlite3 module) emit BEGIN, so that writes can take the
        # write lock up front (BEGIN IMMEDIATE) instead of failing on upgrade.
        dbapi_conn.isolation_level = None
        cur = dbapi_conn.cursor()  # any DBAPI connection (the driver may be an adapter)
        sqlite_settings(cur, mode)
        cur.close()

    @event.listens_for(engine, "begin")
    def _begin(conn: Connection) -> None:
        if conn.get_execution_options().get("podres_write"):
            conn.exec_driver_sql("BEGIN IMMEDIATE")
        else:
            conn.exec_driver_sql("BEGIN")


def migrate_main() -> int:
    """The migration child's entry point: bring the database named in the environment to the
    newest schema in a short-lived process, so that the node agent itself never loads Alembic
    (about a tenth of its memory).

    Exit codes: 0 migrated, 2 a clear error (printed), 3 the database is unreachable.
    """
    url = os.environ.get(MIGRATE_URL_ENV)
    if not url:
        print(f"podres-exporter history: error: {MIGRATE_URL_ENV} is not set", file=sys.stderr)
        return 2
    try:
        store = open_store(url)
    except UserError as exc:
        print(f"podres-exporter history: error: {exc}", file=sys.stderr)
        return 2
    pending = store.migration_pending
    store.close()
    if pending:
        print("history database unreachable", file=sys.stderr)
        return MIGRATE_UNREACHABLE
    return 0
