"""History store and dashboard backend: assignment and anomaly intervals, node summaries and
gaps in SQLite (default) or PostgreSQL; see docs/history.md and docs/design.md#history.

The exports are loaded on first use: ``import exporter.history`` (and ``serve`` writing to
SQLite through ``exporter.history.embedded``) does not load SQLAlchemy."""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from exporter.history.connect import open_store
    from exporter.history.location import default_history_url
    from exporter.history.store import HistoryStore
    from exporter.history.writer import HistoryWriter

__all__ = ["HistoryStore", "HistoryWriter", "default_history_url", "open_store"]

_HOMES = {"HistoryStore": "store", "HistoryWriter": "writer",
          "default_history_url": "location", "open_store": "connect"}


def __getattr__(name: str) -> Any:
    home = _HOMES.get(name)
    if home is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(importlib.import_module(f"{__name__}.{home}"), name)
