"""``podres-exporter doctor``: the enablement checklist of a node for Pod-Level Resource
Managers, with pass / fail / unknown and a one-line fix for each failure.

Exit status: 0 when nothing fails, 1 when a check fails, 2 when the node cannot be read.
``doctor_checks`` is pure so that ``serve`` (or anything else) can reuse it.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal, Protocol

from exporter.errors import UserError
from exporter.flags import add_flag
from exporter.options import SourcesOptions, add_output_flag

if TYPE_CHECKING:
    from exporter.rawnode import RawNode
    from reconciler.snapshot import Topology

HELP = "enablement checklist for pod-level resource managers (exit 0 ready, 1 not, 2 unreadable)"

Status = Literal["pass", "fail", "unknown"]


class CheckpointFacts(Protocol):
    """What doctor needs of a parsed checkpoint (``exporter.sources.checkpoint``)."""

    @property
    def file(self) -> str: ...

    @property
    def format(self) -> str: ...

    @property
    def downgrade_unsafe(self) -> bool: ...


@dataclass(frozen=True, slots=True)
class Check:
    name: str
    status: Status
    detail: str
    fix: str = ""

    def to_json(self) -> dict[str, str]:
        return {"name": self.name, "status": self.status, "detail": self.detail,
                "fix": self.fix}


GATES = ("PodLevelResources", "PodLevelResourceManagers")


def _gate_check(name: str, config: Any, feature_metrics: Mapping[str, bool] | None) -> Check:
    fix = f"enable the feature gate: featureGates: {{{name}: true}} in the kubelet config"
    if feature_metrics is not None and name in feature_metrics:
        on = feature_metrics[name]
        return Check(f"{name} gate", "pass" if on else "fail",
                     f"kubernetes_feature_enabled says {'on' if on else 'off'}",
                     "" if on else fix)
    explicit = config.gate(name) if config is not None else None
    if explicit is not None:
        return Check(f"{name} gate", "pass" if explicit else "fail",
                     f"featureGates sets it {'true' if explicit else 'false'}",
                     "" if explicit else fix)
    if config is None:
        return Check(f"{name} gate", "unknown", "kubelet configuration not read")
    if name == "PodLevelResourceManagers":
        return Check(f"{name} gate", "fail", "not set in featureGates: off by default", fix)
    return Check(f"{name} gate", "unknown",
                 "not set in featureGates and no kubelet metrics: on by default since 1.34 "
                 "(beta), off before")


def doctor_checks(config: Any, feature_metrics: Mapping[str, bool] | None,
                  checkpoints: Sequence[CheckpointFacts] | None, platform: str | None, *,
                  online_cpus: int | None = None,
                  allocatable_cpus: int | None = None,
                  topology: Topology | None = None) -> list[Check]:
    """The checklist. ``config`` is a :class:`reconciler.kube.KubeletConfig` or ``None``;
    ``feature_metrics`` the ``kubernetes_feature_enabled`` gates; ``checkpoints`` the parsed
    checkpoint files (``None`` when not read); ``platform`` like ``sys.platform``."""
    checks = [_gate_check(g, config, feature_metrics) for g in GATES]
    if config is None:
        for name in ("topology manager policy", "topology manager scope",
                     "static CPU manager policy", "CPU manager policy options",
                     "Static memory manager policy"):
            checks.append(Check(name, "unknown", "kubelet configuration not read"))
    else:
        policy = config.topology_manager_policy
        checks.append(
            Check("topology manager policy", "pass", f"topologyManagerPolicy is {policy}")
            if policy.lower() != "none" else
            Check("topology manager policy", "fail", "topologyManagerPolicy is none",
                  "set topologyManagerPolicy: single-numa-node (or restricted / best-effort)"))
        scope = config.topology_manager_scope
        if scope.lower() == "pod":
            checks.append(Check("topology manager scope", "pass",
                                "topologyManagerScope is pod: pods with a budget get one "
                                "NUMA-aligned block and a pod shared pool"))
        elif scope.lower() == "container":
            checks.append(Check("topology manager scope", "pass",
                                "topologyManagerScope is container: exclusive containers "
                                "come from the node pool, no pod shared pool"))
        else:
            checks.append(Check("topology manager scope", "fail",
                                f"topologyManagerScope {scope!r} is not pod or container",
                                "set topologyManagerScope: pod"))
        checks.append(
            Check("static CPU manager policy", "pass", "cpuManagerPolicy is static")
            if config.static_cpu else
            Check("static CPU manager policy", "fail",
                  f"cpuManagerPolicy is {config.cpu_manager_policy}",
                  "set cpuManagerPolicy: static with reservedSystemCPUs, drain the node and "
                  "remove cpu_manager_state before restarting the kubelet"))
        checks.append(_policy_options_check(config))
        mem = config.memory_manager_policy
        checks.append(
            Check("Static memory manager policy", "pass", "memoryManagerPolicy is Static")
            if mem.lower() == "static" else
            Check("Static memory manager policy", "fail", f"memoryManagerPolicy is {mem}",
                  "set memoryManagerPolicy: Static with reservedMemory, drain the node and "
                  "remove memory_manager_state before restarting the kubelet"))
    if platform is None:
        checks.append(Check("Linux", "unknown", "platform not known"))
    elif platform.lower().startswith("linux"):
        checks.append(Check("Linux", "pass", "the node runs Linux"))
    else:
        checks.append(Check("Linux", "fail", f"the node runs {platform}",
                            "pod-level resource managers exist only on Linux nodes"))
    if checkpoints is None:
        checks.append(Check("checkpoint downgrade trap", "unknown",
                            "checkpoint files not read (give the kubelet root directory)"))
    else:
        unsafe = [c for c in checkpoints if c.downgrade_unsafe]
        formats = ", ".join(f"{c.file} {c.format}" for c in checkpoints) or "none present"
        if unsafe:
            names = ", ".join(f"{c.file} ({c.format} with podEntries)" for c in unsafe)
            checks.append(Check(
                "checkpoint downgrade trap", "fail",
                f"{names}: kubelets before 1.36 refuse it as corrupted",
                "before any kubelet downgrade, drain the node and delete the listed file(s); "
                "or upgrade to 1.37 (whose format older kubelets can read)"))
        else:
            checks.append(Check("checkpoint downgrade trap", "pass", f"formats: {formats}"))
    checks.append(_reserved_check(config, online_cpus, allocatable_cpus))
    checks.append(_topology_check(config, topology))
    return checks


def _topology_check(config: Any, topology: Topology | None) -> Check:
    """Whether the kubelet sees the machine as the kernel does; where it does not, the
    ledger follows the kubelet (docs/design.md#topology)."""
    from reconciler.kubelet_topology import divergences

    name = "kubelet's view of the CPU topology"
    if topology is None or topology.kernel is None:
        return Check(name, "unknown", "CPU topology not read from sysfs (a live node with --sysfs, "
                     "or a fixture recorded from one)")
    found = divergences(topology, topology_policy=config.topology_manager_policy
                        if config is not None else None,
                        max_numa_nodes=config.max_numa_nodes() if config is not None
                        else None)
    if not found:
        counts = topology.counts
        detail = (f"{counts.cpus} CPUs, {counts.cores} cores, {counts.numa_nodes} NUMA "
                  "node(s): as the kernel shows them" if counts else "as the kernel shows it")
        return Check(name, "pass", detail)
    return Check(name, "fail", "; ".join(f"{d.kind}: {d.detail}" for d in found),
                 "; ".join(d.fix for d in found))


def _policy_options_check(config: Any) -> Check:
    """``cpuManagerPolicyOptions`` as the kubelet reads them: an unknown name, a value that
    is not a boolean or a pair it refuses keeps the kubelet from starting."""
    from reconciler.allocator import ModelConfig, ModelError

    name = "CPU manager policy options"
    try:
        model = ModelConfig.from_kubelet_config(config)
    except ModelError as exc:
        return Check(name, "fail", str(exc),
                     "fix cpuManagerPolicyOptions: the kubelet refuses to start with it")
    enabled = ", ".join(sorted(model.options)) or "none"
    return Check(name, "pass", f"enabled: {enabled}")


def _reserved_check(config: Any, online: int | None, allocatable: int | None) -> Check:
    name = "reserved CPUs leave room"
    if config is not None and config.static_cpu and allocatable is not None:
        if allocatable == 0:
            return Check(name, "fail", "GetAllocatableResources lists no CPU",
                         "reserve fewer CPUs (reservedSystemCPUs / kubeReserved / systemReserved)")
        return Check(name, "pass", f"{allocatable} CPUs allocatable")
    if config is None or online is None:
        return Check(name, "unknown", "online CPUs or reservation not known")
    if config.reserved_system_cpus:
        reserved = len(config.reserved_system_cpus)
    else:
        reserved = math.ceil(config.reserved_cpu_quantity_m() / 1000)
    left = online - reserved
    if left <= 0:
        return Check(name, "fail", f"{reserved} of {online} CPUs reserved: none left for pods",
                     "reserve fewer CPUs (reservedSystemCPUs / kubeReserved / systemReserved)")
    return Check(name, "pass", f"{reserved} of {online} CPUs reserved, {left} left")


def exit_code(checks: Sequence[Check]) -> int:
    return 1 if any(c.status == "fail" for c in checks) else 0


def render_table(checks: Sequence[Check]) -> str:
    width = max(len(c.name) for c in checks)
    lines = []
    for c in checks:
        lines.append(f"{c.status.upper():8} {c.name:{width}}  {c.detail}")
        if c.fix:
            lines.append(f"{'':8} {'':{width}}  fix: {c.fix}")
    failing = [c.name for c in checks if c.status == "fail"]
    lines.append("")
    lines.append(f"not ready: failing: {', '.join(failing)}" if failing
                 else "ready: no check fails")
    return "\n".join(lines)


# ---- reading the node ------------------------------------------------------------------


@dataclass
class _Facts:
    config: Any = None
    metrics: dict[str, bool] | None = None
    checkpoints: list[Any] | None = None
    platform: str | None = None
    online: int | None = None
    allocatable: int | None = None
    topology: Topology | None = None


def facts_from_raw(raw: RawNode, origin: str, platform: str | None) -> _Facts:
    """The checklist's inputs from a node's raw inputs (a fixture directory or a live
    read); ``origin`` names where the configuration came from."""
    from exporter.sources.checkpoint import CheckpointError, parse_checkpoint
    from exporter.sources.kubelet_bodies import config_from_body, feature_gates
    from exporter.sources.podresources import decode_allocatable

    if raw.configz is None:
        raise UserError(f"cannot read the node: {origin} is missing")
    try:
        config = config_from_body(raw.configz)
    except (ValueError, RecursionError) as exc:  # json's errors and SpecError
        reason = "nested too deeply" if isinstance(exc, RecursionError) else str(exc)[:300]
        if isinstance(exc, json.JSONDecodeError):
            reason = f"invalid JSON: {reason}"
        raise UserError(f"cannot read the node: {origin}: {reason}") from None
    facts = _Facts(config=config, platform=platform)
    if raw.metrics is not None:
        facts.metrics = feature_gates(raw.metrics) or None
    checkpoints = []
    for name, data in raw.checkpoints:
        try:
            checkpoints.append(parse_checkpoint(name, data))
        except CheckpointError as exc:
            raise UserError(f"cannot read the node: {exc}") from None
    facts.checkpoints = checkpoints
    if raw.topology is not None:
        facts.online = len(raw.topology.cpus)
        facts.topology = raw.topology
    if raw.allocatable is not None:
        try:
            facts.allocatable = len(decode_allocatable(raw.allocatable).cpu_ids)
        except UserError as exc:
            raise UserError(f"cannot read the node: {exc}") from None
    return facts


def facts_from_dir(directory: str) -> _Facts:
    from exporter.sources.fixture import load_fixture_dir

    root = Path(directory)
    try:
        raw = load_fixture_dir(root, with_list=False)
    except UserError as exc:
        raise UserError(f"cannot read the node: {exc}") from None
    # topology.json is recorded from sysfs: a Linux node, unless the fixture says otherwise.
    platform = "linux" if raw.topology is not None else None
    if (root / "platform").exists():
        platform = (root / "platform").read_text(encoding="utf-8").strip() or None
    return facts_from_raw(raw, str(root / "configz.json"), platform)


async def _facts_live(args: argparse.Namespace) -> _Facts:
    from exporter.commands._sources import source_options
    from exporter.reader import NodeReader

    options = source_options(args)
    if not options.kubelet_url:
        raise UserError("cannot read the node: give --from DIR or --kubelet.url URL")
    reader = NodeReader(options)
    try:
        poll = await reader.poll()
    finally:
        await reader.close()
    problem = poll.errors.get(("kubelet", "configz"))
    if problem is not None:
        raise UserError(f"cannot read the node: {problem}")
    facts = facts_from_raw(poll.raw, f"{options.kubelet_url}/configz", sys.platform)
    if not options.kubelet_root:
        facts.checkpoints = None  # not read, rather than none present
    return facts


def add_arguments(parser: argparse.ArgumentParser) -> None:
    add_flag(parser, "--from", dest="from_dir", default=None, metavar="DIR",
             help="check a fixture directory (configz.json, metrics.txt, checkpoint files, "
             "topology.json, allocatable.json) instead of a live node")
    add_output_flag(parser)
    SourcesOptions.add_flags(parser)


def run(args: argparse.Namespace) -> int:
    if args.from_dir:
        facts = facts_from_dir(args.from_dir)
    else:
        import asyncio

        SourcesOptions.from_args(args)  # the sources flags' cross-checks, before any read
        facts = asyncio.run(_facts_live(args))
    checks = doctor_checks(facts.config, facts.metrics, facts.checkpoints, facts.platform,
                           online_cpus=facts.online, allocatable_cpus=facts.allocatable,
                           topology=facts.topology)
    code = exit_code(checks)
    if args.output == "json":
        print(json.dumps({"ready": code == 0, "checks": [c.to_json() for c in checks]},
                         indent=2))
    else:
        print(render_table(checks))
    return code
