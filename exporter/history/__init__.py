"""History store and dashboard backend: assignment and anomaly intervals, node summaries and
gaps in SQLite (default) or PostgreSQL; see docs/history.md and docs/design.md#history."""

from __future__ import annotations

from exporter.history.connect import default_history_url, open_store
from exporter.history.store import HistoryStore
from exporter.history.writer import HistoryWriter

__all__ = ["HistoryStore", "HistoryWriter", "default_history_url", "open_store"]
