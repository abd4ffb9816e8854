"""The fleet roll-up (table ``fleet_summaries``): for every automatic step of the series
and every bucket of that step, how many nodes have summaries in it and the sum over those
nodes of each node's average ``pod_shared`` and ``pod_exclusive`` CPUs in it — the answer
of ``/api/v1/fleet/ratio`` for a whole bucket, read as one row instead of recomputed from
every node's summaries (docs/history.md, "Fleet roll-up").

A node's average is kept as an integer in billionths of a CPU, rounded the same way here
and in SQL, so that the writers of a fleet can each add their own node's change of average
(new minus old) to a shared row in any order, concurrently, and the row still equals, to
the last unit, the sum of the nodes' rounded averages (no floating-point drift).

Each writer adds its deltas at the end of its transaction, in (step, bucket) order, after
every lock on its own node's rows: writers wait for each other on a bucket only briefly and
never deadlock (the arithmetic of those deltas, shared with the embedded store, is in
:mod:`exporter.history.fleetplan`). Rows are back-filled by migration 0003 and rebuilt by
``HistoryStore.rebuild_rollup``."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from sqlalchemy import BigInteger, Connection, Select, bindparam, cast, delete, func, literal
from sqlalchemy import select as sa_select

from exporter.history.fleetplan import (
    FLEET_COLUMNS,
    HOUR,
    NANO,
    SERIES_STEPS,
    node_average,
)
from exporter.history.schema import fleet_summaries, node_summaries, node_summaries_hourly

__all__ = ["FLEET_COLUMNS", "NANO", "FleetStatements", "node_average"]


def _sql_average(total: Any, samples: Any) -> Any:
    """:func:`~exporter.history.fleetplan.node_average` in SQL."""
    total = cast(total, BigInteger)
    samples = cast(samples, BigInteger)
    return (2 * total * NANO + samples) // (2 * samples)


class FleetStatements:
    """The statements that keep the roll-up (``fleet_add``, ``fleet_raw``,
    ``fleet_hourly`` of ``common.WritePath``), built once per store (see
    ``store._WriteStatements`` for why)."""

    def __init__(self, stmt: Any) -> None:
        """``stmt``: this backend's ``insert(fleet_summaries)`` (with ``on_conflict_*``)."""
        f, s, h = fleet_summaries, node_summaries, node_summaries_hourly
        self.fleet_add = stmt.on_conflict_do_update(
            index_elements=["step", "bucket_epoch"],
            set_={c: f.c[c] + stmt.excluded[c]
                  for c in ("nodes", "cpus_pod_shared_nano", "cpus_pod_exclusive_nano")})
        # Both read (time, samples, sums): a raw summary is one sample.
        self.fleet_raw = (
            sa_select(s.c.at_epoch, literal(1), *[s.c[c] for c in FLEET_COLUMNS])
            .where(s.c.node_id == bindparam("b_node"),
                   s.c.at_epoch >= bindparam("b_lo"), s.c.at_epoch < bindparam("b_hi")))
        self.fleet_hourly = (
            sa_select(h.c.hour_epoch, h.c.samples, *[h.c[f"sum_{c}"] for c in FLEET_COLUMNS])
            .where(h.c.node_id == bindparam("b_node"), h.c.hour_epoch >= bindparam("b_lo"),
                   h.c.hour_epoch < bindparam("b_hi")))


def _per_node(step: int) -> Select[Any]:
    """Each node's samples and sums per bucket of ``step``: from the raw summaries below an
    hour, from the hourly roll-up for whole hours."""
    if step < HOUR:
        s = node_summaries
        bucket = s.c.at_epoch - s.c.at_epoch % step
        return (sa_select(bucket.label("bucket_epoch"), func.count().label("samples"),
                          *[func.sum(s.c[c]).label(c) for c in FLEET_COLUMNS])
                .group_by(s.c.node_id, bucket))
    h = node_summaries_hourly
    bucket = h.c.hour_epoch - h.c.hour_epoch % step
    return (sa_select(bucket.label("bucket_epoch"), func.sum(h.c.samples).label("samples"),
                      *[func.sum(h.c[f"sum_{c}"]).label(c) for c in FLEET_COLUMNS])
            .group_by(h.c.node_id, bucket))


def rebuild_fleet_rollup(conn: Connection, steps: Iterable[int] = SERIES_STEPS) -> int:
    """Recompute the roll-up from the summaries (the hourly roll-up must be current);
    returns the number of rows written."""
    f = fleet_summaries
    conn.execute(delete(f))
    written = 0
    for step in steps:
        per_node = _per_node(step).subquery()
        select = (sa_select(literal(step), per_node.c.bucket_epoch, func.count(),
                            *[func.sum(_sql_average(per_node.c[c], per_node.c.samples))
                              for c in FLEET_COLUMNS])
                  .group_by(per_node.c.bucket_epoch))
        written += conn.execute(f.insert().from_select(
            ["step", "bucket_epoch", "nodes", "cpus_pod_shared_nano",
             "cpus_pod_exclusive_nano"], select)).rowcount
    return written


def prune_fleet_rollup(conn: Connection, cutoff: int) -> None:
    """Drop the buckets that ended by ``cutoff`` (unix seconds). A bucket the cutoff
    falls in keeps the samples pruned from it, like the hourly roll-up's hour."""
    f = fleet_summaries
    conn.execute(delete(f).where(f.c.bucket_epoch + f.c.step <= cutoff))


def whole_buckets(conn: Connection, step: int, lo: int, hi: int) -> tuple[int, int]:
    """The buckets ``[first, end)`` of ``step`` that the roll-up answers within the
    summaries' window ``lo <= at_epoch <= hi``: whole buckets inside the window, from the
    roll-up's oldest bucket on (older ones were pruned from it; their nodes may still have
    summaries). ``first >= end`` when there are none."""
    if step not in SERIES_STEPS:
        return 0, 0
    f = fleet_summaries
    oldest = conn.execute(sa_select(func.min(f.c.bucket_epoch))
                          .where(f.c.step == step)).scalar_one_or_none()
    if oldest is None:
        return 0, 0
    first = max(-(-lo // step) * step, int(oldest))
    end = (hi + 1) // step * step
    return first, end


def bucket_rows(conn: Connection, step: int, first: int, end: int
                ) -> list[tuple[int, int, float, float]]:
    """``(bucket, nodes, pod_shared, pod_exclusive)`` of the buckets in ``[first, end)``."""
    f = fleet_summaries
    rows = conn.execute(
        sa_select(f.c.bucket_epoch, f.c.nodes, f.c.cpus_pod_shared_nano,
                  f.c.cpus_pod_exclusive_nano)
        .where(f.c.step == step, f.c.bucket_epoch >= first, f.c.bucket_epoch < end,
               f.c.nodes > 0))
    return [(int(b), int(n), int(sh) / NANO, int(ex) / NANO) for b, n, sh, ex in rows]
