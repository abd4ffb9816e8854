"""explain: the model's decision path, and for every refusal case of plan's tests the cause
and changes that plan, run again on the changed manifest or kubelet flags, admits."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import pytest
import yaml

from exporter.cli import main
from tests.plan.test_plan_node import _busy_node, _fixture_dir, _manifest

PLAN_DATA = Path(__file__).parent.parent / "plan" / "data"
FLAG_OF = {"topologyManagerPolicy": "--topology-policy", "topologyManagerScope": "--scope",
           "cpuManagerPolicyOptions": "--cpu-policy-options"}


def _json(capsys: pytest.CaptureFixture[str], command: str, *args: str) -> dict[str, Any]:
    assert main([command, *args, "-o", "json"]) == 0
    out: dict[str, Any] = json.loads(capsys.readouterr().out)
    return out


def _pod_spec(doc: dict[str, Any]) -> dict[str, Any]:
    """The pod spec of a workload document, wherever its kind keeps it."""
    kind = doc["kind"]
    if kind == "Pod":
        spec: dict[str, Any] = doc["spec"]
        return spec
    if kind == "CronJob":
        return _pod_spec({"kind": "Job", "spec": doc["spec"]["jobTemplate"]["spec"]})
    return _pod_spec({"kind": "Pod", "spec": doc["spec"]["template"]["spec"]})


def _set_cpu(resources: dict[str, Any], cpus: int) -> None:
    for section in ("requests", "limits"):
        block = resources.setdefault(section, {})
        block["cpu"] = str(cpus)
        if "memory" in resources.get("limits", {}):
            block["memory"] = resources["limits"]["memory"]


def _applied(source: Path, name: str, change: dict[str, Any], out: Path) -> Path:
    """``source`` with ``change``'s CPUs written into template ``name``."""
    docs = [d for d in yaml.safe_load_all(source.read_text()) if d]
    flat = [item for d in docs for item in (d["items"] if d["kind"] == "List" else [d])]
    (doc,) = [d for d in flat if d["metadata"]["name"] == name]
    spec = _pod_spec(doc)
    if change["pod_cpus"] is not None:
        _set_cpu(spec.setdefault("resources", {}), change["pod_cpus"])
    for container, cpus in change["container_cpus"].items():
        every = spec.get("containers", []) + spec.get("initContainers", [])
        (c,) = [c for c in every if c["name"] == container]
        _set_cpu(c.setdefault("resources", {}), cpus)
    out.write_text(yaml.safe_dump_all(flat))
    return out


def _flags(node_flags: list[str], kubelet: dict[str, str]) -> list[str]:
    """The modelled-node flags with the change's kubelet fields in place of theirs."""
    flags = list(node_flags)
    for field, value in kubelet.items():
        flag = FLAG_OF[field]
        if flag in flags:
            i = flags.index(flag)
            del flags[i:i + 2]
        flags += [flag, value]
    return flags


def _huge(tmp: Path) -> Path:
    path = tmp / "huge.yaml"
    path.write_text("kind: Pod\nmetadata: {name: big}\nspec:\n  containers:\n"
                    "  - {name: main, resources: {limits: {cpu: '5000', memory: 1Gi}}}\n")
    return path


def _odd(tmp: Path) -> Path:
    path = tmp / "odd.yaml"
    path.write_text("kind: Pod\nmetadata: {name: odd}\nspec:\n  containers:\n"
                    "  - {name: app, resources: {limits: {cpu: '3', memory: 1Gi}}}\n")
    return path


# (manifest, template, modelled-node flags, cause, kinds of change expected): the refusals of
# tests/plan/test_plan.py (nightly, db, big), and an SMT refusal under full-pcpus-only. Only
# the pod scope under a topology policy other than none carves a pod block, so another scope
# or the none policy admits what the budget refused (docs/design.md#allocator).
CASES = [
    (lambda tmp: PLAN_DATA / "kinds.yaml", "nightly", [], "budget",
     {"budget", "scope", "policy"}),
    (lambda tmp: PLAN_DATA / "kinds.yaml", "db", ["--topology.shape", "2x4x1", "--reserved", "0"],
     "topology", {"cpus", "policy"}),
    (_huge, "big", [], "cpus", {"cpus"}),
    (_odd, "odd", ["--topology.shape", "1x4x2", "--reserved", "0", "--cpu-policy-options",
                   "full-pcpus-only"], "smt-multiple", {"smt", "cpus", "option"}),
]


@pytest.mark.parametrize(("source", "name", "node", "cause", "kinds"), CASES,
                         ids=[c[1] for c in CASES])
