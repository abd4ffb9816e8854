"""Every SQL query of history.json (panels and template variables) runs against the history
schema (exporter.history, migrated by ``open_store``) on SQLite and on a real PostgreSQL
server, and returns what the panel promises for a small known history.

Grafana's macros are expanded the way its PostgreSQL data source expands them
(``$__timeFilter(c)`` → ``c BETWEEN '…Z' AND '…Z'``); on SQLite, which stores naive UTC text,
the same instants are written in its storage format. PostgreSQL is
``$PODRES_TEST_POSTGRES_URL`` when set, else a throwaway cluster (initdb/pg_ctl, as the
``postgres`` user when running as root, unix socket only).
"""

from __future__ import annotations

import glob
import os
import re
import shutil
import subprocess
import tempfile
import uuid
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from dash_helpers import dashboard_queries, variable_queries

history = pytest.importorskip(
    "exporter.history",
    reason="the history store (exporter.history.open_store, issue 5) is not available yet")
schema = pytest.importorskip("exporter.history.schema")

from sqlalchemy import create_engine, insert, text  # noqa: E402
from sqlalchemy.engine import make_url  # noqa: E402

NOW = datetime.now(UTC).replace(microsecond=0)
RANGE_FROM = NOW - timedelta(hours=24)
RANGE_TO = NOW
T0 = NOW - timedelta(hours=3)
T1 = NOW - timedelta(hours=2)
T2 = NOW - timedelta(hours=1)
VARIABLES = {"node": "node-a", "namespace": "app", "pod": "web"}


# --- PostgreSQL -------------------------------------------------------------------------

def _pg_bindir() -> str | None:
    for candidate in sorted(glob.glob("/usr/lib/postgresql/*/bin"), reverse=True):
        if os.access(os.path.join(candidate, "initdb"), os.X_OK):
            return candidate
    initdb = shutil.which("initdb")
    return os.path.dirname(initdb) if initdb else None


@pytest.fixture(scope="module")
def pg_server() -> Iterator[str]:
    given = os.environ.get("PODRES_TEST_POSTGRES_URL")
    if given:
        yield given
        return
    bindir = _pg_bindir()
    if bindir is None:
        pytest.skip("PostgreSQL binaries (initdb, pg_ctl) not installed: "
                    "apt-get install -y postgresql-15")
    d = tempfile.mkdtemp(prefix="pgd", dir="/tmp")
    as_root = os.geteuid() == 0
    if as_root:
        shutil.chown(d, "postgres", "postgres")

    def tool(name: str, *args: str) -> None:
        cmd = [os.path.join(bindir, name), *args]
        if as_root:
            cmd = ["runuser", "-u", "postgres", "--", *cmd]
        subprocess.run(cmd, check=True, capture_output=True)

    data = os.path.join(d, "data")
    tool("initdb", "-D", data, "-U", "postgres", "-A", "trust", "-E", "UTF8",
         "--locale=C.UTF-8", "--no-sync")
    tool("pg_ctl", "-D", data, "-l", os.path.join(d, "log"), "-w", "-o",
         f"-k {d} -c listen_addresses='' -c fsync=off", "start")
    try:
        yield f"postgresql+psycopg://postgres@/postgres?host={d}"
    finally:
        try:
            tool("pg_ctl", "-D", data, "-m", "fast", "-w", "stop")
        finally:
            shutil.rmtree(d, ignore_errors=True)


@pytest.fixture(params=["sqlite", "postgresql"])
def store(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Any]:
    if request.param == "sqlite":
        st = history.open_store(f"sqlite:///{tmp_path / 'history.db'}")
        try:
            yield st
        finally:
            st.close()
        return
    server = request.getfixturevalue("pg_server")
    name = "podres_dash_" + uuid.uuid4().hex[:10]
    admin = create_engine(server, isolation_level="AUTOCOMMIT")
    with admin.connect() as conn:
        conn.execute(text(f'CREATE DATABASE "{name}" TEMPLATE template0'))
    url = make_url(server).set(database=name).render_as_string(hide_password=False)
    st = history.open_store(url)
    try:
        yield st
    finally:
        st.close()
        with admin.connect() as conn:
            conn.execute(text(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))
        admin.dispose()


# --- a small known history ------------------------------------------------------------

