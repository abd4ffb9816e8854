"""What a ``serve`` process loads: modules that only some configurations need stay out of
the others' resident memory (docs/performance.md#memory, docs/design.md#history). The
checks of what is loaded run in a fresh interpreter, so modules imported by other tests do
not hide a regression; the last test checks the schema's declaration in this one."""

from __future__ import annotations

import asyncio
import json
import sys
from pathlib import Path
from typing import Any

from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.schema import CreateIndex

from exporter.history.schema import assignment_intervals, declare_backend

ROOT = Path(__file__).resolve().parents[2]
SCENARIO = ROOT / "tests" / "data" / "scenarios" / "database-pod-scope"

# A real ``serve`` with SQLite history, polling the test's simulated kubelet: the modules
# loaded once its first ledger is in the database, then after one request to the API.
_SERVE_ON_SQLITE = """
import asyncio, json, sqlite3, sys
from exporter.cli import build_parser
from exporter.commands.serve import serve

WATCHED = ("alembic", "bcrypt", "prometheus_client", "sqlalchemy", "yaml")
socket, database = sys.argv[1:]


def loaded():
    return sorted(m for m in sys.modules if m.split(".")[0] in WATCHED)


def rows():
    try:
        with sqlite3.connect(database) as conn:
            return conn.execute("SELECT count(*) FROM assignment_intervals").fetchone()[0]
    except sqlite3.Error:
        return 0


async def main():
    import aiohttp

    args = build_parser().parse_args([
        "serve", "--web.listen-address", "127.0.0.1:0", "--node-name", "weigh",
        "--sysfs", "/nonexistent-sysfs", "--cgroup.root", "", "--proc.root", "",
        "--podresources.socket", socket, "--poll.interval", "100ms",
        "--history.url", "sqlite:///" + database])
    stop = asyncio.Event()
    ready = asyncio.get_running_loop().create_future()
    task = asyncio.create_task(serve(args, on_ready=ready.set_result, stop=stop))
    base = await asyncio.wait_for(ready, 60)
    for _ in range(1200):  # until the first ledger is written (at most a minute)
        if rows():
            break
        await asyncio.sleep(0.05)
    out = {"rows": rows(), "writing": loaded()}
    async with aiohttp.ClientSession() as session:
        async with session.get(base + "/api/v1/nodes") as resp:
            out["status"] = resp.status
            out["nodes"] = [n["name"] for n in (await resp.json())["items"]]
    out["queried"] = loaded()
    stop.set()
    await task
    print(json.dumps(out))


asyncio.run(main())
"""


async def test_serve_on_sqlite_loads_sqlalchemy_only_when_the_api_is_queried(
        start_sim: Any, short_tmp: Path) -> None:
    sim = await start_sim(SCENARIO)
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-c", _SERVE_ON_SQLITE, sim.socket_path, f"{short_tmp}/history.db",
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE, cwd=ROOT,
        env={"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin", "GRPC_VERBOSITY": "ERROR"})
    stdout, stderr = await asyncio.wait_for(proc.communicate(), 180)
    assert proc.returncode == 0, stderr.decode()[-2000:]
    result = json.loads(stdout.decode().splitlines()[-1])
    assert result["rows"] > 0  # the history was written, with none of these loaded
    assert result["writing"] == []
    assert result["status"] == 200 and result["nodes"] == ["weigh"]
    queried = result["queried"]
    assert "sqlalchemy.dialects.sqlite" in queried  # the read store, opened on demand
    assert not [m for m in queried if m.startswith("sqlalchemy.dialects.postgresql")]
    assert not [m for m in queried if m.split(".")[0] in ("alembic", "bcrypt", "yaml",
                                                           "prometheus_client")]


def test_the_open_interval_index_is_partial_on_both_backends() -> None:
    index = next(i for i in assignment_intervals.indexes
                 if i.name == "uq_assignment_intervals_open")
    for backend, dialect in (("sqlite", sqlite.dialect()), ("postgresql", postgresql.dialect())):
        declare_backend(backend)
        ddl = str(CreateIndex(index).compile(dialect=dialect))
        assert ddl.startswith("CREATE UNIQUE INDEX uq_assignment_intervals_open")
        assert ddl.rstrip().endswith("WHERE valid_to IS NULL"), ddl
