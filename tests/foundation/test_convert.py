"""``pods_from_proto`` reads ``List`` from the wire format: whatever the response holds
(devices, dynamic resources, fields this version does not know, ids of any size, names of
any script), the pods are exactly what reading the decoded message field by field gives;
``Get`` and ``GetAllocatableResources`` read devices the same way."""

from __future__ import annotations

from collections.abc import Iterable

import pytest
from google.protobuf.message import DecodeError
from hypothesis import given, settings
from hypothesis import strategies as st

from exporter.pb import api_pb2
from exporter.sources.convert import (
    allocatable_from_proto,
    allocatable_to_proto,
    pod_from_get,
    pods_from_proto,
    pods_from_wire,
    pods_to_proto,
)
from reconciler.snapshot import ClaimDevice, ContainerAlloc, DeviceAlloc, MemoryBlock, PodAlloc

Message = api_pb2.ListPodResourcesResponse


def field_by_field(resp: Message) -> tuple[PodAlloc, ...]:
    """The independent reading: every field through protobuf's own accessors."""
    def memory(blocks: Iterable[api_pb2.ContainerMemory]) -> tuple[MemoryBlock, ...]:
        return tuple(MemoryBlock(b.memory_type, b.size, tuple(n.ID for n in b.topology.nodes))
                     for b in blocks)

    def devices(devs: Iterable[api_pb2.ContainerDevices]) -> tuple[DeviceAlloc, ...]:
        return tuple(DeviceAlloc(d.resource_name, tuple(d.device_ids),
                                 tuple(n.ID for n in d.topology.nodes)) for d in devs)

    def claims(dynamic: Iterable[api_pb2.DynamicResource]) -> tuple[ClaimDevice, ...]:
        out = []
        for r in dynamic:
            for c in r.claim_resources:
                out.append(ClaimDevice(r.claim_namespace, r.claim_name, c.driver_name,
                                       c.pool_name, c.device_name,
                                       tuple(d.name for d in c.cdi_devices),
                                       c.share_id if c.HasField("share_id") else None))
        return tuple(out)

    return tuple(
        PodAlloc(p.namespace, p.name,
                 tuple(ContainerAlloc(c.name, tuple(c.cpu_ids), memory(c.memory),
                                      devices(c.devices), claims(c.dynamic_resources))
                       for c in p.containers),
                 tuple(p.cpu_ids), memory(p.memory))
        for p in resp.pod_resources)


def block(mtype: str = "memory", size: int = 1 << 30, *nodes: int) -> api_pb2.ContainerMemory:
    return api_pb2.ContainerMemory(memory_type=mtype, size=size, topology=api_pb2.TopologyInfo(
        nodes=[api_pb2.NUMANode(ID=n) for n in nodes]))


def check(resp: Message) -> tuple[PodAlloc, ...]:
    wire = Message.FromString(resp.SerializeToString())
    pods = pods_from_proto(wire)
    assert pods == field_by_field(wire)
    return pods


def test_a_busy_node_reads_as_its_fields() -> None:
    shared = [api_pb2.ContainerResources(name=n) for n in ("app", "istio-proxy")]
    pods = check(Message(pod_resources=[
        *(api_pb2.PodResources(namespace="team", name=f"web-{i}", containers=shared)
          for i in range(3)),
        api_pb2.PodResources(namespace="db", name="pg", cpu_ids=[4, 5, 300],
                             memory=[block("memory", 2 << 30, 0)], containers=[
                                 api_pb2.ContainerResources(name="pg", cpu_ids=[4, 300],
                                                            memory=[block("memory", 1, 0, 1)]),
                                 *shared]),
        api_pb2.PodResources(namespace="", name="", containers=[api_pb2.ContainerResources()]),
    ]))
    assert [p.name for p in pods] == ["web-0", "web-1", "web-2", "pg", ""]
    # Pods of one workload share their decoded containers (immutable, so safely).
    assert pods[0].containers is pods[1].containers
    assert pods[3].containers[1] is pods[0].containers[0]


def test_long_names_and_pods_read_as_their_fields() -> None:
    """Lengths past one varint byte: names, containers and whole pods of 128 bytes on."""
    long = "n" * 200
    pods = check(Message(pod_resources=[
        api_pb2.PodResources(namespace=long, name=long + "p", cpu_ids=list(range(120, 140)),
                             containers=[api_pb2.ContainerResources(
                                 name=long + "c", cpu_ids=[127, 128, 2**40])]),
        api_pb2.PodResources(namespace="ns", name="short"),
    ]))
    assert [(p.namespace, p.name) for p in pods] == [(long, long + "p"), ("ns", "short")]
    assert pods[0].containers[0].cpu_ids == (127, 128, 2**40)


