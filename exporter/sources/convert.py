"""PodResources protobuf messages ↔ the reconciler's snapshot types."""

from __future__ import annotations

from collections.abc import Iterable

from exporter.pb import api_pb2
from reconciler.snapshot import Allocatable, ContainerAlloc, MemoryBlock, PodAlloc


def _memory(blocks: Iterable[api_pb2.ContainerMemory]) -> tuple[MemoryBlock, ...]:
    return tuple(
        MemoryBlock(b.memory_type, b.size, tuple(n.ID for n in b.topology.nodes))
        for b in blocks
    )


def pods_from_proto(resp: api_pb2.ListPodResourcesResponse) -> tuple[PodAlloc, ...]:
    pods = []
    # Most containers of a busy node hold nothing exclusive and share a few names
    # ("istio-proxy", "app"): one immutable ContainerAlloc per such name is enough.
    plain: dict[str, ContainerAlloc] = {}
    for p in resp.pod_resources:
        containers = []
        for c in p.containers:
            cpu_ids, memory = c.cpu_ids, c.memory
            if not cpu_ids and not memory:
                name = c.name
                alloc = plain.get(name)
                if alloc is None:
                    alloc = plain[name] = ContainerAlloc(name)
                containers.append(alloc)
            else:
                containers.append(ContainerAlloc(c.name, tuple(cpu_ids),
                                                 _memory(memory) if memory else ()))
        pods.append(PodAlloc(p.namespace, p.name, tuple(containers), tuple(p.cpu_ids),
                             _memory(p.memory) if p.memory else ()))
    return tuple(pods)


def allocatable_from_proto(resp: api_pb2.AllocatableResourcesResponse) -> Allocatable:
    return Allocatable(tuple(resp.cpu_ids), _memory(resp.memory))


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
                                                   memory=_memory_to_proto(c.memory))
                        for c in p.containers],
        )
        for p in pods
    ])


def allocatable_to_proto(alloc: Allocatable) -> api_pb2.AllocatableResourcesResponse:
    return api_pb2.AllocatableResourcesResponse(cpu_ids=list(alloc.cpu_ids),
                                                memory=_memory_to_proto(alloc.memory))
