"""History store and writer, on SQLite and on a real PostgreSQL (``history_url``)."""

from __future__ import annotations

import asyncio
import gc
import logging
import subprocess
import sys
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from alembic.autogenerate import compare_metadata
from alembic.runtime.migration import MigrationContext
from backends import Flaky, History
from histsim import SimNode, actual_assignments, expected_assignments
from sqlalchemy import func, select, text

from exporter.errors import UserError
from exporter.history import HistoryWriter, open_store
from exporter.history import queries as q
from exporter.history.changes import ChangeSet, diff_states, state_of
from exporter.history.schema import assignment_intervals, metadata
from exporter.history.store import HEAD_REVISION, HistoryStore, count_rows

T0 = datetime(2026, 11, 30, 8, 0, tzinfo=UTC)


def at(i: int) -> datetime:
    return T0 + timedelta(seconds=10 * i)


async def run_churn(store: HistoryStore, sim: SimNode, steps: int, start: int = 0,
                    **kwargs: Any) -> list[tuple[datetime, Any]]:
    """Drive ``sim`` through ``steps`` steps into ``store``; returns (time, ledger) pairs."""
    writer = HistoryWriter(store, sim.name, **kwargs)
    await writer.start()
    timeline = []
    for i in range(start, start + steps):
        if i > start:
            sim.step()
        ledger = sim.ledger()
        writer.submit(ledger, at(i))
        timeline.append((at(i), ledger))
        await asyncio.sleep(0)
    await writer.close()
    assert writer.pending_writes == 0
    return timeline


def check_timeline(store: HistoryStore, node: str,
                   timeline: list[tuple[datetime, Any]]) -> None:
    for when, ledger in timeline:
        for t in (when, when + timedelta(seconds=5)):
            got = actual_assignments(q.assignments_at(store, t, node))
            assert got == expected_assignments(ledger), f"at {t}"
    assert q.assignments_at(store, T0 - timedelta(seconds=1), node) == []


def open_intervals_unique(store: HistoryStore) -> None:
    a = assignment_intervals
    with store.read() as conn:
        dup = conn.execute(
            select(a.c.node_id, a.c.namespace, a.c.pod, a.c.container, func.count())
            .where(a.c.valid_to.is_(None))
            .group_by(a.c.node_id, a.c.namespace, a.c.pod, a.c.container)
            .having(func.count() > 1)).all()
        bad = conn.execute(select(func.count()).select_from(a)
                           .where(a.c.valid_to <= a.c.valid_from)).scalar_one()
    assert dup == []
    assert bad == 0


def test_migrations_create_the_declared_schema(history_url: str) -> None:
    store = open_store(history_url)
    assert store.revision() == HEAD_REVISION
    with store.engine.connect() as conn:
        ctx = MigrationContext.configure(conn, opts={"version_table": "podres_alembic_version"})
        diffs = compare_metadata(ctx, metadata)
    assert diffs == []
    store.close()
    again = open_store(history_url)  # idempotent
    assert again.revision() == HEAD_REVISION
    again.close()


_MIGRATE_WITHOUT_DECLARING = """
import sys
from sqlalchemy import create_engine
from exporter.history.schema import assignment_intervals
from exporter.history.store import HistoryStore

engine = create_engine(sys.argv[1])  # not open_store: nothing declared the backend
HistoryStore(engine).migrate()
(index,) = [i for i in assignment_intervals.indexes if i.name == "uq_assignment_intervals_open"]
print(index.dialect_options[engine.dialect.name]["where"])
"""


def test_the_migration_environment_declares_the_backend(history_url: str) -> None:
    # In a fresh interpreter, so that no open_store of another test declared it: the
    # metadata Alembic compares with (autogenerate) has the partial index's condition.
    out = subprocess.run([sys.executable, "-c", _MIGRATE_WITHOUT_DECLARING, history_url],
                         check=True, capture_output=True, text=True).stdout
    assert out.strip() == "valid_to IS NULL"


def test_head_revision_is_alembics_head() -> None:
    from alembic.config import Config
    from alembic.script import ScriptDirectory

    from exporter.history.store import MIGRATIONS

    cfg = Config()
    cfg.set_main_option("script_location", str(MIGRATIONS))
    assert ScriptDirectory.from_config(cfg).get_current_head() == HEAD_REVISION


def test_current_store_opens_without_loading_alembic(tmp_path: Any) -> None:
    url = f"sqlite:///{tmp_path}/h.db"
    open_store(url).close()  # creates and migrates
    code = ("import sys; from exporter.history import open_store; "
            f"open_store({url!r}).close(); "
            "sys.exit(1 if any(m.startswith('alembic') for m in sys.modules) else 0)")
    assert subprocess.run([sys.executable, "-c", code], check=False).returncode == 0