def gpu(*ids: str, numa: tuple[int, ...] = (), name: str = "nvidia.com/gpu"
        ) -> api_pb2.ContainerDevices:
    return api_pb2.ContainerDevices(resource_name=name, device_ids=list(ids),
                                    topology=api_pb2.TopologyInfo(nodes=[
                                        api_pb2.NUMANode(ID=n) for n in numa]) if numa else None)


def claim(name: str, *devices: str, share: str | None = None) -> api_pb2.DynamicResource:
    return api_pb2.DynamicResource(claim_name=name, claim_namespace="ml", claim_resources=[
        api_pb2.ClaimResource(driver_name="gpu.example.com", pool_name="node-a",
                              device_name=d, cdi_devices=[api_pb2.CDIDevice(name=f"cdi/{d}")],
                              share_id=share)
        for d in devices])


def test_devices_and_dynamic_resources_read_as_their_fields() -> None:
    """The kubelet lists each device once per NUMA node (one entry each); a claim device
    with and without a share id; containers without devices still shared between pods."""
    trainer = api_pb2.ContainerResources(
        name="trainer", cpu_ids=[2, 3], memory=[block("memory", 1 << 30, 0)],
        devices=[gpu("GPU-0", numa=(0,)), gpu("GPU-1", numa=(1,)), gpu("GPU-1", numa=(0,)),
                 gpu("vf-3", name="intel.com/sriov"), gpu("x", numa=(-1, 2**40))],
        dynamic_resources=[claim("c1", "gpu-0", "gpu-1", share="s-1"), claim("empty")])
    proxy = api_pb2.ContainerResources(name="proxy")
    pods = check(Message(pod_resources=[
        api_pb2.PodResources(namespace="ml", name=f"train-{i}", containers=[trainer, proxy])
        for i in range(2)]))
    c = pods[0].containers[0]
    assert c.devices[:2] == (DeviceAlloc("nvidia.com/gpu", ("GPU-0",), (0,)),
                             DeviceAlloc("nvidia.com/gpu", ("GPU-1",), (1,)))
    assert c.devices[3] == DeviceAlloc("intel.com/sriov", ("vf-3",), ())
    assert c.devices[4].numa_nodes == (-1, 2**40)
    assert [(d.claim_name, d.device, d.share_id) for d in c.dynamic] == [
        ("c1", "gpu-0", "s-1"), ("c1", "gpu-1", "s-1")]
    assert c.dynamic[0].cdi_devices == ("cdi/gpu-0",)
    assert pods[1].containers is pods[0].containers
    assert pods[0].containers[1].devices == () and pods[0].containers[1].dynamic == ()


def test_get_and_allocatable_read_devices() -> None:
    pod = api_pb2.PodResources(namespace="ml", name="p", containers=[
        api_pb2.ContainerResources(name="c", devices=[gpu("GPU-0", numa=(1,))],
                                   dynamic_resources=[claim("k", "d0")])])
    got = pod_from_get(api_pb2.GetPodResourcesResponse.FromString(
        api_pb2.GetPodResourcesResponse(pod_resources=pod).SerializeToString()))
    assert got == field_by_field(Message(pod_resources=[pod]))[0]
    alloc = allocatable_from_proto(api_pb2.AllocatableResourcesResponse(
        cpu_ids=[0, 1], devices=[gpu("GPU-0", numa=(0,)), gpu("GPU-1", numa=(1,)),
                                 gpu("vf-0", name="intel.com/sriov")]))
    assert alloc.devices == (DeviceAlloc("nvidia.com/gpu", ("GPU-0",), (0,)),
                             DeviceAlloc("nvidia.com/gpu", ("GPU-1",), (1,)),
                             DeviceAlloc("intel.com/sriov", ("vf-0",), ()))
    # The simulated kubelet's encoding (pods_to_proto, allocatable_to_proto) round-trips.
    assert allocatable_from_proto(allocatable_to_proto(alloc)) == alloc
    assert pods_from_proto(pods_to_proto((got,))) == (got,)


def test_huge_device_lists_and_hostile_names_read_as_their_fields() -> None:
    many = [gpu(*(f"dev-{i}-{j}" for j in range(50)), numa=(i % 4,)) for i in range(2000)]
    hostile = [gpu("a\nb", name='x"y\n{z}'), gpu("é", name="ü" * 5000),
               gpu("", name="")]
    pods = check(Message(pod_resources=[api_pb2.PodResources(
        namespace="ns", name="p", containers=[api_pb2.ContainerResources(
            name="c", devices=many + hostile)])]))
    assert len(pods[0].containers[0].devices) == 2003
    assert pods[0].containers[0].devices[-3].resource_name == 'x"y\n{z}'


