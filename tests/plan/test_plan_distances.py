"""The modelled node's topology-manager options (issue 32): prefer-closest-numa-nodes on a
modelled shape compares the NUMA distances --topology.distances gives, max-allowable-numa-nodes
is the kubelet's NUMA-node limit, and both are shown by plan and explain; bad values are one
line naming the flag and the format (docs/plan.md#numa-distances)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from exporter.cli import main

# Four NUMA nodes of 8 CPUs (4 cores x 2 threads) and 64 GiB each; nothing reserved.
SHAPE = ["--topology.shape", "1x16x2", "--numa-per-socket", "4", "--reserved", "",
         "--topology-policy", "restricted"]
# Nodes 0 and 1 far apart, 2 and 3 closest: of the equally narrow pairs the kubelet takes
# {0,1} by bitmask order, and {2,3} with prefer-closest-numa-nodes.
DISTANCES = "10,30,20,20;30,10,20,20;20,20,10,11;20,20,11,10"
CLOSEST = ["--topology-policy-options", "prefer-closest-numa-nodes",
           "--topology.distances", DISTANCES]


def _pod(tmp: Path) -> Path:
    # 12 CPUs and 100 GiB: two NUMA nodes each way.
    block = {"cpu": "12", "memory": "100Gi"}
    path = tmp / "pod.yaml"
    path.write_text(yaml.safe_dump({"apiVersion": "v1", "kind": "Pod", "metadata": {
        "namespace": "default", "name": "wide"}, "spec": {"containers": [{
            "name": "app", "image": "x", "resources": {"requests": block,
                                                       "limits": block}}]}}))
    return path


def _run(capsys: pytest.CaptureFixture[str], *argv: str) -> str:
    assert main(list(argv)) == 0
    text: str = capsys.readouterr().out
    return text


def _numa(capsys: pytest.CaptureFixture[str], pod: Path, *flags: str) -> list[int]:
    report = json.loads(_run(capsys, "plan", "-f", str(pod), *SHAPE, *flags, "-o", "json"))
    (p,) = report["pods"]
    assert p["admitted"], p
    numa: list[int] = p["numa_nodes"]
    return numa


def test_prefer_closest_takes_the_closest_pair(tmp_path: Path,
                                               capsys: pytest.CaptureFixture[str]) -> None:
    pod = _pod(tmp_path)
    assert _numa(capsys, pod) == [0, 1]
    assert _numa(capsys, pod, "--topology.distances", DISTANCES) == [0, 1]
    assert _numa(capsys, pod, *CLOSEST) == [2, 3]
    assert _numa(capsys, pod, "--topology-policy-options",
                 "prefer-closest-numa-nodes=false", "--topology.distances", DISTANCES) == [0, 1]


def test_plan_and_explain_show_the_options_and_distances(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    pod = _pod(tmp_path)
    first = _run(capsys, "plan", "-f", str(pod), *SHAPE, *CLOSEST).splitlines()[0]
    assert f"NUMA distances {DISTANCES};" in first
    assert "topology manager restricted (scope pod, prefer-closest-numa-nodes)" in first
    report = json.loads(_run(capsys, "plan", "-f", str(pod), *SHAPE, *CLOSEST,
                             "--topology-policy-options",
                             "prefer-closest-numa-nodes,max-allowable-numa-nodes=16",
                             "-o", "json"))
    node = report["modelled_node"]
    assert node["distances"]["2"] == [20, 20, 10, 11]
    assert node["config"]["topologyManagerPolicyOptions"] == {
        "prefer-closest-numa-nodes": "true", "max-allowable-numa-nodes": "16"}
    text = _run(capsys, "explain", "-f", str(pod), *SHAPE, *CLOSEST)
    assert "scope pod, prefer-closest-numa-nodes, reserved CPUs" in text
    assert "chosen: NUMA 2+3" in text
    out = json.loads(_run(capsys, "explain", "-f", str(pod), *SHAPE, *CLOSEST, "-o", "json"))
    assert out["pods"][0]["node"]["topology_manager_policy_options"] == {
        "prefer-closest-numa-nodes": "true"}


def test_help_names_the_flags_and_their_format(capsys: pytest.CaptureFixture[str]) -> None:
    for command in ("plan", "explain"):
        with pytest.raises(SystemExit):
            main([command, "--help"])
        text = " ".join(capsys.readouterr().out.split())
        assert "--topology.distances ROW;ROW..." in text
        assert "10,21;21,10 for two nodes" in text
        assert "max-allowable-numa-nodes=N (default: 8)" in text


@pytest.mark.parametrize(("flags", "words"), [
    (["--topology-policy-options", "prefer-closest-numa-nodes"],
     "prefer-closest-numa-nodes compares NUMA distances, which the modelled node lacks: give "
     "them with --topology.distances"),
    (["--topology.distances", "10,21;21,10"],
     "--topology.distances '10,21;21,10': the NUMA nodes 0-3 need 4 rows of 4 distances "
     "(1-255), rows separated by ';', e.g. 10,21,21,21;21,10,21,21;21,21,10,21;21,21,21,10"),
    (["--topology.distances", "10,x,20,20;30,10,20,20;20,20,10,11;20,20,11,10"],
     "need 4 rows of 4 distances"),
    (["--topology.distances", "10,300,20,20;30,10,20,20;20,20,10,11;20,20,11,10"],
     "need 4 rows of 4 distances"),
    (["--topology-policy-options", "prefer-closest"],
     "--topology-policy-options 'prefer-closest': expected prefer-closest-numa-nodes, "
     "max-allowable-numa-nodes"),
    (["--topology-policy-options", "prefer-closest-numa-nodes=maybe"], "expected"),
    (["--topology-policy-options", "max-allowable-numa-nodes=4"],
     'the minimum value of "max-allowable-numa-nodes" should not be less than 8'),
])
def test_bad_values_are_one_line(flags: list[str], words: str, tmp_path: Path,
                                 capsys: pytest.CaptureFixture[str]) -> None:
    pod = _pod(tmp_path)
    for command in ("plan", "explain"):
        assert main([command, "-f", str(pod), *SHAPE, *flags]) == 2
        err = capsys.readouterr().err
        assert words in err and "Traceback" not in err and len(err.strip().splitlines()) == 1


def test_distances_describe_a_modelled_node(tmp_path: Path,
                                            capsys: pytest.CaptureFixture[str]) -> None:
    pod = _pod(tmp_path)
    assert main(["plan", "-f", str(pod), "--topology.distances", "10"]) == 2
    assert "--topology.distances describes a modelled node: give --topology.shape" in \
        capsys.readouterr().err
    fixture = Path(__file__).resolve().parents[1] / "data" / "realnode" / "1.36-amd-pod"
    assert main(["plan", "--node", "--from", str(fixture), "-f", str(pod),
                 "--topology.distances", "10"]) == 2
    assert "with --node the node's own distances (sysfs) are used" in capsys.readouterr().err


def test_more_numa_nodes_than_allowed(tmp_path: Path,
                                      capsys: pytest.CaptureFixture[str]) -> None:
    """The kubelet refuses to start with more NUMA nodes than max-allowable-numa-nodes
    (8 by default) under any policy but none; raising the option models such a node."""
    pod = _pod(tmp_path)
    wide = ["--topology.shape", "1x16x2", "--numa-per-socket", "16", "--reserved", ""]
    assert main(["plan", "-f", str(pod), *wide]) == 2
    assert ("the modelled 1x16x2 node: unsupported on machines with more than 8 NUMA Nodes; "
            "--topology-policy-options max-allowable-numa-nodes=N raises the limit") in \
        capsys.readouterr().err
    text = _run(capsys, "plan", "-f", str(pod), *wide, "--topology-policy-options",
                "max-allowable-numa-nodes=16")
    assert "max-allowable-numa-nodes=16" in text.splitlines()[0]


def test_a_modelled_nodes_topology_file_keeps_its_distances(tmp_path: Path) -> None:
    """What sim --topology-file writes for a modelled node (the exporter's --topology, and
    plan's) carries the distances, so prefer-closest-numa-nodes works on it too."""
    from exporter.options import ModelOptions
    from exporter.sources.topology import load_topology_file

    topology, _ = ModelOptions(shape="1x16x2", numa_per_socket=4, reserved="",
                               distances=DISTANCES).build()
    assert topology is not None
    path = tmp_path / "topology.json"
    path.write_text(json.dumps(topology.to_json()))
    assert load_topology_file(str(path)).distances == topology.distances
    assert topology.to_snapshot().distances == topology.distances
    assert dict(topology.distances)[3] == (20, 20, 11, 10)
