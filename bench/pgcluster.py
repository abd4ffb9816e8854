"""A throwaway PostgreSQL cluster for the history tests and benchmarks.

``initdb`` and ``pg_ctl`` in a short temporary directory (as the ``postgres`` user when
running as root: both refuse to run as root), listening only on a unix socket there, with
``fsync=off``: it starts in about a second and is removed afterwards. Databases are
created on it one per test or per benchmark run.
"""

from __future__ import annotations

import glob
import os
import shutil
import subprocess
import tempfile
import uuid

from sqlalchemy import create_engine, text
from sqlalchemy.engine import make_url


def pg_bindir() -> str | None:
    """The newest installed PostgreSQL's binaries (Debian layout), else ``initdb`` on PATH."""
    for candidate in sorted(glob.glob("/usr/lib/postgresql/*/bin"), reverse=True):
        if os.access(os.path.join(candidate, "initdb"), os.X_OK):
            return candidate
    initdb = shutil.which("initdb")
    return os.path.dirname(initdb) if initdb else None


class PgCluster:
    """A throwaway PostgreSQL cluster listening only on a unix socket."""

    def __init__(self, bindir: str, settings: dict[str, str] | None = None) -> None:
        self.bindir = bindir
        self.settings = {"max_connections": "300", **(settings or {})}
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
        """The maintenance database ``postgres``."""
        return f"postgresql+psycopg://postgres@/postgres?host={self.dir}"

    def _run(self, tool: str, *args: str) -> None:
        cmd = [os.path.join(self.bindir, tool), *args]
        if self.as_root:
            cmd = ["runuser", "-u", "postgres", "--", *cmd]
        subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)

    def start(self) -> None:
        options = " ".join(f"-c {k}={v}" for k, v in self.settings.items())
        self._run("pg_ctl", "-D", self.data, "-l", os.path.join(self.dir, "log"), "-w", "-o",
                  f"-k {self.dir} -c listen_addresses='' -c fsync=off {options}", "start")

    def stop(self) -> None:
        self._run("pg_ctl", "-D", self.data, "-m", "immediate", "-w", "stop")

    def destroy(self) -> None:
        try:
            self._run("pg_ctl", "-D", self.data, "-m", "fast", "-w", "stop")
        except subprocess.CalledProcessError:
            pass
        shutil.rmtree(self.dir, ignore_errors=True)


def start_cluster() -> PgCluster | None:
    """A new cluster, or None when the PostgreSQL binaries are not installed."""
    bindir = pg_bindir()
    return PgCluster(bindir) if bindir is not None else None


def create_database(server_url: str) -> str:
    """A new empty database on the server of ``server_url``; returns its URL."""
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
