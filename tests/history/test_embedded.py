"""The embedded write path (``serve`` on SQLite, stdlib ``sqlite3``): table for table the
same database as the SQLAlchemy store after the same writes, its errors at open and while
writing, and the API's read store opened on demand. Real SQLite files throughout."""

from __future__ import annotations

import asyncio
import logging
import os
import sqlite3
import subprocess
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta, timezone
from pathlib import Path
from typing import Any

import pytest
from aiohttp import web
from aiohttp.test_utils import TestClient, TestServer
from histsim import SimNode, actual_assignments, expected_assignments
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from sqlalchemy.engine import make_url

from exporter.errors import UserError
from exporter.history import HistoryWriter, open_store
from exporter.history import queries as q
from exporter.history.api import LazyReadStore, add_routes
from exporter.history.changes import ChangeSet, Gap, State, diff_states, state_of
from exporter.history.common import is_transient
from exporter.history.embedded import EmbeddedStore, connect, db_time, open_embedded
from exporter.history.location import plain_sqlite_database

T0 = datetime(2026, 11, 30, 8, 0, tzinfo=UTC)
TABLES = ("nodes", "assignment_intervals", "anomaly_intervals", "node_summaries",
          "node_summaries_hourly", "fleet_summaries", "history_gaps")


def at(i: int) -> datetime:
    return T0 + timedelta(seconds=37 * i)


def dump(path: Path) -> dict[str, list[tuple[Any, ...]]]:
    """Every row of every history table, in primary-key order, as SQLite holds it."""
    with sqlite3.connect(path) as conn:
        return {t: conn.execute(f"SELECT * FROM {t} ORDER BY 1, 2").fetchall() for t in TABLES}


# -- the same writes, the same database ---------------------------------------------------

# An operation: ("step", n) n changes of the node; ("summary",) a summary at the next
# write; ("full",) a full reconcile; ("gap", dropped); ("retry",) the last batch again (a
# commit whose acknowledgement was lost); ("restart",) a new writer id; ("prune", k) prune
# before the k-th write's time; ("node",) the next writes to a second node.
Op = tuple[Any, ...]


def play(store: Any, ops: list[Op], seed: int) -> None:
    """Drive ``store.write``/``prune`` through ``ops`` as a writer would."""
    sims = {name: SimNode(name, seed + i, pods=6) for i, name in enumerate(("n1", "n2"))}
    node, writer, seq, i = "n1", "w0", 0, 0
    basis: dict[str, State | None] = dict.fromkeys(sims)
    summary = full = False
    gap: Gap | None = None
    last: list[ChangeSet] = []
    for op in ops:
        kind = op[0]
        if kind == "summary":
            summary = True
        elif kind == "full":
            full = True
        elif kind == "gap":
            gap = Gap(at(i), at(i + 1), op[1], "test gap")
        elif kind == "node":
            node = "n2" if node == "n1" else "n1"
        elif kind == "restart":
            writer, seq = f"w{seq}", 0
            basis = dict.fromkeys(sims)
        elif kind == "retry" and last:
            store.write(node, writer, last)
        elif kind == "prune":
            store.prune(at(op[1]), node if op[1] % 2 else None)
        elif kind == "step":
            for _ in range(op[1]):
                sims[node].step()
            i += 1
            seq += 1
            state = state_of(sims[node].ledger())
            before = basis[node]
            if before is None or full or gap is not None:
                cs = ChangeSet(seq, at(i), at(i - 1), state=state, gap=gap)
            else:
                diff = diff_states(before.assignments, before.anomalies, state)
                cs = ChangeSet(seq, at(i), at(i - 1), diff=diff or None)
            if summary:
                cs.summary = state.summary
            basis[node], summary, full, gap = state, False, False, None
            last = [cs]
            store.write(node, writer, last)


def both(tmp_path: Path, ops: list[Op], seed: int = 1) -> tuple[Any, Any]:
    """The tables after ``ops`` through the SQLAlchemy store and the embedded one."""
    out = []
    for name, opener in (("alchemy", open_store), ("embedded", open_embedded)):
        path = tmp_path / f"{name}.db"
        path.unlink(missing_ok=True)
        store = opener(f"sqlite:///{path}")
        play(store, ops, seed)
        store.close()
        out.append(dump(path))
    return out[0], out[1]


