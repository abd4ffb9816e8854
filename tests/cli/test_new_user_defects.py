"""Defects a new user met (issue 31), each run as that user ran it: the installed command in
a subprocess."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from foundation.helpers import SCENARIOS, arun_cli, run_cli


async def test_record_keeps_the_node_name_for_snapshot_from(start_sim: Any,
                                                            short_tmp: Path) -> None:
    """``record --node-name X`` then ``snapshot --from``: the ledger is node X's, not this
    host's; ``--node-name`` given to ``snapshot`` still wins."""
    folder = SCENARIOS / "database-pod-scope"
    sim = await start_sim(folder)
    out = short_tmp / "fixture"
    run = await arun_cli("record", str(out), "--podresources.socket", sim.socket_path,
                         "--topology", str(folder / "topology.json"),
                         "--node-name", "worker-9")
    assert run.code == 0, run.err
    env = {"NODE_NAME": "", "PODRES_NODE_NAME": ""}
    table = run_cli("snapshot", "--from", str(out), env=env)
    assert table.code == 0, table.err
    assert "worker-9" in table.out.splitlines()[0], table.out
    body = json.loads(run_cli("snapshot", "--from", str(out), "-o", "json", env=env).out)
    assert body["node"]["name"] == "worker-9"
    other = run_cli("snapshot", "--from", str(out), "-o", "json", "--node-name", "other")
    assert json.loads(other.out)["node"]["name"] == "other"


def test_fixture_node_file_that_is_not_a_name_is_one_line(short_tmp: Path) -> None:
    fixture = short_tmp / "f"
    fixture.mkdir()
    for name in ("list.json", "topology.json"):
        (fixture / name).write_bytes((SCENARIOS / "database-pod-scope" / name).read_bytes())
    (fixture / "node.json").write_text('{"node_name": 7}')
    run = run_cli("snapshot", "--from", str(fixture))
    assert run.code != 0 and "Traceback" not in run.err
    assert "node.json" in run.err and len(run.err.strip().splitlines()) == 1, run.err
