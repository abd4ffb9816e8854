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
from typing import Any, Literal, Protocol

from exporter.errors import UserError
from exporter.flags import add_flag
from exporter.options import SourcesOptions, add_output_flag

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
                  allocatable_cpus: int | None = None) -> list[Check]:
    """The checklist. ``config`` is a :class:`reconciler.kube.KubeletConfig` or ``None``;
    ``feature_metrics`` the ``kubernetes_feature_enabled`` gates; ``checkpoints`` the parsed
    checkpoint files (``None`` when not read); ``platform`` like ``sys.platform``."""
    checks = [_gate_check(g, config, feature_metrics) for g in GATES]
    if config is None:
        for name in ("topology manager policy", "topology manager scope",
                     "static CPU manager policy", "Static memory manager policy"):
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
    return checks


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


def _read_checkpoints(root: Path) -> list[Any] | None:
    from exporter.sources.checkpoint import read_cpu_checkpoint, read_memory_checkpoint

    found: list[Any] = []
    any_file = False
    for name, reader in (("cpu_manager_state", read_cpu_checkpoint),
                         ("memory_manager_state", read_memory_checkpoint)):
        if (root / name).exists():
            any_file = True
            found.append(reader(root / name))
    return found if any_file else []


def _json_file(path: Path) -> Any:
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except OSError as exc:
        raise UserError(f"cannot read the node: {path}: {exc.strerror or exc}") from None
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise UserError(f"cannot read the node: {path}: invalid JSON: {exc}") from None


def _config(obj: Any, origin: str) -> Any:
    from reconciler.kube import SpecError, kubelet_config_from_json

    try:
        return kubelet_config_from_json(obj)
    except SpecError as exc:
        raise UserError(f"cannot read the node: {origin}: {exc}") from None


def facts_from_dir(directory: str) -> _Facts:
    from exporter.sources.kubelet import parse_feature_metrics
    from exporter.sources.topology import topology_from_json

    root = Path(directory)
    if not root.is_dir():
        raise UserError(f"cannot read the node: {root} is not a fixture directory")
    facts = _Facts()
    configz = root / "configz.json"
    if not configz.exists():
        raise UserError(f"cannot read the node: {configz} is missing")
    facts.config = _config(_json_file(configz), str(configz))
    metrics = root / "metrics.txt"
    if metrics.exists():
        facts.metrics = parse_feature_metrics(metrics.read_text(encoding="utf-8",
                                                                errors="replace"))
    facts.checkpoints = _read_checkpoints(root)
    topo = root / "topology.json"
    if topo.exists():
        try:
            facts.online = len(topology_from_json(_json_file(topo), str(topo)).cpus)
        except UserError as exc:
            raise UserError(f"cannot read the node: {exc}") from None
        facts.platform = "linux"  # topology.json is recorded from sysfs
    platform = root / "platform"
    if platform.exists():
        facts.platform = platform.read_text(encoding="utf-8").strip() or None
    alloc = root / "allocatable.json"
    if alloc.exists():
        obj = _json_file(alloc)
        ids = obj.get("cpuIds", obj.get("cpu_ids", [])) if isinstance(obj, dict) else None
        if not isinstance(ids, list):
            raise UserError(f"cannot read the node: {alloc}: cpuIds is not a list")
        facts.allocatable = len(ids)
    return facts


async def _facts_live(args: argparse.Namespace) -> _Facts:
    from exporter.sources.kubelet import KubeletClient, parse_feature_metrics
    from exporter.sources.podresources import PodResourcesClient
    from exporter.sources.topology import load_topology_file, read_sysfs_topology

    ns = vars(args)
    url = ns.get("kubelet.url")
    if not url:
        raise UserError("cannot read the node: give --from DIR or --kubelet.url URL")
    facts = _Facts(platform=sys.platform)
    client = KubeletClient(url, token_file=ns.get("kubelet.token_file"),
                           ca_file=ns.get("kubelet.ca_file"),
                           insecure_skip_verify=bool(ns.get("kubelet.insecure_skip_verify")))
    try:
        try:
            body = await client.fetch("/configz")
        except UserError as exc:
            raise UserError(f"cannot read the node: {exc}") from None
        try:
            facts.config = _config(json.loads(body), f"{url}/configz")
        except json.JSONDecodeError:
            raise UserError(f"cannot read the node: {url}/configz is not JSON") from None
        try:
            facts.metrics = parse_feature_metrics(
                (await client.fetch("/metrics")).decode("utf-8", "replace")) or None
        except UserError:
            facts.metrics = None
    finally:
        await client.close()
    root = ns.get("kubelet.root_dir")
    if root:
        facts.checkpoints = _read_checkpoints(Path(root))
    try:
        topo = load_topology_file(ns["topology"]) if ns.get("topology") \
            else read_sysfs_topology(ns.get("sysfs") or "/sys")
        facts.online = len(topo.cpus)
    except UserError:
        facts.online = None
    socket = ns.get("podresources.socket")
    if socket and Path(socket).exists():
        pr = PodResourcesClient(socket)
        try:
            resp = await pr.allocatable()
            if resp is not None:
                facts.allocatable = len(resp.cpu_ids)
        except UserError:
            pass
        finally:
            await pr.close()
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
                           online_cpus=facts.online, allocatable_cpus=facts.allocatable)
    code = exit_code(checks)
    if args.output == "json":
        print(json.dumps({"ready": code == 0, "checks": [c.to_json() for c in checks]},
                         indent=2))
    else:
        print(render_table(checks))
    return code
