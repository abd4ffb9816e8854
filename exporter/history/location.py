"""Where a history store lives: the default URL, the file of a plain ``sqlite:///`` URL and
what may be created there (docs/design.md#history, "Who may create a store"). No
SQLAlchemy: ``serve`` on SQLite opens its store without it."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any, Literal
from urllib.parse import unquote

from exporter.errors import UserError

Mode = Literal["create", "readonly", "maintenance"]
MODES: tuple[Mode, ...] = ("create", "readonly", "maintenance")
_PLAIN_SQLITE = "sqlite:///"


def default_history_url() -> str:
    """``sqlite:///$XDG_STATE_HOME/podres-exporter/history.db`` (``~/.local/state`` when the
    variable is unset), or ``/var/lib/podres-exporter/history.db`` when running as root."""
    if hasattr(os, "geteuid") and os.geteuid() == 0:
        base = Path("/var/lib/podres-exporter")
    else:
        state = os.environ.get("XDG_STATE_HOME") or str(Path.home() / ".local" / "state")
        base = Path(state) / "podres-exporter"
    return f"{_PLAIN_SQLITE}{base / 'history.db'}"


def plain_sqlite_database(url: str) -> str | None:
    """The database of a plain ``sqlite:///…`` URL (no driver, no query string), as
    SQLAlchemy reads it (``%xx`` decoded); None for any other URL."""
    if not url.startswith(_PLAIN_SQLITE) or "?" in url:
        return None
    return unquote(url[len(_PLAIN_SQLITE):])


def check_sqlite_path(database: str | None, mode: Mode, default_location: bool) -> Path | None:
    """Refuse what SQLite would silently create; returns the file that opening will create
    (``create`` mode, file missing), else None."""
    database = database or ""
    if not database or database == ":memory:" or database.startswith("file:"):
        raise UserError("--history.url: SQLite needs a file path "
                        "(sqlite:///path/to/history.db)")
    path = Path(database).expanduser()
    if path.exists():
        return None
    if mode != "create":
        raise UserError(f"history database {path} does not exist (the exporter creates it "
                        "when it first writes)")
    if default_location:
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise UserError(f"cannot create the history directory {path.parent}: "
                            f"{exc.strerror or exc}") from None
    elif not path.parent.is_dir():
        raise UserError(f"history directory {path.parent} does not exist (create it, or "
                        "give --history.url a file in an existing directory)")
    return path


def sqlite_settings(conn: Any, mode: Mode, *, timeout: float = 10.0,
                    cache_kib: int | None = None) -> None:
    """The settings of every connection to a history on SQLite, whichever store opens it
    (``conn``: anything with ``execute``: a ``sqlite3`` connection, a DBAPI cursor).
    ``cache_kib``: a page cache other than SQLite's 2 MiB."""
    conn.execute(f"PRAGMA busy_timeout = {int(timeout * 1000)}")
    if mode == "create":
        # Stored in the file: set by the writer that creates it, not by a command that
        # must leave a file that is not a history untouched.
        conn.execute("PRAGMA journal_mode = WAL")
    conn.execute("PRAGMA synchronous = NORMAL")
    conn.execute("PRAGMA foreign_keys = ON")
    if mode == "readonly":
        conn.execute("PRAGMA query_only = ON")
    if cache_kib is not None:
        conn.execute(f"PRAGMA cache_size = -{cache_kib}")
