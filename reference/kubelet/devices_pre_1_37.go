//go:build kubelet_1_35 || kubelet_1_36

package main

import "k8s.io/kubernetes/pkg/kubelet/cm/devicemanager"

func allocatableDevices(n *node) devicemanager.ResourceDeviceInstances {
	return n.devs.dm.GetAllocatableDevices()
}
