"""Opening a history store: what each mode may create, and one-line errors (real SQLite
files and real PostgreSQL servers)."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest
from sqlalchemy import create_engine, inspect

from bench.pgcluster import PgCluster
from exporter.errors import UserError
from exporter.history import default_history_url, open_store
from exporter.history.connect import Mode
from exporter.history.store import HEAD_REVISION


def files_under(root: Path) -> list[Path]:
    return sorted(root.rglob("*"))


@pytest.mark.parametrize("mode", ["readonly", "maintenance"])
def test_read_and_maintenance_never_create_a_store(tmp_path: Path, mode: Mode) -> None:
    with pytest.raises(UserError, match="does not exist") as err:
        open_store(f"sqlite:///{tmp_path}/a/b/history.db", mode=mode)
    assert "\n" not in str(err.value)
    with pytest.raises(UserError, match="does not exist"):
        open_store(f"sqlite:///{tmp_path}/history.db", mode=mode)
    assert files_under(tmp_path) == []


@pytest.mark.parametrize("mode", ["readonly", "maintenance"])
def test_an_empty_database_is_refused_not_initialised(tmp_path: Path, mode: Mode) -> None:
    path = tmp_path / "empty.db"
    path.touch()
    with pytest.raises(UserError, match="holds no podres-exporter history"):
        open_store(f"sqlite:///{path}", mode=mode)
    assert path.stat().st_size == 0


def test_maintenance_writes_an_existing_store(history_url: str) -> None:
    open_store(history_url).close()
    store = open_store(history_url, mode="maintenance")
    assert not store.readonly and store.revision() == HEAD_REVISION
    store.close()


def test_create_needs_an_existing_directory(tmp_path: Path) -> None:
    with pytest.raises(UserError, match=f"history directory {tmp_path}/missing does not exist"):
        open_store(f"sqlite:///{tmp_path}/missing/history.db")
    assert files_under(tmp_path) == []


def test_create_makes_only_the_file_and_says_where(tmp_path: Path,
                                                  caplog: pytest.LogCaptureFixture) -> None:
    path = tmp_path / "history.db"
    with caplog.at_level(logging.INFO, logger="podres.history"):
        open_store(f"sqlite:///{path}").close()
        open_store(f"sqlite:///{path}").close()  # already there: nothing to announce
    created = [r for r in caplog.records if r.getMessage() == "history store created"]
    assert [getattr(r, "path", None) for r in created] == [str(path)]
    assert path.is_file()


def test_the_default_location_gets_its_directory(tmp_path: Path,
                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    # The exporter's own state directory is the one directory it may create.
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "state"))
    monkeypatch.setattr("os.geteuid", lambda: 1000)  # root's default is /var/lib/...
    assert default_history_url() == f"sqlite:///{tmp_path}/state/podres-exporter/history.db"
    open_store().close()
    assert (tmp_path / "state" / "podres-exporter" / "history.db").is_file()


def test_an_unknown_mode_is_a_programming_error(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="mode"):
        open_store(f"sqlite:///{tmp_path}/h.db", mode="write")  # type: ignore[arg-type]
    assert files_under(tmp_path) == []


def test_postgres_without_a_history_is_refused(pg_url: str) -> None:
    modes: tuple[Mode, ...] = ("readonly", "maintenance")
    for mode in modes:
        with pytest.raises(UserError, match="holds no podres-exporter history"):
            open_store(pg_url, mode=mode)
    engine = create_engine(pg_url)
    with engine.connect() as conn:  # the refusals created nothing
        assert inspect(conn).get_table_names() == []
    engine.dispose()


@pytest.mark.parametrize("mode", ["readonly", "maintenance"])
def test_unreachable_postgres_is_one_line_for_commands(own_pg_cluster: PgCluster, mode: Mode,
                                                       caplog: pytest.LogCaptureFixture
                                                       ) -> None:
    own_pg_cluster.stop()
    with caplog.at_level(logging.WARNING), pytest.raises(UserError) as err:
        open_store(own_pg_cluster.url, mode=mode)
    assert "\n" not in str(err.value) and "retry" not in str(err.value)
    assert caplog.records == []  # no "will retry" warning for a one-shot command
