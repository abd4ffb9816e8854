"""Typed options: each flag group (web, history, log, polling, sources, modelled node) is
declared once, as a frozen dataclass whose fields carry their flag, and every command that
takes the group adds it with ``add_flags`` and reads it back with ``from_args``, which
validates it. Commands never read ``argparse.Namespace`` keys by hand.

A field's dataclass default is the flag's default (shown once in ``--help``); a command may
override it (``demo`` listens on loopback), never redeclare the flag.
"""

from __future__ import annotations

import argparse
import os
import re
import sys
from collections.abc import Callable, Collection
from dataclasses import dataclass, field, fields
from pathlib import Path
from socket import gethostname
from typing import TYPE_CHECKING, Any, ClassVar, Self
from urllib.parse import urlsplit

from exporter.errors import UserError
from exporter.flags import add_flag, duration, env_name, format_duration, positive_int
from exporter.sources.cgroup import DRIVERS as CGROUP_DRIVERS
from exporter.sources.kubelet import DEFAULT_TOKEN_FILE
from exporter.sources.podresources import DEFAULT_MAX_RECV, DEFAULT_SOCKET
from reconciler.allocator.config import KNOWN_OPTIONS

if TYPE_CHECKING:
    from reconciler.allocator import CPUTopology, ModelConfig
    from reconciler.allocator.devices import NodeDevices

_DAY = 86400.0


@dataclass(frozen=True)
class Flag:
    """How one option field appears on the command line."""

    name: str
    help: str
    metavar: str | None = None
    type: Callable[[str], Any] | None = None
    choices: tuple[str, ...] | None = None
    action: Any = None
    # A second environment variable consulted when the flag's own is unset (NODE_NAME is
    # what the downward API conventionally sets).
    fallback_env: str | None = None

    @property
    def dest(self) -> str:
        return self.name.lstrip("-").replace("-", "_")


def option(flag: Flag, default: Any) -> Any:
    """A dataclass field bound to ``flag``."""
    return field(default=default, metadata={"flag": flag})


def _flag(f: Any) -> Flag:
    spec: Flag = f.metadata["flag"]
    return spec


class FlagGroup:
    """Mixin of the option dataclasses: ``add_flags``, ``from_args`` and ``validate``."""

    TITLE: ClassVar[str]

    @classmethod
    def add_flags(cls, parser: argparse.ArgumentParser, *, only: Collection[str] | None = None,
                  **defaults: Any) -> None:
        """Add the group's flags (all, or the fields named in ``only``) to ``parser``;
        ``defaults`` overrides field defaults for this command."""
        known = {f.name: f for f in fields(cls)}  # type: ignore[arg-type]
        unknown = (set(only or ()) | set(defaults)) - set(known)
        if unknown:
            raise ValueError(f"{cls.__name__} has no option {', '.join(sorted(unknown))}")
        group = parser.add_argument_group(cls.TITLE)
        for name, f in known.items():
            if only is None or name in only:
                _add(group, _flag(f), defaults.get(name, f.default))

    @classmethod
    def from_args(cls, args: argparse.Namespace) -> Self:
        """The group's values from parsed arguments (flags a command did not add keep their
        defaults), validated."""
        values = {f.name: getattr(args, _flag(f).dest)
                  for f in fields(cls)  # type: ignore[arg-type]
                  if hasattr(args, _flag(f).dest)}
        for f in fields(cls):  # type: ignore[arg-type]
            _check_choice(_flag(f), values.get(f.name))
        options = cls(**values)
        options.validate()
        return options

    def validate(self) -> None:
        """Cross-field checks; single values are checked by their flag's type."""


def _check_choice(spec: Flag, value: Any) -> None:
    # argparse checks choices on the command line only, not a default from the environment.
    if spec.choices is not None and value is not None and value not in spec.choices:
        raise UserError(f"{spec.name} {value!r} (from {env_name(spec.name)}): invalid choice "
                        f"(choose from {', '.join(spec.choices)})")


def _add(group: argparse._ArgumentGroup, spec: Flag, default: Any) -> None:
    if spec.fallback_env and os.environ.get(spec.fallback_env):
        default = os.environ[spec.fallback_env]
    kwargs: dict[str, Any] = {"default": default, "help": spec.help}
    if isinstance(default, float):  # a duration: parsed back by its type, shown as typed
        kwargs["default"] = format_duration(default)
    for key in ("metavar", "type", "choices", "action"):
        if getattr(spec, key) is not None:
            kwargs[key] = getattr(spec, key)
    # A store_true flag is off unless given: no default to show.
    shows_default = default not in (None, False, "")
    if shows_default and "default" not in spec.help:
        kwargs["help"] = f"{spec.help} (default: %(default)s)"
    add_flag(group, spec.name, **kwargs)


