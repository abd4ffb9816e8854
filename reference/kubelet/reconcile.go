package main

// The CPU manager's reconcile loop, run on request (docs/design.md#reference). The loop the
// manager's Start launches runs once at start-up and then every reconcilePeriod, on a
// goroutine of its own, which would make its outcome depend on the scheduler; so the
// reference calls the same method, the kubelet's reconcileState, from the request loop, with
// the pod statuses the request gives (running, running with a runtime that fails the update,
// waiting, terminated, no container ID, no state, or no status for the pod), against a fake runtime that remembers the cpuset each container was
// created with (GetCPUAffinity, as the kubelet's PreCreateContainer pins it) and each
// cpuset the loop pushes. The answer is the cpuset each container runs on afterwards.

import (
	"context"
	"fmt"
	"reflect"
	"sync"
	"unsafe"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
	"k8s.io/utils/cpuset"
)

// reconciledContainer is the cpumanager package's, field for field (the method's results).
type reconciledContainer struct {
	podName       string
	containerName string
	containerID   string
}

// cpuReconcileState is cpumanager's (*manager).reconcileState, whose signature is the same in
// 1.35, 1.36 and 1.37; the receiver is the *manager the Manager interface holds.
//
//go:linkname cpuReconcileState k8s.io/kubernetes/pkg/kubelet/cm/cpumanager.(*manager).reconcileState
func cpuReconcileState(m unsafe.Pointer, ctx context.Context) (success, failure []reconciledContainer)

// fakeRuntime is the container runtime of one node, across its kubelet restarts.
type fakeRuntime struct {
	mu sync.Mutex
	n  *node
	// The cpuset each container runs on, by container ID.
	cpus map[string]cpuset.CPUSet
	// The statuses the pod status provider answers with while a reconcile runs (by pod UID,
	// then container name), and whether one runs: outside of it, no pod has a status.
	statuses map[string]map[string]string
	active   bool
	// Containers whose UpdateContainerResources fails in this reconcile (a runtime error).
	failing map[string]bool
}

var runtimeMu sync.Mutex
var current *fakeRuntime

// runtimeFor is the runtime of n when it has one; the managers of an earlier node (whose
// start-up reconcile pass may run late) find none and see no pod status.
func runtimeFor(n *node) *fakeRuntime {
	runtimeMu.Lock()
	defer runtimeMu.Unlock()
	if current == nil || current.n != n {
		return nil
	}
	return current
}

func runtimeOf(n *node) *fakeRuntime {
	runtimeMu.Lock()
	defer runtimeMu.Unlock()
	if current == nil || current.n != n {
		current = &fakeRuntime{n: n, cpus: map[string]cpuset.CPUSet{}}
	}
	return current
}

type reconcileReport struct {
	// The cpuset each container of each active pod runs on ("" for none known), by pod
	// UID and container name.
	CPUs    map[string]map[string]string `json:"cpus"`
	Success int                          `json:"success"`
	Failure int                          `json:"failure"`
}

func (n *node) reconcile(statuses map[string]map[string]string) *reconcileReport {
	rt := runtimeOf(n)
	// Containers created since the last reconcile: pinned as PreCreateContainer pins them.
	n.containers.Visit(func(uid, name, id string) {
		rt.mu.Lock()
		if _, ok := rt.cpus[id]; !ok {
			rt.cpus[id] = n.cpu.GetCPUAffinity(uid, name)
		}
		rt.mu.Unlock()
	})
	rt.mu.Lock()
	rt.statuses, rt.active, rt.failing = statuses, true, map[string]bool{}
	rt.mu.Unlock()
	success, failure := cpuReconcileState(reflect.ValueOf(n.cpu).UnsafePointer(), n.ctx)
	rt.mu.Lock()
	defer rt.mu.Unlock()
	rt.active = false
	out := &reconcileReport{CPUs: map[string]map[string]string{}, Success: len(success),
		Failure: len(failure)}
	for _, pod := range n.pods {
		uid := string(pod.UID)
		out.CPUs[uid] = map[string]string{}
		for _, c := range allContainers(pod) {
			if set, ok := rt.cpus[containerID(uid, c.Name)]; ok {
				out.CPUs[uid][c.Name] = set.String()
			}
		}
	}
	return out
}

func (rt *fakeRuntime) podStatus(uid types.UID) (v1.PodStatus, bool) {
	rt.mu.Lock()
	defer rt.mu.Unlock()
	byName, ok := rt.statuses[string(uid)]
	if !rt.active || !ok {
		return v1.PodStatus{}, false
	}
	var st v1.PodStatus
	for _, pod := range rt.n.pods {
		if pod.UID != uid {
			continue
		}
		for _, c := range allContainers(pod) {
			cs := v1.ContainerStatus{Name: c.Name, ContainerID: "fake://" + containerID(string(uid), c.Name)}
			switch byName[c.Name] {
			case "running":
				cs.State.Running = &v1.ContainerStateRunning{}
			case "update-fails":
				cs.State.Running = &v1.ContainerStateRunning{}
				rt.failing[containerID(string(uid), c.Name)] = true
			case "waiting":
				cs.State.Waiting = &v1.ContainerStateWaiting{Reason: "ContainerCreating"}
			case "terminated":
				cs.State.Terminated = &v1.ContainerStateTerminated{Reason: "Completed"}
			case "no-id":
				cs.ContainerID = ""
				cs.State.Waiting = &v1.ContainerStateWaiting{Reason: "ContainerCreating"}
			case "bad-id": // a container ID the kubelet cannot parse
				cs.ContainerID = "no-runtime-prefix"
				cs.State.Running = &v1.ContainerStateRunning{}
			case "no-state":
			default: // no status for this container
				continue
			}
			st.ContainerStatuses = append(st.ContainerStatuses, cs)
		}
	}
	return st, true
}

func (rt *fakeRuntime) update(id string, r *runtimeapi.ContainerResources) error {
	if r == nil || r.Linux == nil {
		return nil
	}
	set, err := cpuset.Parse(r.Linux.CpusetCpus)
	if err != nil {
		return err
	}
	rt.mu.Lock()
	defer rt.mu.Unlock()
	if rt.failing[id] {
		return fmt.Errorf("the fake runtime fails this update of %s", id)
	}
	rt.cpus[id] = set
	return nil
}