def _populate(st: Any) -> None:
    s = schema
    with st.write_transaction() as conn:
        ids = {}
        for name in ("node-a", "node-b"):
            ids[name] = conn.execute(insert(s.nodes).values(
                name=name, first_seen=T0, last_seen=NOW, online_cpus=16)
            ).inserted_primary_key[0]
        a = ids["node-a"]

        def interval(pod: str, container: str, assignment: str, cpuset: str,
                     start: datetime, end: datetime | None, node: int = a) -> dict[str, Any]:
            return dict(node_id=node, namespace="app", pod=pod, container=container,
                        assignment=assignment, memory_assignment="node_shared", cpuset=cpuset,
                        cpu_count=len(cpuset.split(",")) if cpuset else 0,
                        memory_bytes=0, valid_from=start, valid_to=end)

        conn.execute(insert(s.assignment_intervals), [
            # app re-pinned at T1 (no gap in its timeline), proxy unchanged, old gone at T2
            interval("web", "app", "pod_exclusive", "2,3", T0, T1),
            interval("web", "app", "pod_exclusive", "4,5", T1, None),
            interval("web", "proxy", "pod_shared", "6", T0, None),
            interval("web", "old", "node_exclusive", "7", T0, T2),
            # another pod, another node, and an interval that ended before the range
            interval("other", "main", "node_exclusive", "8", T0, None),
            interval("web", "app", "pod_exclusive", "9", T0, None, node=ids["node-b"]),
            interval("web", "ancient", "node_exclusive", "1", NOW - timedelta(days=9),
                     NOW - timedelta(days=8)),
        ])
        conn.execute(insert(s.anomaly_intervals), [
            dict(node_id=a, kind="exclusive_overlap", namespace="app", pod="web",
                 container="app", subject="app/web/app", detail="CPU 3 also held by app/x",
                 first_seen=T1, last_seen=T2, resolved_at=T2),
            dict(node_id=a, kind="unknown_cpu", namespace="", pod="", container="",
                 subject="node", detail="CPU 99 not online",
                 first_seen=T2, last_seen=NOW, resolved_at=None),
            dict(node_id=ids["node-b"], kind="numa_misaligned", namespace="app", pod="web",
                 container="", subject="x", detail="",
                 first_seen=T2, last_seen=NOW, resolved_at=None),
        ])
        rows = []
        for i in range(3):
            at = T1 + timedelta(minutes=i)
            rows.append(dict(
                node_id=a, at=at, at_epoch=int(at.timestamp()), online_cpus=16,
                cpus_reserved=2, cpus_node_shared=6, cpus_node_exclusive=2,
                cpus_pod_exclusive=4, cpus_pod_shared=1 + i, cpus_pod_idle=1,
                containers_node_exclusive=1, containers_pod_exclusive=2,
                containers_pod_shared=3, containers_node_shared=4, pods=3,
                reclaimed_cpus=1, reclaimable_cpus=2, anomalies=i))
        conn.execute(insert(s.node_summaries), rows)
        conn.execute(insert(s.history_gaps), [dict(
            node_id=a, gap_from=T1, gap_to=T2, dropped_writes=5, reason="database down")])


def _literal(t: datetime, dialect: str) -> str:
    if dialect == "postgresql":     # what Grafana sends
        return "'" + t.strftime("%Y-%m-%dT%H:%M:%SZ") + "'"
    return "'" + t.strftime("%Y-%m-%d %H:%M:%S") + "'"   # SQLite's naive UTC text


def expand(sql: str, dialect: str) -> str:
    frm, to = _literal(RANGE_FROM, dialect), _literal(RANGE_TO, dialect)
    sql = re.sub(r"\$__timeFilter\(([^)]+)\)", rf"\1 BETWEEN {frm} AND {to}", sql)
    sql = sql.replace("$__timeFrom()", frm).replace("$__timeTo()", to)
    sql = sql.replace("$__unixEpochFrom()", str(int(RANGE_FROM.timestamp())))
    sql = sql.replace("$__unixEpochTo()", str(int(RANGE_TO.timestamp())))
    for name, value in VARIABLES.items():
        sql = re.sub(rf"\$\{{{name}\}}|\${name}\b", value, sql)
    assert "$" not in sql, f"unexpanded macro or variable in:\n{sql}"
    return sql


def _run(st: Any, sql: str) -> list[dict[str, Any]]:
    with st.read() as conn:
        result = conn.exec_driver_sql(expand(sql, st.dialect))
        return [dict(r._mapping) for r in result]


SQL_PANELS = [q for q in dashboard_queries("history.json") if q.kind == "sql"]
SQL_VARIABLES = [q for q in variable_queries("history.json") if q.kind == "sql"]


def test_history_dashboard_has_sql_panels() -> None:
    assert len(SQL_PANELS) >= 6
    assert {q.panel for q in SQL_PANELS} >= {"Assignment timeline", "Anomaly log"}


@pytest.mark.parametrize("query", SQL_PANELS + SQL_VARIABLES, ids=lambda q: q.where)
def test_sql_runs_and_returns_rows(store: Any, query: Any) -> None:
    _populate(store)
    rows = _run(store, query.text)
    assert rows, f"{query.where}: no rows on {store.dialect}"


def _by_panel(title: str) -> str:
    return next(q.text for q in SQL_PANELS if q.panel == title)


def test_timeline_and_log_contents(store: Any) -> None:
    _populate(store)
    timeline = [(r["container"], r["assignment"]) for r in _run(store, _by_panel(
        "Assignment timeline"))]
    # app twice (re-pinned, no 'gone' in between), proxy once, old assigned then gone;
    # ancient ended before the range, node-b and pod 'other' are filtered out.
    assert sorted(timeline) == sorted([("app", "pod_exclusive"), ("app", "pod_exclusive"),
                                       ("proxy", "pod_shared"), ("old", "node_exclusive"),
                                       ("old", "gone")])
    intervals = _run(store, _by_panel("Assignment intervals"))
    assert sorted(r["cpuset"] for r in intervals) == ["2,3", "4,5", "6", "7"]
    log = _run(store, _by_panel("Anomaly log"))
    assert [r["kind"] for r in log] == ["unknown_cpu", "exclusive_overlap"]
    pools = _run(store, _by_panel("CPU pools"))
    assert [r["pod_shared"] for r in pools] == [1, 2, 3]
    assert [r["dropped_writes"] for r in _run(store, _by_panel("History gaps"))] == [5]
    variables = {q.panel: [next(iter(r.values())) for r in _run(store, q.text)]
                 for q in SQL_VARIABLES}
    assert variables == {"variable node": ["node-a", "node-b"], "variable namespace": ["app"],
                         "variable pod": ["other", "web"]}