# ---- web ------------------------------------------------------------------------------

DEFAULT_PORT = 9847


@dataclass(frozen=True)
class WebOptions(FlagGroup):
    TITLE = "web"

    listen_address: str = option(Flag(
        "--web.listen-address", "address to listen on (port 0 picks a free one)",
        metavar="[HOST]:PORT"), f":{DEFAULT_PORT}")
    config_file: str | None = option(Flag(
        "--web.config.file", "exporter-toolkit web config: TLS and basic auth for every route",
        metavar="FILE"), None)
    # Together these bound what idle, slow or abandoned clients can hold: each open TLS
    # connection costs about a quarter of a megabyte.
    read_header_timeout: float = option(Flag(
        "--web.read-header-timeout", "time a new client has for the TLS handshake and its "
        "request headers (and a kept-alive one from its next request's first byte)",
        metavar="DURATION", type=duration(0.1, 3600.0)), 10.0)
    idle_timeout: float = option(Flag(
        "--web.idle-timeout", "how long a kept-alive connection may wait for its next "
        "request, and a response may take to be read", metavar="DURATION",
        type=duration(0.1, _DAY)), 120.0)
    max_connections: int = option(Flag(
        "--web.max-connections", "open connections at most: at the cap a new one replaces "
        "one that has waited a second or more for its client (half-sent request, silence, "
        "handshake; a kept-alive one last), waiting in the backlog until one has, and is "
        "refused only when every open one has a request in flight", metavar="N",
        type=positive_int), 128)

    def validate(self) -> None:
        self.bind()

    def bind(self) -> tuple[str | None, int]:
        """(host or ``None`` for every interface, port) of ``--web.listen-address``."""
        address = self.listen_address
        host, sep, port_text = address.rpartition(":")
        if not sep:
            raise UserError(f"--web.listen-address {address!r}: expected [HOST]:PORT")
        try:
            port = int(port_text)
        except ValueError:
            raise UserError(f"--web.listen-address {address!r}: port is not a number") from None
        if not 0 <= port <= 65535:
            raise UserError(f"--web.listen-address {address!r}: port out of range")
        if host.startswith("[") != host.endswith("]"):
            raise UserError(f"--web.listen-address {address!r}: unbalanced [ ] around the "
                            "IPv6 host")
        host = host.strip("[]")
        return (host or None), port


# ---- history --------------------------------------------------------------------------

_OFF = ("off", "none", "false")


@dataclass(frozen=True)
class HistoryOptions(FlagGroup):
    TITLE = "history"

    url: str | None = option(Flag(
        "--history.url", "history database: sqlite:///PATH or postgresql+psycopg://... "
        "(default: the exporter's SQLite file under its state directory; serve also takes "
        "'off')", metavar="URL"), None)
    max_pending: int = option(Flag(
        "--history.max-pending", "history writes buffered while the database is unreachable",
        metavar="N", type=positive_int), 10_000)
    retention: float = option(Flag(
        "--history.retention", "how long history is kept", metavar="DURATION",
        type=duration(60.0, 100 * 365 * _DAY)), 30 * _DAY)
    summary_interval: float = option(Flag(
        "--history.summary-interval", "how often node summaries are written",
        metavar="DURATION", type=duration(1.0, _DAY)), 60.0)
    prune_interval: float = option(Flag(
        "--history.prune-interval", "how often serve deletes history older than the "
        "retention", metavar="DURATION", type=duration(60.0, 7 * _DAY)), 3600.0)

    @property
    def enabled(self) -> bool:
        return self.url is None or self.url.strip().lower() not in (*_OFF, "")


# ---- logs -----------------------------------------------------------------------------


@dataclass(frozen=True)
class LogOptions(FlagGroup):
    TITLE = "logging"

    level: str = option(Flag("--log.level", "log level",
                             choices=("debug", "info", "warn", "error")), "info")
    format: str = option(Flag("--log.format", "log line format",
                              choices=("logfmt", "json")), "logfmt")

    def setup(self) -> None:
        from exporter.logs import setup_logging

        setup_logging("warning" if self.level == "warn" else self.level, self.format)


# ---- polling and collectors -----------------------------------------------------------


