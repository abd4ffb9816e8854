"""`plan --node` and `explain --node` on the real node, then the manifest dropped in
(docs/real-node.md#plan): the CPUs the model places each container on, the block, and the
verdict are what the kubelet then does, pod after pod, on the node as it stands."""

from __future__ import annotations

import json
import re
from typing import Any

import pytest
import yaml

from realnode.harness import NODE_NAME, Node, NodeConfig, guaranteed_pod, wait_for
from tests.realnode.checks import KubeletCPUState, cpus, settled
from tests.realnode.conftest import StartNode
from tests.realnode.test_ledger import AMD, INTEL, tree_workload


def predicted(node: Node, command: str, manifest: dict[str, Any]) -> dict[str, Any]:
    path = node.workdir / f"{command}-{manifest['metadata']['name']}.yaml"
    path.write_text(yaml.safe_dump(manifest))
    done = node.exporter(command, "--node", "-f", str(path), "-o", "json")
    assert done.returncode == 0, done.stderr
    pods: list[dict[str, Any]] = json.loads(done.stdout)["pods"]
    assert len(pods) == 1
    return pods[0]


def what_the_kubelet_did(node: Node, name: str
                         ) -> tuple[str | None, dict[str, frozenset[int]], frozenset[int]]:
    """(the reason it refused the pod or None, each container's CPUs, the block) once the
    kubelet has decided."""
    full = f"{name}-{NODE_NAME}"

    def decided() -> dict[str, Any] | None:
        pod = next((p for p in node.pods() if p["metadata"]["name"] == full), None)
        phase = pod and pod.get("status", {}).get("phase")
        return pod if phase in ("Running", "Failed") else None
    pod = wait_for(decided, 60, f"the kubelet to decide on {name}")
    if pod["status"]["phase"] == "Failed":
        return str(pod["status"].get("reason")), {}, frozenset()
    state = KubeletCPUState.read(node)
    uid = pod["metadata"]["uid"]
    return None, state.containers.get(uid, {}), state.pods.get(uid, frozenset())


CASES = [("1.37", AMD), ("1.37", INTEL), ("1.36", AMD)]


@pytest.mark.parametrize(("version", "tree"), CASES, ids=[f"{v}-{t}" for v, t in CASES])
def test_plan_and_explain_say_what_the_kubelet_then_does(start_node: StartNode, version: str,
                                                          tree: str) -> None:
    node = start_node(NodeConfig(version=version, tree=tree, scope="pod", pod_level=True))
    pods = [*tree_workload().values(), guaranteed_pod("toobig", cpu="9")]
    running: set[str] = set()
    for manifest in pods:
        name = manifest["metadata"]["name"]
        plan = predicted(node, "plan", manifest)
        explain = predicted(node, "explain", manifest)
        node.add_pod(manifest)
        refused, held, block = what_the_kubelet_did(node, name)
        assert plan["admitted"] == (refused is None), (name, refused, plan)
        if refused is not None:
            # "TopologyAffinityError" as the plan words it: "topology affinity error: ..."
            assert plan["reason"].startswith(
                re.sub(r"(?<!^)(?=[A-Z])", " ", refused).lower()), (refused, plan["reason"])
            node.remove_pod(name)
            wait_for(lambda n=name: f"{n}-{NODE_NAME}" not in node.phases(), 60, "the pod to go")
            continue
        running.add(f"{name}-{NODE_NAME}")
        settled(node, running)
        planned = {c["name"]: cpus(c["cpus"]) for c in plan["containers"]}
        # explain's JSON writes "-" where it has no CPU to show.
        explained = {c["name"]: cpus((c["cpus"] or "").strip("-"))
                     for c in explain["containers"]}
        # A container without CPUs of its own and no block runs on the node's shared pool:
        # the checkpoint has no entry for it, the plan no CPUs.
        assert {n: c for n, c in planned.items() if c} == held, (name, planned, held)
        assert explained == planned, (name, explained, planned)
        # The pod's CPUs: its block, or without one what its containers hold.
        assert cpus(plan["cpus"]) == (block or frozenset().union(*held.values())), (
            name, plan["cpus"], block, held)
