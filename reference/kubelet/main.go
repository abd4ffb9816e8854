// Command reference drives the kubelet's own CPU, memory and topology managers, its
// checkpoint code and its PodResources v1 server (k8s.io/kubernetes, linked as a library) from a
// JSON-lines script on stdin, and answers one JSON line per request on stdout. It is the
// reference the project's allocator model is checked against (docs/design.md#reference).
//
// Requests ({"op": ...}):
//
//	setup    a node: CPUs (explicit list), memory per NUMA node, kubelet settings, feature gates
//	admit    a v1.Pod through the topology manager's admit handler (which calls the CPU and
//	         memory managers' hints and Allocate/AllocatePod), then AddContainer for each container
//	remove   one container (RemoveContainer by container ID), or a whole pod when no container
//	restart  new managers on the same checkpoint directory: Start (the real state validation)
//	         and every active pod admitted again, in admission order, as a restarted kubelet does
//	state    the managers' state, the default CPU set and the checkpoint files' bytes
//	reconcile the CPU manager's reconcile loop with the given pod statuses (reconcile.go)
//	serve    the PodResources v1 server on a unix socket, backed by these managers
//	topology topology.Discover on a machine description, and the facts it derives
//	         (topology_facts.go); needs no node
//
// What is faked, because it needs a container runtime or an API server (see fakes.go): the
// pod lister (the pods admitted here), the runtime (UpdateContainerResources does nothing),
// the pod status provider (no status: the reconcile loop skips every container), sources
// ready (once the node has started), container IDs ("<pod uid>/<container name>").
//
// One request runs at a time, and a start (setup, restart) answers only once what the
// managers run on goroutines of their own is done (docs/design.md#reference): the CPU
// manager's first reconcile pass (fakes.go) and the device manager's checkpoint of each
// plugin's device list (devicewait.go).
package main

import (
	"bufio"
	"encoding/json"
	"fmt"
	"os"
)

type request struct {
	Op        string          `json:"op"`
	Setup     *setupRequest   `json:"setup,omitempty"`
	Pod       json.RawMessage `json:"pod,omitempty"`
	PodUID    string          `json:"pod_uid,omitempty"`
	Container string          `json:"container,omitempty"`
	Socket    string          `json:"socket,omitempty"`
	// reconcile: each pod's container states, by pod UID then container name (reconcile.go).
	Statuses map[string]map[string]string `json:"statuses,omitempty"`
	Machine  *machineRequest              `json:"machine,omitempty"`
}

type cpuInfo struct {
	ID     int `json:"id"`
	Core   int `json:"core"`
	Socket int `json:"socket"`
	NUMA   int `json:"numa"`
	// L3 is the uncore cache id; -1 for none (the kubelet then falls back to the socket).
	L3 int `json:"l3"`
}

type setupRequest struct {
	CPUs   []cpuInfo         `json:"cpus"`
	Memory map[string]uint64 `json:"memory"` // bytes per NUMA node id
	// NUMA distances per node id, as sysfs nodeN/distance lists them (cAdvisor's Distances).
	Distances        map[string][]uint64 `json:"distances"`
	CPUPolicy        string              `json:"cpu_policy"`
	CPUPolicyOptions map[string]string   `json:"cpu_policy_options"`
	TopologyPolicy   string              `json:"topology_policy"`
	TopologyScope    string              `json:"topology_scope"`
	TopologyOptions  map[string]string   `json:"topology_options"`
	MemoryPolicy     string              `json:"memory_policy"`
	ReservedCPUs     string              `json:"reserved_cpus"`   // reservedSystemCPUs
	ReservedCPU      string              `json:"reserved_cpu"`    // kubeReserved+systemReserved cpu quantity
	ReservedMemory   map[string]uint64   `json:"reserved_memory"` // reservedMemory per NUMA node
	// The node allocatable's memory reservation (kubeReserved + systemReserved + the hard
	// eviction threshold), which the memory manager checks reservedMemory against; when
	// empty, the sum of reservedMemory, as a consistent configuration has it.
	ReservedMemoryTotal string           `json:"reserved_memory_total"`
	FeatureGates        map[string]bool  `json:"feature_gates"`
	Devices             []deviceResource `json:"devices"` // device plugins' resources (devices.go)
	StateDir            string           `json:"state_dir"`
	KeepStateDir        bool             `json:"keep_state_dir"`

	// Hugepages per NUMA node id: page size in KiB -> number of pages (hugepages.go).
	Hugepages map[string]map[string]uint64 `json:"hugepages"`
}