def test_the_same_writes_give_the_same_tables(tmp_path: Path) -> None:
    ops: list[Op] = [("summary",), ("step", 0), *[("step", 1)] * 10, ("summary",),
                     ("step", 3), ("gap", 4), ("step", 2), ("retry",), ("restart",),
                     ("summary",), ("step", 0), ("node",), ("summary",), ("step", 2),
                     ("step", 5), ("node",), ("full",), ("summary",), ("step", 1),
                     ("prune", 6), ("prune", 9), *[("step", 2), ("summary",)] * 5]
    alchemy, embedded = both(tmp_path, ops)
    assert all(alchemy[t] for t in TABLES)  # every table written to
    for table in TABLES:
        assert embedded[table] == alchemy[table], table


OPS = st.lists(st.one_of(
    st.tuples(st.just("step"), st.integers(0, 4)),
    st.tuples(st.sampled_from(["summary", "full", "retry", "restart", "node"])),
    st.tuples(st.just("gap"), st.integers(1, 9)),
    st.tuples(st.just("prune"), st.integers(0, 40))), max_size=40)


@settings(max_examples=25, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(ops=OPS, seed=st.integers(0, 1000))
def test_any_sequence_of_writes_gives_the_same_tables(tmp_path: Path, ops: list[Op],
                                                       seed: int) -> None:
    alchemy, embedded = both(tmp_path, ops, seed)
    for table in TABLES:
        assert embedded[table] == alchemy[table], table


def test_times_are_stored_as_sqlalchemy_stores_them(tmp_path: Path) -> None:
    store = open_store(f"sqlite:///{tmp_path}/h.db")
    for value in (datetime(1970, 1, 1, tzinfo=UTC), datetime(2026, 11, 30, 9, 15, 0, 7, UTC),
                  datetime(2026, 11, 30, 10, 15, tzinfo=timezone(timedelta(hours=-3)))):
        store.write("n", "w", [ChangeSet(1, value, value, summary=None,
                                         gap=Gap(value, value, 1, ""))])
        with sqlite3.connect(tmp_path / "h.db") as conn:
            (stored,) = conn.execute("SELECT gap_to FROM history_gaps ORDER BY id DESC"
                                     ).fetchone()
        assert stored == db_time(value)
        store.prune(datetime(9000, 1, 1))
        store._node_ids.clear()
        with store.write_transaction() as conn:
            conn.exec_driver_sql("DELETE FROM nodes")
    store.close()


def test_open_creates_a_wal_store_at_the_newest_revision(tmp_path: Path,
                                                         caplog: pytest.LogCaptureFixture
                                                         ) -> None:
    path = tmp_path / "history.db"
    with caplog.at_level(logging.INFO, logger="podres.history"):
        open_embedded(f"sqlite:///{path}").close()
        store = open_embedded(f"sqlite:///{path}")  # already there: nothing to announce
    assert [getattr(r, "path", None) for r in caplog.records
            if r.getMessage() == "history store created"] == [str(path)]
    assert store.revision() == open_store(f"sqlite:///{path}", mode="readonly").revision()
    store.close()
    with sqlite3.connect(path) as conn:
        assert conn.execute("PRAGMA journal_mode").fetchone() == ("wal",)


@pytest.mark.parametrize("url", ["sqlite:///h.db", "sqlite:////abs/h.db",
                                 "sqlite:///a%20b%23c.db", "sqlite:///~/h.db",
                                 "sqlite:///:memory:", "sqlite:///a@b:c.db"])
def test_plain_urls_name_the_file_sqlalchemy_names(url: str) -> None:
    assert plain_sqlite_database(url) == make_url(url).database


@pytest.mark.parametrize("url", ["sqlite://", "sqlite:///h.db?mode=ro",
                                 "sqlite+pysqlite:///h.db", "postgresql+psycopg://u@h/db"])
def test_other_urls_are_not_plain(url: str) -> None:
    assert plain_sqlite_database(url) is None
    with pytest.raises(ValueError, match="plain"):
        open_embedded(url)


# -- errors -------------------------------------------------------------------------------

@pytest.mark.parametrize("name", ["missing/history.db", ":memory:"])
def test_open_errors_are_those_of_the_sqlalchemy_store(tmp_path: Path, name: str) -> None:
    url = f"sqlite:///{tmp_path}/{name}" if name != ":memory:" else "sqlite:///:memory:"
    with pytest.raises(UserError) as expected:
        open_store(url)
    with pytest.raises(UserError) as got:
        open_embedded(url)
    assert str(got.value) == str(expected.value)
    assert list(tmp_path.iterdir()) == []


def test_a_corrupt_file_is_one_line(tmp_path: Path) -> None:
    path = tmp_path / "history.db"
    path.write_bytes(b"this is not a database, " * 100)
    with pytest.raises(UserError, match="file is not a database") as err:
        open_embedded(f"sqlite:///{path}")
    assert "\n" not in str(err.value)
    assert path.read_bytes() == b"this is not a database, " * 100


@pytest.fixture
def read_only_file(tmp_path: Path) -> Iterator[Path]:
    """A history this process may read but not write: mode 0444, or for root (whom modes
    do not stop) the immutable attribute."""
    path = tmp_path / "history.db"
    open_store(f"sqlite:///{path}").close()
    if os.geteuid() != 0:
        path.chmod(0o444)
        yield path
        return
    if subprocess.run(["chattr", "+i", str(path)], check=False,
                      capture_output=True).returncode != 0:
        pytest.skip("running as root on a file system without chattr +i")
    try:
        yield path
    finally:
        subprocess.run(["chattr", "-i", str(path)], check=True)


def test_a_read_only_file_is_refused_in_one_line(read_only_file: Path) -> None:
    before = dump(read_only_file)
    with pytest.raises(UserError, match="readonly database") as err:
        open_embedded(f"sqlite:///{read_only_file}")
    assert "\n" not in str(err.value)
    assert dump(read_only_file) == before


def lock(path: Path) -> sqlite3.Connection:
    """Another process's write transaction on ``path`` (held until rolled back)."""
    other = sqlite3.connect(path, isolation_level=None)
    other.execute("BEGIN IMMEDIATE")
    return other


def test_a_locked_database_is_a_transient_error(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path}/h.db"
    store = open_embedded(url, timeout=0.05)
    other = lock(tmp_path / "h.db")
    with pytest.raises(sqlite3.OperationalError, match="locked") as err:
        store.prune(T0)
    assert is_transient(err.value)
    other.rollback()
    assert store.prune(T0).to_json()["summaries"] == 0  # usable again
    store.close()


async def test_the_writer_retries_a_locked_database_until_it_is_free(
        tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    path = tmp_path / "h.db"
    store = open_embedded(f"sqlite:///{path}", timeout=0.01)
    sim = SimNode("n", 4, pods=8)
    writer = HistoryWriter(store, "n", retry_initial=0.01, retry_max=0.05)
    await writer.start()
    other = lock(path)
    with caplog.at_level(logging.WARNING, logger="podres.history"):
        for i in range(5):
            sim.step()
            writer.submit(sim.ledger(), at(i))
        while not writer.last_error:
            await asyncio.sleep(0.01)
    assert "locked" in writer.last_error
    assert writer.pending_writes > 0
    other.rollback()
    assert await writer.flush(timeout=60)
    await writer.close()
    assert writer.dropped_writes_total == 0
    assert [r for r in caplog.records if r.getMessage() == "history write failed; retrying"]
    reader = open_store(f"sqlite:///{path}", mode="readonly")
    assert actual_assignments(q.assignments_at(reader, at(4), "n")) == \
        expected_assignments(sim.ledger())
    reader.close()
    store.close()


# -- the API's read store, opened on demand ----------------------------------------------

async def test_the_read_store_opens_on_the_first_request_and_retries(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path}/history.db"
    lazy = LazyReadStore(url)
    app = web.Application()
    add_routes(app, lazy)
    async with TestClient(TestServer(app)) as client:
        resp = await client.get("/api/v1/nodes")  # no store yet: unavailable, one line
        body = await resp.json()
        assert resp.status == 503 and body["status"] == 503
        assert body["error"].startswith("history database unavailable: ")
        assert "does not exist" in body["error"] and "\n" not in body["error"]
        store: EmbeddedStore = open_embedded(url)
        store.write("n", "w", [ChangeSet(1, T0, T0, summary=state_of(
            SimNode("n", 1).ledger()).summary)])
        resp = await client.get("/api/v1/nodes")  # tried again: there now
        assert resp.status == 200
        assert [n["name"] for n in (await resp.json())["items"]] == ["n"]
    lazy.close()
    store.close()



def test_the_writer_connection_keeps_a_small_page_cache(tmp_path: Path) -> None:
    """256 KiB instead of SQLite's 2 MiB: memory of every node agent."""
    conn = connect(tmp_path / "h.db", 1.0)
    try:
        assert conn.execute("PRAGMA cache_size").fetchone()[0] == -256
    finally:
        conn.close()