@dataclass(frozen=True)
class PollOptions(FlagGroup):
    TITLE = "polling and collectors"

    # 0s would poll in a busy loop; a day is far beyond any useful exporter.
    interval: float = option(Flag(
        "--poll.interval", "how often to poll the sources (SIGHUP polls at once)",
        metavar="DURATION", type=duration(0.1, _DAY)), 15.0)
    staleness: float = option(Flag(
        "--podresources.staleness",
        "withdraw the ledger series when PodResources has failed for this long",
        metavar="DURATION", type=duration(1.0, _DAY)), 60.0)
    pods_collector: bool = option(Flag(
        "--collector.pods", "per-pod and per-container series",
        action=argparse.BooleanOptionalAction), True)
    pods_max_series: int = option(Flag(
        "--collector.pods.max-series", "cap on per-pod and per-container series",
        metavar="N", type=positive_int), 50_000)


# ---- sources --------------------------------------------------------------------------

# One flag, one meaning, in every command: a topology.json file (as `record` writes it).
TOPOLOGY = Flag("--topology", "a topology.json file (as record writes it) describing the "
                "node's CPUs, instead of sysfs or a modelled shape", metavar="FILE")


def warn_topology_shape(shape: str) -> None:
    """``--topology SxCxT``, the shape's spelling before ``--topology`` named a file, still
    works; it says so once on stderr, pointing to the flag that replaces it."""
    print(f"podres-exporter: warning: --topology {shape} is deprecated for a machine shape: "
          f"use --topology.shape {shape} (--topology names a topology.json file)",
          file=sys.stderr)


def _kubelet_url(text: str) -> str:
    parts = urlsplit(text)
    if parts.scheme not in ("https", "http") or not parts.hostname:
        raise argparse.ArgumentTypeError(
            f"invalid URL {text!r}: expected https://HOST:PORT (the kubelet's port is 10250)")
    return text


@dataclass(frozen=True)
class SourcesOptions(FlagGroup):
    """Where a live node is read from (``exporter.reader.SourceOptions`` is built from it)."""

    TITLE = "sources"

    socket: str = option(Flag(
        "--podresources.socket",
        "the kubelet's PodResources unix socket (mount its directory, not the file)",
        metavar="PATH"), DEFAULT_SOCKET)
    timeout: float = option(Flag(
        "--podresources.timeout", "deadline of every PodResources call", metavar="DURATION",
        type=duration(0.01, 600.0)), 5.0)
    reprobe_interval: float = option(Flag(
        "--podresources.reprobe-interval", "how long an RPC the kubelet answered "
        "UNIMPLEMENTED is not asked again (a kubelet restart asks again at once)",
        metavar="DURATION", type=duration(1.0, _DAY)), 300.0)
    max_receive_bytes: int = option(Flag(
        "--podresources.max-receive-bytes",
        "largest PodResources response accepted (busy nodes exceed gRPC's 4 MiB)",
        metavar="BYTES", type=positive_int), DEFAULT_MAX_RECV)
    kubelet_url: str | None = option(Flag(
        "--kubelet.url", "the kubelet's HTTPS endpoint for /pods and /configz, e.g. "
        "https://$HOST_IP:10250 (unset: no pod specs, estimates use the podresources basis)",
        metavar="URL", type=_kubelet_url), None)
    token_file: str = option(Flag(
        "--kubelet.token-file", "bearer token for the kubelet (re-read on every request)",
        metavar="PATH"), DEFAULT_TOKEN_FILE)
    ca_file: str | None = option(Flag(
        "--kubelet.ca-file", "CA bundle that signed the kubelet's serving certificate",
        metavar="PATH"), None)
    insecure_skip_verify: bool = option(Flag(
        "--kubelet.insecure-skip-verify",
        "do not verify the kubelet's certificate (self-signed serving certs)",
        action="store_true"), False)
    pods_interval: float = option(Flag(
        "--kubelet.pods-refresh-interval", "how often /pods is read when PodResources shows "
        "no change (a changed PodResources answer reads it at once): picks up resizes and "
        "restarted containers", metavar="DURATION", type=duration(1.0, _DAY)), 60.0)
    metrics_interval: float = option(Flag(
        "--kubelet.metrics-interval", "how often the kubelet's /metrics (feature gates) is "
        "read", metavar="DURATION", type=duration(1.0, _DAY)), 300.0)
    root_dir: str | None = option(Flag(
        "--kubelet.root-dir",
        "the kubelet's root directory, to read its checkpoint files (read-only)",
        metavar="DIR"), None)
    sysfs: str = option(Flag("--sysfs", "sysfs mount to read the CPU topology from",
                             metavar="DIR"), "/sys")
    topology: str | None = option(TOPOLOGY, None)
    node_name: str = option(Flag(
        "--node-name", "this node's Kubernetes name, shown in the ledger and the history "
        "store; the scrape configuration attaches the same name as the `node` target label "
        "(default: $NODE_NAME from the downward API, else the host name)", metavar="NAME",
        fallback_env="NODE_NAME"), gethostname())

    def validate(self) -> None:
        # Asked for and missing would silently mean sysfs (the host's CPUs): a wrong ledger.
        if self.topology and not Path(self.topology).is_file():
            raise UserError(f"--topology {self.topology}: file does not exist (a "
                            "topology.json as record writes it)")


