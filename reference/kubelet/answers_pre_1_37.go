//go:build kubelet_1_35 || kubelet_1_36

package main

import podresourcesapi "k8s.io/kubelet/pkg/apis/podresources/v1"

// listedPodCPUs: the PodResources API of 1.35 and 1.36 has no pod-level cpu_ids.
func listedPodCPUs(*podresourcesapi.PodResources) []int64 { return nil }
