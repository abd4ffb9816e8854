"""``record DIR`` from the simulated kubelet, then ``snapshot --from DIR``: the same ledger.
And the fixture directory format itself (docs/design.md#sources)."""

from __future__ import annotations

import json
import shutil
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
from google.protobuf import json_format

from exporter.errors import UserError
from exporter.rawnode import CHECKPOINT_FILES
from exporter.sources.fixture import load_fixture_dir, write_fixture_dir
from exporter.sources.pod_list import reduce_pod_list
from foundation.helpers import REPO, SCENARIO_NAMES, SCENARIOS, arun_cli, run_cli

REAL = REPO / "tests" / "data" / "realnode"
REAL_NAMES = sorted(p.name for p in REAL.iterdir() if p.is_dir())
ROUND_TRIPS = [SCENARIOS / n for n in SCENARIO_NAMES] + [REAL / n for n in REAL_NAMES]


@pytest.mark.parametrize("folder", ROUND_TRIPS, ids=[p.name for p in ROUND_TRIPS])
async def test_record_round_trip(folder: Path, start_sim: Any, short_tmp: Path) -> None:
    """The hand-made scenarios and the real kubelets' captures (tests/data/realnode, their
    checkpoints in a kubelet root directory) served by the simulated kubelet."""
    sim = await start_sim(folder, http=True)
    live = ["--podresources.socket", sim.socket_path, "--kubelet.url", sim.http_url,
            "--kubelet.ca-file", str(sim.cert_path), "--kubelet.token-file", "/none",
            "--topology", str(folder / "topology.json")]
    checkpoints = [p for p in folder.iterdir() if p.name in CHECKPOINT_FILES]
    if checkpoints:
        root = short_tmp / "kubelet"
        root.mkdir()
        for path in checkpoints:
            shutil.copy(path, root / path.name)
        live += ["--kubelet.root-dir", str(root)]
    out = short_tmp / "recorded"
    run = await arun_cli("record", str(out), *live)
    assert run.code == 0, run.err
    assert "Traceback" not in run.err
    written = {Path(line).name for line in run.out.splitlines()}
    assert {"list.json", "topology.json"} <= written
    assert {p.name for p in out.iterdir() if not p.name.startswith(".")} == written
    for optional in ("allocatable.json", "pods.json", "configz.json"):
        assert (optional in written) == (folder / optional).exists()

    live_run = await arun_cli("snapshot", "--output", "json", *live)
    from_dir = run_cli("snapshot", "--from", str(out), "--output", "json")
    assert live_run.code == 0 and from_dir.code == 0, from_dir.err
    assert json.loads(from_dir.out) == json.loads(live_run.out)

    # And the recorded files hold what the original folder held.
    original, recorded = load_fixture_dir(folder), load_fixture_dir(out)
    assert recorded.kubelet.list_response == original.kubelet.list_response
    assert recorded.kubelet.allocatable == original.kubelet.allocatable
    # /pods as the exporter keeps it: only the fields it reads (no env, no annotations).
    assert recorded.kubelet.pod_list == (None if original.pods is None
                                         else json.loads(reduce_pod_list(original.pods)))
    assert recorded.kubelet.configz == original.kubelet.configz
    assert recorded.topology == original.topology
    assert recorded.checkpoints == original.checkpoints


async def test_record_with_checkpoints(start_sim: Any, short_tmp: Path) -> None:
    folder = SCENARIOS / "sidecar-hybrid"
    sim = await start_sim(folder)
    root = short_tmp / "kubelet"
    root.mkdir()
    checkpoint = '{"policyName":"static","defaultCpuSet":"0-1,5-7","entries":{},"checksum":1}'
    (root / "cpu_manager_state").write_text(checkpoint)
    out = short_tmp / "out"
    run = await arun_cli("record", str(out), "--podresources.socket", sim.socket_path,
                         "--topology", str(folder / "topology.json"),
                         "--kubelet.root-dir", str(root))
    assert run.code == 0, run.err
    assert (out / "cpu_manager_state").read_text() == checkpoint
    assert not (out / "memory_manager_state").exists()
    assert load_fixture_dir(out).checkpoints == (("cpu_manager_state", checkpoint.encode()),)


