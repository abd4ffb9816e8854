"""Fixtures for the history tests: every store test runs on SQLite and on a real PostgreSQL,
and every test of the write path also on the embedded store (``history``, backends.py).

PostgreSQL is ``$PODRES_TEST_POSTGRES_URL`` when set (each test gets a fresh database created
on it), else a throwaway cluster (bench/pgcluster.py, shared with the benchmarks) started
once per session. Tests are skipped with a reason only when the PostgreSQL binaries are
absent.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest
from backends import BACKENDS, History

from bench.pgcluster import PgCluster, create_database, drop_database, start_cluster

PG_ENV = "PODRES_TEST_POSTGRES_URL"


def start_cluster_or_skip() -> PgCluster:
    cluster = start_cluster()
    if cluster is None:
        pytest.skip("PostgreSQL binaries (initdb, pg_ctl) not installed: "
                    "apt-get install -y postgresql-15")
    return cluster


@pytest.fixture(scope="session")
def pg_server_url() -> Iterator[str]:
    """URL of a PostgreSQL server's maintenance database."""
    given = os.environ.get(PG_ENV)
    if given:
        yield given
        return
    cluster = start_cluster_or_skip()
    try:
        yield cluster.url
    finally:
        cluster.destroy()


@pytest.fixture
def pg_url(pg_server_url: str) -> Iterator[str]:
    url = create_database(pg_server_url)
    try:
        yield url
    finally:
        drop_database(pg_server_url, url)


def _fresh_url(request: pytest.FixtureRequest, tmp_path: Path, backend: str
               ) -> Iterator[str]:
    if backend != "postgresql":
        yield f"sqlite:///{tmp_path / 'history.db'}"
        return
    server = request.getfixturevalue("pg_server_url")
    url = create_database(server)
    try:
        yield url
    finally:
        drop_database(server, url)


@pytest.fixture(params=["sqlite", "postgresql"])
def history_url(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    """A fresh, empty history database URL: SQLite file, then real PostgreSQL."""
    yield from _fresh_url(request, tmp_path, request.param)


@pytest.fixture(params=BACKENDS)
def backend_url(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[tuple[str, str]]:
    """``(url, backend)``: a fresh history database and the write path under test."""
    for url in _fresh_url(request, tmp_path, request.param):
        yield url, request.param


@pytest.fixture
def history(backend_url: tuple[str, str]) -> Iterator[History]:
    """A fresh history store, written by each write path in turn, read by SQLAlchemy."""
    store = History(*backend_url)
    try:
        yield store
    finally:
        store.close()


@pytest.fixture
def own_pg_cluster() -> Iterator[PgCluster]:
    """A cluster of the test's own, which the test may stop and start."""
    cluster = start_cluster_or_skip()
    try:
        yield cluster
    finally:
        cluster.destroy()