def test_refusals_name_the_cause_and_changes_plan_then_admits(
        source: Any, name: str, node: list[str], cause: str, kinds: set[str], tmp_path: Path,
        capsys: pytest.CaptureFixture[str]) -> None:
    manifest = source(tmp_path)
    planned = {p["name"]: p for p in _json(capsys, "plan", "-f", str(manifest), *node)["pods"]}
    assert planned[name]["admitted"] is False
    (e,) = _json(capsys, "explain", "-f", str(manifest), *node, name)["pods"]
    assert e["admitted"] is False
    assert e["reason"] == planned[name]["reason"]
    assert e["cause"] == cause
    assert {c["kind"] for c in e["changes"]} == kinds
    for i, change in enumerate(e["changes"]):
        changed = _applied(manifest, name, change, tmp_path / f"changed-{i}.yaml")
        report = _json(capsys, "plan", "-f", str(changed), *_flags(node, change["kubelet"]))
        again = {p["name"]: p for p in report["pods"]}[name]
        assert again["admitted"] is True, (change, again["reason"])
        if node:  # a modelled node: plan predicts the same CPUs
            assert again["cpus"] == change["cpus"], change


def test_smt_refusal_in_words(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["explain", "-f", str(_odd(tmp_path)), "--topology.shape", "1x4x2",
                 "--reserved", "0", "--cpu-policy-options", "full-pcpus-only"]) == 0
    out = capsys.readouterr().out
    assert "result: refused: container app: SMT Alignment Error: requested 3 cpus" in out
    assert "cause: full-pcpus-only: the request is not a multiple of the threads per core" in out
    assert "container app: cpu 3 -> 4 (a multiple of the 2 threads per core): admitted" in out
    assert "full-pcpus-only (whole physical cores only" in out
    assert "decided the refusal: without it the pod is admitted" in out


def test_admitted_on_two_numa_nodes_shows_the_hints(tmp_path: Path,
                                                    capsys: pytest.CaptureFixture[str]) -> None:
    """6 CPUs on two 4-CPU NUMA nodes under best-effort: no single node can hold them, so
    the preferred hint is both nodes, and the CPUs span both."""
    manifest = tmp_path / "six.yaml"
    manifest.write_text("kind: Pod\nmetadata: {name: six}\nspec:\n  containers:\n"
                        "  - {name: app, resources: {limits: {cpu: '6', memory: 1Gi}}}\n")
    (e,) = _json(capsys, "explain", "-f", str(manifest), "--topology.shape", "2x4x1",
                 "--reserved", "", "--topology-policy", "best-effort")["pods"]
    assert e["admitted"] is True and e["numa_nodes"] == [0, 1]
    (hint,) = e["hints"]
    assert hint["request"] == "pod" and hint["cpus"] == 6
    assert hint["cpu_hints"] == [{"numa_nodes": [0, 1], "preferred": True}]
    assert {"numa_nodes": [0], "preferred": True} in hint["memory_hints"]
    assert hint["chosen"] == [0, 1]
    assert e["changes"] == []
    assert [(c["name"], c["eligible"], c["cpus"]) for c in e["containers"]] == \
        [("app", True, e["cpus"])]


