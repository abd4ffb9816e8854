"""PodResources protobuf messages ↔ the reconciler's snapshot types."""

from __future__ import annotations

from collections.abc import Iterable
from itertools import chain

from exporter.pb import api_pb2
from reconciler.snapshot import (
    Allocatable,
    ClaimDevice,
    ContainerAlloc,
    DeviceAlloc,
    MemoryBlock,
    PodAlloc,
)


def _memory(blocks: Iterable[api_pb2.ContainerMemory]) -> tuple[MemoryBlock, ...]:
    return tuple(
        MemoryBlock(b.memory_type, b.size, tuple(n.ID for n in b.topology.nodes))
        for b in blocks
    )


def _device(d: api_pb2.ContainerDevices) -> DeviceAlloc:
    return DeviceAlloc(d.resource_name, tuple(d.device_ids),
                       tuple(n.ID for n in d.topology.nodes))


def _claims(r: api_pb2.DynamicResource) -> tuple[ClaimDevice, ...]:
    """One ``ClaimDevice`` per device of the claim (a claim with none reports nothing)."""
    return tuple(
        ClaimDevice(r.claim_namespace, r.claim_name, c.driver_name, c.pool_name, c.device_name,
                    tuple(d.name for d in c.cdi_devices),
                    c.share_id if c.HasField("share_id") else None)
        for c in r.claim_resources)


def pods_from_proto(resp: api_pb2.ListPodResourcesResponse) -> tuple[PodAlloc, ...]:
    """The pods of a ``List`` response, read from its wire form (see ``_ListReader``)."""
    return pods_from_wire(resp.SerializeToString())


def pods_from_wire(data: bytes) -> tuple[PodAlloc, ...]:
    """The pods of a ``List`` response as the kubelet sent it: what protobuf's decode of
    ``data`` gives, or its ``DecodeError`` (the reader hands protobuf any part it cannot
    read, so bytes protobuf refuses are refused alike)."""
    return _ListReader(data).pods()


# Tags (field number << 3 | wire type 2, length-delimited) of the fields read from the wire.
_POD_RESOURCES = 0x0A  # ListPodResourcesResponse's one field
_NAME, _NAMESPACE, _POD_CONTAINERS, _POD_CPU_IDS, _POD_MEMORY = 0x0A, 0x12, 0x1A, 0x22, 0x2A
_CONTAINER_CPU_IDS, _CONTAINER_MEMORY = 0x1A, 0x22
_CONTAINER_DEVICES, _CONTAINER_DYNAMIC = 0x12, 0x2A
_CONTAINER_FIELDS = frozenset((_NAME, _CONTAINER_CPU_IDS, _CONTAINER_MEMORY, _CONTAINER_DEVICES,
                               _CONTAINER_DYNAMIC))
_INT64 = 1 << 64
# Past these many bits a varint is refused as corrupt by protobuf: ten bytes for a value,
# five for a length.
_VALUE_BITS, _LENGTH_BITS = 70, 35


class _Unexpected(Exception):
    """A field the wire reader does not read itself, or a length that runs past its
    message: protobuf decodes that part (and refuses it if it is malformed)."""


