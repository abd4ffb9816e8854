"""``python -m exporter.history.migrate``: bring a history database to the newest schema in
a short-lived process, so that the node agent itself never loads Alembic (about a tenth of
its memory). The URL comes in the environment, never on a command line where ``ps`` would
show its password.

Exit codes: 0 migrated, 2 a clear error (printed), 3 the database is unreachable.
"""

from __future__ import annotations

import os
import subprocess
import sys

from exporter.errors import UserError

URL_ENV = "PODRES_HISTORY_MIGRATE_URL"
UNREACHABLE = 3


class MigrationUnreachable(Exception):
    """The database did not answer; migrate again on first use."""


def migrate_in_child(url: str, timeout: float = 120.0) -> None:
    env = dict(os.environ, **{URL_ENV: url})
    try:
        proc = subprocess.run([sys.executable, "-m", "exporter.history.migrate"], env=env,
                              capture_output=True, text=True, timeout=timeout, check=False)
    except subprocess.TimeoutExpired:
        raise MigrationUnreachable(f"schema migration took longer than {timeout:g}s") from None
    message = (proc.stderr.strip().splitlines() or [f"exit code {proc.returncode}"])[-1]
    if proc.returncode == UNREACHABLE:
        raise MigrationUnreachable(message)
    if proc.returncode != 0:
        raise UserError(message.removeprefix("podres-exporter history: error: "))


def main() -> int:
    from exporter.history.store import open_store

    url = os.environ.get(URL_ENV)
    if not url:
        print(f"podres-exporter history: error: {URL_ENV} is not set", file=sys.stderr)
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
        return UNREACHABLE
    return 0


if __name__ == "__main__":
    sys.exit(main())
