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
//   - sources ready: once the node has started and every pod is admitted again, as on a
//     kubelet past its start-up (so removeStaleState runs then), and never again for managers
//     a restart replaced. The managers' reconcile goroutines cannot be stopped, and one whose
//     first stale-state sweep ran late, concurrently with a restart's re-admissions or after
//     it, made the outcome depend on the scheduler (two workloads in 12,000, under load);
//   - pod status provider: no status for any pod, except while a "reconcile" request runs
//     the CPU manager's reconcile loop with the statuses it gives (reconcile.go);
//   - container runtime: UpdateContainerResources records the cpuset pushed (reconcile.go).
type fakes struct {
	n     *node
	ready atomic.Bool
}

func (f *fakes) AddSource(string) {}
func (f *fakes) AllReady() bool   { return f.ready.Load() }

func (f *fakes) GetPodStatus(uid types.UID) (v1.PodStatus, bool) {
	if rt := runtimeFor(f.n); rt != nil {
		return rt.podStatus(uid) // only while a reconcile request runs (reconcile.go)
	}
	return v1.PodStatus{}, false
}

func (f *fakes) UpdateContainerResources(_ context.Context, id string, r *runtimeapi.ContainerResources) error {
	if rt := runtimeFor(f.n); rt != nil {
		return rt.update(id, r)
	}
	return nil
}
