"""``podres-exporter history`` and ``podres-exporter api`` against real databases."""

from __future__ import annotations

import asyncio
import json
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from histsim import SimNode, actual_assignments, expected_assignments

from bench.pgcluster import PgCluster
from exporter.cli import build_parser, main
from exporter.commands.api import serve_api
from exporter.commands.history import EMPTY_EXIT
from exporter.history import HistoryWriter, open_store
from exporter.options import HistoryOptions

T0 = datetime(2026, 11, 30, 8, 0, tzinfo=UTC)


def at(i: int) -> datetime:
    return T0 + timedelta(seconds=10 * i)


async def populate(url: str, steps: int = 30) -> list[tuple[datetime, Any]]:
    store = open_store(url)
    sim = SimNode("node-1", 42, pods=8, hostile=True)
    writer = HistoryWriter(store, "node-1", summary_interval=10)
    await writer.start()
    timeline = []
    for i in range(steps):
        if i:
            sim.step()
        writer.submit(sim.ledger(), at(i))
        timeline.append((at(i), sim.ledger()))
    await writer.close()
    store.close()
    return timeline


def cli(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    """Exit code, stdout and stderr of one command; a usage error (refused by the argument
    parser, which exits) counts like any other."""
    try:
        code = main(list(argv))
    except SystemExit as exc:
        code = exc.code if isinstance(exc.code, int) else 1
    out, err = capsys.readouterr()
    return code, out, err


async def test_history_at_and_events(history_url: str,
                                     capsys: pytest.CaptureFixture[str]) -> None:
    timeline = await populate(history_url)
    for when, ledger in timeline[::5]:
        code, out, _ = await asyncio.to_thread(
            cli, capsys, "history", "at", when.isoformat(), "--history.url", history_url,
            "-o", "json")
        assert code == 0
        body = json.loads(out)
        assert actual_assignments(body["containers"]) == expected_assignments(ledger)
        assert body["gaps"] == []
    code, out, _ = cli(capsys, "history", "at", str(int(at(10).timestamp())),
                       "--history.url", history_url)
    assert code == 0
    assert out.splitlines()[0].split()[:4] == ["NODE", "NAMESPACE", "POD", "CONTAINER"]
    code, out, _ = cli(capsys, "history", "events", "--since", at(0).isoformat(),
                       "--until", at(30).isoformat(), "--history.url", history_url,
                       "-o", "json")
    assert code == 0
    events = json.loads(out)["events"]
    kinds = {e["event"] for e in events}
    assert {"assigned", "released"} <= kinds
    assert [e["time"] for e in events] == sorted(e["time"] for e in events)
    code, out, _ = cli(capsys, "history", "events", "--since", "1h", "--history.url",
                       history_url)
    assert code == 0 and out.startswith("TIME")  # header only: nothing in the last hour


async def test_history_at_relative_and_empty(history_url: str,
                                            capsys: pytest.CaptureFixture[str]) -> None:
    """`history at 5m` is read as `events --since 5m` reads it (a duration back from now);
    a time with nothing recorded says so, naming what the record covers, and exits 1."""
    timeline = await populate(history_url)  # from 2026-11-30T08:00Z, intervals left open
    for when in ("5m", "now"):
        code, out, err = await asyncio.to_thread(
            cli, capsys, "history", "at", when, "--history.url", history_url, "-o", "json")
        assert code == 0, err
        body = json.loads(out)
        assert datetime.fromisoformat(body["at"]) > at(30)
        # What is still open now is what the last ledger held.
        assert actual_assignments(body["containers"]) == expected_assignments(timeline[-1][1])
    before = (T0 - timedelta(hours=1)).isoformat()
    code, out, err = cli(capsys, "history", "at", before, "--history.url", history_url)
    assert code == EMPTY_EXIT
    assert out.split() == ["NODE", "NAMESPACE", "POD", "CONTAINER", "ASSIGNMENT", "CPUS",
                           "COUNT", "MEMORY", "NUMA", "SINCE"]
    assert "nothing recorded for any node at 2026-11-30T07:00:00Z: the record runs from " \
        "2026-11-30T08:00:00Z to " in err
    assert err.count("\n") == 1
    code, _, err = cli(capsys, "history", "at", at(10).isoformat(), "--node", "elsewhere",
                       "--history.url", history_url)
    assert code == EMPTY_EXIT
    assert "the history holds no node named elsewhere" in err
    # Something recorded: 0, memory in binary units (JSON keeps bytes).
    code, out, _ = cli(capsys, "history", "at", at(10).isoformat(), "--history.url",
                       history_url, "-o", "json")
    sizes = {c["memory_bytes"] for c in json.loads(out)["containers"]} - {0, None}
    assert sizes and min(sizes) >= 2**20
    code, out, _ = cli(capsys, "history", "at", at(10).isoformat(), "--history.url",
                       history_url)
    assert code == 0
    for size in sizes:
        assert f" {size} " not in out
        assert f" {size / 2**20:g} MiB " in out or f" {size / 2**30:g} GiB " in out


def test_history_at_duration_out_of_range(tmp_path: Path,
                                          capsys: pytest.CaptureFixture[str]) -> None:
    url = f"sqlite:///{tmp_path}/h.db"
    open_store(url).close()
    code, _, err = cli(capsys, "history", "at", "999999999d", "--history.url", url)
    assert code == 2 and err.startswith("podres-exporter history: error: TIME: ")


async def test_history_prune(history_url: str, capsys: pytest.CaptureFixture[str]) -> None:
    await populate(history_url)
    code, out, _ = await asyncio.to_thread(
        cli, capsys, "history", "prune", "--before", at(15).isoformat(),
        "--history.url", history_url, "-o", "json")
    assert code == 0
    deleted = json.loads(out)["deleted"]
    assert deleted["summaries"] == 15 and deleted["assignments"] > 0
    code, out, _ = cli(capsys, "history", "prune", "--history.url", history_url)
    assert code == 0 and out.startswith("pruned history before")


@pytest.mark.parametrize("argv", [
    ["history", "at", "yesterday"],
    ["history", "events", "--since", "soon"],
    ["history", "at", "now", "--history.url", "mysql://x"],
    # Valid RFC 3339 whose offset puts the instant outside years 1-9999 in UTC.
    ["history", "at", "0001-01-01T00:00:00+00:01"],
    ["history", "at", "9999-12-31T23:59:59-00:01"],
    ["history", "events", "--since", "9999-12-31T23:59:59-00:01"],
    ["history", "events", "--since", "0001-01-01T00:00:00+00:01"],
    ["history", "events", "--until", "9999-12-31T23:59:59-00:01"],
    ["history", "events", "--since", "999999999d"],
    ["history", "prune", "--before", "0001-01-01T00:00:00+00:01"],
    ["history", "prune", "--history.retention", "999999999d"],
])
def test_history_errors_are_one_line(argv: list[str], tmp_path: Path,
                                     capsys: pytest.CaptureFixture[str]) -> None:
    url = f"sqlite:///{tmp_path}/h.db"
    open_store(url).close()
    if "--history.url" not in argv:
        argv = [*argv, "--history.url", url]
    code, _out, err = cli(capsys, *argv)
    assert code == 2
    assert err.count("\n") == 1 and err.startswith("podres-exporter history")
    assert ": error: " in err and "Traceback" not in err


def test_history_on_a_missing_database(tmp_path: Path,
                                       capsys: pytest.CaptureFixture[str]) -> None:
    code, _, err = cli(capsys, "history", "at", "now", "--history.url",
                       f"sqlite:///{tmp_path}/none.db")
    assert code == 2 and "does not exist" in err
    assert not (tmp_path / "none.db").exists()  # queries never create a database


@pytest.mark.parametrize("command", [["at", "now"], ["events"], ["prune"]])
def test_history_commands_never_create_a_store(command: list[str], tmp_path: Path,
                                              capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = cli(capsys, "history", *command, "--history.url",
                         f"sqlite:///{tmp_path}/a/b/history.db")
    assert code == 2 and out == ""
    assert err.count("\n") == 1 and "does not exist" in err
    assert list(tmp_path.iterdir()) == []  # neither the file nor its directories


def test_serve_refuses_a_history_directory_that_does_not_exist(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, _, err = cli(capsys, "serve", "--web.listen-address", "127.0.0.1:0",
                       "--podresources.socket", f"{tmp_path}/kubelet.sock",
                       "--history.url", f"sqlite:///{tmp_path}/no/such/history.db")
    assert code == 2 and err.count("\n") == 1
    assert f"history directory {tmp_path}/no/such does not exist" in err
    assert list(tmp_path.iterdir()) == []


def test_prune_against_an_unreachable_postgres_is_one_line(
        own_pg_cluster: PgCluster, capsys: pytest.CaptureFixture[str]) -> None:
    own_pg_cluster.stop()
    code, out, err = cli(capsys, "history", "prune", "--history.url", own_pg_cluster.url)
    assert code == 2 and out == ""
    assert err.count("\n") == 1 and err.startswith("podres-exporter history: error:")
    assert "retry" not in err and "Traceback" not in err


def test_history_url_from_environment(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("PODRES_HISTORY_URL", f"sqlite:///{tmp_path}/env.db")
    args = build_parser().parse_args(["history", "events"])
    assert HistoryOptions.from_args(args).url == f"sqlite:///{tmp_path}/env.db"


async def test_api_command_serves_the_database_read_only(history_url: str) -> None:
    await populate(history_url, steps=10)
    args = build_parser().parse_args(["api", "--history.url", history_url,
                                      "--web.listen-address", "127.0.0.1:0"])
    stop = asyncio.Event()
    ready: asyncio.Queue[str] = asyncio.Queue()
    task = asyncio.create_task(serve_api(args, stop=stop, on_ready=ready.put_nowait))
    base = await asyncio.wait_for(ready.get(), 30)
    async with aiohttp.ClientSession() as session:
        async with session.get(base + "/api/v1/nodes") as resp:
            assert resp.status == 200
            assert [n["name"] for n in (await resp.json())["items"]] == ["node-1"]
        async with session.get(base + "/api/v1/openapi.json") as resp:
            assert (await resp.json())["openapi"].startswith("3.")
        async with session.post(base + "/api/v1/nodes") as resp:
            assert resp.status == 405
        async with session.get(base + "/runbook") as resp:  # alert links may point here
            assert resp.status == 200
            assert 'id="podresexporterdown"' in await resp.text()
    stop.set()
    assert await task == 0