def test_options_that_shaped_the_take(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """distribute-cpus-across-cores takes one thread per core: without it the same pod gets
    both threads of a core, and explain says so."""
    manifest = tmp_path / "two.yaml"
    manifest.write_text("kind: Pod\nmetadata: {name: two}\nspec:\n  containers:\n"
                        "  - {name: app, resources: {limits: {cpu: '2', memory: 1Gi}}}\n")
    (e,) = _json(capsys, "explain", "-f", str(manifest), "--topology.shape", "1x4x2",
                 "--reserved", "", "--cpu-policy-options",
                 "distribute-cpus-across-cores")["pods"]
    (option,) = e["options"]
    assert option["name"] == "distribute-cpus-across-cores"
    assert option["effect"].startswith("shaped the take: without it the CPUs would be")
    assert e["cpus"] not in option["effect"]


async def test_manifest_on_a_live_node_over_the_socket(
        short_tmp: Path, start_sim: Any, capsys: pytest.CaptureFixture[str]) -> None:
    """plan --node's refusal (also-four, after needs-four took NUMA node 1) explained on the
    same live node; the change offered is admitted by plan --node on the changed manifest."""
    node = _busy_node()
    sim = await start_sim(node.state())
    topology = short_tmp / "topology.json"
    topology.write_text(json.dumps(node.topology_json()))
    manifest = _manifest(short_tmp, ("needs-four", 4), ("also-four", 4))
    live = ["--node", "--podresources.socket", sim.socket_path, "--topology", str(topology),
            "--topology-policy", "single-numa-node", "--scope", "container", "--reserved", "0"]
    argv = ["explain", *live, "-f", str(manifest), "also-four", "-o", "json"]
    assert await asyncio.to_thread(main, argv) == 0
    (e,) = json.loads(capsys.readouterr().out)["pods"]
    assert e["admitted"] is False and e["cause"] == "topology"
    (change,) = e["changes"]
    assert change["container_cpus"] == {"app": 1} and change["cpus"] == "3"
    changed = _applied(manifest, "also-four", change, short_tmp / "changed.yaml")
    argv = ["plan", *live, "-f", str(changed), "-o", "json"]
    assert await asyncio.to_thread(main, argv) == 0
    pods = {p["name"]: p for p in json.loads(capsys.readouterr().out)["pods"]}
    assert pods["also-four"]["admitted"] is True and pods["also-four"]["cpus"] == "3"


async def test_a_pod_on_a_live_node_over_https(short_tmp: Path, start_sim: Any,
                                               capsys: pytest.CaptureFixture[str]) -> None:
    """A pod the node runs, read through the kubelet's /pods and /configz: with its CPUs
    given back, the model places it where it is."""
    node = _busy_node()
    held = node.model.pods[("default", "busy")].held
    sim = await start_sim(node.state(), http=True)
    topology = short_tmp / "topology.json"
    topology.write_text(json.dumps(node.topology_json()))
    argv = ["explain", "--node", "--podresources.socket", sim.socket_path, "--topology",
            str(topology), "--kubelet.url", sim.http_url, "--kubelet.ca-file",
            str(sim.cert_path), "busy", "-o", "json"]
    assert await asyncio.to_thread(main, argv) == 0
    (e,) = json.loads(capsys.readouterr().out)["pods"]
    assert e["node"]["topology_manager_policy"] == "single-numa-node"
    assert e["admitted"] is True
    from reconciler.cpuset import parse_cpuset

    assert parse_cpuset(e["cpus"]) == held
    (hint,) = e["hints"]
    assert hint["request"] == "container app" and hint["chosen"] == [0]


def test_manifest_on_a_fixture_node(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """plan --node --from's refusal (five CPUs on a node with 4 and 1 free per NUMA node)."""
    directory = _fixture_dir(tmp_path, _busy_node())
    manifest = _manifest(tmp_path, ("five", 5))
    (e,) = _json(capsys, "explain", "--node", "--from", str(directory), "-f",
                 str(manifest))["pods"]
    assert e["admitted"] is False
    changes = {c["kind"]: c for c in e["changes"]}
    assert changes["cpus"]["container_cpus"] == {"app": 4}
    changed = _applied(manifest, "five", changes["cpus"], tmp_path / "changed.yaml")
    (again,) = _json(capsys, "plan", "--node", "--from", str(directory), "-f",
                     str(changed))["pods"]
    assert again["admitted"] is True and again["cpus"] == changes["cpus"]["cpus"]


@pytest.mark.parametrize(("args", "message"), [
    ([], "name the pod"),
    (["--from", "x", "-f", "y"], "--from DIR reads a node"),
    (["--node", "--from", "DIR"], "name it ([NAMESPACE/]NAME)"),
    (["--node", "--from", "DIR", "nosuchpod"], "no pod default/nosuchpod"),
    (["-f", str(PLAN_DATA / "kinds.yaml"), "nosuch"], "no template nosuch in the manifests"),
    (["--node", "--topology.shape", "1x4x1", "-f", "y"], "--topology.shape does not apply"),
])
def test_bad_input_is_one_line(args: list[str], message: str, tmp_path: Path,
                               capsys: pytest.CaptureFixture[str]) -> None:
    directory = _fixture_dir(tmp_path, _busy_node())
    args = [str(directory) if a == "DIR" else a for a in args]
    assert main(["explain", *args]) == 2
    err = capsys.readouterr().err
    assert message in err and "Traceback" not in err
    assert len(err.strip().splitlines()) == 1


def test_a_pod_on_a_fixture_node_in_words(tmp_path: Path,
                                          capsys: pytest.CaptureFixture[str]) -> None:
    """A pod the fixture's node runs (its spec from pods.json), explained as a table: its CPUs
    given back, the model takes the same ones again, and says which hints it chose from."""
    node = _busy_node()
    held = node.model.pods[("default", "busy")].held
    directory = _fixture_dir(tmp_path, node)
    assert main(["explain", "--node", "--from", str(directory), "default/busy"]) == 0
    out = capsys.readouterr().out
    from reconciler.cpuset import format_cpuset

    assert f"result: admitted, CPUs {format_cpuset(held)} (NUMA 0)" in out
    assert "container app: 2 CPU(s), memory 1 GiB" in out
    assert "CPU manager offers NUMA 0 (preferred), NUMA 1 (preferred)" in out
    assert "chosen: NUMA 0" in out
