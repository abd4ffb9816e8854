"""The DaemonSet's exporter on the real node: its container's environment, read from
deploy/manifests (and the checkpoint patch), with each path mapped into the node's mount
namespace (docs/real-node.md)."""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import yaml

if TYPE_CHECKING:
    from realnode.harness import Node

REPO = Path(__file__).resolve().parent.parent
DAEMONSET = REPO / "deploy" / "manifests" / "daemonset.yaml"
CHECKPOINT_PATCH = REPO / "deploy" / "manifests" / "patches" / "checkpoints.yaml"
# Where a DaemonSet container finds the service account's files (automounted, not a volume).
SERVICE_ACCOUNT = "/var/run/secrets/kubernetes.io/serviceaccount"


def _container(checkpoints: bool) -> tuple[dict[str, Any], list[dict[str, Any]],
                                            list[dict[str, Any]], dict[str, Any]]:
    """(the pod spec, the container's env list, its volumeMounts, the volumes by name),
    with the checkpoint patch applied when ``checkpoints``."""
    ds = yaml.safe_load(DAEMONSET.read_text())
    pod = ds["spec"]["template"]["spec"]
    container = pod["containers"][0]
    env_list = list(container["env"])
    mounts = list(container["volumeMounts"])
    volumes = {v["name"]: v for v in pod["volumes"]}
    if checkpoints:
        for op in yaml.safe_load(CHECKPOINT_PATCH.read_text()):
            target = {"env": env_list, "volumeMounts": mounts}.get(op["path"].split("/")[-2])
            if target is not None:
                target.append(op["value"])
            elif op["path"].endswith("/volumes/-"):
                volumes[op["value"]["name"]] = op["value"]
    return pod, env_list, mounts, volumes


def _sources(node: Node, mounts: list[dict[str, Any]],
             volumes: Mapping[str, Any]) -> dict[str, str]:
    """Each mount path of the container -> the path inside the node's namespace that its
    volume is: a hostPath as it is, an emptyDir a directory of the work dir, the service
    account's files the node's CA and token."""
    paths = {SERVICE_ACCOUNT: str(node.ca_file.parent)}
    for m in mounts:
        v = volumes[m["name"]]
        if "hostPath" in v:
            paths[m["mountPath"]] = v["hostPath"]["path"]
        else:
            local = node.workdir / "exporter" / m["name"]
            local.mkdir(parents=True, exist_ok=True)
            paths[m["mountPath"]] = str(local)
    return paths


def _env(node: Node, env_list: list[dict[str, Any]], paths: Mapping[str, str]
         ) -> dict[str, str]:
    refs = {"spec.nodeName": node.name, "status.hostIP": "127.0.0.1"}
    env: dict[str, str] = {}
    for e in env_list:
        value = refs[e["valueFrom"]["fieldRef"]["fieldPath"]] if "valueFrom" in e \
            else re.sub(r"\$\((\w+)\)", lambda m: env[m.group(1)], e["value"])
        env[e["name"]] = _map_path(value, paths)
    # The one thing a namespace cannot map: the kubelet listens on a free port, not 10250.
    env["PODRES_KUBELET_URL"] = env["PODRES_KUBELET_URL"].replace(
        ":10250", f":{node.port}")
    return env


def daemonset_env(node: Node, *, listen: str | None = None,
                  checkpoints: bool = True) -> dict[str, str]:
    """The DaemonSet container's environment (with the checkpoint patch when
    ``checkpoints``), its hostPath volumes mapped to the paths inside the namespace, its
    emptyDirs to directories of the work dir, the service account's files to the node's
    CA and token, $(HOST_IP):10250 to the kubelet's loopback port."""
    _, env_list, mounts, volumes = _container(checkpoints)
    env = _env(node, env_list, _sources(node, mounts, volumes))
    if listen is not None:
        env["PODRES_WEB_LISTEN_ADDRESS"] = listen
    return {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "GRPC_VERBOSITY": "ERROR",
            **env}


@dataclass(frozen=True)
class Container:
    """The DaemonSet's container as a runtime would run it on this node: its environment
    unmapped (the paths are the container's own), its volumes as (path inside the node's
    namespace, mount path, read-only), its securityContext's UID:GID."""

    env: dict[str, str]
    volumes: list[tuple[str, str, bool]]
    user: str


def daemonset_container(node: Node, *, checkpoints: bool = True) -> Container:
    """The DaemonSet container (with the checkpoint patch when ``checkpoints``) for a
    runtime: deploy/image/run.py binds the volumes, the environment is the manifest's
    (the service account's files bound where Kubernetes automounts them)."""
    pod, env_list, mounts, volumes = _container(checkpoints)
    sources = _sources(node, mounts, volumes)
    env = _env(node, env_list, {})
    read_only = {m["mountPath"]: bool(m.get("readOnly")) for m in mounts}
    binds = [(source, path, read_only.get(path, True)) for path, source in sources.items()]
    context = {**pod.get("securityContext", {}),
               **pod["containers"][0].get("securityContext", {})}
    return Container(env, binds, f"{context['runAsUser']}:{context['runAsGroup']}")


def _map_path(value: str, paths: Mapping[str, str]) -> str:
    """``value`` with a container path (the longest mount that holds it) turned into the
    host path the volume names; URLs (sqlite:////var/...) keep their scheme."""
    for mount in sorted(paths, key=len, reverse=True):
        i = value.find(mount)
        if i >= 0 and value[i + len(mount):i + len(mount) + 1] in ("", "/"):
            return value[:i] + paths[mount].rstrip("/") + value[i + len(mount):]
    return value
