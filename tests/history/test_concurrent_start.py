"""Concurrent first start (issue 33, item 5): exporters that open one new history database
at the same moment all bring it to the newest schema and come up, on SQLite and on a real
PostgreSQL. The in-process test puts a second migrator exactly where the race was (between
two of the first one's migration steps); the end-to-end tests start ``serve`` processes at
the same instant (test_serve_concurrent_start.py)."""

from __future__ import annotations

from typing import Any

from sqlalchemy import create_engine, event, inspect, text

from exporter.history.child import child_migrator
from exporter.history.common import HEAD_REVISION, VERSION_TABLE
from exporter.history.connect import configure_sqlite
from exporter.history.store import HistoryStore


def _stored_revision(url: str) -> str | None:
    engine = create_engine(url)
    try:
        with engine.connect() as conn:
            if not inspect(conn).has_table(VERSION_TABLE):
                return None
            value = conn.execute(text(f"SELECT version_num FROM {VERSION_TABLE}")).scalar()
            return None if value is None else str(value)
    finally:
        engine.dispose()


def test_a_second_migrator_between_two_steps_of_the_first(history_url: str) -> None:
    """Before: SQLite's migrations ran one transaction per step, with the steps to run read
    once at the start; another process that migrated between two steps made this one
    create its tables again ("table node_placement already exists")."""
    engine = create_engine(history_url, connect_args=(
        {"timeout": 10} if history_url.startswith("sqlite") else {}))
    others: list[str | None] = []

    def another_exporter_migrates(_conn: Any) -> None:
        if others:
            return
        revision = _stored_revision(history_url)
        if revision is not None and revision != HEAD_REVISION:  # mid-way through the steps
            others.append(revision)
            # As serve does: in a process of its own (Alembic is not re-entrant).
            child_migrator(history_url)()

    # Before the store's own listener, which takes the write lock at BEGIN.
    event.listen(engine, "begin", another_exporter_migrates)
    if engine.dialect.name == "sqlite":
        configure_sqlite(engine, "create")
    first = HistoryStore(engine)
    try:
        first.migrate()
        assert first.revision() == HEAD_REVISION
    finally:
        first.close()
    assert _stored_revision(history_url) == HEAD_REVISION