def test_malformed_device_bytes_are_refused_as_protobuf_refuses_them() -> None:
    container = api_pb2.ContainerResources(name="c", devices=[gpu("GPU-0", numa=(1,))])
    inner = container.SerializeToString()
    pod = api_pb2.PodResources(name="p").SerializeToString()
    for bad_inner in (inner[:-1], inner[:-3], inner + b"\x12", inner + b"\x12\x05\x0a",
                      inner.replace(b"GPU-0", b"\xff\xfe\xfd\xfc\xfb"),
                      inner + b"\x2a\x03\x12\x05a"):
        body = pod + b"\x1a" + _varint(len(bad_inner)) + bad_inner
        _same_as_protobuf(b"\x0a" + _varint(len(body)) + body)


def test_unknown_fields_change_nothing() -> None:
    device = api_pb2.ContainerDevices(resource_name="gpu", device_ids=["a"])
    claim = api_pb2.DynamicResource(claim_name="c", claim_namespace="n")
    container = api_pb2.ContainerResources(name="app", devices=[device], cpu_ids=[1],
                                           dynamic_resources=[claim])
    pod = api_pb2.PodResources(namespace="ns", name="p", containers=[container])
    # Fields a later kubelet may add: a varint (field 9) and a multi-byte tag (field 20).
    extra = b"\x48\x07" + b"\xa2\x01\x02hi"
    pod_bytes = pod.SerializeToString() + extra
    inner = api_pb2.ContainerResources(name="x").SerializeToString() + extra
    second = api_pb2.PodResources(name="q").SerializeToString() + b"\x1a" + bytes(
        [len(inner)]) + inner
    data = b"\x0a" + bytes([len(pod_bytes)]) + pod_bytes + b"\x0a" + bytes([len(second)]) + second
    for answer in (data, data + extra):  # unknown fields in pods, containers, the response
        pods = check(Message.FromString(answer))
        assert [(p.name, [(c.name, c.cpu_ids) for c in p.containers]) for p in pods] == [
            ("p", [("app", (1,))]), ("q", [("x", ())])]


@settings(max_examples=150, deadline=None)
@given(st.lists(st.tuples(
    st.text(max_size=6), st.text(max_size=6),
    st.lists(st.tuples(st.sampled_from(["app", "proxy", "ünï", ""]),
                       st.lists(st.integers(-(2**63), 2**63 - 1), max_size=4),
                       st.lists(st.integers(0, 2**64 - 1), max_size=2)), max_size=4),
    st.lists(st.integers(-3, 2**40), max_size=3)), max_size=6))
def test_any_answer_reads_as_its_fields(
        pods: list[tuple[str, str, list[tuple[str, list[int], list[int]]], list[int]]]) -> None:
    check(Message(pod_resources=[
        api_pb2.PodResources(
            namespace=ns, name=name, cpu_ids=ids,
            memory=[block("memory", len(ids) << 20, 0)] if ids else [],
            containers=[api_pb2.ContainerResources(
                name=c, cpu_ids=c_ids, memory=[block("hugepages-2Mi", s, 1) for s in sizes])
                for c, c_ids, sizes in containers])
        for ns, name, containers, ids in pods]))


# -- bytes that protobuf refuses, or reads in a shape the reader does not ----------------


def _hand_made() -> list[bytes]:
    pod = Message(pod_resources=[api_pb2.PodResources(
        name="web", namespace="ns", cpu_ids=[1, 2],
        containers=[api_pb2.ContainerResources(name="app", cpu_ids=[3, 300])])])
    good = pod.SerializeToString()
    return [
        good,
        b"\x0a",                      # a pod's tag and nothing else
        b"\x0a\x05\x0a\x09ab",        # a name longer than its pod
        b"\x0a\x03\x1a\x05\x0a",      # a container longer than its pod
        b"\x0a\x02\x22\x81",          # a packed id cut short
        b"\x0a\x03\x22\x01\xff",      # an id list longer than its pod
        good[:-1], good[:-3],         # the answer cut short
        good + b"\x0a\x80",           # a length varint cut short at the end
        # Varints at and past the longest protobuf reads: five bytes for a length (a
        # pod's, a name's), ten for an id (the last byte's spare bits dropped).
        b"\x0a" + b"\x80" * 4 + b"\x00",
        b"\x0a" + b"\x80" * 5 + b"\x00",
        b"\x0a\x08\x0a" + b"\x82" + b"\x80" * 3 + b"\x00" + b"ab",
        b"\x0a\x09\x0a" + b"\x82" + b"\x80" * 4 + b"\x00" + b"ab",
        b"\x0a\x0c\x22\x0a" + b"\xff" * 9 + b"\x7f",
        b"\x0a\x0d\x22\x0b" + b"\xff" * 10 + b"\x01",
    ]


