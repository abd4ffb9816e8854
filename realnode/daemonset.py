"""The DaemonSet's exporter on the real node: its container's environment, read from
deploy/manifests (and the checkpoint patch), with each path mapped into the node's mount
namespace (docs/real-node.md)."""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING

import yaml

if TYPE_CHECKING:
    from realnode.harness import Node

REPO = Path(__file__).resolve().parent.parent
DAEMONSET = REPO / "deploy" / "manifests" / "daemonset.yaml"
CHECKPOINT_PATCH = REPO / "deploy" / "manifests" / "patches" / "checkpoints.yaml"
# Where a DaemonSet container finds the service account's files (automounted, not a volume).
SERVICE_ACCOUNT = "/var/run/secrets/kubernetes.io/serviceaccount"


def daemonset_env(node: Node, *, listen: str | None = None,
                  checkpoints: bool = True) -> dict[str, str]:
    """The DaemonSet container's environment (with the checkpoint patch when
    ``checkpoints``), its hostPath volumes mapped to the paths inside the namespace, its
    emptyDirs to directories of the work dir, the service account's files to the node's
    CA and token, $(HOST_IP):10250 to the kubelet's loopback port."""
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
    paths = {SERVICE_ACCOUNT: str(node.ca_file.parent)}
    for m in mounts:
        v = volumes[m["name"]]
        if "hostPath" in v:
            paths[m["mountPath"]] = v["hostPath"]["path"]
        else:
            local = node.workdir / "exporter" / m["name"]
            local.mkdir(parents=True, exist_ok=True)
            paths[m["mountPath"]] = str(local)
    refs = {"spec.nodeName": node.name, "status.hostIP": "127.0.0.1"}
    env: dict[str, str] = {}
    for e in env_list:
        value = refs[e["valueFrom"]["fieldRef"]["fieldPath"]] if "valueFrom" in e \
            else re.sub(r"\$\((\w+)\)", lambda m: env[m.group(1)], e["value"])
        env[e["name"]] = _map_path(value, paths)
    env["PODRES_KUBELET_URL"] = env["PODRES_KUBELET_URL"].replace(
        ":10250", f":{node.port}")
    if listen is not None:
        env["PODRES_WEB_LISTEN_ADDRESS"] = listen
    return {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "GRPC_VERBOSITY": "ERROR",
            **env}


def _map_path(value: str, paths: Mapping[str, str]) -> str:
    """``value`` with a container path (the longest mount that holds it) turned into the
    host path the volume names; URLs (sqlite:////var/...) keep their scheme."""
    for mount in sorted(paths, key=len, reverse=True):
        i = value.find(mount)
        if i >= 0 and value[i + len(mount):i + len(mount) + 1] in ("", "/"):
            return value[:i] + paths[mount].rstrip("/") + value[i + len(mount):]
    return value
