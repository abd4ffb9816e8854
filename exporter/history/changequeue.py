"""The history writer's change detection: turns each reduced ledger into the change-set
against what the queued change-sets leave in the database, and holds those change-sets, in
order, until they are written (docs/history.md#writer).

- Nothing is queued when the ledger did not change, the placement state did not either, and
  no summary is due.
- ``max_pending`` bounds the queue. Past the bound, change-sets are dropped and counted; once
  there is room again, one explicit gap row (its span and the dropped count) is queued with
  the latest state in full, so history is never wrong, only coarser inside the recorded gap.
- The first change-set (and the first after the database refused one) is the whole state:
  the store reconciles the node's open intervals with it instead of duplicating them.

Pure bookkeeping: no I/O, no event loop; :class:`~exporter.history.writer.HistoryWriter`
feeds it from its converter task and writes what it holds from its flusher task.
"""

from __future__ import annotations

import logging
from collections import deque
from collections.abc import Callable
from datetime import datetime, timedelta
from typing import TYPE_CHECKING

from exporter.history.changes import ChangeSet, Gap, State, diff_states
from exporter.history.common import describe_error

if TYPE_CHECKING:
    from exporter.history.placement import PlacementRow

log = logging.getLogger("podres.history")


class ChangeQueue:
    """The change-sets not yet written, and what they leave in the database."""

    def __init__(self, node: str, *, max_pending: int, summary_interval: float,
                 on_queued: Callable[[], None]) -> None:
        self.node = node
        self.max_pending = max_pending
        self.summary_interval = summary_interval
        self._on_queued = on_queued  # wakes the flusher
        self.pending: deque[ChangeSet] = deque()
        self.dropped = 0
        self._seq = 0
        # The node's placement state as last submitted, and the digest of the last one
        # queued: a change-set carries it only when it changed (docs/history.md).
        self.placement: PlacementRow | None = None
        self._placement_queued: str | None = None
        # What the queued change-sets leave in the database (None: not known yet, so the
        # next change-set is a full reconcile).
        self._basis: State | None = None
        self.last_at: datetime | None = None
        self._last_summary_at: datetime | None = None
        # Gap bookkeeping while the queue is full.
        self._gap_from: datetime | None = None
        self._gap_dropped = 0
        self._gap_latest: tuple[State, datetime] | None = None
        self._carry_gap: Gap | None = None

    @property
    def drained(self) -> bool:
        """Nothing queued, and no gap waiting for room to be queued."""
        return not self.pending and self._gap_latest is None

    def batch(self, limit: int) -> list[ChangeSet]:
        """The oldest change-sets, at most ``limit``, left queued until :meth:`written`."""
        return [self.pending[i] for i in range(min(limit, len(self.pending)))]

    def written(self, batch: list[ChangeSet]) -> None:
        for _ in batch:
            self.pending.popleft()

    def abandon(self) -> int:
        """Counts what is still queued as dropped (at shutdown); returns how many."""
        lost = len(self.pending)
        self.dropped += lost
        return lost

    # -- change detection --------------------------------------------------------------

    def _next_seq(self) -> int:
        self._seq += 1
        return self._seq

    def _summary_due(self, at: datetime) -> bool:
        return (self._last_summary_at is None
                or at - self._last_summary_at >= timedelta(seconds=self.summary_interval))

    def record(self, state: State, at: datetime) -> None:
        """Queues what the ledger reduced to ``state``, observed at ``at``, changed."""
        if self.last_at is not None and at < self.last_at:
            at = self.last_at  # the clock went back: keep intervals well-formed
        prev_at = self.last_at or at
        summary_due = self._summary_due(at)
        self.end_gap_if_room()
        if self._gap_from is not None:  # still no room: count what is lost
            self._count_lost(state, at, summary_due)
            return
        cs = self._change_set(state, at, prev_at)
        if summary_due:
            cs.summary = state.summary
        self.last_at = at
        if (cs.state is None and cs.diff is None and cs.summary is None
                and not self._placement_changed()):
            self._basis = state  # identical content; keep the newest object
            return
        if len(self.pending) >= self.max_pending:
            self._start_gap(state, at, summary_due)
            return
        if summary_due:
            self._last_summary_at = at
        self._basis = state
        self._enqueue(cs)

    def _change_set(self, state: State, at: datetime, prev_at: datetime) -> ChangeSet:
        """The whole state after a gap or at the start, else what changed since the basis."""
        if self._basis is None:
            cs = ChangeSet(self._next_seq(), at, prev_at, state=state, gap=self._carry_gap)
            self._carry_gap = None
            return cs
        diff = diff_states(self._basis.assignments, self._basis.anomalies, state,
                           self._basis.devices)
        return ChangeSet(self._next_seq(), at, prev_at, diff=diff if diff else None)

    def _placement_changed(self) -> bool:
        return self.placement is not None and self.placement.digest != self._placement_queued

    def _enqueue(self, cs: ChangeSet) -> None:
        row = self.placement
        # A full reconcile carries it always: it may replace change-sets that did.
        if row is not None and (cs.full or row.digest != self._placement_queued):
            cs.placement = row
            self._placement_queued = row.digest
        self.pending.append(cs)
        self._on_queued()

    # -- the bound and its gaps --------------------------------------------------------

    def _count_lost(self, state: State, at: datetime, summary_due: bool) -> None:
        """A reading while the queue has no room: counted as dropped when it would have
        written something, and kept as the state to write when room comes back."""
        prev_state = self._gap_latest[0] if self._gap_latest else self._basis
        changed = prev_state is None or bool(
            diff_states(prev_state.assignments, prev_state.anomalies, state,
                        prev_state.devices))
        if changed or summary_due:
            self._gap_dropped += 1
            self.dropped += 1
        self._gap_latest = (state, at)
        self.last_at = at
        if summary_due:
            self._last_summary_at = at

    def _start_gap(self, state: State, at: datetime, summary_due: bool) -> None:
        """The queue is full: drop this write and every one until there is room, which
        then writes the whole state with the gap recorded."""
        self._seq -= 1
        self._gap_from = at
        self._gap_dropped = 1
        self.dropped += 1
        self._gap_latest = (state, at)
        if summary_due:
            self._last_summary_at = at
        log.warning("history queue full; dropping writes until there is room (a gap "
                    "will be recorded)", extra={"node": self.node,
                                                "pending": len(self.pending)})

    def end_gap_if_room(self) -> None:
        if self._gap_from is None or self._gap_latest is None:
            return
        if len(self.pending) >= self.max_pending:
            return
        state, at = self._gap_latest
        cs = ChangeSet(self._next_seq(), at, at, state=state, summary=state.summary,
                       gap=Gap(self._gap_from, at, self._gap_dropped,
                               f"history queue full ({self.max_pending} pending writes)"))
        self._last_summary_at = at
        self._basis = state
        self._gap_from = None
        self._gap_dropped = 0
        self._gap_latest = None
        self._enqueue(cs)

    # -- a change-set the database refuses ---------------------------------------------

    def refused(self, batch: list[ChangeSet], exc: BaseException) -> None:
        """A permanent error (the database disagrees with what the writer believed it holds,
        or refuses a value). First, every queued change-set is collapsed into one full
        reconcile of the newest state (with a gap when intermediate changes are lost); if
        that is refused too, it is dropped and the next ledger reconciles in full."""
        head = batch[0]
        if head.state is None and self._basis is not None:
            log.warning("history write rejected; reconciling in full",
                        extra={"node": self.node, "error": describe_error(exc)})
            newest = self.pending[-1]
            collapsed = len(self.pending)
            self.pending.clear()
            gap = None
            if collapsed > 1:
                self.dropped += collapsed - 1
                gap = Gap(head.prev_at, newest.at, collapsed - 1,
                          f"write refused by the database: {describe_error(exc)}"[:500])
            self._enqueue(ChangeSet(self._next_seq(), newest.at, head.prev_at,
                                    state=self._basis, summary=newest.summary, gap=gap))
            return
        log.error("history dropping a change-set the database refuses",
                  extra={"node": self.node, "error": describe_error(exc)})
        self.pending.popleft()
        self.dropped += 1
        self._placement_queued = None  # what it carried is written again with the next
        self._carry_gap = Gap(head.prev_at, head.at, 1,
                              f"write refused by the database: {describe_error(exc)}"[:500])
        if not self.pending:
            self._basis = None  # the next ledger reconciles in full
