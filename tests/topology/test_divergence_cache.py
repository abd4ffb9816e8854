"""The topology divergence check is made once per topology and kubelet settings: a
recompute for new pods on the same topology object gets the last answer without checking
again, and a different topology or policy is checked afresh."""

from __future__ import annotations

from dataclasses import replace

import pytest

from exporter.assemble import assemble
from reconciler import reconcile as reconcile_module
from reconciler.kube import KubeletConfig
from reconciler.kubelet_topology import topology
from reconciler.reconcile import reconcile
from reconciler.snapshot import CPUInfo, KernelTopology


def _topology(nodes: int) -> object:
    cpus = tuple(CPUInfo(id=i, core=i, socket=0, numa_node=i % nodes) for i in range(4))
    kernel = KernelTopology(online=frozenset(range(4)), numa_nodes=tuple(range(nodes)))
    return topology(cpus, (), kernel=kernel)


def test_the_same_topology_is_checked_once(monkeypatch: pytest.MonkeyPatch) -> None:
    calls: list[object] = []
    real = reconcile_module.divergences

    def counted(topo: object, **kw: object) -> object:
        calls.append(topo)
        return real(topo, **kw)  # type: ignore[arg-type]

    monkeypatch.setattr(reconcile_module, "divergences", counted)
    monkeypatch.setattr(reconcile_module, "_last_divergences", None)
    many = _topology(9)  # over the topology manager's 8: a divergence under a policy
    strict = KubeletConfig(topology_manager_policy="single-numa-node")
    first = reconcile(assemble((), topology=many, config=strict))
    again = reconcile(assemble((), topology=many, config=strict))
    assert len(calls) == 1
    assert again.topology_divergences is first.topology_divergences
    assert [d.kind for d in first.topology_divergences or ()] == ["numa_nodes_over_limit"]
    # Another policy, or another topology object: checked again, with its own answer.
    none = reconcile(assemble((), topology=many, config=replace(
        strict, topology_manager_policy="none")))
    assert none.topology_divergences == () and len(calls) == 2
    reconcile(assemble((), topology=_topology(9), config=strict))
    assert len(calls) == 3
