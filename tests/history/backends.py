"""The history's write paths under test: the SQLAlchemy store on SQLite and on PostgreSQL,
and the embedded store (``serve`` on SQLite, stdlib ``sqlite3``). A test of the write path
takes the ``history`` fixture (tests/history/conftest.py): a :class:`History` writes
through the backend's write path and reads through the SQLAlchemy store, as ``serve``
does."""

from __future__ import annotations

import sqlite3
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from exporter.history import open_store
from exporter.history.embedded import open_embedded
from exporter.history.store import HistoryStore

# sqlite: the SQLAlchemy store on SQLite; embedded: the same file written by the embedded
# store; postgresql: the SQLAlchemy store on a real PostgreSQL.
BACKENDS = ("sqlite", "embedded", "postgresql")


def open_write_path(url: str, backend: str) -> Any:
    """The store ``serve`` writes through for ``url`` (creating it)."""
    return open_embedded(url) if backend == "embedded" else open_store(url)


class History:
    """A store under test: ``write``, ``prune`` and ``write_transaction`` go to the
    backend's write path, everything else (reads, queries) to the SQLAlchemy store."""

    def __init__(self, url: str, backend: str) -> None:
        self.url = url
        self.backend = backend
        self.writer = open_write_path(url, backend)
        self.reader: HistoryStore = (self.writer if isinstance(self.writer, HistoryStore)
                                     else open_store(url, mode="readonly"))

    def write(self, node: str, writer_id: str, changesets: Any) -> int:
        return int(self.writer.write(node, writer_id, changesets))

    def prune(self, before: Any, node: str | None = None) -> Any:
        return self.writer.prune(before, node)

    @contextmanager
    def maintenance(self) -> Iterator[HistoryStore]:
        """A SQLAlchemy store that may write, as ``history prune`` opens it."""
        if self.reader is self.writer:
            yield self.reader
            return
        store = open_store(self.url, mode="maintenance")
        try:
            yield store
        finally:
            store.close()

    @contextmanager
    def edit(self) -> Iterator[Any]:
        """A write transaction of a SQLAlchemy store: someone editing rows behind the
        writer's back."""
        with self.maintenance() as store, store.write_transaction() as conn:
            yield conn

    def rebuild_rollup(self) -> int:
        with self.maintenance() as store:
            return store.rebuild_rollup()

    def connection_lost(self) -> Exception:
        """The error this backend raises when the database went away."""
        if self.backend == "embedded":
            return sqlite3.OperationalError("database down")
        from sqlalchemy.exc import OperationalError

        return OperationalError("INSERT", {}, ConnectionRefusedError("database down"))

    def close(self) -> None:
        self.writer.close()
        if self.reader is not self.writer:
            self.reader.close()

    def __getattr__(self, name: str) -> Any:
        return getattr(self.reader, name)


class Flaky(History):
    """The real write path, but writes fail (as a lost connection does) while ``down``."""

    down = False
    attempts = 0

    def write(self, node: str, writer_id: str, changesets: Any) -> int:
        self.attempts += 1
        if self.down:
            raise self.connection_lost()
        return super().write(node, writer_id, changesets)
