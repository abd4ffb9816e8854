//go:build kubelet_1_35 || kubelet_1_36

package main

// The managers' API as 1.35 and 1.36 have it: no logger or context on the topology
// manager's calls and the hint providers, and a PodResources server without pod-level
// answers: a container's CPUs are whatever the CPU manager's state holds for it, its slice
// of a pod's shared pool included.

import (
	cadvisorapi "github.com/google/cadvisor/info/v1"
	v1 "k8s.io/api/core/v1"
	"k8s.io/klog/v2"
	podresourcesapi "k8s.io/kubelet/pkg/apis/podresources/v1"
	"k8s.io/kubernetes/pkg/kubelet/cm/topologymanager"
	"k8s.io/kubernetes/pkg/kubelet/lifecycle"
)

type (
	machineInfoT = cadvisorapi.MachineInfo
	numaNodeT    = cadvisorapi.Node
	coreT        = cadvisorapi.Core
	cacheT       = cadvisorapi.Cache
)

func newTopologyManager(_ klog.Logger, topology []numaNodeT, policy, scope string,
	options map[string]string) (topologymanager.Manager, error) {
	return topologymanager.NewManager(topology, policy, scope, options)
}

func (n *node) tmAdmit(pod *v1.Pod) lifecycle.PodAdmitResult {
	return n.tm.Admit(&lifecycle.PodAdmitAttributes{Pod: pod, OtherPods: n.activePods()})
}

func (n *node) tmAddContainer(pod *v1.Pod, c *v1.Container, id string) {
	n.tm.AddContainer(pod, c, id)
}

func (n *node) tmRemoveContainer(id string) error { return n.tm.RemoveContainer(id) }

func (n *node) tmAffinity(uid, name string) topologymanager.TopologyHint {
	return n.tm.GetAffinity(uid, name)
}

func (n *node) probeHints(probe *v1.Pod) {
	n.cpu.GetTopologyHints(probe, &probe.Spec.Containers[0])
	n.mem.GetTopologyHints(probe, &probe.Spec.Containers[0])
}

func (p providers) UpdateAllocatedDevices() {}
func (p providers) GetAllocatableDevices() []*podresourcesapi.ContainerDevices {
	return []*podresourcesapi.ContainerDevices{}
}
func (p providers) GetDynamicResources(*v1.Pod, *v1.Container) []*podresourcesapi.DynamicResource {
	return []*podresourcesapi.DynamicResource{}
}

func (p providers) GetCPUs(podUID, containerName string) []int64 {
	return int64s(p.n.cpu.GetExclusiveCPUs(podUID, containerName))
}

func (p providers) GetMemory(podUID, containerName string) []*podresourcesapi.ContainerMemory {
	return containerMemory(p.n.mem.GetMemory(podUID, containerName))
}
func (p providers) GetAllocatableMemory() []*podresourcesapi.ContainerMemory {
	return containerMemory(p.n.mem.GetAllocatableMemory())
}
