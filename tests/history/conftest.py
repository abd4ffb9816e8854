"""Fixtures for the history tests: every store test runs on SQLite and on a real PostgreSQL.

PostgreSQL is ``$PODRES_TEST_POSTGRES_URL`` when set (each test gets a fresh database created
on it), else a throwaway cluster started once per session (initdb/pg_ctl, as the
``postgres`` user when running as root, unix socket in a short temporary directory). Tests
are skipped with a reason only when the PostgreSQL binaries are absent.
"""

from __future__ import annotations

import glob
import os
import shutil
import subprocess
import tempfile
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from sqlalchemy import create_engine, text
from sqlalchemy.engine import make_url

PG_ENV = "PODRES_TEST_POSTGRES_URL"


def pg_bindir() -> str | None:
    for pattern in ("/usr/lib/postgresql/*/bin",):
        for candidate in sorted(glob.glob(pattern), reverse=True):
            if os.access(os.path.join(candidate, "initdb"), os.X_OK):
                return candidate
    initdb = shutil.which("initdb")
    return os.path.dirname(initdb) if initdb else None


class PgCluster:
    """A throwaway PostgreSQL cluster listening only on a unix socket."""

    def __init__(self, bindir: str) -> None:
        self.bindir = bindir
        self.dir = tempfile.mkdtemp(prefix="pg", dir="/tmp")
        self.data = os.path.join(self.dir, "data")
        self.as_root = os.geteuid() == 0
        if self.as_root:
            shutil.chown(self.dir, "postgres", "postgres")
        self._run("initdb", "-D", self.data, "-U", "postgres", "-A", "trust", "-E", "UTF8",
                  "--locale=C.UTF-8", "--no-sync")
        self.start()

    @property
    def url(self) -> str:
        return f"postgresql+psycopg://postgres@/postgres?host={self.dir}"

    def _run(self, tool: str, *args: str) -> None:
        cmd = [os.path.join(self.bindir, tool), *args]
        if self.as_root:
            cmd = ["runuser", "-u", "postgres", "--", *cmd]
        subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)

    def start(self) -> None:
        self._run("pg_ctl", "-D", self.data, "-l", os.path.join(self.dir, "log"), "-w", "-o",
                  f"-k {self.dir} -c listen_addresses='' -c fsync=off "
                  "-c max_connections=300", "start")

    def stop(self) -> None:
        self._run("pg_ctl", "-D", self.data, "-m", "immediate", "-w", "stop")

    def destroy(self) -> None:
        try:
            self._run("pg_ctl", "-D", self.data, "-m", "fast", "-w", "stop")
        except subprocess.CalledProcessError:
            pass
        shutil.rmtree(self.dir, ignore_errors=True)


def start_cluster_or_skip() -> PgCluster:
    bindir = pg_bindir()
    if bindir is None:
        pytest.skip("PostgreSQL binaries (initdb, pg_ctl) not installed: "
                    "apt-get install -y postgresql-15")
    return PgCluster(bindir)


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


def create_database(server_url: str) -> str:
    name = "podres_" + uuid.uuid4().hex[:12]
    engine = create_engine(server_url, isolation_level="AUTOCOMMIT")
    with engine.connect() as conn:
        conn.execute(text(f'CREATE DATABASE "{name}" TEMPLATE template0'))
    engine.dispose()
    return make_url(server_url).set(database=name).render_as_string(hide_password=False)


def drop_database(server_url: str, url: str) -> None:
    name = make_url(url).database
    engine = create_engine(server_url, isolation_level="AUTOCOMMIT")
    with engine.connect() as conn:
        conn.execute(text(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))
    engine.dispose()


@pytest.fixture
def pg_url(pg_server_url: str) -> Iterator[str]:
    url = create_database(pg_server_url)
    try:
        yield url
    finally:
        drop_database(pg_server_url, url)


@pytest.fixture(params=["sqlite", "postgresql"])
def history_url(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    """A fresh, empty history database URL: SQLite file, then real PostgreSQL."""
    if request.param == "sqlite":
        yield f"sqlite:///{tmp_path / 'history.db'}"
        return
    server = request.getfixturevalue("pg_server_url")
    url = create_database(server)
    try:
        yield url
    finally:
        drop_database(server, url)


@pytest.fixture
def own_pg_cluster() -> Iterator[PgCluster]:
    """A cluster of the test's own, which the test may stop and start."""
    cluster = start_cluster_or_skip()
    try:
        yield cluster
    finally:
        cluster.destroy()
