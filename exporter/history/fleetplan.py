"""What a writer adds to the fleet roll-up for the summaries it just inserted: the pure
arithmetic of :mod:`exporter.history.fleet`, shared by both stores' write paths (neither
SQLAlchemy nor a database here; the caller reads the node's samples)."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

# The automatic steps of the series (the API picks the smallest giving about 500 points).
SERIES_STEPS = (60, 120, 300, 600, 900, 1800, 3600, 7200, 10800, 21600, 43200, 86400, 172800,
                604800)
NANO = 10**9  # units of a node's average CPUs in the roll-up
HOUR = 3600
SUB_HOUR_STEPS = tuple(s for s in SERIES_STEPS if s < HOUR)  # each divides an hour
HOUR_STEPS = tuple(s for s in SERIES_STEPS if s >= HOUR)  # each a whole number of hours
FLEET_COLUMNS = ("cpus_pod_shared", "cpus_pod_exclusive")
# plan --fleet's staleness bound (docs/plan.md#fleet): a running exporter writes at least one
# summary per --history.summary-interval (60 s by default), which moves its node's
# last_seen; five missed is an exporter stopped. Here, not in fleetread, so that the CLI's
# parser can name it without importing SQLAlchemy.
DEFAULT_STALE_AFTER = 300.0

# ``read(statement, lo, hi)``: the node's ``(epoch, samples, *FLEET_COLUMNS sums)`` with
# ``lo <= epoch < hi``, from its raw summaries (``fleet_raw``, one sample each) or its
# hourly roll-up (``fleet_hourly``).
Reader = Callable[[str, int, int], Iterable[Any]]


def node_average(total: int, samples: int) -> int:
    """``total / samples`` in billionths, rounded half up: ``(2·total·10⁹ + samples) div
    (2·samples)``, the same integer expression as ``fleet._sql_average`` (values are CPU
    counts, never negative, so SQL's truncating division equals Python's floor)."""
    return (2 * total * NANO + samples) // (2 * samples)


@dataclass(slots=True)
class _Bucket:
    """One node's samples in a bucket: written by this transaction, and in all."""

    added: int = 0
    added_sums: list[int] = field(default_factory=lambda: [0, 0])
    samples: int = 0
    sums: list[int] = field(default_factory=lambda: [0, 0])


def fleet_additions(samples: list[tuple[int, dict[str, int]]], read: Reader
                    ) -> list[dict[str, int]]:
    """The rows to add to the roll-up (``step``, ``bucket_epoch`` and the sums to add) for
    the node's summaries just inserted (``(at_epoch, values)``; its raw rows and hourly
    roll-up already hold them), in (step, bucket) order."""
    buckets: dict[tuple[int, int], _Bucket] = {}
    for epoch, values in samples:
        for step in SERIES_STEPS:
            b = buckets.setdefault((step, epoch - epoch % step), _Bucket())
            b.added += 1
            for i, c in enumerate(FLEET_COLUMNS):
                b.added_sums[i] += int(values.get(c, 0))
    _count(buckets, read)
    rows = []
    for (step, start), b in sorted(buckets.items()):
        old = b.samples - b.added
        old_sums = [t - a for t, a in zip(b.sums, b.added_sums, strict=True)]
        shared, exclusive = (
            node_average(new, b.samples) - (node_average(was, old) if old else 0)
            for new, was in zip(b.sums, old_sums, strict=True))
        rows.append({"step": step, "bucket_epoch": start, "nodes": 0 if old else 1,
                     "cpus_pod_shared_nano": shared, "cpus_pod_exclusive_nano": exclusive})
    return rows


def _count(buckets: dict[tuple[int, int], _Bucket], read: Reader) -> None:
    """Fill in the node's samples and sums per bucket from its raw summaries (steps below
    an hour) and its hourly roll-up (whole hours)."""
    for steps, statement in ((SUB_HOUR_STEPS, "fleet_raw"), (HOUR_STEPS, "fleet_hourly")):
        mine = [(k, b) for k, b in buckets.items() if k[0] in steps]
        lo = min(start for (_, start), _ in mine)
        hi = max(start + step for (step, start), _ in mine)
        for epoch, n, *values in read(statement, lo, hi):
            for step in steps:
                b = buckets.get((step, epoch - epoch % step))
                if b is not None:
                    b.samples += n
                    for i, v in enumerate(values):
                        b.sums[i] += int(v)