# ---- kernel sources ---------------------------------------------------------------------


@dataclass(frozen=True)
class KernelSourcesOptions(FlagGroup):
    """The host's cgroup tree and ``/proc``, read for enforced cpusets and busy time per
    CPU (docs/kernel.md); an empty root turns that source off."""

    TITLE = "kernel sources"

    cgroup_root: str = option(Flag(
        "--cgroup.root", "the host's cgroup filesystem, read-only, for each container's "
        "enforced cpuset ('' turns the source off)", metavar="DIR"), "/sys/fs/cgroup")
    cgroup_driver: str = option(Flag(
        "--cgroup.driver", "the kubelet's cgroup driver (auto: from the kubelet's /configz, "
        "else from the kubepods directory found)", choices=CGROUP_DRIVERS), "auto")
    cgroup_kubelet_root: str = option(Flag(
        "--cgroup.kubelet-root", "the kubelet's cgroupRoot, e.g. /kubelet on kind ('': from "
        "the kubelet's /configz, else /)", metavar="PATH"), "")
    proc_root: str = option(Flag(
        "--proc.root", "the host's procfs, read-only, for busy time per CPU from stat ('' "
        "turns the source off)", metavar="DIR"), "/proc")


# ---- the modelled node (plan, sim) ----------------------------------------------------

_SHAPE = re.compile(r"^\d+x\d+x\d+$")
# What a modelled shape's NUMA node holds when --memory-per-numa is not given.
DEFAULT_MEMORY_PER_NUMA = "64Gi"