def test_isolated_migration_builds_the_schema_in_a_child(tmp_path: Any) -> None:
    # What serve does: the schema is created by a short-lived child process, and the
    # exporter's own process never imports Alembic.
    url = f"sqlite:///{tmp_path}/fresh.db"
    code = ("import sys; from exporter.history import open_store; "
            f"s = open_store({url!r}, isolated_migrations=True); "
            "sys.exit(1 if any(m.startswith('alembic') for m in sys.modules) else 0)")
    assert subprocess.run([sys.executable, "-c", code], check=False).returncode == 0
    store = open_store(url)
    assert store.revision() == HEAD_REVISION
    store.close()


def test_sqlite_is_in_wal_mode(tmp_path: Any) -> None:
    store = open_store(f"sqlite:///{tmp_path}/h.db")
    with store.engine.connect() as conn:
        assert conn.execute(text("PRAGMA journal_mode")).scalar_one() == "wal"


async def test_unchanged_cycle_writes_no_rows(history: History) -> None:
    store = history
    sim = SimNode("n1", 1, pods=30)
    writer = HistoryWriter(store, "n1", summary_interval=3600)
    await writer.start()
    writer.submit(sim.ledger(), at(0))
    await writer.flush()
    before = count_rows(store)
    written = writer.rows_written_total
    for i in range(1, 20):
        writer.submit(sim.ledger(), at(i))  # a new but identical ledger every cycle
    await writer.flush()
    assert count_rows(store) == before
    assert writer.rows_written_total == written
    await writer.close()


async def test_churn_history_at_returns_the_ledger_current_then(history: History) -> None:
    store = history
    sim = SimNode("churny", 7, pods=12)
    timeline = await run_churn(store, sim, 120, summary_interval=60)
    check_timeline(store, "churny", timeline)
    open_intervals_unique(store)
    # Anomalies: the open ones at each T are those of the ledger.
    for when, ledger in timeline[::7]:
        page = q.anomalies(store, node="churny", window=q.Window(at=when), limit=1000)
        got = {(a["kind"], a["namespace"], a["pod"], a["container"], a["detail"])
               for a in page.items}
        assert got == {(a.kind, a.namespace, a.pod, a.container, a.detail)
                       for a in ledger.anomalies}
    # Summaries at their own interval: one per 60 s of 10 s cycles.
    assert count_rows(store)["node_summaries"] == 20


async def test_restart_reconciles_open_intervals(history: History) -> None:
    store = history
    sim = SimNode("n", 3, pods=8)
    first = await run_churn(store, sim, 10)
    rows = count_rows(store)["assignment_intervals"]
    # A new exporter process: same ledger again, then a change.
    writer = HistoryWriter(store, "n", summary_interval=3600)
    await writer.start()
    writer.submit(sim.ledger(), at(10))
    await writer.flush()
    assert count_rows(store)["assignment_intervals"] == rows  # nothing duplicated
    # The vanished pod's intervals are closed by the next (changed) ledger.
    removed = sim.pods.pop(0)
    writer.submit(sim.ledger(), at(11))
    await writer.close()
    open_intervals_unique(store)
    now = q.assignments_at(store, at(11), "n")
    assert all(i["pod"] != removed.name for i in now)
    check_timeline(store, "n", [*first, (at(10), None), (at(11), sim.ledger())][:10])
    assert actual_assignments(now) == expected_assignments(sim.ledger())


async def test_restart_after_pods_vanished_while_down(history: History) -> None:
    store = history
    sim = SimNode("n", 4, pods=6)
    await run_churn(store, sim, 3)
    sim.pods = sim.pods[2:]
    sim.add_pod()
    timeline = await run_churn(store, sim, 1, start=3)  # first ledger of the new process
    assert actual_assignments(q.assignments_at(store, timeline[0][0], "n")) == \
        expected_assignments(timeline[0][1])
    open_intervals_unique(store)


async def test_outage_buffers_in_order_and_loses_nothing(backend_url: tuple[str, str]) -> None:
    store = Flaky(*backend_url)
    sim = SimNode("n", 11, pods=10)
    writer = HistoryWriter(store, "n", retry_initial=0.01, retry_max=0.02,
                           summary_interval=30)
    await writer.start()
    timeline = []
    for i in range(60):
        if i:
            sim.step()
        if i == 15:
            store.down = True
        if i == 45:
            assert writer.pending_writes > 0
            attempts = store.attempts
            for _ in range(1000):
                if store.attempts > attempts:  # retrying
                    break
                await asyncio.sleep(0.01)
            assert store.attempts > attempts
            store.down = False
        writer.submit(sim.ledger(), at(i))
        timeline.append((at(i), sim.ledger()))
        await asyncio.sleep(0.005)
    await writer.close()
    assert writer.dropped_writes_total == 0
    assert count_rows(store)["history_gaps"] == 0
    check_timeline(store, "n", timeline)


