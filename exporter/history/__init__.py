"""History store and dashboard backend (issue 5): assignment and anomaly intervals, node
summaries and gaps in SQLite (default) or PostgreSQL; see docs/history.md."""

from __future__ import annotations

from exporter.history.store import HistoryStore, default_history_url, open_store
from exporter.history.writer import HistoryWriter

__all__ = ["HistoryStore", "HistoryWriter", "default_history_url", "open_store"]
