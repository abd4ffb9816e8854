package main

import (
	"context"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// fakes stands in for what the managers' Start needs from a running kubelet and is not
// theirs to decide (docs/design.md#reference):
//   - sources ready: always (so removeStaleState runs, as on a kubelet past its start-up);
//   - pod status provider: no status for any pod, so the CPU manager's reconcile loop skips
//     every container (there is no runtime to push cpusets to);
//   - container runtime: UpdateContainerResources accepts everything and does nothing.
type fakes struct{ n *node }

func (f *fakes) AddSource(string) {}
func (f *fakes) AllReady() bool   { return true }

func (f *fakes) GetPodStatus(types.UID) (v1.PodStatus, bool) { return v1.PodStatus{}, false }

func (f *fakes) UpdateContainerResources(context.Context, string, *runtimeapi.ContainerResources) error {
	return nil
}