class _ListReader:
    """Reads a ``List`` response from protobuf's wire format for what the snapshot keeps.

    Going through the decoded message costs a Python object per field read (names,
    repeated fields, nested messages): most of a cold cycle on a busy node. On the wire,
    the pods of one workload differ only in their name and namespace, and a container
    that holds nothing exclusive is the same bytes in every pod of it, so after the two
    names each pod's remaining bytes, each container's and each memory block's are
    decoded once per distinct value and shared (the results are immutable). A part in a
    shape this reader does not expect (another field, an unpacked id list, bytes cut
    short) is decoded by protobuf instead, with the same result or protobuf's error."""

    def __init__(self, data: bytes) -> None:
        self.data = data
        self.tails: dict[bytes, tuple[tuple[ContainerAlloc, ...], tuple[int, ...],
                                      tuple[MemoryBlock, ...]]] = {}
        self.containers: dict[bytes, ContainerAlloc] = {}
        self.blocks: dict[bytes, MemoryBlock] = {}
        # A node's device-holding containers are few and each device distinct: decoded by
        # protobuf, per distinct bytes as for memory blocks.
        self.devices: dict[bytes, DeviceAlloc] = {}
        self.claims: dict[bytes, tuple[ClaimDevice, ...]] = {}

    def pods(self) -> tuple[PodAlloc, ...]:
        data = self.data
        pods: list[PodAlloc] = []
        add = pods.append
        new = tuple.__new__
        namespaces: dict[bytes, str] = {}
        afters: dict[bytes, tuple[str, tuple[ContainerAlloc, ...], tuple[int, ...],
                                  tuple[MemoryBlock, ...]]] = {}
        i, end = 0, len(data)
        try:
            while i < end:
                if data[i] != _POD_RESOURCES:  # no kubelet sends another field
                    raise _Unexpected
                length = data[i + 1]
                # _span's common case inline here and in _pod, as in _span: a call per pod
                # and per name costs some 8% of the assembly of a busy node.
                if length < 0x80:
                    i += 2
                else:
                    length, i = _varint(data, i + 1)
                stop = i + length
                if stop > end:
                    raise _Unexpected
                # The pod's name then namespace, each with a one-byte length (what a kubelet
                # writes for names under 128 bytes), read here; any other layout in _pod.
                # k stays within the pod only if every byte read before it did.
                j = i + 2 + data[i + 1]
                k = j + 2 + data[j + 1] if j + 1 < stop else stop + 1
                try:
                    if (data[i] == _NAME and data[j] == _NAMESPACE and k <= stop
                            and data[i + 1] < 0x80 and data[j + 1] < 0x80):
                        # What follows the name (the namespace, then the rest) is the same
                        # bytes for the pods of one workload: read once, one lookup a pod.
                        after = data[j:stop]
                        known = afters.get(after)
                        if known is None:
                            known = afters[after] = self._after_name(data[j + 2:k],
                                                                     data[k:stop], namespaces)
                        namespace, containers, cpu_ids, memory = known
                        add(new(PodAlloc, (namespace, data[i + 2:j].decode(), containers,
                                           cpu_ids, memory)))
                    else:
                        add(self._pod(i, stop))
                except (_Unexpected, UnicodeDecodeError):
                    add(_pod(api_pb2.PodResources.FromString(data[i:stop])))
                i = stop
        except (_Unexpected, IndexError):  # IndexError: a varint cut short at the end
            return tuple(map(_pod, api_pb2.ListPodResourcesResponse.FromString(data)
                             .pod_resources))
        return tuple(pods)

    def _after_name(self, raw_namespace: bytes, tail: bytes, namespaces: dict[bytes, str],
                    ) -> tuple[str, tuple[ContainerAlloc, ...], tuple[int, ...],
                               tuple[MemoryBlock, ...]]:
        """A pod's namespace and the rest, each shared with the pods that have the same: a
        node's namespaces are few, one string each (held by the ledger's entries until the
        next change), and a workload's pods in several namespaces share their rest."""
        namespace = namespaces.get(raw_namespace)
        if namespace is None:
            namespace = namespaces[raw_namespace] = raw_namespace.decode()
        rest = self.tails.get(tail)
        if rest is None:
            rest = self.tails[tail] = self._pod_rest(tail)
        return (namespace, *rest)

    def _pod(self, i: int, stop: int) -> PodAlloc:
        """The names first (where protobuf writes them), then the rest, read once per
        distinct bytes."""
        data = self.data
        name = namespace = ""
        while i < stop:
            tag = data[i]
            if tag != _NAME and tag != _NAMESPACE:
                break
            length = data[i + 1]
            if length < 0x80:
                i += 2
            else:
                length, i = _varint(data, i + 1)
            if tag == _NAME:
                name = data[i:i + length].decode()
            else:
                namespace = data[i:i + length].decode()
            i += length
        if i > stop:  # a name longer than its pod: protobuf says what is wrong
            raise _Unexpected
        tail = data[i:stop]
        rest = self.tails.get(tail)
        if rest is None:
            rest = self.tails[tail] = self._pod_rest(tail)
        # PodAlloc's field order, without NamedTuple's Python-level __new__ (every pod).
        return tuple.__new__(PodAlloc, (namespace, name, *rest))

    def _pod_rest(self, tail: bytes) -> tuple[tuple[ContainerAlloc, ...], tuple[int, ...],
                                              tuple[MemoryBlock, ...]]:
        containers = []
        ids: list[tuple[int, ...]] = []
        memory: list[MemoryBlock] = []
        known = self.containers
        i, end = 0, len(tail)
        while i < end:
            tag = tail[i]
            if tag != _POD_CONTAINERS and tag != _POD_CPU_IDS and tag != _POD_MEMORY:
                raise _Unexpected  # before reading a length: it may be no length at all
            length = tail[i + 1]
            if length < 0x80:  # _span's common case, inline (once per distinct pod)
                start = i + 2
            else:
                length, start = _varint(tail, i + 1)
            i = start + length
            chunk = tail[start:i]
            if tag == _POD_CONTAINERS:
                container = known.get(chunk)
                containers.append(self._container(chunk) if container is None else container)
            elif tag == _POD_CPU_IDS:
                ids.append(_int64s(chunk))
            else:
                memory.append(self._block(chunk))
        if i != end:  # the last field ran past the pod (its value was read cut short)
            raise _Unexpected
        return tuple(containers), _joined(ids), tuple(memory)

    def _container(self, chunk: bytes) -> ContainerAlloc:
        container = self.containers.get(chunk)
        if container is None:
            try:
                container = _container_from_wire(chunk, self)
            except (_Unexpected, UnicodeDecodeError):
                container = _container(api_pb2.ContainerResources.FromString(chunk))
            self.containers[chunk] = container
        return container

    def _block(self, chunk: bytes) -> MemoryBlock:
        block = self.blocks.get(chunk)
        if block is None:
            try:
                block = _block_from_wire(chunk)
            except (_Unexpected, UnicodeDecodeError, IndexError):
                block = _memory((api_pb2.ContainerMemory.FromString(chunk),))[0]
            self.blocks[chunk] = block
        return block

    def _device(self, chunk: bytes) -> DeviceAlloc:
        device = self.devices.get(chunk)
        if device is None:
            device = self.devices[chunk] = _device(api_pb2.ContainerDevices.FromString(chunk))
        return device

    def _claims(self, chunk: bytes) -> tuple[ClaimDevice, ...]:
        claims = self.claims.get(chunk)
        if claims is None:
            claims = self.claims[chunk] = _claims(api_pb2.DynamicResource.FromString(chunk))
        return claims


