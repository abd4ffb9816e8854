package main

import (
	"context"
	"sync/atomic"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// fakes stands in for what the managers' Start needs from a running kubelet and is not
// theirs to decide (docs/design.md#reference):
//   - sources ready: always (so removeStaleState runs, as on a kubelet past its start-up),
//     until a restart retires these managers: their reconcile goroutines cannot be stopped,
//     and one that ran its stale-state sweep late would write its old state over the new
//     managers' checkpoint (seen once in 6,000 workloads on a loaded machine);
//   - pod status provider: no status for any pod, so the CPU manager's reconcile loop skips
//     every container (there is no runtime to push cpusets to);
//   - container runtime: UpdateContainerResources accepts everything and does nothing.
type fakes struct {
	n       *node
	retired atomic.Bool
}

func (f *fakes) AddSource(string) {}
func (f *fakes) AllReady() bool   { return !f.retired.Load() }

func (f *fakes) GetPodStatus(types.UID) (v1.PodStatus, bool) { return v1.PodStatus{}, false }

func (f *fakes) UpdateContainerResources(context.Context, string, *runtimeapi.ContainerResources) error {
	return nil
}
