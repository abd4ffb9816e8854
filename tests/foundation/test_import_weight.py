"""What a ``serve`` process loads: modules that only some configurations need stay out of
the others' resident memory (docs/performance.md#memory). Each check runs in a fresh
interpreter, so modules imported by other tests do not hide a regression."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.schema import CreateIndex

from exporter.history.schema import assignment_intervals, declare_backend

ROOT = Path(__file__).resolve().parents[2]

_SERVE_ON_SQLITE = """
import json, sys
import exporter.cli, exporter.commands.serve, exporter.service, exporter.web.app
import exporter.web.webconfig, exporter.history.api
from exporter.history import HistoryWriter, open_store
store = open_store(sys.argv[1], isolated_migrations=True)
store.close()
print(json.dumps(sorted(m for m in sys.modules if m.split(".")[0] in
      ("bcrypt", "alembic", "prometheus_client", "sqlalchemy", "yaml"))))
"""


def test_an_agent_on_sqlite_loads_no_postgresql_alembic_bcrypt_or_yaml(tmp_path: Path) -> None:
    out = subprocess.run(
        [sys.executable, "-c", _SERVE_ON_SQLITE, f"sqlite:///{tmp_path}/history.db"],
        check=True, capture_output=True, text=True, cwd=ROOT,
        env={"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin", "GRPC_VERBOSITY": "ERROR"})
    loaded = json.loads(out.stdout)
    assert "sqlalchemy.dialects.sqlite" in loaded  # the store was really opened
    assert not [m for m in loaded if m.startswith("sqlalchemy.dialects.postgresql")]
    assert not [m for m in loaded if m.split(".")[0] in ("alembic", "bcrypt", "yaml",
                                                          "prometheus_client")]
    assert (tmp_path / "history.db").stat().st_size > 0  # migrated, in a child process


def test_the_open_interval_index_is_partial_on_both_backends() -> None:
    index = next(i for i in assignment_intervals.indexes
                 if i.name == "uq_assignment_intervals_open")
    for backend, dialect in (("sqlite", sqlite.dialect()), ("postgresql", postgresql.dialect())):
        declare_backend(backend)
        ddl = str(CreateIndex(index).compile(dialect=dialect))
        assert ddl.startswith("CREATE UNIQUE INDEX uq_assignment_intervals_open")
        assert ddl.rstrip().endswith("WHERE valid_to IS NULL"), ddl