def _container_from_wire(chunk: bytes, reader: _ListReader) -> ContainerAlloc:
    name = ""
    ids: list[tuple[int, ...]] = []
    memory: list[MemoryBlock] = []
    devices: list[DeviceAlloc] = []
    claims: list[tuple[ClaimDevice, ...]] = []
    i, end = 0, len(chunk)
    while i < end:
        tag = chunk[i]
        if tag not in _CONTAINER_FIELDS:
            raise _Unexpected  # as in _pod_rest
        length = chunk[i + 1]
        if length < 0x80:  # _span's common case, inline (once per distinct container)
            start = i + 2
        else:
            length, start = _varint(chunk, i + 1)
        i = start + length
        if tag == _NAME:
            name = chunk[start:i].decode()
        elif tag == _CONTAINER_CPU_IDS:
            ids.append(_int64s(chunk[start:i]))
        elif tag == _CONTAINER_MEMORY:
            memory.append(reader._block(chunk[start:i]))
        elif tag == _CONTAINER_DEVICES:
            devices.append(reader._device(chunk[start:i]))
        else:
            claims.append(reader._claims(chunk[start:i]))
    if i != end:  # as in _pod_rest
        raise _Unexpected
    # ContainerAlloc's field order, as for PodAlloc; a container without devices (nearly
    # every one) shares the empty tuples.
    return tuple.__new__(ContainerAlloc, (
        name, _joined(ids), tuple(memory), tuple(devices) if devices else (),
        tuple(chain.from_iterable(claims)) if claims else ()))