async def test_record_keeps_malformed_bodies_for_the_bug_report(start_sim: Any,
                                                                short_tmp: Path) -> None:
    """A kubelet sending garbage is what a bug report is for: the bad /pods body is kept
    byte for byte, an undecodable allocatable is left out, each with a warning."""
    folder = SCENARIOS / "database-pod-scope"
    bad_pods = b'{"items": [{"metadata": 7}]}'
    sim = await start_sim(replace(load_fixture_dir(folder), pods=bad_pods,
                                  allocatable=b"\xff\xff garbage"), http=True)
    out = short_tmp / "out"
    run = await arun_cli("record", str(out), "--podresources.socket", sim.socket_path,
                         "--kubelet.url", sim.http_url, "--kubelet.ca-file",
                         str(sim.cert_path), "--kubelet.token-file", "/none",
                         "--topology", str(folder / "topology.json"))
    assert run.code == 0, run.err
    assert "Traceback" not in run.err
    assert "kubelet pods" in run.err and "GetAllocatableResources" in run.err
    assert (out / "pods.json").read_bytes() == bad_pods
    assert not (out / "allocatable.json").exists()
    again = run_cli("snapshot", "--from", str(out))
    assert again.code == 2 and "pods.json" in again.err and "Traceback" not in again.err


async def test_record_unreachable_node_is_one_line(short_tmp: Path) -> None:
    run = await arun_cli("record", str(short_tmp / "out"), "--podresources.socket",
                         str(short_tmp / "none.sock"), "--topology", "/nonexistent")
    assert run.code == 2 and "Traceback" not in run.err
    assert len(run.err_lines) == 1 and "does not exist" in run.err
    assert not (short_tmp / "out").exists()


async def test_record_into_unwritable_place(start_sim: Any, short_tmp: Path) -> None:
    sim = await start_sim(SCENARIOS / "sidecar-hybrid")
    blocker = short_tmp / "file"
    blocker.write_text("")
    run = await arun_cli("record", str(blocker / "sub"), "--podresources.socket",
                         sim.socket_path, "--topology",
                         str(SCENARIOS / "sidecar-hybrid" / "topology.json"))
    assert run.code == 2 and "Traceback" not in run.err
    assert len(run.err_lines) == 1 and "cannot write" in run.err


def test_record_refuses_a_directory_that_holds_files(short_tmp: Path) -> None:
    """An older fixture in DIR would be half overwritten (a file this capture lacks would
    stay): refused before the node is read, nothing touched."""
    out = short_tmp / "out"
    out.mkdir()
    (out / "pods.json").write_text('{"items": []}')
    run = run_cli("record", str(out), "--podresources.socket", str(short_tmp / "none.sock"))
    assert run.code == 2 and "Traceback" not in run.err
    assert len(run.err_lines) == 1 and "not empty" in run.err and "--force" in run.err
    assert [p.name for p in out.iterdir()] == ["pods.json"]
    assert sorted(p.name for p in short_tmp.iterdir()) == ["out"]


@pytest.mark.parametrize("kind", ["file", "symlink"])
def test_record_refuses_a_dir_that_is_not_a_directory(short_tmp: Path, kind: str) -> None:
    out = short_tmp / "out"
    if kind == "file":
        out.write_text("keep")
    else:
        (short_tmp / "real").mkdir()
        out.symlink_to(short_tmp / "real")
    run = run_cli("record", str(out), "--force", "--podresources.socket",
                  str(short_tmp / "none.sock"))
    assert run.code == 2 and len(run.err_lines) == 1 and "Traceback" not in run.err
    assert "directory" in run.err or "symbolic link" in run.err
    assert out.is_symlink() if kind == "symlink" else out.read_text() == "keep"


@pytest.mark.parametrize("existing", ["empty", "older fixture"])
async def test_record_force_replaces_the_directory_whole(start_sim: Any, short_tmp: Path,
                                                         existing: str) -> None:
    folder = SCENARIOS / "sidecar-hybrid"
    sim = await start_sim(folder)
    out = short_tmp / "fixtures" / "out"
    out.mkdir(parents=True)
    flags: list[str] = []
    if existing == "older fixture":
        shutil.copytree(SCENARIOS / "database-pod-scope", out, dirs_exist_ok=True)
        (out / "notes.txt").write_text("from an older capture")
        flags = ["--force"]
    run = await arun_cli("record", str(out), *flags, "--podresources.socket",
                         sim.socket_path, "--topology", str(folder / "topology.json"))
    assert run.code == 0, run.err
    written = {Path(line).name for line in run.out.splitlines()}
    assert all(Path(line).parent == out for line in run.out.splitlines())
    # Exactly this capture: nothing left from before, no staging directory left beside it.
    assert {p.name for p in out.iterdir()} == written
    assert [p.name for p in out.parent.iterdir()] == ["out"]
    recorded = load_fixture_dir(out)
    assert recorded.kubelet.list_response == load_fixture_dir(folder).kubelet.list_response
    assert recorded.kubelet.pod_list is None  # no kubelet URL: the old pods.json is gone


