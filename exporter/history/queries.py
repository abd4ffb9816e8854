"""Read queries over the history, shared by the dashboard API and the ``history`` CLI.

Every function returns JSON-ready values (times as RFC 3339 strings). Lists are paged by
keyset: ``cursor`` is the last row id of the previous page, opaque to clients."""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from sqlalchemy import Float, Select, and_, cast, func, or_, select, true, union_all

from exporter.history.fleet import FLEET_COLUMNS, bucket_rows, whole_buckets
from exporter.history.schema import (
    SUMMARY_ASSIGNMENTS,
    SUMMARY_COLUMNS,
    SUMMARY_POOLS,
    anomaly_intervals,
    assignment_intervals,
    history_gaps,
    node_summaries,
    node_summaries_hourly,
    nodes,
)
from exporter.history.store import HistoryStore, at_filter, overlap_filter
from exporter.history.timeutil import format_time
from exporter.history.window import MAX_POINTS, Window, auto_step, check_points, default_window

# Importable from here as before: what needs no database is in window.py, which the API
# imports without SQLAlchemy.
__all__ = ["MAX_POINTS", "Page", "Window", "anomalies", "assignments", "assignments_at",
           "auto_step", "check_points", "default_window", "events", "fleet_ratio", "gaps",
           "list_nodes", "summary"]

@dataclass(frozen=True, slots=True)
class Page:
    items: list[dict[str, Any]]
    next_cursor: str | None

    def to_json(self) -> dict[str, Any]:
        return {"items": self.items, "next_cursor": self.next_cursor}


def _none_if_empty(text: str) -> str | None:
    return text or None


def _page(rows: list[Any], limit: int, item: Any) -> Page:
    more = len(rows) > limit
    rows = rows[:limit]
    return Page([item(r) for r in rows], str(rows[-1].id) if more and rows else None)


def list_nodes(store: HistoryStore, *, limit: int = 100, cursor: int | None = None) -> Page:
    stmt = select(nodes.c.id, nodes.c.name, nodes.c.first_seen, nodes.c.last_seen,
                  nodes.c.online_cpus).order_by(nodes.c.id).limit(limit + 1)
    if cursor is not None:
        stmt = stmt.where(nodes.c.id > cursor)
    with store.read() as conn:
        rows = list(conn.execute(stmt))
    return _page(rows, limit, lambda r: {
        "name": r.name, "first_seen": format_time(r.first_seen),
        "last_seen": format_time(r.last_seen), "online_cpus": r.online_cpus})


def _assignment_json(r: Any) -> dict[str, Any]:
    return {
        "id": r.id, "node": r.node, "pod_uid": _none_if_empty(r.pod_uid),
        "namespace": r.namespace, "pod": r.pod, "container": r.container,
        "sidecar": bool(r.sidecar), "assignment": r.assignment,
        "memory_assignment": r.memory_assignment, "cpus": r.cpuset, "cpu_count": r.cpu_count,
        "memory_bytes": r.memory_bytes,
        "numa_nodes": [int(n) for n in r.numa_nodes.split(",") if n],
        "valid_from": format_time(r.valid_from), "valid_to": format_time(r.valid_to),
    }


def _interval_page(store: HistoryStore, stmt: Select[Any], id_col: Any, start_col: Any,
                   end_col: Any, window: Window, cursor: int | None, limit: int,
                   to_json: Any) -> Page:
    """One page of intervals ``[start_col, end_col)``: current at ``window.at``, or
    overlapping ``window.start``–``window.end``; keyset-paginated by ``id_col``."""
    if window.at is not None:
        stmt = stmt.where(at_filter(start_col, end_col, window.at))
    elif window.start is not None or window.end is not None:
        stmt = stmt.where(overlap_filter(start_col, end_col, window.start, window.end))
    if cursor is not None:
        stmt = stmt.where(id_col > cursor)
    with store.read() as conn:
        rows = list(conn.execute(stmt))
    return _page(rows, limit, to_json)


def assignments(store: HistoryStore, *, node: str | None = None,
                namespace: str | None = None, pod: str | None = None,
                container: str | None = None, assignment: str | None = None,
                window: Window = Window(), limit: int = 100,
                cursor: int | None = None) -> Page:
    a = assignment_intervals
    stmt: Select[Any] = (select(a, nodes.c.name.label("node"))
                         .join(nodes, nodes.c.id == a.c.node_id)
                         .order_by(a.c.id).limit(limit + 1))
    for column, value in ((nodes.c.name, node), (a.c.namespace, namespace), (a.c.pod, pod),
                          (a.c.container, container), (a.c.assignment, assignment)):
        if value is not None:
            stmt = stmt.where(column == value)
    return _interval_page(store, stmt, a.c.id, a.c.valid_from, a.c.valid_to, window, cursor,
                          limit, _assignment_json)


