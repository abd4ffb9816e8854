"""The command line: bad input gives a non-zero exit and one clear line (no traceback), and
every flag reads its PODRES_ environment variable."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import pytest

from exporter.cli import main
from exporter.flags import env_name, parse_duration
from foundation.helpers import SCENARIOS, arun_cli, assert_one_clear_line, run_cli

HYBRID = SCENARIOS / "sidecar-hybrid"


@pytest.fixture
def fixture_copy(short_tmp: Path) -> Path:
    target = short_tmp / "node"
    shutil.copytree(HYBRID, target)
    return target


@pytest.mark.parametrize(("file", "content", "needle"), [
    ("list.json", "{not json", "invalid JSON"),
    ("list.json", '{"podResources": [{"name": 5, "bogus": 1}]}', "ListPodResourcesResponse"),
    ("list.json", "[]", "ListPodResourcesResponse"),
    ("allocatable.json", '{"cpuIds": ["x"]}', "AllocatableResourcesResponse"),
    ("topology.json", '{"cpus": [{"id": "a"}]}', "bad CPU entry"),
    ("topology.json", '{"cpus": [{"id": 1}, {"id": 1}]}', "duplicate"),
    ("topology.json", "[1, 2]", "'cpus' list"),
    ("configz.json", '{"kubeletconfig": {"reservedSystemCPUs": "0-x"}}', "reservedSystemCPUs"),
    ("configz.json", "[]", "expected a JSON object"),
    ("pods.json", '{"items": [{"metadata": {}, "spec": {"containers": [{}]}}]}',
     "container without a name"),
    ("pods.json", '{"items": [{"spec": {"containers": [{"name": "a", "resources": '
     '{"limits": {"cpu": "lots"}}}]}}]}', "not a quantity"),
    ("list.json", b"\xff\xfe\x00", "not UTF-8"),
])
def test_malformed_fixture_files(fixture_copy: Path, file: str, content: str | bytes,
                                 needle: str) -> None:
    path = fixture_copy / file
    if isinstance(content, bytes):
        path.write_bytes(content)
    else:
        path.write_text(content)
    run = run_cli("snapshot", "--from", str(fixture_copy))
    assert run.code == 2
    line = assert_one_clear_line(run, needle, "podres-exporter snapshot: error")
    assert file in line


def test_missing_fixture_dir(short_tmp: Path) -> None:
    run = run_cli("snapshot", "--from", str(short_tmp / "absent"))
    assert_one_clear_line(run, "not a fixture directory")


def test_fixture_dir_without_list(short_tmp: Path) -> None:
    run = run_cli("snapshot", "--from", str(short_tmp))
    assert_one_clear_line(run, "list.json is missing")


async def test_topology_file_missing_is_a_warning(start_sim: Any) -> None:
    sim = await start_sim(HYBRID)
    run = await arun_cli("snapshot", "--output", "json", "--podresources.socket",
                         sim.socket_path, "--topology", "/nonexistent/topology.json")
    assert run.code == 0 and "Traceback" not in run.err
    assert len(run.err_lines) == 1
    assert "topology read" in run.err and "/nonexistent/topology.json" in run.err
    assert json.loads(run.out)["node"]["numa_nodes"] is None


async def test_live_topology_file_problems_are_warnings(start_sim: Any, short_tmp: Path
                                                        ) -> None:
    sim = await start_sim(HYBRID)
    bad = short_tmp / "topology.json"
    bad.write_text("{nope")
    run = await arun_cli("snapshot", "--output", "json", "--podresources.socket",
                         sim.socket_path, "--topology", str(bad))
    assert run.code == 0 and "Traceback" not in run.err
    assert run.err_lines and all("warning" in line and "invalid JSON" in line
                                 for line in run.err_lines)
    assert json.loads(run.out)["cpu_pools_by_numa"] == {}


@pytest.mark.parametrize(("args", "needle"), [
    (["snapshot", "--bogus"], "unrecognized arguments: --bogus"),
    (["snapshot", "--output", "yaml"], "invalid choice"),
    (["snapshot", "--podresources.timeout", "5x"], "invalid duration"),
    (["snapshot", "--podresources.timeout", ""], "invalid duration"),
    (["snapshot", "--podresources.max-receive-bytes", "-1"], "must be positive"),
    (["snapshot", "--podresources.max-receive-bytes", "lots"], "not a whole number"),
    (["frobnicate"], "invalid choice"),
    ([], "required"),
])
def test_bad_flags(args: list[str], needle: str) -> None:
    run = run_cli(*args)
    assert run.code == 2
    assert_one_clear_line(run, needle)


@pytest.mark.parametrize(("text", "seconds"), [
    ("500ms", 0.5), ("15s", 15), ("1m", 60), ("2h", 7200), ("30d", 30 * 86400),
    ("1h30m", 5400), ("0.5s", 0.5),
])
def test_parse_duration(text: str, seconds: float) -> None:
    assert parse_duration(text) == pytest.approx(seconds)


@pytest.mark.parametrize("text", ["", "5", "5x", "s", "-1s", "1s 2s", "1.s", "1e3s"])
def test_parse_duration_rejects(text: str) -> None:
    import argparse

    with pytest.raises(argparse.ArgumentTypeError):
        parse_duration(text)


def test_env_names() -> None:
    assert env_name("--podresources.socket") == "PODRES_PODRESOURCES_SOCKET"
    assert env_name("--kubelet.insecure-skip-verify") == "PODRES_KUBELET_INSECURE_SKIP_VERIFY"


def test_env_vars_are_honoured() -> None:
    run = run_cli("snapshot", env={"PODRES_FROM": str(HYBRID), "PODRES_OUTPUT": "json"})
    assert run.code == 0, run.err
    assert json.loads(run.out)["reclaimed_cpus"] == 1


def test_env_var_socket_is_used(short_tmp: Path) -> None:
    path = short_tmp / "from-env.sock"
    run = run_cli("snapshot", env={"PODRES_PODRESOURCES_SOCKET": str(path),
                                   "PODRES_TOPOLOGY": str(HYBRID / "topology.json")})
    assert_one_clear_line(run, str(path), "does not exist")


def test_flag_beats_env_var() -> None:
    run = run_cli("snapshot", "--from", str(HYBRID), "--output", "table",
                  env={"PODRES_OUTPUT": "json", "PODRES_FROM": "/nonexistent"})
    assert run.code == 0, run.err
    assert run.out.startswith("Node ")


def test_bad_env_var_value_is_one_line() -> None:
    run = run_cli("snapshot", "--from", str(HYBRID),
                  env={"PODRES_PODRESOURCES_TIMEOUT": "soon"})
    assert run.code == 2
    assert_one_clear_line(run, "invalid duration")


async def test_env_vars_for_kubelet_flags(start_sim: Any, short_tmp: Path) -> None:
    folder = SCENARIOS / "database-pod-scope"
    sim = await start_sim(folder, http=True, token="t0k")
    token = short_tmp / "token"
    token.write_text("t0k")
    run = await arun_cli("snapshot", "--output", "json", env={
        "PODRES_PODRESOURCES_SOCKET": sim.socket_path, "PODRES_KUBELET_URL": sim.http_url,
        "PODRES_KUBELET_CA_FILE": str(sim.cert_path),
        "PODRES_KUBELET_TOKEN_FILE": str(token),
        "PODRES_TOPOLOGY": str(folder / "topology.json"), "PODRES_NODE_NAME": "node-7"})
    assert run.code == 0 and run.err == "", run.err
    doc = json.loads(run.out)
    assert doc["node"]["name"] == "node-7"
    assert {p["estimate_basis"] for p in doc["pods"]} == {"spec"}


async def test_insecure_skip_verify_env_boolean(start_sim: Any) -> None:
    folder = SCENARIOS / "database-pod-scope"
    sim = await start_sim(folder, http=True)
    run = await arun_cli("snapshot", "--output", "json", env={
        "PODRES_PODRESOURCES_SOCKET": sim.socket_path, "PODRES_KUBELET_URL": sim.http_url,
        "PODRES_KUBELET_INSECURE_SKIP_VERIFY": "true",
        "PODRES_TOPOLOGY": str(folder / "topology.json")})
    assert run.code == 0 and run.err == "", run.err


def test_version_and_help(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as info:
        main(["--version"])
    assert info.value.code == 0
    assert capsys.readouterr().out.startswith("podres-exporter ")
    run = run_cli("snapshot", "--help")
    assert run.code == 0 and "PODRES_PODRESOURCES_SOCKET" in run.out


def test_node_name_flag(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["snapshot", "--from", str(HYBRID), "-o", "json", "--node-name", "n1"]) == 0
    assert json.loads(capsys.readouterr().out)["node"]["name"] == "n1"


def test_hostile_names_in_table_output(short_tmp: Path) -> None:
    listing = {"podResources": [{"name": 'we"b\nnext', "namespace": "ns\u202e",
                                 "containers": [{"name": "c\tx", "cpuIds": ["1"]},
                                                {"name": "ünï😀"}]}]}
    (short_tmp / "list.json").write_text(json.dumps(listing))
    run = run_cli("snapshot", "--from", str(short_tmp))
    assert run.code == 0, run.err
    assert "we\"b\\nnext" in run.out and "ünï😀" in run.out
    run = run_cli("snapshot", "--from", str(short_tmp), "-o", "json")
    doc = json.loads(run.out)
    assert doc["pods"][0]["name"] == 'we"b\nnext'