def test_field_name_styles_are_equivalent(short_tmp: Path) -> None:
    """protobuf's JSON mapping: lowerCamel (as recorded) and original field names."""
    folder = SCENARIOS / "database-pod-scope"
    original = load_fixture_dir(folder)
    snake = short_tmp / "snake"
    shutil.copytree(folder, snake)
    for name, message in (("list.json", original.kubelet.list_response),
                          ("allocatable.json", original.kubelet.allocatable)):
        assert message is not None
        (snake / name).write_text(json.dumps(json_format.MessageToDict(
            message, preserving_proto_field_name=True)))
    assert "pod_resources" in (snake / "list.json").read_text()
    assert load_fixture_dir(snake).kubelet == original.kubelet
    a = run_cli("snapshot", "--from", str(folder), "-o", "json").out
    b = run_cli("snapshot", "--from", str(snake), "-o", "json").out
    assert a == b


def test_unknown_fields_are_errors(short_tmp: Path) -> None:
    (short_tmp / "list.json").write_text('{"podResources": [{"nmae": "typo"}]}')
    with pytest.raises(UserError, match="nmae"):
        load_fixture_dir(short_tmp)


def test_only_list_json_is_required(short_tmp: Path) -> None:
    (short_tmp / "list.json").write_text("{}")
    fixture = load_fixture_dir(short_tmp)
    assert fixture.kubelet.allocatable is None and fixture.kubelet.pod_list is None
    assert fixture.kubelet.configz is None and fixture.topology is None
    assert fixture.checkpoints == ()
    run = run_cli("snapshot", "--from", str(short_tmp), "-o", "json")
    assert run.code == 0
    assert json.loads(run.out)["pods"] == []


def test_write_then_load(short_tmp: Path) -> None:
    fixture = load_fixture_dir(SCENARIOS / "database-pod-scope")
    written = write_fixture_dir(short_tmp / "copy", replace(
        fixture, checkpoints=(("cpu_manager_state", b"{}"),)))
    assert all(p.exists() for p in written)
    assert not list((short_tmp / "copy").glob(".*.tmp"))
    again = load_fixture_dir(short_tmp / "copy")
    assert again.kubelet == fixture.kubelet and again.topology == fixture.topology
    assert again.checkpoints == (("cpu_manager_state", b"{}"),)


DEEP = "[" * 100_000 + "]" * 100_000
HUGE = "9" * 5000


@pytest.mark.parametrize(("name", "text", "reason"), [
    ("pods.json", '{"items": [{"metadata": {"name": "a", "namespace": "b"}, '
                  '"spec": {"containers": 5}}]}', "malformed document"),
    ("pods.json", '{"items": [{"metadata": {"name": "a", "namespace": "b"}, '
                  '"spec": {"initContainers": {"x": 1}}}]}', ""),
    ("pods.json", DEEP, "nested too deeply"),
    ("pods.json", '{"items": [], "n": ' + HUGE + "}", "digits"),
    ("configz.json", '{"kubeletconfig": {"reservedSystemCPUs": ' + HUGE + "}}", "digits"),
    ("configz.json", DEEP, "nested too deeply"),
    ("list.json", '{"podResources": ' + DEEP + "}", "invalid JSON"),
    ("list.json", '{"podResources": [{"cpuIds": [' + HUGE + "]}]}", "invalid JSON"),
    ("topology.json", '{"cpus": [{"id": Infinity}]}', "bad CPU entry"),
    ("topology.json", '{"cpus": [{"id": 9223372036854775807}]}', "impossible CPU id"),
    ("topology.json", '{"cpus": []}', "no CPUs"),
])
def test_hostile_fixture_files_are_one_line(name: str, text: str, reason: str,
                                            short_tmp: Path,
                                            capsys: pytest.CaptureFixture[str]) -> None:
    from exporter.cli import main

    folder = short_tmp / "fixture"
    shutil.copytree(SCENARIOS / "database-pod-scope", folder)
    (folder / name).write_text(text)
    assert main(["snapshot", "--from", str(folder), "-o", "json"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and name in err[0] and reason in err[0], err
    assert len(err[0]) < 700
