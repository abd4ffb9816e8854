"""Defects a new user met (issue 31), each run as that user ran it: the installed command in
a subprocess."""

from __future__ import annotations

import argparse
import json
import shlex
import socket
import subprocess
import time
import urllib.request
from pathlib import Path
from typing import Any

import pytest
from foundation.helpers import CLI, REPO, SCENARIOS, arun_cli, cli_env, run_cli

from exporter.cli import build_parser
from exporter.demo.node import FIRST_PODS


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


def _sim_flags(short_tmp: Path, *extra: str) -> argparse.Namespace:
    """Start ``sim`` on a modelled node, read the exporter flags it prints, stop it; the
    flags as ``serve`` parses them."""
    proc = subprocess.Popen([CLI, "sim", "--topology.shape", "1x2x2", "--socket",
                             str(short_tmp / "k.sock"), *extra], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, env=cli_env(None))
    try:
        assert proc.stdout is not None
        for line in proc.stdout:
            if line.startswith("sim: exporter flags: "):
                flags = line.removeprefix("sim: exporter flags: ")
                break
        else:
            pytest.fail(f"sim printed no exporter flags: {proc.stderr.read()}")  # type: ignore[union-attr]
    finally:
        proc.terminate()
        proc.communicate(timeout=30)
    return build_parser().parse_args(["serve", *shlex.split(flags)])


def test_sim_flags_turn_this_hosts_kernel_sources_off(short_tmp: Path) -> None:
    """Without simulated kernel files, ``serve`` with the printed flags must not read this
    host's /proc/stat (its load would be drawn on the simulated CPUs) nor its cgroups."""
    args = vars(_sim_flags(short_tmp))
    assert args["proc.root"] == "" and args["cgroup.root"] == ""


def test_sim_flags_name_the_simulated_kernel_files(short_tmp: Path) -> None:
    args = vars(_sim_flags(short_tmp, "--cgroup-dir", str(short_tmp / "cg"), "--proc-dir",
                           str(short_tmp / "proc")))
    assert args["cgroup.root"] == str(short_tmp / "cg")
    assert args["proc.root"] == str(short_tmp / "proc")


def test_history_events_help_says_since_takes_durations() -> None:
    group = run_cli("history", "--help")
    events = run_cli("history", "events", "--help")
    assert group.code == 0 and events.code == 0
    summary = " ".join(group.out.split())
    assert "events changes over the last hour, or since a duration or time" in summary
    text = " ".join(events.out.split())
    assert "duration back from now (30m, 2h, 7d, 1h30m)" in text
    assert "--until DURATION|TIME" in text


def test_history_events_until_takes_a_duration(short_tmp: Path) -> None:
    from exporter.history import open_store

    url = f"sqlite:///{short_tmp / 'h.db'}"
    open_store(url).close()
    ok = run_cli("history", "events", "--history.url", url, "--since", "2h", "--until",
                 "30m", "-o", "json")
    assert ok.code == 0, ok.err
    body = json.loads(ok.out)
    assert body["since"] < body["until"]


def test_make_demo_on_a_busy_port_says_how_to_pick_another() -> None:
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        run = subprocess.run(["make", "-s", "demo",
                              f"ARGS=--web.listen-address=127.0.0.1:{port} --duration 5s"],
                             cwd=REPO, capture_output=True, text=True, timeout=120,
                             env=cli_env(None), check=False)
    assert run.returncode != 0
    assert "Address already in use" in run.stderr, run.stderr
    assert "make demo ARGS=--web.listen-address=127.0.0.1:0" in run.stderr
    assert "Traceback" not in run.stderr


