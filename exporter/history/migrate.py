"""``python -m exporter.history.migrate``: bring a history database to the newest schema in
a short-lived process, so that the node agent itself never loads Alembic (about a tenth of
its memory). The URL comes in the environment (``PODRES_HISTORY_MIGRATE_URL``), never on a
command line where ``ps`` would show its password.

Exit codes: 0 migrated, 2 a clear error (printed), 3 the database is unreachable.
"""

from __future__ import annotations

import os
import sys

from exporter.errors import UserError
from exporter.history.connect import MIGRATE_UNREACHABLE, MIGRATE_URL_ENV, open_store


def main() -> int:
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


if __name__ == "__main__":
    sys.exit(main())