def _joined(parts: list[tuple[int, ...]]) -> tuple[int, ...]:
    """Ids from one packed field (what a kubelet sends) or from several, which protobuf
    concatenates: joined once, not tuple by tuple (quadratic in a hostile answer)."""
    if len(parts) == 1:
        return parts[0]
    return tuple(chain.from_iterable(parts))


def _span(data: bytes, i: int) -> tuple[int, int]:
    """Where the value of the length-delimited field whose one-byte tag is at ``data[i]``
    starts and stops."""
    length = data[i + 1]
    if length < 0x80:  # _varint's common case, inline
        return i + 2, i + 2 + length
    length, start = _varint(data, i + 1)
    return start, start + length


def _varint(data: bytes, i: int, bits: int = _LENGTH_BITS) -> tuple[int, int]:
    """The varint at ``data[i]`` (a length unless ``bits`` says otherwise) and the index
    after it."""
    byte = data[i]
    if byte < 0x80:  # nearly every length and CPU id of a node
        return byte, i + 1
    value = shift = 0
    while byte >= 0x80:
        value |= (byte & 0x7F) << shift
        shift += 7
        if shift == bits:
            raise _Unexpected
        i += 1
        byte = data[i]
    return value | byte << shift, i + 1


def _int64s(packed: bytes) -> tuple[int, ...]:
    """A packed repeated int64: varints, two's complement in 64 bits."""
    if packed.isascii():  # every id below 128: one byte each, as it is
        return tuple(packed)
    values: list[int] = []
    add = values.append
    i, stop = 0, len(packed)
    while i < stop:
        byte = packed[i]
        if byte < 0x80:
            add(byte)
            i += 1
            continue
        after = packed[i + 1]
        if after < 0x80:  # a CPU id below 16,384: two bytes, inline
            add(byte & 0x7F | after << 7)
            i += 2
            continue
        value, i = _varint(packed, i, _VALUE_BITS)
        value %= _INT64
        add(value - _INT64 if value >> 63 else value)
    return tuple(values)


# ContainerMemory's fields (memory_type, size, topology), TopologyInfo's nodes and NUMANode's
# ID, as tags.
_MEMORY_TYPE, _MEMORY_SIZE, _MEMORY_TOPOLOGY, _TOPOLOGY_NODE, _NODE_ID = (
    0x0A, 0x10, 0x1A, 0x0A, 0x08)


def _block_from_wire(chunk: bytes) -> MemoryBlock:
    """A ``ContainerMemory`` as protobuf reads it: the last type and size, and the NUMA
    nodes of every topology (protobuf merges a repeated message field)."""
    memory_type = ""
    size = 0
    nodes: list[int] = []
    i, end = 0, len(chunk)
    while i < end:
        tag = chunk[i]
        if tag == _MEMORY_SIZE:
            size, i = _varint(chunk, i + 1, _VALUE_BITS)
            size %= _INT64  # uint64: protobuf keeps the low 64 bits of a longer varint
            continue
        if tag != _MEMORY_TYPE and tag != _MEMORY_TOPOLOGY:
            raise _Unexpected
        start, i = _span(chunk, i)
        if tag == _MEMORY_TYPE:
            memory_type = chunk[start:i].decode()
        else:
            nodes += _numa_nodes(chunk[start:i])
    if i != end:
        raise _Unexpected
    return tuple.__new__(MemoryBlock, (memory_type, size, tuple(nodes)))


def _numa_nodes(topology: bytes) -> list[int]:
    """The IDs of a ``TopologyInfo``'s nodes (an empty node is NUMA node 0)."""
    ids = []
    i, end = 0, len(topology)
    while i < end:
        if topology[i] != _TOPOLOGY_NODE:
            raise _Unexpected
        start, i = _span(topology, i)
        node = 0
        while start < i:
            if topology[start] != _NODE_ID:
                raise _Unexpected
            node, start = _varint(topology, start + 1, _VALUE_BITS)
            node %= _INT64
            if node >> 63:
                node -= _INT64
        if start != i:
            raise _Unexpected
        ids.append(node)
    if i != end:
        raise _Unexpected
    return ids


