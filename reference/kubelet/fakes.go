package main

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// fakes stands in for what the managers' Start needs from a running kubelet and is not
// theirs to decide (docs/design.md#reference):
//   - sources ready: once the node has started and every pod is admitted again, as on a
//     kubelet past its start-up (so removeStaleState runs then), and never again for managers
//     a restart replaced;
//   - pod status provider: no status for any pod, except while a "reconcile" request runs
//     the CPU manager's reconcile loop with the statuses it gives (reconcile.go);
//   - container runtime: UpdateContainerResources records the cpuset pushed (reconcile.go).
type fakes struct {
	n     *node
	ready atomic.Bool
	pass  *firstPass
}

func newFakes(n *node) *fakes { return &fakes{n: n, pass: newFirstPass()} }

func (f *fakes) AddSource(string) {}
func (f *fakes) AllReady() bool   { return f.ready.Load() }

func (f *fakes) GetPodStatus(uid types.UID) (v1.PodStatus, bool) {
	f.pass.asked()
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

// cpuActivePods is the CPU manager's pod lister: the node's, telling the first pass how
// many pods it will ask the status of.
func (f *fakes) cpuActivePods() []*v1.Pod {
	pods := f.n.activePods()
	f.pass.listed(len(pods))
	return pods
}

// firstPass follows the CPU manager's first reconcile pass. Its Start runs reconcileState
// at once on a goroutine of its own (wait.Until), which lists the active pods and asks the
// status of each (none, during a start) and then sleeps for reconcilePeriod. Left to the
// scheduler, that pass read the pod list while a restart's re-admissions changed it (a data
// race the race detector reports, a torn slice header that can crash the process), and one
// that ran late, once sources were ready, swept stale state in the middle of later requests.
// The node waits for the pass to end before it goes on (docs/design.md#reference): after its
// pod list, nothing of the node is touched by it but the status asked of each listed pod.
type firstPass struct {
	mu    sync.Mutex
	pods  int // the pods it listed; -1 until it lists them
	asks  int
	ended bool
	done  chan struct{}
}

func newFirstPass() *firstPass { return &firstPass{pods: -1, done: make(chan struct{})} }

func (p *firstPass) listed(pods int) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.ended || p.pods >= 0 {
		return // a later call: the stale-state sweep, once sources are ready
	}
	p.pods = pods
	p.endIfAsked()
}

func (p *firstPass) asked() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.ended || p.pods < 0 {
		return // a reconcile request's own pass, after the first ended
	}
	p.asks++
	p.endIfAsked()
}

func (p *firstPass) endIfAsked() {
	if p.asks >= p.pods {
		p.ended = true
		close(p.done)
	}
}

// wait returns once the pass has asked the status of every pod it listed.
func (p *firstPass) wait(limit time.Duration) error {
	select {
	case <-p.done:
		return nil
	case <-time.After(limit):
		return fmt.Errorf("cpu manager start: its first reconcile pass did not end in %s", limit)
	}
}
