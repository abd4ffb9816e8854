"""The history writer: turns each polled ledger into the differences against the previous
one and writes them in the background, in order, surviving database outages.

- ``submit()`` only appends to an in-memory inbox: the poll loop and scrapes never wait for
  the database.
- A converter task reduces each ledger to its :class:`~exporter.history.changes.State` and
  hands it to the :class:`~exporter.history.changequeue.ChangeQueue`, which works out the
  change-set (nothing at all when the ledger did not change and no summary is due), bounds
  the queue and records the gaps past the bound.
- A flusher task writes queued change-sets in order, several per transaction, in a dedicated
  thread; on failure it retries the same batch with exponential backoff, capped at
  ``RETRY_MAX`` seconds so that writes resume within seconds of the database's return. It
  prunes the node's rows past the retention after a write, every ``prune_interval``.
- ``close`` is bounded: what cannot be written within its timeout (a database that does
  not answer) is counted as dropped, and a write stuck in the database thread is left
  behind, not waited for: that thread is a daemon, so it does not hold the process either
  (docs/history.md#outages).

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

from exporter.history.changequeue import ChangeQueue
from exporter.history.changes import State, state_of
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
    """The writer's two background tasks around a :class:`ChangeQueue`: the converter feeds
    it, the flusher writes what it holds (with retries, and the retention's pruning)."""

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
        self._inbox_event = asyncio.Event()
        self._pending_event = asyncio.Event()
        self._changes = ChangeQueue(node, max_pending=max_pending,
                                    summary_interval=summary_interval,
                                    on_queued=self._pending_event.set)
        self._stop = asyncio.Event()
        self._tasks: list[asyncio.Task[None]] = []
        self._executor = _DaemonExecutor("podres-history")
        self._writing: asyncio.Future[Any] | None = None  # the write in the thread, if any
        self._last_prune: float | None = None
        self._busy = False  # the flusher is between taking a batch and finishing with it
        self._closed = False

    # -- public ------------------------------------------------------------------------

    @property
    def pending_writes(self) -> int:
        """Change-sets waiting to be written (plus ledgers not yet compared)."""
        return len(self._changes.pending) + len(self._inbox)

    @property
    def dropped_writes_total(self) -> int:
        """Change-sets dropped because the queue was full (recorded as gaps)."""
        return self._changes.dropped

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
            while self._inbox or not self._changes.drained or self._busy:
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
        lost = self._changes.abandon()
        if lost:
            log.warning("history change-sets not written at shutdown",
                        extra={"node": self.node, "lost": lost, "error": self.last_error
                               or ("the database did not answer within "
                                   f"{timeout:g} s" if writing is not None else None)})
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
                        self._changes.placement = row
                    self._changes.record(state, at)
                except Exception:  # a malformed ledger must not stop the history
                    log.exception("history cannot record a ledger",
                                  extra={"node": self.node})
                finally:
                    self._inbox.popleft()

    # -- flushing ----------------------------------------------------------------------

    async def _flush_loop(self) -> None:
        loop = asyncio.get_running_loop()
        delay = self.retry_initial
        changes = self._changes
        while not self._stop.is_set():
            if not changes.pending:
                changes.end_gap_if_room()
            if not changes.pending:
                self._pending_event.clear()
                await self._pending_event.wait()
                continue
            batch = changes.batch(MAX_BATCH)
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
                if not is_transient(exc):  # retrying the same batch cannot help
                    changes.refused(batch, exc)
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
            changes.written(batch)
            changes.end_gap_if_room()
            try:
                await self._maybe_prune(loop)
            finally:
                self._busy = False

    async def _maybe_prune(self, loop: asyncio.AbstractEventLoop) -> None:
        if self.retention <= 0:
            return
        now = loop.time()
        if self._last_prune is not None and now - self._last_prune < self.prune_interval:
            return
        self._last_prune = now
        cutoff = (self._changes.last_at or datetime.now().astimezone()) - timedelta(
            seconds=self.retention)
        try:
            await loop.run_in_executor(self._executor, self.store.prune, cutoff, self.node)
        except Exception as exc:  # pruning again later is fine
            log.warning("history prune failed; trying again later",
                        extra={"node": self.node, "error": describe_error(exc)})