def assignments_at(store: HistoryStore, at: datetime, node: str | None = None
                   ) -> list[dict[str, Any]]:
    """Every container's assignment at ``at`` (all pages)."""
    out: list[dict[str, Any]] = []
    cursor: int | None = None
    while True:
        page = assignments(store, node=node, window=Window(at=at), limit=5000, cursor=cursor)
        out.extend(page.items)
        if page.next_cursor is None:
            return out
        cursor = int(page.next_cursor)


def _anomaly_json(r: Any) -> dict[str, Any]:
    return {
        "id": r.id, "node": r.node, "kind": r.kind,
        "namespace": _none_if_empty(r.namespace), "pod": _none_if_empty(r.pod),
        "container": _none_if_empty(r.container), "subject": r.subject, "detail": r.detail,
        "first_seen": format_time(r.first_seen), "last_seen": format_time(r.last_seen),
        "resolved_at": format_time(r.resolved_at),
    }


def anomalies(store: HistoryStore, *, node: str | None = None, kind: str | None = None,
              namespace: str | None = None, pod: str | None = None,
              container: str | None = None, state: str = "any", window: Window = Window(),
              limit: int = 100, cursor: int | None = None) -> Page:
    n = anomaly_intervals
    stmt: Select[Any] = (select(n, nodes.c.name.label("node"))
                         .join(nodes, nodes.c.id == n.c.node_id)
                         .order_by(n.c.id).limit(limit + 1))
    for column, value in ((nodes.c.name, node), (n.c.kind, kind), (n.c.namespace, namespace),
                          (n.c.pod, pod), (n.c.container, container)):
        if value is not None:
            stmt = stmt.where(column == value)
    if state == "open":
        stmt = stmt.where(n.c.resolved_at.is_(None))
    elif state == "resolved":
        stmt = stmt.where(n.c.resolved_at.is_not(None))
    return _interval_page(store, stmt, n.c.id, n.c.first_seen, n.c.resolved_at, window, cursor,
                          limit, _anomaly_json)


def gaps(store: HistoryStore, *, node: str | None = None, window: Window = Window(),
         limit: int = 100, cursor: int | None = None) -> Page:
    g = history_gaps
    stmt: Select[Any] = (select(g, nodes.c.name.label("node"))
                         .join(nodes, nodes.c.id == g.c.node_id)
                         .order_by(g.c.id).limit(limit + 1))
    if node is not None:
        stmt = stmt.where(nodes.c.name == node)
    if window.at is not None:
        stmt = stmt.where(g.c.gap_from <= window.at, g.c.gap_to >= window.at)
    else:
        if window.end is not None:
            stmt = stmt.where(g.c.gap_from < window.end)
        if window.start is not None:
            stmt = stmt.where(g.c.gap_to > window.start)
    if cursor is not None:
        stmt = stmt.where(g.c.id > cursor)
    with store.read() as conn:
        rows = list(conn.execute(stmt))
    return _page(rows, limit, lambda r: {
        "id": r.id, "node": r.node, "from": format_time(r.gap_from),
        "to": format_time(r.gap_to), "dropped_writes": r.dropped_writes, "reason": r.reason})


def _float(value: Any) -> float | None:
    return None if value is None else round(float(value), 3)


def _seconds(start: datetime, end: datetime) -> tuple[int, int]:
    """The whole seconds ``lo <= at_epoch <= hi`` of the window ``[start, end]``."""
    return math.ceil(start.timestamp()), math.floor(end.timestamp())


