"""A kubelet restart on the model's state (docs/design.md#allocator): the static policy's
``Start`` validates the state it restores, then every active pod is admitted again, in the
order it was first admitted, through the topology manager.

For most pods the second admission changes nothing: the CPU manager finds each container
already in its state and keeps its CPUs. A pod-scope pod with pod-level resources is
different (1.36 and 1.37): its second admission asks for hints from the CPUs its containers
hold, which fail whenever one of them holds the pod shared pool, and then ``AllocatePod``
carves a new block out of the free CPUs without giving back the old one. The model follows
the kubelet, leak included.
"""

from __future__ import annotations

from dataclasses import dataclass

from reconciler.allocator.model import NodeModel
from reconciler.allocator.start import validate_state


@dataclass(frozen=True, slots=True)
class Readmission:
    uid: str
    admitted: bool
    reason: str = ""


@dataclass(frozen=True, slots=True)
class RestartResult:
    """``error`` is why the kubelet would not start (its own words); otherwise each pod's
    second admission, in order. A refused pod is killed and gives back what it held."""

    error: str | None
    readmitted: tuple[Readmission, ...] = ()


def restart(model: NodeModel, kubelet: str = "1.37") -> RestartResult:
    """Restart the kubelet (minor version ``kubelet``) on ``model``'s state, changing the
    model as the kubelet would."""
    error = start_error(model)
    if error is not None:
        return RestartResult(error)
    smt_first = kubelet in ("1.35", "1.36")
    out: list[Readmission] = []
    for key, placement in list(model.pods.items()):
        reason = None
        if placement.path == "pod" and placement.block and not model.memory_enabled:
            reason = model.readmit_pod_block(key)
        elif smt_first:
            reason = model.recheck_smt(key)
        out.append(Readmission(placement.uid, reason is None, reason or ""))
    return RestartResult(None, tuple(out))


def start_error(model: NodeModel) -> str | None:
    """``validateState`` of the static policy on the model's state, or ``None``."""
    if not model.config.static:
        return None
    assignments: dict[str, dict[str, frozenset[int]]] = {}
    for placement in model.pods.values():
        if placement.held:
            assignments[placement.uid] = {"*": placement.held}
    for (uid, name), cpus in model.checkpointed.items():
        assignments.setdefault(uid, {})[name] = cpus
    strict = "strict-cpu-reservation" in model.config.options
    _, error = validate_state(model.topo, model.reserved, model.default_set, assignments,
                              strict=strict, pod_sets=model.orphan_blocks.values())
    return None if error is None else f"cpu manager start: {error}"


__all__ = ["Readmission", "RestartResult", "restart", "start_error"]
