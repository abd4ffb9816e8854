//go:build !kubelet_1_35 && !kubelet_1_36

package main

// The managers' API as 1.37 has it: a logger on most calls, a context and an operation on
// admission, pod-level answers for the PodResources server, and containers that hold no
// exclusive CPUs or memory of their own answering nothing (GetResourceIsolationLevel).

import (
	cadvisorapi "github.com/google/cadvisor/lib/model"
	v1 "k8s.io/api/core/v1"
	"k8s.io/klog/v2"
	podresourcesapi "k8s.io/kubelet/pkg/apis/podresources/v1"
	cmqos "k8s.io/kubernetes/pkg/kubelet/cm/qos"
	"k8s.io/kubernetes/pkg/kubelet/cm/topologymanager"
	"k8s.io/kubernetes/pkg/kubelet/lifecycle"
)

type (
	machineInfoT = cadvisorapi.MachineInfo
	numaNodeT    = cadvisorapi.Node
	coreT        = cadvisorapi.Core
	cacheT       = cadvisorapi.Cache
)

func newTopologyManager(logger klog.Logger, topology []numaNodeT, policy, scope string,
	options map[string]string) (topologymanager.Manager, error) {
	return topologymanager.NewManager(logger, topology, policy, scope, options)
}

func (n *node) tmAdmit(pod *v1.Pod) lifecycle.PodAdmitResult {
	return n.tm.Admit(n.ctx, &lifecycle.PodAdmitAttributes{Pod: pod, OtherPods: n.activePods(),
		Operation: lifecycle.AddOperation})
}

func (n *node) tmAddContainer(pod *v1.Pod, c *v1.Container, id string) {
	n.tm.AddContainer(n.logger, pod, c, id)
}

func (n *node) tmRemoveContainer(id string) error { return n.tm.RemoveContainer(n.logger, id) }

func (n *node) tmAffinity(uid, name string) topologymanager.TopologyHint {
	return n.tm.GetAffinity(n.logger, uid, name)
}

func (n *node) probeHints(probe *v1.Pod) {
	n.cpu.GetTopologyHints(n.logger, probe, &probe.Spec.Containers[0], lifecycle.AddOperation)
	n.mem.GetTopologyHints(n.logger, probe, &probe.Spec.Containers[0], lifecycle.AddOperation)
}

func (p providers) UpdateAllocatedDevices(klog.Logger) {}
func (p providers) GetAllocatableDevices(klog.Logger) []*podresourcesapi.ContainerDevices {
	return []*podresourcesapi.ContainerDevices{}
}
func (p providers) GetDynamicResources(klog.Logger, *v1.Pod, *v1.Container) []*podresourcesapi.DynamicResource {
	return []*podresourcesapi.DynamicResource{}
}

func (p providers) GetCPUs(pod *v1.Pod, container *v1.Container) []int64 {
	if p.n.cpu.GetResourceIsolationLevel(pod, container) != cmqos.ResourceIsolationContainer {
		return []int64{}
	}
	return int64s(p.n.cpu.GetExclusiveCPUs(string(pod.UID), container.Name))
}
func (p providers) GetPodCPUs(podUID string) []int64 { return int64s(p.n.cpu.GetPodCPUs(podUID)) }

func (p providers) GetMemory(logger klog.Logger, pod *v1.Pod, container *v1.Container) []*podresourcesapi.ContainerMemory {
	if p.n.mem.GetResourceIsolationLevel(pod, container) != cmqos.ResourceIsolationContainer {
		return []*podresourcesapi.ContainerMemory{}
	}
	return containerMemory(p.n.mem.GetMemory(logger, string(pod.UID), container.Name))
}
func (p providers) GetPodMemory(_ klog.Logger, podUID string) []*podresourcesapi.ContainerMemory {
	return containerMemory(p.n.mem.GetPodMemory(podUID))
}
func (p providers) GetAllocatableMemory(logger klog.Logger) []*podresourcesapi.ContainerMemory {
	return containerMemory(p.n.mem.GetAllocatableMemory(logger))
}
