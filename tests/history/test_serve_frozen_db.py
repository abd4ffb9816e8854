"""``serve`` with its history in a PostgreSQL that stops answering (its processes
SIGSTOPped: connections stay open, nothing is ever answered, as with a hung server or a
network partition without resets). SIGTERM still ends ``serve`` within its 10 s budget
(docs/history.md#outages); and a writer whose database comes back resumes writing at its
next attempt, at most ``RETRY_MAX`` seconds later."""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import socket
import subprocess
import time
from collections.abc import Iterator
from datetime import datetime
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from foundation.helpers import CLI, cli_env

from bench.pgcluster import PgCluster
from exporter.errors import UserError
from exporter.history import open_store
from exporter.history.store import count_rows

pytestmark = pytest.mark.postgres

SCENARIO = Path(__file__).resolve().parents[1] / "data" / "scenarios" / "database-pod-scope"
BUDGET = 10.0  # what the issue and the DaemonSet's grace period allow


def _cluster_pids(cluster: PgCluster) -> list[int]:
    """The postmaster and every process it started (backends, checkpointer, ...)."""
    with open(os.path.join(cluster.data, "postmaster.pid"), encoding="ascii") as f:
        postmaster = int(f.readline())
    pids = [postmaster]
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            with contextlib.suppress(OSError), open(f"/proc/{entry}/stat") as f:
                if int(f.read().rpartition(")")[2].split()[1]) == postmaster:
                    pids.append(int(entry))
    return pids


@contextlib.contextmanager
def frozen(cluster: PgCluster) -> Iterator[list[int]]:
    pids = []
    for pid in _cluster_pids(cluster):
        # A backend may end between the listing and the signal (CI saw one): it holds
        # nothing to freeze.
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGSTOP)
            pids.append(pid)
    try:
        yield pids
    finally:
        for pid in pids:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGCONT)


async def _wait(what: str, check: Any, timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    while not await asyncio.to_thread(check):
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        await asyncio.sleep(0.1)


async def test_sigterm_ends_serve_while_the_database_is_frozen(
        own_pg_cluster: PgCluster, start_sim: Any) -> None:
    from exporter.sources.fixture import load_fixture_dir

    full = load_fixture_dir(SCENARIO).kubelet
    sim = await start_sim(full)
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    proc = await asyncio.create_subprocess_exec(
        CLI, "serve", "--web.listen-address", f"127.0.0.1:{port}", "--node-name", "frozen",
        "--sysfs", "/nonexistent-sysfs", "--cgroup.root", "", "--proc.root", "",
        "--podresources.socket", sim.socket_path, "--poll.interval", "100ms",
        "--history.url", own_pg_cluster.url, "--history.summary-interval", "1s",
        env=cli_env(), stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    def written() -> bool:
        try:
            reader = open_store(own_pg_cluster.url, mode="readonly")
        except UserError:  # no history yet
            return False
        try:
            return count_rows(reader)["assignment_intervals"] > 0
        finally:
            reader.close()

    try:
        await _wait("the first rows", written)
        with frozen(own_pg_cluster):
            # Writes (a summary a second) now hang in the database thread; a history query
            # hangs too, in a request the server is still answering when told to stop.
            async with aiohttp.ClientSession() as session:
                query = asyncio.ensure_future(session.get(
                    f"http://127.0.0.1:{port}/api/v1/nodes",
                    timeout=aiohttp.ClientTimeout(total=30)))
                await asyncio.sleep(2.5)
                assert not query.done()
                async with session.get(f"http://127.0.0.1:{port}/metrics") as resp:
                    assert resp.status == 200  # scrapes are not held up meanwhile
                started = time.monotonic()
                proc.send_signal(signal.SIGTERM)
                try:
                    await asyncio.wait_for(proc.wait(), BUDGET)
                except TimeoutError:
                    pytest.fail(f"serve still running {BUDGET:g} s after SIGTERM")
                took = time.monotonic() - started
                query.cancel()
                with contextlib.suppress(BaseException):
                    await query
        assert proc.stderr is not None
        err = (await proc.stderr.read()).decode()
        assert proc.returncode == 0, err
        assert "Traceback" not in err
        assert took < BUDGET
    finally:
        if proc.returncode is None:
            proc.kill()
            await proc.wait()


async def test_writes_resume_at_the_next_attempt_after_the_database_returns(
        own_pg_cluster: PgCluster, monkeypatch: pytest.MonkeyPatch) -> None:
    """The pauses between attempts, as the writer schedules them (no clock in the test):
    after many failures they stay at ``RETRY_MAX``, and the first attempt after the
    database is back writes everything pending."""
    from exporter.assemble import snapshot_from_raw
    from exporter.history import writer as writer_module
    from exporter.history.writer import RETRY_MAX, HistoryWriter
    from exporter.sources.fixture import load_fixture_dir
    from reconciler.reconcile import reconcile

    pauses: list[float] = []
    real_wait_for = asyncio.wait_for

    async def recorded_wait_for(aw: Any, timeout: float | None) -> Any:
        if getattr(aw, "__qualname__", "") == "Event.wait":  # the pause between attempts
            assert timeout is not None
            pauses.append(timeout)
            timeout = 0.01  # the pause is taken as scheduled, only faster
        return await real_wait_for(aw, timeout)

    monkeypatch.setattr(writer_module.asyncio, "wait_for", recorded_wait_for)
    store = open_store(own_pg_cluster.url)
    writer = HistoryWriter(store, "n", summary_interval=0)
    await writer.start()
    ledger = reconcile(snapshot_from_raw(load_fixture_dir(SCENARIO)).snapshot)
    writer.submit(ledger, datetime.now().astimezone())
    assert await writer.flush(30)
    await asyncio.to_thread(own_pg_cluster.stop)
    try:
        writer.submit(ledger, datetime.now().astimezone())
        while len(pauses) < 10:  # more failures than it takes to reach the cap
            await asyncio.sleep(0.05)
    finally:
        await asyncio.to_thread(own_pg_cluster.start)
    assert await writer.flush(60)
    assert writer.pending_writes == 0 and writer.last_error is None
    assert pauses[:4] == [0.5, 1.0, 2.0, 4.0]
    assert max(pauses) == RETRY_MAX <= 5.0
    await writer.close()
    store.close()