@dataclass(frozen=True)
class ModelOptions(FlagGroup):
    """The node the allocator model places pods on."""

    TITLE = "modelled node"

    topology: str | None = option(TOPOLOGY, None)
    shape: str | None = option(Flag(
        "--topology.shape", "sockets x cores per socket x threads per core of the modelled "
        "node, e.g. 2x16x2 (the old spelling --topology SxCxT still works, deprecated)",
        metavar="SxCxT"), None)
    numa_per_socket: int = option(Flag(
        "--numa-per-socket", "NUMA nodes per socket of a modelled shape", metavar="N",
        type=positive_int), 1)
    # None: the shape's default, named in the help; a --topology FILE has its own sizes.
    memory_per_numa: str | None = option(Flag(
        "--memory-per-numa", "memory of each NUMA node of a modelled shape, a Kubernetes "
        f"quantity (default: {DEFAULT_MEMORY_PER_NUMA}; a --topology FILE gives its own)",
        metavar="SIZE"), None)
    scope: str = option(Flag("--scope", "topology manager scope",
                             choices=("pod", "container")), "pod")
    topology_policy: str = option(Flag(
        "--topology-policy", "topology manager policy",
        choices=("none", "best-effort", "restricted", "single-numa-node")), "single-numa-node")
    reserved: str = option(Flag(
        "--reserved", "reservedSystemCPUs of the modelled node (Linux list format; '' for "
        "none)", metavar="CPUSET"), "0")
    cpu_policy_options: str = option(Flag(
        "--cpu-policy-options", "CPU manager policy options (cpuManagerPolicyOptions "
        "set to true): " + ", ".join(KNOWN_OPTIONS), metavar="OPT[,OPT]"), "")
    topology_policy_options: str = option(Flag(
        "--topology-policy-options", "topology manager policy options "
        "(topologyManagerPolicyOptions): prefer-closest-numa-nodes (of equally narrow NUMA "
        "masks, the one with the shortest distances; a modelled shape takes them from "
        "--topology.distances), max-allowable-numa-nodes=N (default: 8)",
        metavar="OPT[=VALUE][,...]"), "")
    distances: str = option(Flag(
        "--topology.distances", "NUMA distances of the modelled node, each NUMA node's row "
        "as /sys/devices/system/node/nodeN/distance lists it, rows in node order separated "
        "by ';': 10,21;21,10 for two nodes (default: none; a --topology FILE gives its own, "
        "which this replaces)", metavar="ROW;ROW..."), "")
    devices: str = option(Flag(
        "--devices", "device-plugin devices of the modelled node, per resource the NUMA "
        "nodes and how many on each: nvidia.com/gpu=0:2,1:2 is 2 GPUs on NUMA node 0 and 2 "
        "on node 1 (-1 for devices without topology); several resources separated by ';'",
        metavar="RESOURCE=NUMA:COUNT[,...][;...]"), "")

    def validate(self) -> None:
        if self.topology and self.shape:
            raise UserError("give --topology FILE or --topology.shape SxCxT, not both")

    @property
    def given(self) -> bool:
        return bool(self.topology or self.shape)

    def _shape(self) -> str | None:
        # `--topology 2x8x2` was the shape's spelling before --topology meant a file.
        legacy = self.topology and _SHAPE.match(self.topology) and \
            not Path(self.topology).exists()
        return self.topology if legacy else self.shape

    @property
    def topology_file(self) -> str | None:
        """The topology.json the modelled node comes from (``None`` for a shape)."""
        return None if self._shape() else self.topology

    def describe(self) -> str:
        return self._shape() or str(self.topology)

    def cpu_topology(self) -> CPUTopology | None:
        from reconciler.allocator import TopologyError, from_snapshot, from_spec

        shape = self._shape()
        if shape and shape == self.topology:
            warn_topology_shape(shape)
        if shape:
            try:
                return from_spec(shape, numa_per_socket=self.numa_per_socket,
                                 memory_per_numa=self.memory_bytes_per_numa)
            except TopologyError as exc:
                raise UserError(str(exc)) from None
        if self.memory_per_numa is not None:
            raise UserError(
                "--memory-per-numa sizes a modelled shape (--topology.shape): a --topology "
                "FILE gives each NUMA node's memory itself" if self.topology else
                "--memory-per-numa sizes a modelled shape: name one with --topology.shape "
                "SOCKETSxCORESxTHREADS (e.g. 2x8x2)")
        if self.topology:
            from exporter.sources.topology import load_topology_file

            if not Path(self.topology).exists():
                raise UserError(f"--topology {self.topology}: no such file; a modelled node's "
                                "shape is --topology.shape SOCKETSxCORESxTHREADS (e.g. 2x8x2)")

            try:
                return from_snapshot(load_topology_file(self.topology))
            except TopologyError as exc:
                raise UserError(f"--topology {self.topology}: {exc}") from None
        return None

    @property
    def memory_bytes_per_numa(self) -> int:
        """Bytes of memory on each NUMA node of a modelled shape (``--memory-per-numa``)."""
        from reconciler.kube import SpecError, memory_bytes

        text = self.memory_per_numa or DEFAULT_MEMORY_PER_NUMA
        try:
            size = memory_bytes(text)
        except SpecError:
            size = 0
        if size <= 0:
            raise UserError(f"--memory-per-numa {text!r}: expected a positive size such as "
                            f"{DEFAULT_MEMORY_PER_NUMA} or 512Gi")
        return size

    def _topology_options(self) -> dict[str, Any]:
        """ModelConfig's fields for ``--topology-policy-options``, parsed as the kubelet
        parses topologyManagerPolicyOptions (a bare name means true)."""
        from reconciler.allocator.config import TOPOLOGY_OPTIONS

        out: dict[str, Any] = {}
        for item in filter(None, (o.strip() for o in self.topology_policy_options.split(","))):
            name, sep, value = (s.strip() for s in item.partition("="))
            value = value if sep else "true"
            if name == "prefer-closest-numa-nodes" and value in ("true", "false"):
                out["prefer_closest_numa"] = value == "true"
            elif name == "max-allowable-numa-nodes" and value.isascii() and value.isdigit():
                out["max_numa_nodes"] = int(value)
            else:
                raise UserError(
                    f"--topology-policy-options {item!r}: expected "
                    f"{', '.join(TOPOLOGY_OPTIONS)} (prefer-closest-numa-nodes[=true|false], "
                    "max-allowable-numa-nodes=N)")
        return out

    def _with_distances(self, topology: CPUTopology | None) -> CPUTopology | None:
        """``topology`` with the ``--topology.distances`` rows, checked against its NUMA
        nodes (docs/plan.md#numa-distances)."""
        if not self.distances.strip():
            return topology
        if topology is None:
            raise UserError("--topology.distances describes a modelled node: give "
                            "--topology.shape SxCxT or --topology FILE")
        from reconciler.allocator import CPUTopology

        nodes = sorted(topology.numa_nodes)
        example = ";".join(",".join("10" if a == b else "21" for b in nodes) for a in nodes)
        rows = [r.strip() for r in self.distances.split(";")]
        try:
            parsed = [tuple(int(d) for d in r.split(",")) for r in rows]
        except ValueError:
            parsed = []
        if len(parsed) != len(nodes) or any(len(r) != len(nodes) or min(r) < 1 or max(r) > 255
                                           for r in parsed):
            raise UserError(
                f"--topology.distances {self.distances!r}: the {describe_nodes(nodes)} need "
                f"{len(nodes)} rows of {len(nodes)} distances (1-255), rows separated by "
                f"';', e.g. {example}")
        return CPUTopology(cpus=topology.cpus, memory=topology.memory,
                           uncore=topology.uncore, counts=topology.counts,
                           distances=tuple(zip(nodes, parsed, strict=True)))

    def node_devices(self, topology: CPUTopology | None) -> NodeDevices:
        """The modelled node's ``--devices`` (docs/plan.md#devices); bad values are one-line
        ``UserError``s."""
        from reconciler.allocator.devices import DeviceError, NodeDevices

        specs = [s.strip() for s in self.devices.split(";") if s.strip()]
        if not specs:
            return NodeDevices()
        if topology is None:
            raise UserError("--devices describes a modelled node: give --topology FILE or "
                            "--topology.shape SxCxT")
        try:
            return NodeDevices.parse(specs, topology.numa_nodes)
        except DeviceError as exc:
            raise UserError(str(exc)) from None

    def build(self, *, pod_level: bool = True) -> tuple[CPUTopology | None, ModelConfig]:
        """The modelled node: its CPUs (``None`` without a topology) and the kubelet
        configuration of the model; bad values are one-line ``UserError``s."""
        from reconciler.allocator import ModelConfig, ModelError, NodeModel
        from reconciler.cpuset import CPUSetError, parse_cpuset

        topology = self._with_distances(self.cpu_topology())
        try:
            reserved = parse_cpuset(self.reserved or "")
        except CPUSetError as exc:
            raise UserError(f"--reserved: {exc}") from None
        if topology is not None and reserved - topology.online:
            raise UserError(f"--reserved: CPUs {self.reserved} are not on a "
                            f"{len(topology.online)}-CPU {self.describe()} node")
        policy_options = frozenset(o.strip() for o in self.cpu_policy_options.split(",")
                                   if o.strip())
        try:
            config = ModelConfig(topology_policy=self.topology_policy, scope=self.scope,
                                 options=policy_options, reserved_cpus=reserved or None,
                                 pod_level=pod_level, **self._topology_options())
        except ModelError as exc:
            raise UserError(f"{exc} (--topology-policy-options)" if "max-allowable" in
                            str(exc) else str(exc)) from None
        if topology is None:
            return topology, config
        if config.prefer_closest_numa and not topology.distances:
            raise UserError("--topology-policy-options prefer-closest-numa-nodes compares "
                            "NUMA distances, which the modelled node lacks: give them with "
                            "--topology.distances (e.g. 10,21;21,10 for two NUMA nodes)")
        try:  # the kubelet's start-up checks of this node and configuration
            NodeModel(topology, config)
        except ModelError as exc:
            hint = ("; --topology-policy-options max-allowable-numa-nodes=N raises the limit"
                    if "NUMA Nodes" in str(exc) else "")
            raise UserError(f"the modelled {self.describe()} node: {exc}{hint}") from None
        return topology, config


def describe_nodes(nodes: Collection[int]) -> str:
    """``NUMA nodes 0-1`` / ``NUMA node 0`` / ``NUMA nodes 0, 2``, for messages."""
    ids = sorted(nodes)
    if len(ids) == 1:
        return f"NUMA node {ids[0]}"
    if ids == list(range(ids[0], ids[-1] + 1)):
        return f"NUMA nodes {ids[0]}-{ids[-1]}"
    return "NUMA nodes " + ", ".join(map(str, ids))


# ---- single flags shared by several commands ------------------------------------------


def add_output_flag(parser: argparse.ArgumentParser, help_text: str = "output format") -> None:
    add_flag(parser, "--output", "-o", choices=("table", "json"), default="table",
             help=f"{help_text} (default: %(default)s)")