type response struct {
	OK      bool         `json:"ok"`
	Error   string       `json:"error,omitempty"`
	Reason  string       `json:"reason,omitempty"`
	Version string       `json:"version,omitempty"`
	State   *stateReport `json:"state,omitempty"`
	// After a restart: each pod's second admission, in order.
	Readmitted []readmission `json:"readmitted,omitempty"`
	// After a reconcile: the cpuset each container runs on.
	Reconciled *reconcileReport `json:"reconciled,omitempty"`
	// After a topology op: what Discover made of the machine.
	Topology *topologyFacts `json:"topology,omitempty"`
}

func main() {
	in := bufio.NewScanner(os.Stdin)
	in.Buffer(make([]byte, 1<<20), 64<<20)
	out := json.NewEncoder(os.Stdout)
	var n *node
	for in.Scan() {
		line := in.Bytes()
		if len(line) == 0 {
			continue
		}
		var req request
		var resp response
		if err := json.Unmarshal(line, &req); err != nil {
			resp = response{Error: fmt.Sprintf("bad request: %v", err)}
		} else {
			resp = handle(&n, &req)
		}
		if err := out.Encode(resp); err != nil {
			fmt.Fprintf(os.Stderr, "reference: cannot write: %v\n", err)
			os.Exit(1)
		}
	}
	if n != nil {
		n.close()
	}
}

func handle(np **node, req *request) response {
	if req.Op == "version" {
		return response{OK: true, Version: kubeletVersion}
	}
	if req.Op == "topology" {
		facts, err := discoverFacts(req.Machine)
		if err != nil {
			return response{Error: err.Error()}
		}
		return response{OK: facts.Error == "", Topology: facts}
	}
	if req.Op == "setup" {
		if old := *np; old != nil {
			old.mu.Lock()
			old.close()
			old.mu.Unlock()
			*np = nil
		}
		if req.Setup == nil {
			return response{Error: "setup: missing \"setup\""}
		}
		n, err := newNode(req.Setup)
		if err != nil {
			return response{Error: err.Error()}
		}
		*np = n
		return response{OK: true, State: n.report()}
	}
	n := *np
	if n == nil {
		return response{Error: fmt.Sprintf("%s: no node: send a setup first", req.Op)}
	}
	n.mu.Lock()
	defer n.mu.Unlock()
	switch req.Op {
	case "admit":
		reason, msg, err := n.admit(req.Pod)
		if err != nil {
			return response{Error: err.Error()}
		}
		return response{OK: msg == "", Reason: reason, Error: msg, State: n.report()}
	case "remove":
		if err := n.remove(req.PodUID, req.Container); err != nil {
			return response{Error: err.Error(), State: n.report()}
		}
		return response{OK: true, State: n.report()}
	case "restart":
		readmitted, err := n.restart()
		if err != nil {
			return response{Error: err.Error(), Readmitted: readmitted}
		}
		return response{OK: true, Readmitted: readmitted, State: n.report()}
	case "state":
		return response{OK: true, State: n.report()}
	case "reconcile":
		if orDefault(n.cfg.CPUPolicy, "static") == "none" {
			return response{Error: "reconcile: the none policy runs no reconcile loop"}
		}
		return response{OK: true, Reconciled: n.reconcile(req.Statuses), State: n.report()}
	case "serve":
		if err := n.serve(req.Socket); err != nil {
			return response{Error: err.Error()}
		}
		return response{OK: true}
	}
	return response{Error: fmt.Sprintf("unknown op %q", req.Op)}
}