async def test_overflow_records_an_explicit_gap(backend_url: tuple[str, str]) -> None:
    store = Flaky(*backend_url)
    sim = SimNode("n", 12, pods=10)
    writer = HistoryWriter(store, "n", max_pending=5, retry_initial=0.01, retry_max=0.02,
                           summary_interval=3600)
    await writer.start()
    timeline = []
    for i in range(40):
        if i:
            while sim.step() == "none":
                pass
        if i == 10:
            store.down = True
        if i == 30:
            store.down = False
        writer.submit(sim.ledger(), at(i))
        timeline.append((at(i), sim.ledger()))
        if store.down:
            await asyncio.sleep(0.005)
        else:  # only the outage may overflow the tiny bound, however slow the machine
            assert await writer.flush(timeout=60)
    await writer.close()
    dropped = writer.dropped_writes_total
    # 5 queued (at 10..14); the changes at 15..29 dropped, and the one at 30 too when it
    # came while the queue was still full (before the next retry succeeded).
    assert dropped in (15, 16)
    (gap,) = q.gaps(store, node="n").items
    assert gap["dropped_writes"] == dropped
    gap_from = datetime.fromisoformat(gap["from"])
    gap_to = datetime.fromisoformat(gap["to"])
    assert gap_from == at(15) and gap_to == at(14 + dropped)
    # Outside the gap the history is exact; inside it, only the gap says "unknown".
    check_timeline(store, "n", [(t, led) for t, led in timeline
                                if not gap_from <= t < gap_to])
    assert q.gaps(store, window=q.Window(at=gap_from + (gap_to - gap_from) / 2)).items
    open_intervals_unique(store)


async def test_database_disagreeing_is_repaired_by_a_full_reconcile(history: History) -> None:
    store = history
    sim = SimNode("n", 13, pods=5)
    writer = HistoryWriter(store, "n", retry_initial=0.01)
    await writer.start()
    writer.submit(sim.ledger(), at(0))
    await writer.flush()
    # Someone wrote an open interval behind the writer's back, for the next pod.
    sim.add_pod()
    ghost = sim.pods[-1]
    with store.edit() as conn:
        conn.execute(assignment_intervals.insert().values(
            node_id=1, namespace=ghost.namespace, pod=ghost.name, container="c0",
            assignment="node_shared", memory_assignment="node_shared", cpuset="",
            cpu_count=0, memory_bytes=0, valid_from=at(0)))
    writer.submit(sim.ledger(), at(1))
    sim.step()
    writer.submit(sim.ledger(), at(2))
    await writer.close()
    assert actual_assignments(q.assignments_at(store, at(2), "n")) == \
        expected_assignments(sim.ledger())
    open_intervals_unique(store)


def test_a_first_write_rolled_back_leaves_no_node_behind(history: History,
                                                         monkeypatch: pytest.MonkeyPatch,
                                                         ) -> None:
    """The node's row is created in the first write's transaction: if that transaction
    fails, the row is gone and the store must not remember its id (the retry would write
    under a node that does not exist)."""
    state = state_of(SimNode("n1", 1, pods=3).ledger())
    first = ChangeSet(1, at(0), at(0), state=state)
    apply = history.writer._apply

    def failing(*args: Any) -> int:
        raise history.connection_lost()

    monkeypatch.setattr(history.writer, "_apply", failing)
    with pytest.raises(type(history.connection_lost())):
        history.write("n1", "w", [first])
    assert count_rows(history)["nodes"] == 0
    monkeypatch.setattr(history.writer, "_apply", apply)
    assert history.write("n1", "w", [first]) > 0
    assert [n["name"] for n in q.list_nodes(history.reader).items] == ["n1"]
    assert count_rows(history)["assignment_intervals"] == len(state.assignments)


async def test_hostile_names_round_trip(history: History) -> None:
    store = history
    sim = SimNode("node'; DROP TABLE nodes;--", 5, pods=15, hostile=True)
    timeline = await run_churn(store, sim, 30)
    check_timeline(store, sim.name, timeline)
    assert [n["name"] for n in q.list_nodes(store).items] == [sim.name]


