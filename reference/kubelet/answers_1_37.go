//go:build !kubelet_1_35 && !kubelet_1_36

package main

import podresourcesapi "k8s.io/kubelet/pkg/apis/podresources/v1"

// listedPodCPUs is List's pod-level cpu_ids (1.37 and later).
func listedPodCPUs(pr *podresourcesapi.PodResources) []int64 { return pr.CpuIds }
