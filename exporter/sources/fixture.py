"""Fixture directories: a node captured as files (docs/design.md#sources), read into a
``RawNode`` by ``snapshot --from``, ``doctor --from`` and the simulated kubelet, written
from one by ``record``.

The files that are the fixture format's own encoding (``list.json``, ``allocatable.json``
in protobuf's JSON mapping, ``topology.json``) are checked when loaded; the kubelet's own
bodies (``pods.json``, ``configz.json``, ``metrics.txt``) and the checkpoint files are kept
as bytes, exactly as recorded, and checked where every source's bodies are."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any, TypeVar

from google.protobuf import json_format
from google.protobuf.message import DecodeError, Message

from exporter.errors import SourceError, UserError
from exporter.files import read_file_bytes, read_text_file
from exporter.pb import api_pb2
from exporter.rawnode import CHECKPOINT_FILES, KubeletState, RawNode, body_bytes
from exporter.sources.topology import topology_from_json, topology_to_json

# A fixture is operator input, not a dump of the internet: refuse absurd files early.
MAX_FILE_BYTES = 256 << 20
# Where each raw part of a fixture comes from, to name the file in an error.
FILE_OF = {("kubelet", "pods"): "pods.json", ("kubelet", "configz"): "configz.json",
           ("podresources", "GetAllocatableResources"): "allocatable.json",
           ("podresources", "List"): "list.json"}
# The node's Kubernetes name as ``record`` was told it (``--node-name``): no kubelet answer
# carries it, and a fixture read elsewhere would otherwise take that host's name.
NODE_FILE = "node.json"


def _read_json(path: Path) -> Any:
    try:
        return json.loads(read_text_file(path, MAX_FILE_BYTES))
    except (ValueError, RecursionError) as exc:  # also numbers past int's digit limit
        reason = "nested too deeply" if isinstance(exc, RecursionError) else str(exc)[:300]
        raise UserError(f"{path}: invalid JSON: {reason}") from None


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
    except (json_format.ParseError, RecursionError) as exc:
        reason = " ".join(str(exc).split())[:300]  # protobuf's messages span lines
        raise UserError(f"{origin}: not a valid {message.DESCRIPTOR.name}: {reason}") from None
    except SystemError:
        # upb's field-name lookup fails this way on a key holding an unpaired surrogate
        # ("\ud800"), which JSON allows and UTF-8 cannot encode.
        raise UserError(f"{origin}: not a valid {message.DESCRIPTOR.name}: a field name is "
                        "not valid UTF-8") from None


def _message_bytes(path: Path, message: Message) -> bytes | None:
    if not path.exists():
        return None
    parsed: Message = parse_message(_read_json(path), message, str(path))
    return parsed.SerializeToString()


def _optional_bytes(path: Path) -> bytes | None:
    return read_file_bytes(path, MAX_FILE_BYTES) if path.exists() else None


def load_fixture_dir(directory: str | Path, *, with_list: bool = True) -> RawNode:
    """The node a fixture directory holds; ``with_list=False`` leaves ``list.json`` unread
    (and not required), for readers that need no pods (``doctor``)."""
    root = Path(directory)
    if not root.is_dir():
        raise UserError(f"{root}: not a fixture directory")
    list_path = root / "list.json"
    if with_list and not list_path.exists():
        raise UserError(f"{root}: list.json is missing (it is the one required file)")
    topology = None
    if (root / "topology.json").exists():
        try:
            topology = topology_from_json(_read_json(root / "topology.json"),
                                          str(root / "topology.json"))
        except SourceError as exc:
            raise UserError(str(exc).removeprefix("topology parse: ")) from None
    return RawNode(
        list_response=_message_bytes(list_path, api_pb2.ListPodResourcesResponse())
        if with_list else None,
        allocatable=_message_bytes(root / "allocatable.json",
                                   api_pb2.AllocatableResourcesResponse()),
        pods=_optional_bytes(root / "pods.json"),
        configz=_optional_bytes(root / "configz.json"),
        metrics=_optional_bytes(root / "metrics.txt"),
        topology=topology,
        checkpoints=tuple((name, data) for name in CHECKPOINT_FILES
                          if (data := _optional_bytes(root / name)) is not None),
    )


def fixture_node_name(directory: str | Path) -> str | None:
    """The node name a fixture was recorded with (``node.json``), if it says one."""
    path = Path(directory) / NODE_FILE
    if not path.exists():
        return None
    obj = _read_json(path)
    name = obj.get("node_name") if isinstance(obj, dict) else None
    if not isinstance(name, str):
        raise UserError(f"{path}: expected an object with a string node_name")
    return name


def write_fixture_dir(directory: str | Path, raw: RawNode,
                      node_name: str | None = None) -> list[Path]:
    """Write a fixture directory (``record``); returns the files written. The kubelet's
    bodies and the checkpoint files are written byte for byte as they were read."""
    root = Path(directory)
    root.mkdir(parents=True, exist_ok=True)
    files: dict[str, bytes] = {}
    for name, kind, data in (
            ("list.json", api_pb2.ListPodResourcesResponse, raw.list_response),
            ("allocatable.json", api_pb2.AllocatableResourcesResponse, raw.allocatable)):
        text = _message_json(kind, data)
        if text is not None:
            files[name] = text
    for name, data in (("pods.json", body_bytes(raw.pods)), ("configz.json", raw.configz),
                       ("metrics.txt", raw.metrics), *raw.checkpoints):
        if data is not None:
            files[name] = data
    if raw.topology is not None:
        files["topology.json"] = _dump(topology_to_json(raw.topology))
    if node_name:
        files[NODE_FILE] = _dump({"node_name": node_name})
    written = []
    for name, data in files.items():
        target = root / name
        tmp = target.with_name(f".{name}.tmp")
        tmp.write_bytes(data)
        os.replace(tmp, target)
        written.append(target)
    return written


def _message_json(kind: type[Message], data: bytes | None) -> bytes | None:
    """The JSON mapping of a response; ``None`` for one that is absent or undecodable
    (the read that returned it has reported that already)."""
    if data is None:
        return None
    try:
        return _dump(json_format.MessageToDict(kind.FromString(data)))
    except DecodeError:
        return None


def _dump(obj: Any) -> bytes:
    return (json.dumps(obj, indent=1, sort_keys=True, ensure_ascii=False) + "\n").encode()


__all__ = ["CHECKPOINT_FILES", "FILE_OF", "NODE_FILE", "KubeletState", "RawNode",
           "fixture_node_name", "load_fixture_dir",
           "parse_message", "write_fixture_dir"]