async def test_nul_and_overlong_names_are_stored_cleaned(history: History) -> None:
    store = history
    sim = SimNode("n", 6, pods=1)
    sim.pods[0].name = "nul\x00byte" + "x" * 400
    await run_churn(store, sim, 1)
    (item,) = [i for i in q.assignments_at(store, at(0), "n")][:1]
    assert item["pod"].startswith("nul\ufffdbyte") and len(item["pod"]) == 253


async def test_prune_deletes_only_what_ended_before_the_cutoff(history: History) -> None:
    store = history
    sim = SimNode("n", 8, pods=10)
    timeline = await run_churn(store, sim, 50, summary_interval=10)
    cutoff = at(25)
    result = store.prune(cutoff)
    assert result.summaries == 25
    assert result.assignments > 0
    # Everything current at or after the cutoff is intact.
    check_timeline(store, "n", [(t, led) for t, led in timeline if t >= cutoff])
    assert store.prune(cutoff).to_json() == {"assignments": 0, "anomalies": 0,
                                             "summaries": 0, "gaps": 0}


async def test_writer_prunes_by_retention(history: History) -> None:
    store = history
    sim = SimNode("n", 9, pods=5)
    await run_churn(store, sim, 40, retention=100.0, summary_interval=10,
                    prune_interval=0.0)
    with store.read() as conn:
        oldest = conn.execute(select(func.min(text("at_epoch"))).select_from(
            text("node_summaries"))).scalar_one()
    assert oldest >= int((at(39) - timedelta(seconds=100)).timestamp()) - 10


def test_readonly_store_refuses_writes(history_url: str) -> None:
    open_store(history_url).close()
    ro = open_store(history_url, mode="readonly")
    with pytest.raises(UserError):
        ro.prune(T0)
    assert q.list_nodes(ro).items == []


def test_open_errors_are_one_line(tmp_path: Any) -> None:
    cases = ["nonsense://", "mysql://u@h/db", "sqlite://", "sqlite:///:memory:",
             "postgresql+nodriver://u@h/db", "sqlite:////proc/forbidden/history.db"]
    for url in cases:
        with pytest.raises(UserError) as err:
            open_store(url)
        assert "\n" not in str(err.value)
    with pytest.raises(UserError, match="does not exist"):
        open_store(f"sqlite:///{tmp_path}/missing.db", mode="readonly")


async def test_submit_never_waits_for_the_database(backend_url: tuple[str, str],
                                                    caplog: pytest.LogCaptureFixture) -> None:
    store = Flaky(*backend_url)
    store.down = True
    writer = HistoryWriter(store, "n", retry_initial=10.0)
    await writer.start()
    sim = SimNode("n", 2, pods=5)
    with caplog.at_level(logging.WARNING, logger="podres.history"):
        for i in range(100):
            sim.step()
            writer.submit(sim.ledger(), at(i))  # returns at once although nothing is written
        assert writer.pending_writes > 0
        await writer.close(timeout=0.05)
    assert writer.dropped_writes_total > 0
    # Structured like the rest of the exporter: a fixed message, the values as fields.
    failed = [r for r in caplog.records if r.getMessage() == "history write failed; retrying"]
    assert failed and vars(failed[0])["error"] == "database down"
    assert vars(failed[0])["node"] == "n" and vars(failed[0])["retry_in_seconds"] == 10.0
    lost = [r for r in caplog.records
            if r.getMessage() == "history change-sets not written at shutdown"]
    assert lost and vars(lost[0])["lost"] > 0


def test_writes_leave_no_cyclic_garbage(history: History) -> None:
    """Each write runs pre-built statements: nothing for the cyclic collector to find
    afterwards (statements built per write left hundreds of objects in reference cycles
    per change-set, and with them a resident set that crept up between collections)."""
    store = history
    sim = SimNode("garbage", seed=3)
    prev = state_of(sim.ledger())
    store.write(sim.name, "w", [ChangeSet(1, at(0), at(0), state=prev, summary=prev.summary)])

    def write(i: int) -> None:
        nonlocal prev
        sim.step()
        state = state_of(sim.ledger())
        diff = diff_states(prev.assignments, prev.anomalies, state)
        store.write(sim.name, "w", [ChangeSet(i + 1, at(i), at(i - 1), diff=diff or None,
                                              summary=state.summary)])
        prev = state

    for i in range(1, 6):  # first executions fill SQLAlchemy's caches
        write(i)
    gc.collect()
    gc.disable()
    try:
        for i in range(6, 40):
            write(i)
        garbage = gc.collect()
    finally:
        gc.enable()
    assert count_rows(store)["node_summaries"] == 40
    assert garbage == 0
