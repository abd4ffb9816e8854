"""The migration child: ``serve`` brings the schema to the newest revision in a
short-lived process (``exporter.history.connect.migrate_main``), so that the node agent
never loads Alembic (nor, on SQLite, SQLAlchemy)."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Callable

from exporter.errors import UserError
from exporter.history.common import MigrationUnreachable

# The child gets the URL in the environment, never on a command line where ``ps`` would
# show a password. It runs connect's own function, so no second module imports it back.
_CHILD = "import sys; from exporter.history.connect import migrate_main; sys.exit(migrate_main())"
MIGRATE_URL_ENV = "PODRES_HISTORY_MIGRATE_URL"
MIGRATE_UNREACHABLE = 3  # the child's exit code when the database did not answer


def child_migrator(url: str, timeout: float = 120.0) -> Callable[[], None]:
    """A function that migrates the database at ``url`` in a child process; it raises
    :class:`MigrationUnreachable` when the database did not answer, :class:`UserError`
    for any other failure (the child's last line)."""
    def migrate_in_child() -> None:
        env = dict(os.environ, **{MIGRATE_URL_ENV: url})
        try:
            proc = subprocess.run([sys.executable, "-c", _CHILD], env=env,
                                  capture_output=True, text=True, timeout=timeout,
                                  check=False)
        except subprocess.TimeoutExpired:
            raise MigrationUnreachable(
                f"schema migration took longer than {timeout:g}s") from None
        message = (proc.stderr.strip().splitlines() or [f"exit code {proc.returncode}"])[-1]
        if proc.returncode == MIGRATE_UNREACHABLE:
            raise MigrationUnreachable(message)
        if proc.returncode != 0:
            raise UserError(message.removeprefix("podres-exporter history: error: "))
    return migrate_in_child