def _container(c: api_pb2.ContainerResources) -> ContainerAlloc:
    return ContainerAlloc(
        c.name, tuple(c.cpu_ids), _memory(c.memory) if c.memory else (),
        tuple(map(_device, c.devices)) if c.devices else (),
        tuple(chain.from_iterable(map(_claims, c.dynamic_resources)))
        if c.dynamic_resources else ())


def _pod(p: api_pb2.PodResources) -> PodAlloc:
    return PodAlloc(p.namespace, p.name, tuple(map(_container, p.containers)),
                    tuple(p.cpu_ids), _memory(p.memory) if p.memory else ())


def pod_from_get(resp: api_pb2.GetPodResourcesResponse) -> PodAlloc:
    """The pod of a ``Get`` response (one pod, the same message as in ``List``)."""
    return _pod(resp.pod_resources)


def allocatable_from_proto(resp: api_pb2.AllocatableResourcesResponse) -> Allocatable:
    return Allocatable(tuple(resp.cpu_ids), _memory(resp.memory),
                       tuple(map(_device, resp.devices)))


def _devices_to_proto(devices: Iterable[DeviceAlloc]) -> list[api_pb2.ContainerDevices]:
    return [api_pb2.ContainerDevices(
        resource_name=d.resource_name, device_ids=list(d.device_ids),
        topology=api_pb2.TopologyInfo(nodes=[api_pb2.NUMANode(ID=n) for n in d.numa_nodes])
        if d.numa_nodes else None)
        for d in devices]


def _dynamic_to_proto(claims: Iterable[ClaimDevice]) -> list[api_pb2.DynamicResource]:
    """One ``DynamicResource`` per claim, its devices in order."""
    by_claim: dict[tuple[str, str], list[api_pb2.ClaimResource]] = {}
    for c in claims:
        by_claim.setdefault((c.claim_namespace, c.claim_name), []).append(
            api_pb2.ClaimResource(
                cdi_devices=[api_pb2.CDIDevice(name=n) for n in c.cdi_devices],
                driver_name=c.driver, pool_name=c.pool, device_name=c.device,
                share_id=c.share_id))
    return [api_pb2.DynamicResource(claim_namespace=ns, claim_name=name, claim_resources=rs)
            for (ns, name), rs in by_claim.items()]


def _memory_to_proto(blocks: Iterable[MemoryBlock]) -> list[api_pb2.ContainerMemory]:
    return [
        api_pb2.ContainerMemory(
            memory_type=b.memory_type, size=b.size,
            topology=api_pb2.TopologyInfo(nodes=[api_pb2.NUMANode(ID=n) for n in b.numa_nodes]),
        )
        for b in blocks
    ]


def pods_to_proto(pods: Iterable[PodAlloc]) -> api_pb2.ListPodResourcesResponse:
    return api_pb2.ListPodResourcesResponse(pod_resources=[
        api_pb2.PodResources(
            name=p.name, namespace=p.namespace, cpu_ids=list(p.cpu_ids),
            memory=_memory_to_proto(p.memory),
            containers=[api_pb2.ContainerResources(name=c.name, cpu_ids=list(c.cpu_ids),
                                                   memory=_memory_to_proto(c.memory),
                                                   devices=_devices_to_proto(c.devices),
                                                   dynamic_resources=_dynamic_to_proto(
                                                       c.dynamic))
                        for c in p.containers],
        )
        for p in pods
    ])


def allocatable_to_proto(alloc: Allocatable) -> api_pb2.AllocatableResourcesResponse:
    return api_pb2.AllocatableResourcesResponse(cpu_ids=list(alloc.cpu_ids),
                                                memory=_memory_to_proto(alloc.memory),
                                                devices=_devices_to_proto(alloc.devices))
