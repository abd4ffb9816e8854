"""Fixture directories (SPEC §4.2): a node captured as files, read by ``snapshot --from``
and served by the simulated kubelet, written by ``record``."""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

from google.protobuf import json_format
from google.protobuf.message import Message

from exporter.errors import SourceError, UserError
from exporter.files import read_text_file
from exporter.pb import api_pb2
from exporter.sources.topology import topology_from_json, topology_to_json
from reconciler.snapshot import Topology

CHECKPOINT_FILES = ("cpu_manager_state", "memory_manager_state")
# A fixture is operator input, not a dump of the internet: refuse absurd files early.
MAX_FILE_BYTES = 256 << 20


@dataclass(frozen=True)
class KubeletState:
    """What a kubelet answers: PodResources responses and its HTTPS endpoint's bodies."""

    list_response: api_pb2.ListPodResourcesResponse
    allocatable: api_pb2.AllocatableResourcesResponse | None = None
    pod_list: dict[str, Any] | None = None
    configz: dict[str, Any] | None = None
    metrics: str | None = None


@dataclass(frozen=True)
class FixtureDir:
    kubelet: KubeletState
    topology: Topology | None = None
    checkpoints: dict[str, str] = field(default_factory=dict)


def _read_text(path: Path) -> str:
    return read_text_file(path, MAX_FILE_BYTES)


def _read_json(path: Path) -> Any:
    try:
        return json.loads(_read_text(path))
    except json.JSONDecodeError as exc:
        raise UserError(f"{path}: invalid JSON: {exc}") from None


M = TypeVar("M", bound=Message)


def parse_message(obj: Any, message: M, origin: str) -> M:
    """protobuf's JSON mapping, lowerCamel or original field names (``ParseDict`` accepts
    both); unknown fields are an error so typos do not silently read as empty."""
    if not isinstance(obj, dict):
        # ParseDict would take an empty list as an empty message.
        raise UserError(f"{origin}: not a valid {message.DESCRIPTOR.name}: expected a JSON "
                        "object")
    try:
        return json_format.ParseDict(obj, message)
    except json_format.ParseError as exc:
        raise UserError(f"{origin}: not a valid {message.DESCRIPTOR.name}: {exc}") from None


def load_fixture_dir(directory: str | Path) -> FixtureDir:
    root = Path(directory)
    if not root.is_dir():
        raise UserError(f"{root}: not a fixture directory")
    list_path = root / "list.json"
    if not list_path.exists():
        raise UserError(f"{root}: list.json is missing (it is the one required file)")
    listing = parse_message(_read_json(list_path), api_pb2.ListPodResourcesResponse(),
                            str(list_path))
    allocatable = None
    if (root / "allocatable.json").exists():
        allocatable = parse_message(_read_json(root / "allocatable.json"),
                                    api_pb2.AllocatableResourcesResponse(),
                                    str(root / "allocatable.json"))
    pod_list = _optional_object(root / "pods.json")
    configz = _optional_object(root / "configz.json")
    metrics = _read_text(root / "metrics.txt") if (root / "metrics.txt").exists() else None
    topology = None
    if (root / "topology.json").exists():
        try:
            topology = topology_from_json(_read_json(root / "topology.json"),
                                          str(root / "topology.json"))
        except SourceError as exc:
            raise UserError(str(exc).removeprefix("topology parse: ")) from None
    checkpoints = {name: _read_text(root / name) for name in CHECKPOINT_FILES
                   if (root / name).exists()}
    return FixtureDir(
        KubeletState(listing, allocatable, pod_list, configz, metrics),
        topology, checkpoints)


def _optional_object(path: Path) -> dict[str, Any] | None:
    if not path.exists():
        return None
    obj = _read_json(path)
    if not isinstance(obj, dict):
        raise UserError(f"{path}: expected a JSON object")
    return obj


def write_fixture_dir(directory: str | Path, fixture: FixtureDir) -> list[Path]:
    """Write a fixture directory (``record``); returns the files written."""
    root = Path(directory)
    root.mkdir(parents=True, exist_ok=True)
    k = fixture.kubelet
    files: dict[str, str] = {
        "list.json": _dump(json_format.MessageToDict(k.list_response)),
    }
    if k.allocatable is not None:
        files["allocatable.json"] = _dump(json_format.MessageToDict(k.allocatable))
    if k.pod_list is not None:
        files["pods.json"] = _dump(k.pod_list)
    if k.configz is not None:
        files["configz.json"] = _dump(k.configz)
    if k.metrics is not None:
        files["metrics.txt"] = k.metrics
    if fixture.topology is not None:
        files["topology.json"] = _dump(topology_to_json(fixture.topology))
    files.update(fixture.checkpoints)
    written = []
    for name, text in files.items():
        target = root / name
        tmp = target.with_name(f".{name}.tmp")
        tmp.write_text(text, encoding="utf-8")
        os.replace(tmp, target)
        written.append(target)
    return written


def _dump(obj: Any) -> str:
    return json.dumps(obj, indent=1, sort_keys=True, ensure_ascii=False) + "\n"