def _partial_sums(columns: tuple[str, ...], lo: int, hi: int, step: int,
                  node: str | None) -> list[Select[Any]]:
    """Statements whose rows are ``(bucket, node_id, samples, sum per column)`` for the
    summaries with ``lo <= at_epoch <= hi``; one (bucket, node) may have a row in several of
    them, to be added up. Whole hours inside the window come from the hourly roll-up when
    the step is a multiple of an hour; the edges (and other steps) from the raw summaries."""
    parts: list[Select[Any]] = []
    s = node_summaries
    raw_ranges = [(lo, hi)]
    if step % 3600 == 0:
        h_lo = -(-lo // 3600) * 3600
        h_hi = (hi + 1) // 3600 * 3600  # hours [h, h + 3600) with h + 3600 <= hi + 1
        if h_lo < h_hi:
            h = node_summaries_hourly
            bucket = (h.c.hour_epoch - h.c.hour_epoch % step).label("bucket")
            stmt = (select(bucket, h.c.node_id.label("node_id"),
                           func.sum(h.c.samples).label("samples"),
                           *[func.sum(h.c[f"sum_{c}"]).label(c) for c in columns])
                    .where(h.c.hour_epoch >= h_lo, h.c.hour_epoch < h_hi)
                    .group_by(bucket, h.c.node_id))
            if node is not None:
                stmt = stmt.join(nodes, nodes.c.id == h.c.node_id).where(nodes.c.name == node)
            parts.append(stmt)
            raw_ranges = [(lo, h_lo - 1), (h_hi, hi)]
    for a, b in raw_ranges:
        if a > b:
            continue
        bucket = (s.c.at_epoch - s.c.at_epoch % step).label("bucket")
        stmt = (select(bucket, s.c.node_id.label("node_id"), func.count().label("samples"),
                       *[func.sum(s.c[c]).label(c) for c in columns])
                .where(s.c.at_epoch >= a, s.c.at_epoch <= b)
                .group_by(bucket, s.c.node_id))
        if node is not None:
            stmt = stmt.join(nodes, nodes.c.id == s.c.node_id).where(nodes.c.name == node)
        parts.append(stmt)
    return parts


def summary(store: HistoryStore, node: str, start: datetime, end: datetime,
            step: int) -> dict[str, Any]:
    """The node's summaries in [start, end], averaged per ``step`` seconds."""
    # One node: at most a few thousand (bucket) rows, added up here.
    sums: dict[int, list[float]] = {}
    with store.read() as conn:
        for stmt in _partial_sums(SUMMARY_COLUMNS, *_seconds(start, end), step, node):
            for r in conn.execute(stmt):
                acc = sums.setdefault(int(r[0]), [0.0] * (len(SUMMARY_COLUMNS) + 1))
                for i, v in enumerate(r[2:]):
                    acc[i] += float(v or 0)
    index = {c: i + 1 for i, c in enumerate(SUMMARY_COLUMNS)}
    points = []
    for b, acc in sorted(sums.items()):
        n = acc[0]
        if not n:
            continue

        def avg(c: str, acc: list[float] = acc, n: float = n) -> float | None:
            return _float(acc[index[c]] / n)

        points.append({
            "t": format_time(datetime.fromtimestamp(b, UTC)),
            "samples": int(n),
            "cpus": {p: avg(f"cpus_{p}") for p in SUMMARY_POOLS},
            "containers": {a: avg(f"containers_{a}") for a in SUMMARY_ASSIGNMENTS},
            "online_cpus": avg("online_cpus"), "pods": avg("pods"),
            "reclaimed_cpus": avg("reclaimed_cpus"),
            "reclaimable_cpus": avg("reclaimable_cpus"), "anomalies": avg("anomalies"),
        })
    return {"node": node, "from": format_time(start), "to": format_time(end), "step": step,
            "points": points}


def fleet_ratio(store: HistoryStore, start: datetime, end: datetime, step: int,
                node: str | None = None) -> dict[str, Any]:
    """pod_shared to pod_exclusive CPUs summed over the fleet per step (each node's
    samples averaged within the step first, so nodes count equally)."""
    lo, hi = _seconds(start, end)
    rows: list[tuple[int, int, float, float]] = []
    with store.read() as conn:
        # Whole buckets of an automatic step come from the fleet roll-up, one row each; the
        # window's partial edges (and other steps, or one node) from each node's sums.
        first, end_ = whole_buckets(conn, step, lo, hi) if node is None else (0, 0)
        ranges = [(lo, hi)]
        if first < end_:
            rows = bucket_rows(conn, step, first, end_)
            ranges = [(lo, first - 1), (end_, hi)]
        statements = [stmt for a, b in ranges if a <= b
                      for stmt in _partial_sums(FLEET_COLUMNS, a, b, step, node)]
        if statements:
            rows += _per_node_ratio(conn, statements)
    points = [{
        "t": format_time(datetime.fromtimestamp(b, UTC)), "nodes": count,
        "pod_shared_cpus": round(shared, 3), "pod_exclusive_cpus": round(exclusive, 3),
        "ratio": round(shared / exclusive, 6) if exclusive else None,
    } for b, count, shared, exclusive in sorted(rows)]
    return {"from": format_time(start), "to": format_time(end), "step": step,
            "points": points}


def _per_node_ratio(conn: Any, statements: list[Select[Any]]
                    ) -> list[tuple[int, int, float, float]]:
    """``(bucket, nodes, pod_shared, pod_exclusive)`` from each node's partial sums: the
    database averages each node per bucket and sums per bucket, one row per point."""
    parts = union_all(*statements).subquery()
    samples = func.sum(parts.c.samples)
    per_node = (select(parts.c.bucket,
                       (cast(func.sum(parts.c.cpus_pod_shared), Float) / samples)
                       .label("shared"),
                       (cast(func.sum(parts.c.cpus_pod_exclusive), Float) / samples)
                       .label("exclusive"))
                .group_by(parts.c.bucket, parts.c.node_id)
                .having(samples > 0).subquery())
    stmt = (select(per_node.c.bucket, func.count(), func.sum(per_node.c.shared),
                   func.sum(per_node.c.exclusive))
            .group_by(per_node.c.bucket))
    return [(int(b), int(count), float(shared), float(exclusive))
            for b, count, shared, exclusive in conn.execute(stmt)]


@dataclass(frozen=True, slots=True)
class _Span:
    """The half-open span ``[start, end)`` of :func:`events` (``end`` None: open-ended)."""

    start: datetime
    end: datetime | None

    def holds(self, t: datetime | None) -> bool:
        return t is not None and t >= self.start and (self.end is None or t < self.end)

    def clause(self, col: Any) -> Any:
        return and_(col >= self.start, col < self.end) if self.end is not None \
            else col >= self.start


Event = tuple[datetime, int, dict[str, Any]]  # time, order among equal times, the event


def events(store: HistoryStore, start: datetime, end: datetime | None = None,
           node: str | None = None, limit: int = 10000) -> list[dict[str, Any]]:
    """Changes in [start, end): intervals opened and closed, anomalies raised and resolved,
    gaps; oldest first (at one instant: gaps, releases, assignments, resolutions, raises)."""
    span = _Span(start, end)
    where_node = nodes.c.name == node if node is not None else true()
    with store.read() as conn:
        out = [*_assignment_events(conn, span, where_node, limit),
               *_anomaly_events(conn, span, where_node, limit),
               *_gap_events(conn, span, where_node, limit)]
    out.sort(key=lambda e: (e[0], e[1]))
    return [e[2] for e in out[:limit]]


def _assignment_events(conn: Any, span: _Span, where_node: Any, limit: int) -> list[Event]:
    a = assignment_intervals
    return _interval_events(
        conn, span, where_node, limit, a, a.c.valid_from, a.c.valid_to,
        lambda r: {k: v for k, v in _assignment_json(r).items()
                   if k not in ("valid_from", "valid_to", "id")},
        ("valid_from", 1, "assigned"), ("valid_to", 0, "released"))


def _anomaly_events(conn: Any, span: _Span, where_node: Any, limit: int) -> list[Event]:
    n = anomaly_intervals
    return _interval_events(
        conn, span, where_node, limit, n, n.c.first_seen, n.c.resolved_at,
        lambda r: {k: v for k, v in _anomaly_json(r).items()
                   if k in ("node", "kind", "namespace", "pod", "container", "detail")},
        ("first_seen", 3, "anomaly_raised"), ("resolved_at", 2, "anomaly_resolved"))


def _interval_events(conn: Any, span: _Span, where_node: Any, limit: int, table: Any,
                     start: Any, end: Any, base_of: Callable[[Any], dict[str, Any]],
                     *edges: tuple[str, int, str]) -> list[Event]:
    """An interval table's rows as events at each edge (column, sort order on ties, name)
    that falls in the span."""
    out: list[Event] = []
    rows = conn.execute(
        select(table, nodes.c.name.label("node")).join(nodes, nodes.c.id == table.c.node_id)
        .where(where_node, or_(span.clause(start), span.clause(end)))
        .order_by(table.c.id).limit(limit * 2))
    for r in rows:
        base = base_of(r)
        for column, order, name in edges:
            t = getattr(r, column)
            if span.holds(t):
                out.append((t, order, {"time": format_time(t), "event": name, **base}))
    return out


def _gap_events(conn: Any, span: _Span, where_node: Any, limit: int) -> list[Event]:
    g = history_gaps
    rows = conn.execute(
        select(g, nodes.c.name.label("node")).join(nodes, nodes.c.id == g.c.node_id)
        .where(where_node, span.clause(g.c.gap_from)).order_by(g.c.id).limit(limit))
    return [(r.gap_from, -1, {
        "time": format_time(r.gap_from), "event": "gap", "node": r.node,
        "until": format_time(r.gap_to), "dropped_writes": r.dropped_writes,
        "detail": r.reason}) for r in rows]