def test_demo_arrival_gives_the_history_a_moment_per_arrival() -> None:
    """``demo`` (``--arrive`` is the default): the workload arrives a pod a second, each
    polled at once, so the history (and the CPU map's slider) has several moments, not the
    19 assignments of one timestamp (the poll interval is long: the arrivals make their own
    polls)."""
    proc = subprocess.Popen([CLI, "demo", "--web.listen-address", "127.0.0.1:0",
                             "--poll.interval", "1h", "--duration", "60s"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env=cli_env(None))
    try:
        assert proc.stdout is not None
        url = next(line.split()[-1].rstrip("/") for line in proc.stdout
                   if "CPU map and links" in line)
        starts: set[str] = set()
        deadline = time.monotonic() + 45
        pods: set[str] = set()
        while time.monotonic() < deadline and len(pods) < 9:
            time.sleep(0.5)
            with urllib.request.urlopen(f"{url}/api/v1/assignments?node=demo-node") as resp:
                items = json.load(resp)["items"]
            pods = {i["pod"] for i in items}
            starts = {i["valid_from"] for i in items}
    finally:
        proc.terminate()
        proc.communicate(timeout=30)
    assert len(pods) == 9, pods
    assert len(starts) == 1 + 9 - FIRST_PODS, sorted(starts)


def test_readme_names_demo_churn_and_args() -> None:
    text = (REPO / "README.md").read_text(encoding="utf-8")
    assert 'make demo ARGS="--churn"' in text
    assert 'make demo ARGS="--web.listen-address=127.0.0.1:0"' in text
    # The Quick start itself is two commands: the demo and the tests.
    block = text.split("## Quick start", 1)[1].split("```sh\n", 1)[1].split("```", 1)[0]
    assert [line.split("#")[0].strip() for line in block.splitlines()] == [
        "make demo", "make test"]


def test_snapshot_containers_table_shows_memory_as_a_size() -> None:
    """The ``memory`` column is the container's memory (its own, or its pod's pool) as a
    size, not the assignment again; the CPU count's header says what it counts."""
    run = run_cli("snapshot", "--from", str(SCENARIOS / "sidecar-hybrid"))
    assert run.code == 0, run.err
    lines = run.out.split("Containers\n", 1)[1].split("\n\n", 1)[0].splitlines()
    header = lines[0].split()
    assert header[-3:] == ["cpus", "cpu_count", "memory"] and "n" not in header
    rows = {r.split()[2]: r.split() for r in lines[2:]}
    assert rows["app"][-2:] == ["4", "GiB"] and rows["mesh-proxy"][-2:] == ["2", "GiB"]


def test_a_mistyped_command_gets_did_you_mean() -> None:
    for argv, nearest in ((["doctr"], "'doctor'"), (["history", "evnts"], "'events'"),
                          (["snapshot", "-o", "jsn"], "'json'")):
        run = run_cli(*argv)
        assert run.code == 2 and len(run.err.strip().splitlines()) == 1, run.err
        assert f"did you mean {nearest}?" in run.err, run.err
    far = run_cli("zzz")
    assert far.code == 2 and "did you mean" not in far.err


def test_docs_define_every_column_plan_prints(tmp_path: Path) -> None:
    """docs/plan.md defines each column header plan's tables print (the pods' and each
    template's containers'), LEGACY and POD-LEVEL among them."""
    import re

    manifest = tmp_path / "pod.yaml"
    manifest.write_text(json.dumps({
        "apiVersion": "v1", "kind": "Pod", "metadata": {"name": "gpu"}, "spec": {
            "resources": {"limits": {"cpu": "3", "memory": "2Gi"}},
            "containers": [{"name": "app", "image": "x", "resources": {"limits": {
                "cpu": "2", "memory": "1Gi", "nvidia.com/gpu": "1"}}}]}}))
    run = run_cli("plan", "-f", str(manifest), "--topology.shape", "2x8x2", "--devices",
                  "nvidia.com/gpu=0:1", "--topology-policy", "best-effort")
    assert run.code == 0, run.err
    headers = [line.split() for line in run.out.splitlines()
               if line.startswith(("KIND ", "  CONTAINER "))]
    assert len(headers) == 2 and "LEGACY" in headers[0] and "DEVICES@NUMA" in headers[1]
    doc = (REPO / "docs" / "plan.md").read_text(encoding="utf-8")
    defined = set(re.findall(r"^\| (`[^|]+`) \|", doc, re.M))
    names = {n.strip("` ") for cell in defined for n in cell.split(",")}
    missing = [h for row in headers for h in row if h not in names]
    assert not missing, f"docs/plan.md does not define {missing}"
