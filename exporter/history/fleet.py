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
never deadlock. Rows are back-filled by migration 0003 and rebuilt by
``HistoryStore.rebuild_rollup``."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from sqlalchemy import BigInteger, Connection, Select, bindparam, cast, delete, func, literal
from sqlalchemy import select as sa_select

from exporter.history.schema import (
    SERIES_STEPS,
    fleet_summaries,
    node_summaries,
    node_summaries_hourly,
)

NANO = 10**9  # units of a node's average CPUs in the roll-up
_HOUR = 3600
SUB_HOUR_STEPS = tuple(s for s in SERIES_STEPS if s < _HOUR)  # each divides an hour
HOUR_STEPS = tuple(s for s in SERIES_STEPS if s >= _HOUR)  # each a whole number of hours
FLEET_COLUMNS = ("cpus_pod_shared", "cpus_pod_exclusive")


def node_average(total: int, samples: int) -> int:
    """``total / samples`` in billionths, rounded half up: ``(2·total·10⁹ + samples) div
    (2·samples)``, the same integer expression as :func:`_sql_average` (values are CPU
    counts, never negative, so SQL's truncating division equals Python's floor)."""
    return (2 * total * NANO + samples) // (2 * samples)


def _sql_average(total: Any, samples: Any) -> Any:
    total = cast(total, BigInteger)
    samples = cast(samples, BigInteger)
    return (2 * total * NANO + samples) // (2 * samples)


@dataclass(slots=True)
class _Bucket:
    """One node's samples in a bucket: written by this transaction, and in all."""

    added: int = 0
    added_sums: list[int] = field(default_factory=lambda: [0, 0])
    samples: int = 0
    sums: list[int] = field(default_factory=lambda: [0, 0])


class FleetRollup:
    """The statements that keep the roll-up, built once per store (see
    ``store._WriteStatements`` for why)."""

    def __init__(self, stmt: Any) -> None:
        """``stmt``: this backend's ``insert(fleet_summaries)`` (with ``on_conflict_*``)."""
        f, s, h = fleet_summaries, node_summaries, node_summaries_hourly
        self.add = stmt.on_conflict_do_update(
            index_elements=["step", "bucket_epoch"],
            set_={c: f.c[c] + stmt.excluded[c]
                  for c in ("nodes", "cpus_pod_shared_nano", "cpus_pod_exclusive_nano")})
        # Both read (time, samples, sums): a raw summary is one sample.
        self.raw = (sa_select(s.c.at_epoch, literal(1), *[s.c[c] for c in FLEET_COLUMNS])
                    .where(s.c.node_id == bindparam("b_node"),
                           s.c.at_epoch >= bindparam("b_lo"), s.c.at_epoch < bindparam("b_hi")))
        self.hourly = (sa_select(h.c.hour_epoch, h.c.samples,
                                 *[h.c[f"sum_{c}"] for c in FLEET_COLUMNS])
                       .where(h.c.node_id == bindparam("b_node"),
                              h.c.hour_epoch >= bindparam("b_lo"),
                              h.c.hour_epoch < bindparam("b_hi")))

    def add_samples(self, conn: Connection, node_id: int,
                    samples: list[tuple[int, dict[str, int]]]) -> None:
        """Add the node's summaries just inserted (``(at_epoch, values)``; the raw rows and
        the hourly roll-up already hold them) to every step's bucket."""
        if not samples:
            return
        buckets: dict[tuple[int, int], _Bucket] = {}
        for epoch, values in samples:
            for step in SERIES_STEPS:
                b = buckets.setdefault((step, epoch - epoch % step), _Bucket())
                b.added += 1
                for i, c in enumerate(FLEET_COLUMNS):
                    b.added_sums[i] += int(values.get(c, 0))
        self._count(conn, node_id, buckets)
        rows = []
        for (step, start), b in sorted(buckets.items()):
            old = b.samples - b.added
            old_sums = [t - a for t, a in zip(b.sums, b.added_sums, strict=True)]
            shared, exclusive = (
                node_average(new, b.samples) - (node_average(was, old) if old else 0)
                for new, was in zip(b.sums, old_sums, strict=True))
            rows.append({"step": step, "bucket_epoch": start, "nodes": 0 if old else 1,
                         "cpus_pod_shared_nano": shared,
                         "cpus_pod_exclusive_nano": exclusive})
        conn.execute(self.add, rows)

    def _count(self, conn: Connection, node_id: int,
               buckets: dict[tuple[int, int], _Bucket]) -> None:
        """Fill in the node's samples and sums per bucket from its raw summaries (steps
        below an hour) and its hourly roll-up (whole hours)."""
        for steps, stmt in ((SUB_HOUR_STEPS, self.raw), (HOUR_STEPS, self.hourly)):
            mine = [(k, b) for k, b in buckets.items() if k[0] in steps]
            lo = min(start for (_, start), _ in mine)
            hi = max(start + step for (step, start), _ in mine)
            for epoch, n, *values in conn.execute(
                    stmt, {"b_node": node_id, "b_lo": lo, "b_hi": hi}):
                for step in steps:
                    b = buckets.get((step, epoch - epoch % step))
                    if b is not None:
                        b.samples += n
                        for i, v in enumerate(values):
                            b.sums[i] += int(v)


def _per_node(step: int) -> Select[Any]:
    """Each node's samples and sums per bucket of ``step``: from the raw summaries below an
    hour, from the hourly roll-up for whole hours."""
    if step < _HOUR:
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