def _repeated_fields(count: int) -> bytes:
    """One pod whose cpu_ids come as ``count`` packed fields (protobuf concatenates them)."""
    body = b"\x0a\x01p" + b"\x22\x01\x05" * count
    return b"\x0a" + _varint(len(body)) + body


def _varint(n: int) -> bytes:
    out = bytearray()
    while n >= 0x80:
        out.append(n & 0x7F | 0x80)
        n >>= 7
    return bytes(out) + bytes([n])


def _same_as_protobuf(data: bytes) -> None:
    try:
        expected = field_by_field(Message.FromString(data))
    except DecodeError:
        with pytest.raises(DecodeError):
            pods_from_wire(data)
    else:
        assert pods_from_wire(data) == expected


def test_malformed_bytes_are_refused_as_protobuf_refuses_them() -> None:
    """Never an IndexError, never a pod read from bytes protobuf would not accept."""
    for data in _hand_made():
        _same_as_protobuf(data)


def test_a_field_repeated_many_times_reads_as_one() -> None:
    pods = pods_from_wire(_repeated_fields(20000))
    assert pods[0].cpu_ids == (5,) * 20000


@settings(max_examples=300)
@given(st.data())
def test_any_bytes_read_as_protobuf_reads_them(data: st.DataObject) -> None:
    """Random bytes, and valid answers with a byte changed, cut or inserted."""
    good = _hand_made()[0]
    raw = data.draw(st.binary(max_size=64) | st.builds(
        lambda at, b, how: (good[:at] + bytes([b]) + good[at + (how == "flip"):]
                            if how != "cut" else good[:at]),
        st.integers(0, len(good) - 1), st.integers(0, 255),
        st.sampled_from(["flip", "insert", "cut"])) | st.builds(
        # A varint made longer: continuation bytes where a length or an id starts.
        lambda at, n: good[:at] + b"\x80" * n + good[at:],
        st.integers(0, len(good) - 1), st.integers(1, 11)))
    _same_as_protobuf(raw)


@settings(max_examples=100, deadline=None)
@given(st.lists(st.tuples(
    st.sampled_from(["app", "trainer", ""]),
    st.lists(st.tuples(st.sampled_from(["nvidia.com/gpu", "ü/x", ""]),
                       st.lists(st.text(max_size=4), max_size=3),
                       st.lists(st.integers(-(2**63), 2**63 - 1), max_size=2)), max_size=3),
    st.lists(st.tuples(st.text(max_size=3), st.lists(st.text(max_size=3), max_size=2),
                       st.none() | st.text(max_size=3)), max_size=2)), max_size=4))
def test_any_devices_read_as_their_fields(
        containers: list[tuple[str, list[tuple[str, list[str], list[int]]],
                               list[tuple[str, list[str], str | None]]]]) -> None:
    check(Message(pod_resources=[api_pb2.PodResources(namespace="ns", name="p", containers=[
        api_pb2.ContainerResources(
            name=name, devices=[gpu(*ids, numa=tuple(numa), name=res) for res, ids, numa in devs],
            dynamic_resources=[claim(c, *ds, share=share) for c, ds, share in claims])
        for name, devs, claims in containers])]))


# -- memory blocks, read from the wire too --------------------------------------------------


def _with_memory() -> bytes:
    return Message(pod_resources=[api_pb2.PodResources(
        name="web", namespace="ns", cpu_ids=[1, 300],
        memory=[block("memory", 6 << 30, 0, 1), block("hugepages-2Mi", 1 << 21, 1)],
        containers=[api_pb2.ContainerResources(
            name="app", cpu_ids=[300], memory=[block("memory", 2**64 - 1, -1, 2**40)])])
    ]).SerializeToString()


def _memory_pod(*blocks: bytes) -> bytes:
    """One pod holding ``blocks`` (a ContainerMemory's bytes each) as its memory."""
    body = b"\x0a\x01p" + b"".join(b"\x2a" + _varint(len(b)) + b for b in blocks)
    return b"\x0a" + _varint(len(body)) + body


