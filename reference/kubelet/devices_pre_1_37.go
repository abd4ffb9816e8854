//go:build kubelet_1_35 || kubelet_1_36

package main

import (
	v1 "k8s.io/api/core/v1"
	"k8s.io/kubernetes/pkg/kubelet/cm/devicemanager"
)

func allocatableDevices(n *node) devicemanager.ResourceDeviceInstances {
	return n.devs.dm.GetAllocatableDevices()
}

func deviceAllocatable(n *node) v1.ResourceList {
	_, allocatable, _ := n.devs.dm.GetCapacity()
	return allocatable
}

func allocatedResourcesStatus(n *node, pod *v1.Pod, status *v1.PodStatus) {
	n.devs.dm.UpdateAllocatedResourcesStatus(pod, status)
}
