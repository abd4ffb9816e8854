"""The history writer: turns each polled ledger into the differences against the previous
one and writes them in the background, in order, surviving database outages.

- ``submit()`` only appends to an in-memory inbox: the poll loop and scrapes never wait for
  the database.
- A converter task reduces each ledger to its :class:`~exporter.history.changes.State` and
  queues the change-set (nothing at all when the ledger did not change and no summary is due).
- A flusher task writes queued change-sets in order, several per transaction, in a dedicated
  thread; on failure it retries the same batch with exponential backoff, capped at
  ``RETRY_MAX`` seconds so that writes resume within seconds of the database's return.
- ``close`` is bounded: what cannot be written within its timeout (a database that does
  not answer) is counted as dropped, and a write stuck in the database thread is left
  behind, not waited for: that thread is a daemon, so it does not hold the process either
  (docs/history.md#outages).
- ``max_pending`` bounds the queue. Past the bound, change-sets are dropped and counted; once
  there is room again, one explicit gap row (its span and the dropped count) is written and
  the latest state is reconciled in full against the database, so history is never wrong,
  only coarser inside the recorded gap.
- The first write after start reconciles the node's open intervals in the database with the
  first ledger (closes what vanished, keeps what is unchanged) instead of duplicating them.

The store is either write path of ``common.WritePath``: the SQLAlchemy store or, for
``serve`` on SQLite, the embedded one; nothing here imports SQLAlchemy.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import queue
import threading
import uuid
from collections import deque
from collections.abc import Callable
from concurrent.futures import Executor, Future
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any

from exporter.history.changes import ChangeSet, Gap, State, diff_states, state_of
from exporter.history.common import WritePath, describe_error, is_transient
from exporter.history.timeutil import utc
from exporter.runtime import release_free_memory
from reconciler.ledger import Ledger

if TYPE_CHECKING:
    from exporter.history.placement import PlacementRow
    from reconciler.allocator.live import NodeState

log = logging.getLogger("podres.history")

MAX_BATCH = 64  # change-sets per transaction when catching up
RELEASE_AFTER_ROWS = 500
# The longest pause between two attempts: the delay between the database's return and the
# first write that succeeds (an outage measured 20 s of dropped writes with a 30 s cap).
RETRY_MAX = 5.0


class _DaemonExecutor(Executor):
    """One daemon thread running what is submitted, in order. ``ThreadPoolExecutor``'s
    threads are joined when the interpreter exits: one stuck in a read from a frozen
    database would hold the process past its termination grace period."""

    def __init__(self, name: str) -> None:
        self._jobs: queue.SimpleQueue[tuple[Future[Any], Callable[..., Any], tuple[Any, ...]]
                                      | None] = queue.SimpleQueue()
        self._name = name
        self._thread: threading.Thread | None = None  # started by the first job

    def _work(self) -> None:
        while (job := self._jobs.get()) is not None:
            future, fn, args = job
            if future.set_running_or_notify_cancel():
                try:
                    future.set_result(fn(*args))
                except BaseException as exc:  # handed to the waiter, as an executor does
                    future.set_exception(exc)
            del job, future, fn, args  # nothing of a finished job kept while waiting

    def submit(self, fn: Callable[..., Any], /, *args: Any, **kwargs: Any) -> Future[Any]:
        assert not kwargs, "positional arguments only"
        future: Future[Any] = Future()
        self._jobs.put((future, fn, args))
        if self._thread is None:
            self._thread = threading.Thread(target=self._work, name=self._name, daemon=True)
            self._thread.start()
        return future

    def shutdown(self, wait: bool = True, *, cancel_futures: bool = False) -> None:
        if self._thread is None:
            return
        self._jobs.put(None)
        if wait:
            self._thread.join()


def _reduce(ledger: Ledger, placement: NodeState | None
            ) -> tuple[State, PlacementRow | None]:
    """What the writer compares: the ledger's rows and the placement state's."""
    if placement is None:
        return state_of(ledger), None
    from exporter.history.placement import placement_row

    return state_of(ledger), placement_row(placement)


class HistoryWriter:
    def __init__(self, store: WritePath[Any], node: str, *, max_pending: int = 10000,
                 summary_interval: float = 60.0, retention: float = 30 * 86400,
                 prune_interval: float = 3600.0, retry_initial: float = 0.5,
                 retry_max: float = RETRY_MAX) -> None:
        if max_pending < 1:
            raise ValueError("max_pending must be at least 1")
        self.store = store
        self.node = node
        self.max_pending = max_pending
        self.summary_interval = summary_interval
        self.retention = retention
        self.prune_interval = prune_interval
        self.retry_initial = retry_initial
        self.retry_max = retry_max
        self.writer_id = uuid.uuid4().hex
        self.rows_written_total = 0
        self.last_error: str | None = None
        self._inbox: deque[tuple[Ledger, datetime, NodeState | None]] = deque()
        # The node's placement state as last submitted, and the digest of the last one
        # queued: a change-set carries it only when it changed (docs/history.md).
        self._placement: PlacementRow | None = None
        self._placement_queued: str | None = None
        self._pending: deque[ChangeSet] = deque()
        self._dropped = 0
        self._seq = 0
        # What the queued change-sets leave in the database (None: not known yet, so the
        # next change-set is a full reconcile).
        self._basis: State | None = None
        self._last_at: datetime | None = None
        self._last_summary_at: datetime | None = None
        # Gap bookkeeping while the queue is full.
        self._gap_from: datetime | None = None
        self._gap_dropped = 0
        self._gap_latest: tuple[State, datetime] | None = None
        self._inbox_event = asyncio.Event()
        self._pending_event = asyncio.Event()
        self._stop = asyncio.Event()
        self._tasks: list[asyncio.Task[None]] = []
        self._executor = _DaemonExecutor("podres-history")
        self._writing: asyncio.Future[Any] | None = None  # the write in the thread, if any
        self._last_prune: float | None = None
        self._carry_gap: Gap | None = None
        self._busy = False  # the flusher is between taking a batch and finishing with it
        self._closed = False

    # -- public ------------------------------------------------------------------------

    @property
    def pending_writes(self) -> int:
        """Change-sets waiting to be written (plus ledgers not yet compared)."""
        return len(self._pending) + len(self._inbox)

    @property
    def dropped_writes_total(self) -> int:
        """Change-sets dropped because the queue was full (recorded as gaps)."""
        return self._dropped

    async def start(self) -> None:
        if self._tasks:
            return
        self._tasks = [asyncio.create_task(self._convert_loop(), name="history-convert"),
                       asyncio.create_task(self._flush_loop(), name="history-flush")]

    def submit(self, ledger: Ledger, at: datetime, placement: NodeState | None = None
               ) -> None:
        """Queue a ledger observed at ``at`` (and the node's placement state, when its
        topology is known); returns at once."""
        if self._closed:
            return
        self._inbox.append((ledger, utc(at), placement))
        self._inbox_event.set()

    async def flush(self, timeout: float | None = None) -> bool:
        """Wait until everything submitted so far is written (True) or ``timeout`` passes."""
        async def _wait() -> None:
            while self._inbox or self._pending or self._gap_latest is not None or self._busy:
                await asyncio.sleep(0.01)
        try:
            await asyncio.wait_for(_wait(), timeout)
        except TimeoutError:
            return False
        return True

    async def close(self, timeout: float = 10.0) -> None:
        """Flush what can be flushed within ``timeout`` and stop, within ``timeout`` (and a
        little) whatever the database does."""
        if self._closed:
            return
        if self._tasks:
            await self.flush(timeout)
        writing = self._writing
        self._closed = True
        self._stop.set()
        self._inbox_event.set()
        self._pending_event.set()
        for task in self._tasks:
            task.cancel()
        for task in self._tasks:
            with contextlib.suppress(asyncio.CancelledError):
                await task
        self._tasks = []
        lost = len(self._pending)
        if lost:
            log.warning("history change-sets not written at shutdown",
                        extra={"node": self.node, "lost": lost, "error": self.last_error
                               or ("the database did not answer within "
                                   f"{timeout:g} s" if writing is not None else None)})
            self._dropped += lost
        # A write still in the database thread is not waited for: that thread is a daemon.
        self._executor.shutdown(wait=writing is None or writing.done())

    # -- conversion --------------------------------------------------------------------

    async def _convert_loop(self) -> None:
        while not self._stop.is_set():
            await self._inbox_event.wait()
            self._inbox_event.clear()
            while self._inbox:
                ledger, at, placement = self._inbox[0]
                try:
                    # Reducing a big ledger takes milliseconds: not on the event loop.
                    state, row = await asyncio.to_thread(_reduce, ledger, placement)
                    if row is not None:
                        self._placement = row
                    self._convert(state, at)
                except Exception:  # a malformed ledger must not stop the history
                    log.exception("history cannot record a ledger",
                                  extra={"node": self.node})
                finally:
                    self._inbox.popleft()

    def _next_seq(self) -> int:
        self._seq += 1
        return self._seq

    def _summary_due(self, at: datetime) -> bool:
        return (self._last_summary_at is None
                or at - self._last_summary_at >= timedelta(seconds=self.summary_interval))

    def _convert(self, state: State, at: datetime) -> None:
        if self._last_at is not None and at < self._last_at:
            at = self._last_at  # the clock went back: keep intervals well-formed
        prev_at = self._last_at or at
        summary_due = self._summary_due(at)
        self._end_gap_if_room()
        if self._gap_from is not None:  # still no room: count what is lost
            self._count_lost(state, at, summary_due)
            return
        cs = self._change_set(state, at, prev_at)
        if summary_due:
            cs.summary = state.summary
        self._last_at = at
        if (cs.state is None and cs.diff is None and cs.summary is None
                and not self._placement_changed()):
            self._basis = state  # identical content; keep the newest object
            return
        if len(self._pending) >= self.max_pending:
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

    def _count_lost(self, state: State, at: datetime, summary_due: bool) -> None:
        """A reading while the queue has no room: counted as dropped when it would have
        written something, and kept as the state to write when room comes back."""
        prev_state = self._gap_latest[0] if self._gap_latest else self._basis
        changed = prev_state is None or bool(
            diff_states(prev_state.assignments, prev_state.anomalies, state,
                        prev_state.devices))
        if changed or summary_due:
            self._gap_dropped += 1
            self._dropped += 1
        self._gap_latest = (state, at)
        self._last_at = at
        if summary_due:
            self._last_summary_at = at

    def _start_gap(self, state: State, at: datetime, summary_due: bool) -> None:
        """The queue is full: drop this write and every one until there is room, which
        then writes the whole state with the gap recorded."""
        self._seq -= 1
        self._gap_from = at
        self._gap_dropped = 1
        self._dropped += 1
        self._gap_latest = (state, at)
        if summary_due:
            self._last_summary_at = at
        log.warning("history queue full; dropping writes until there is room (a gap "
                    "will be recorded)", extra={"node": self.node,
                                                "pending": len(self._pending)})

    def _placement_changed(self) -> bool:
        return self._placement is not None and self._placement.digest != self._placement_queued

    def _enqueue(self, cs: ChangeSet) -> None:
        row = self._placement
        # A full reconcile carries it always: it may replace change-sets that did.
        if row is not None and (cs.full or row.digest != self._placement_queued):
            cs.placement = row
            self._placement_queued = row.digest
        self._pending.append(cs)
        self._pending_event.set()

    def _end_gap_if_room(self) -> None:
        if self._gap_from is None or self._gap_latest is None:
            return
        if len(self._pending) >= self.max_pending:
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

    # -- flushing ----------------------------------------------------------------------

    async def _flush_loop(self) -> None:
        loop = asyncio.get_running_loop()
        delay = self.retry_initial
        while not self._stop.is_set():
            if not self._pending:
                self._end_gap_if_room()
            if not self._pending:
                self._pending_event.clear()
                await self._pending_event.wait()
                continue
            batch = [self._pending[i] for i in range(min(MAX_BATCH, len(self._pending)))]
            self._busy = True
            try:
                self._writing = loop.run_in_executor(
                    self._executor, self.store.write, self.node, self.writer_id, batch)
                rows = await self._writing
            except asyncio.CancelledError:
                raise
            except Exception as exc:
                self._writing = None
                self._busy = False
                self.last_error = describe_error(exc)
                if not is_transient(exc) and not self._make_robust(batch, exc):
                    continue
                log.warning("history write failed; retrying", extra={
                    "node": self.node, "error": self.last_error, "retry_in_seconds": delay})
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(self._stop.wait(), delay)
                delay = min(delay * 2, self.retry_max)
                continue
            self._writing = None
            delay = self.retry_initial
            self.last_error = None
            self.rows_written_total += rows
            if rows >= RELEASE_AFTER_ROWS:
                # A node's worth of rows left its statement parameters freed in the writing
                # thread's malloc arena: hand the pages back instead of keeping the peak.
                release_free_memory()
            for _ in batch:
                self._pending.popleft()
            self._end_gap_if_room()
            try:
                await self._maybe_prune(loop)
            finally:
                self._busy = False

    def _make_robust(self, batch: list[ChangeSet], exc: BaseException) -> bool:
        """A permanent error (the database disagrees with what the writer believed it holds,
        or refuses a value). First, every queued change-set is collapsed into one full
        reconcile of the newest state (with a gap when intermediate changes are lost); if
        that is refused too, it is dropped and the next ledger reconciles in full. Returns
        True to retry after a pause, False to go on at once."""
        head = batch[0]
        if head.state is None and self._basis is not None:
            log.warning("history write rejected; reconciling in full",
                        extra={"node": self.node, "error": describe_error(exc)})
            newest = self._pending[-1]
            collapsed = len(self._pending)
            self._pending.clear()
            gap = None
            if collapsed > 1:
                self._dropped += collapsed - 1
                gap = Gap(head.prev_at, newest.at, collapsed - 1,
                          f"write refused by the database: {describe_error(exc)}"[:500])
            self._enqueue(ChangeSet(self._next_seq(), newest.at, head.prev_at,
                                    state=self._basis, summary=newest.summary, gap=gap))
            return False
        log.error("history dropping a change-set the database refuses",
                  extra={"node": self.node, "error": describe_error(exc)})
        self._pending.popleft()
        self._dropped += 1
        self._placement_queued = None  # what it carried is written again with the next
        self._carry_gap = Gap(head.prev_at, head.at, 1,
                              f"write refused by the database: {describe_error(exc)}"[:500])
        if not self._pending:
            self._basis = None  # the next ledger reconciles in full
        return False

    async def _maybe_prune(self, loop: asyncio.AbstractEventLoop) -> None:
        if self.retention <= 0:
            return
        now = loop.time()
        if self._last_prune is not None and now - self._last_prune < self.prune_interval:
            return
        self._last_prune = now
        cutoff = (self._last_at or datetime.now().astimezone()) - timedelta(
            seconds=self.retention)
        try:
            await loop.run_in_executor(self._executor, self.store.prune, cutoff, self.node)
        except Exception as exc:  # pruning again later is fine
            log.warning("history prune failed; trying again later",
                        extra={"node": self.node, "error": describe_error(exc)})