def test_memory_blocks_in_any_layout_read_as_protobuf_reads_them() -> None:
    node = b"\x0a\x02\x08\x01"  # a NUMANode of ID 1
    for blocks in (
            (b"",),                                    # every field at its default
            (b"\x1a\x00\x0a\x01m",),                   # topology before the type
            (b"\x10\x05\x10\x07",),                    # size twice: the last stands
            (b"\x1a\x04" + node + b"\x1a\x04" + node,),  # topology twice: merged
            (b"\x1a\x06\x0a\x04\x08\x01\x08\x02",),    # a node's ID twice: the last
            (b"\x1a\x02\x0a\x00",),                    # an empty node: NUMA node 0
            (b"\x10" + b"\xff" * 9 + b"\x7f",),        # a size past 64 bits: cut to 64
            (b"\x10" + b"\xff" * 10 + b"\x01",),       # a varint too long: refused
            (b"\x1a\x0b\x0a\x09\x08" + b"\xff" * 9 + b"\x01",),  # ID -1
            (b"\x18\x01",),                            # an unknown field
            (b"\x1a\x04\x0a\x02\x10\x01",),            # an unknown field in a node
            (b"\x1a\x03\x0a\x02\x08",),                # a node's ID cut short
            (b"\x1a\x02\x0a\x05",),                    # a node longer than its topology
            (b"\x0a\x02\xff\xfe",),                    # a type that is not UTF-8
            (b"\x10",),                                # a size cut short
    ):
        _same_as_protobuf(_memory_pod(*blocks))


@settings(max_examples=300)
@given(st.data())
def test_any_bytes_of_memory_blocks_read_as_protobuf_reads_them(data: st.DataObject) -> None:
    good = _with_memory()
    raw = data.draw(st.builds(
        lambda at, b, how: (good[:at] + bytes([b]) + good[at + (how == "flip"):]
                            if how != "cut" else good[:at]),
        st.integers(0, len(good) - 1), st.integers(0, 255),
        st.sampled_from(["flip", "insert", "cut"])) | st.builds(
        lambda at, n: good[:at] + b"\x80" * n + good[at:],
        st.integers(0, len(good) - 1), st.integers(1, 11)))
    _same_as_protobuf(raw)


@settings(max_examples=100, deadline=None)
@given(st.lists(st.tuples(st.text(max_size=4), st.integers(0, 2**64 - 1),
                          st.lists(st.integers(-(2**63), 2**63 - 1), max_size=3)),
                max_size=4))
def test_any_memory_blocks_read_as_their_fields(
        blocks: list[tuple[str, int, list[int]]]) -> None:
    memory = [block(mtype, size, *nodes) for mtype, size, nodes in blocks]
    check(Message(pod_resources=[api_pb2.PodResources(
        namespace="ns", name="p", memory=memory,
        containers=[api_pb2.ContainerResources(name="app", memory=memory[::-1])])]))


def test_pods_of_one_namespace_share_its_name() -> None:
    pods = pods_from_wire(Message(pod_resources=[
        api_pb2.PodResources(name=f"p{i}", namespace=ns)
        for i, ns in enumerate(["team-a", "team-b", "team-a", "team-a"])]).SerializeToString())
    assert [p.namespace for p in pods] == ["team-a", "team-b", "team-a", "team-a"]
    assert pods[0].namespace is pods[2].namespace is pods[3].namespace


def test_pods_of_one_workload_in_several_namespaces_share_what_they_can() -> None:
    """What follows a pod's name is read once per distinct bytes: pods of one namespace and
    shape share the namespace and the containers, pods of one shape in another namespace
    still share the containers, and each keeps its own name."""
    def listed(name: str, namespace: str, cpus: list[int]) -> api_pb2.PodResources:
        return api_pb2.PodResources(name=name, namespace=namespace, containers=[
            api_pb2.ContainerResources(name="app", cpu_ids=cpus),
            api_pb2.ContainerResources(name="proxy")])
    pods = pods_from_wire(Message(pod_resources=[
        listed("a", "team-a", []), listed("b", "team-b", []), listed("c", "team-a", []),
        listed("d", "team-a", [3]), listed("e", "team-b", [])]).SerializeToString())
    assert [(p.namespace, p.name) for p in pods] == [
        ("team-a", "a"), ("team-b", "b"), ("team-a", "c"), ("team-a", "d"), ("team-b", "e")]
    assert pods[0].namespace is pods[2].namespace is pods[3].namespace
    assert pods[1].namespace is pods[4].namespace
    assert pods[0].containers is pods[1].containers is pods[2].containers
    assert pods[3].containers[0].cpu_ids == (3,)
    assert pods[3].containers[1] is pods[0].containers[1]
