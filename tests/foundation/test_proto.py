"""The PodResources proto: generated stubs are not stale, and every message, field number,
type and the service match the PodResources v1 API (docs/design.md#sources)."""

from __future__ import annotations

import tempfile
from pathlib import Path

import pytest
from google.protobuf import descriptor as d

from exporter.pb import api_pb2, generate
from foundation.helpers import REPO

T = d.FieldDescriptor
I64, U64, STR, MSG = T.TYPE_INT64, T.TYPE_UINT64, T.TYPE_STRING, T.TYPE_MESSAGE

# message → {field: (number, type, repeated, message type name or None)}, from the
# PodResources v1 API.
SPEC: dict[str, dict[str, tuple[int, int, bool, str | None]]] = {
    "AllocatableResourcesRequest": {},
    "ListPodResourcesRequest": {},
    "AllocatableResourcesResponse": {
        "devices": (1, MSG, True, "ContainerDevices"), "cpu_ids": (2, I64, True, None),
        "memory": (3, MSG, True, "ContainerMemory")},
    "ListPodResourcesResponse": {"pod_resources": (1, MSG, True, "PodResources")},
    "PodResources": {
        "name": (1, STR, False, None), "namespace": (2, STR, False, None),
        "containers": (3, MSG, True, "ContainerResources"), "cpu_ids": (4, I64, True, None),
        "memory": (5, MSG, True, "ContainerMemory")},
    "ContainerResources": {
        "name": (1, STR, False, None), "devices": (2, MSG, True, "ContainerDevices"),
        "cpu_ids": (3, I64, True, None), "memory": (4, MSG, True, "ContainerMemory"),
        "dynamic_resources": (5, MSG, True, "DynamicResource")},
    "ContainerMemory": {
        "memory_type": (1, STR, False, None), "size": (2, U64, False, None),
        "topology": (3, MSG, False, "TopologyInfo")},
    "ContainerDevices": {
        "resource_name": (1, STR, False, None), "device_ids": (2, STR, True, None),
        "topology": (3, MSG, False, "TopologyInfo")},
    "TopologyInfo": {"nodes": (1, MSG, True, "NUMANode")},
    "NUMANode": {"ID": (1, I64, False, None)},
    "DynamicResource": {
        "claim_name": (2, STR, False, None), "claim_namespace": (3, STR, False, None),
        "claim_resources": (4, MSG, True, "ClaimResource")},
    "ClaimResource": {
        "cdi_devices": (1, MSG, True, "CDIDevice"), "driver_name": (2, STR, False, None),
        "pool_name": (3, STR, False, None), "device_name": (4, STR, False, None),
        "share_id": (5, STR, False, None)},
    "CDIDevice": {"name": (1, STR, False, None)},
    "GetPodResourcesRequest": {
        "pod_name": (1, STR, False, None), "pod_namespace": (2, STR, False, None)},
    "GetPodResourcesResponse": {"pod_resources": (1, MSG, False, "PodResources")},
}


def test_stubs_are_not_stale() -> None:
    with tempfile.TemporaryDirectory() as tmp:
        written = generate.generate(Path(tmp))
        assert sorted(p.name for p in written) == sorted(generate.OUTPUTS)
        for path in written:
            committed = REPO / "exporter" / "pb" / path.name
            assert committed.read_bytes() == path.read_bytes(), (
                f"exporter/pb/{path.name} is stale against proto/api.proto: run `make proto`")


def test_file_is_proto3_package_v1_without_imports() -> None:
    fd = api_pb2.DESCRIPTOR
    assert fd.package == "v1"
    assert 'syntax = "proto3";' in (REPO / "proto" / "api.proto").read_text()
    assert list(fd.dependencies) == []
    assert set(fd.message_types_by_name) == set(SPEC)


@pytest.mark.parametrize("message", sorted(SPEC))
def test_message_fields_match_spec(message: str) -> None:
    desc = api_pb2.DESCRIPTOR.message_types_by_name[message]
    got = {}
    for f in desc.fields:
        repeated = f.is_repeated if hasattr(f, "is_repeated") else f.label == T.LABEL_REPEATED
        got[f.name] = (f.number, f.type, repeated,
                       f.message_type.name if f.message_type is not None else None)
    assert got == SPEC[message]


def test_pod_level_fields() -> None:
    fields = api_pb2.PodResources.DESCRIPTOR.fields_by_name
    assert fields["cpu_ids"].number == 4
    assert fields["memory"].number == 5


def test_dynamic_resource_reserves_field_1() -> None:
    proto = (REPO / "proto" / "api.proto").read_text()
    block = proto[proto.index("message DynamicResource"):]
    block = block[:block.index("}")]
    assert "reserved 1;" in block
    assert 1 not in {f.number for f in api_pb2.DynamicResource.DESCRIPTOR.fields}


def test_share_id_is_optional() -> None:
    field = api_pb2.ClaimResource.DESCRIPTOR.fields_by_name["share_id"]
    assert field.has_presence
    msg = api_pb2.ClaimResource()
    assert not msg.HasField("share_id")
    msg.share_id = ""
    assert msg.HasField("share_id")


def test_service_methods() -> None:
    service = api_pb2.DESCRIPTOR.services_by_name["PodResourcesLister"]
    assert service.full_name == "v1.PodResourcesLister"
    methods = {m.name: (m.input_type.name, m.output_type.name) for m in service.methods}
    assert methods == {
        "List": ("ListPodResourcesRequest", "ListPodResourcesResponse"),
        "GetAllocatableResources": ("AllocatableResourcesRequest",
                                    "AllocatableResourcesResponse"),
        "Get": ("GetPodResourcesRequest", "GetPodResourcesResponse"),
    }


def test_wire_compatibility_of_pod_level_fields() -> None:
    """A hand-encoded PodResources with field 4 (packed int64) and 5 decodes as SPEC says."""
    # field 4, wire type 2 (packed): tag 0x22, length 2, ids 3 and 4
    # field 5, wire type 2: ContainerMemory{memory_type="memory", size=1024}
    inner = b"\x0a\x06memory\x10\x80\x08"
    raw = b"\x0a\x01p" + b"\x22\x02\x03\x04" + b"\x2a" + bytes([len(inner)]) + inner
    msg = api_pb2.PodResources.FromString(raw)
    assert msg.name == "p"
    assert list(msg.cpu_ids) == [3, 4]
    assert msg.memory[0].memory_type == "memory" and msg.memory[0].size == 1024


def test_runtime_is_not_older_than_the_generator() -> None:
    import grpc
    from google.protobuf import __version__ as pb_version

    def version(text: str) -> tuple[int, ...]:
        return tuple(int(x) for x in text.split(".")[:3] if x.isdigit())

    stub = (REPO / "exporter" / "pb" / "api_pb2_grpc.py").read_text()
    marker = "GRPC_GENERATED_VERSION = '"
    generated = stub[stub.index(marker) + len(marker):].split("'")[0]
    assert version(grpc.__version__) >= version(generated)
    pb2 = (REPO / "exporter" / "pb" / "api_pb2.py").read_text()
    # "# Protobuf Python Version: X.Y.Z"
    line = next(ln for ln in pb2.splitlines() if "Protobuf Python Version" in ln)
    assert version(pb_version) >= version(line.rsplit(" ", 1)[1])
