package main

// What the kubelet's PodResources v1 server answers, called in-process after every step
// (docs/design.md#reference): List (each pod's containers' cpu_ids and, with
// PodLevelResourceManagers, the pod's own), GetAllocatableResources' cpu_ids, and what the
// CPU manager gives the container manager (GetCPUAffinity, the cpuset a container is created
// with; GetAllCPUs). These are the fields the exporter reads, so the differential compares
// them with what the model reports (reconciler/allocator/report.py).

import (
	"k8s.io/apimachinery/pkg/util/sets"
	podresourcesapi "k8s.io/kubelet/pkg/apis/podresources/v1"
	"k8s.io/kubernetes/pkg/kubelet/apis/podresources"
)

type podAnswer struct {
	CPUs       []int64            `json:"cpus"`
	Containers map[string][]int64 `json:"containers"`
	// GetCPUAffinity per container (init containers too): what PreCreateContainer pins.
	Affinity map[string][]int64 `json:"affinity"`
	// GetMemoryNUMANodes per container (init containers too): the cpuset.mems
	// PreCreateContainer pins (internal_container_lifecycle_linux.go).
	Mems map[string][]int `json:"mems"`
}

type answers struct {
	Pods        map[string]podAnswer `json:"pods"` // by pod UID
	Allocatable []int64              `json:"allocatable"`
	AllCPUs     []int64              `json:"all_cpus"`
	Version     string               `json:"version"` // whose answers: what the model reports is per minor
	Error       string               `json:"error,omitempty"`
}

func (n *node) answers() *answers {
	p := providers{n}
	srv := podresources.NewV1PodResourcesServer(n.ctx, podresources.PodResourcesProviders{
		Pods: p, Devices: p, Cpus: p, Memory: p, DynamicResources: p})
	out := &answers{Pods: map[string]podAnswer{}, AllCPUs: int64s(n.cpu.GetAllCPUs()),
		Version: kubeletVersion}
	listed, err := srv.List(n.ctx, &podresourcesapi.ListPodResourcesRequest{})
	if err != nil {
		out.Error = "List: " + err.Error()
		return out
	}
	byName := map[string]string{}
	for _, pod := range n.pods {
		byName[pod.Namespace+"/"+pod.Name] = string(pod.UID)
		a := podAnswer{Containers: map[string][]int64{}, Affinity: map[string][]int64{},
			Mems: map[string][]int{}}
		for _, c := range allContainers(pod) {
			a.Affinity[c.Name] = int64s(n.cpu.GetCPUAffinity(string(pod.UID), c.Name))
			if mems := n.mem.GetMemoryNUMANodes(n.logger, pod, &c); mems != nil {
				a.Mems[c.Name] = sets.List(mems)
			}
		}
		out.Pods[string(pod.UID)] = a
	}
	for _, pr := range listed.PodResources {
		uid, ok := byName[pr.Namespace+"/"+pr.Name]
		if !ok {
			out.Error = "List: a pod the pod lister does not hold: " + pr.Namespace + "/" + pr.Name
			return out
		}
		a := out.Pods[uid]
		a.CPUs = orEmpty(listedPodCPUs(pr))
		for _, c := range pr.Containers {
			a.Containers[c.Name] = orEmpty(c.CpuIds)
		}
		out.Pods[uid] = a
	}
	alloc, err := srv.GetAllocatableResources(n.ctx, &podresourcesapi.AllocatableResourcesRequest{})
	if err != nil {
		out.Error = "GetAllocatableResources: " + err.Error()
		return out
	}
	out.Allocatable = orEmpty(alloc.CpuIds)
	return out
}

func orEmpty(ids []int64) []int64 {
	if ids == nil {
		return []int64{}
	}
	return ids
}
