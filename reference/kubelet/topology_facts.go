package main

// The "topology" op: the kubelet's topology.Discover run on one machine description, and
// what the CPU manager reads back from the CPUTopology it returns (its counts, the per-CPU
// ids, the groupings), or Discover's error. It needs no node: the machine is either the
// one setup builds from a CPU list (machineInfo, node.go), or cAdvisor's MachineInfo given
// node by node and core by core, so that machines cAdvisor reads wrong (a core without
// threads, a thread twice in a core or on two cores, no CPUs, no sockets) reach the
// kubelet's code as they would (bench/reference_topology.py, docs/design.md#reference).

import (
	"fmt"
	"strconv"

	"k8s.io/klog/v2"
	"k8s.io/kubernetes/pkg/kubelet/cm/cpumanager/topology"
	"k8s.io/utils/cpuset"
)

type machineCore struct {
	ID      int   `json:"id"`
	Socket  int   `json:"socket"`
	Threads []int `json:"threads"`
	// Uncore cache ids, in cAdvisor's order (the kubelet reads the first; none: the socket).
	Uncore []int `json:"uncore"`
}

type machineNode struct {
	ID    int           `json:"id"`
	Cores []machineCore `json:"cores"`
}

type machineRequest struct {
	// A CPU list, as setup takes it: the machine info setup builds (node.go machineInfo).
	CPUs []cpuInfo `json:"cpus,omitempty"`
	// Else cAdvisor's MachineInfo as given: NumCores (its logical CPU count), NumSockets,
	// and Topology.
	NumCores   int           `json:"num_cores"`
	NumSockets int           `json:"num_sockets"`
	Nodes      []machineNode `json:"nodes"`
	// CPU ids to ask about beside those Discover found (ids not on the machine).
	Probe []int `json:"probe"`
}

type cpuFacts struct {
	ID     int `json:"id"`
	Core   int `json:"core"`
	Socket int `json:"socket"`
	NUMA   int `json:"numa"`
	Uncore int `json:"uncore"` // CPUDetails' UncoreCacheID; -1 when not on the machine
	// CPUCoreID's, CPUSocketID's and CPUNUMANodeID's errors ("" for none).
	Errors [3]string `json:"errors"`
}

type topologyFacts struct {
	Error          string     `json:"error,omitempty"`
	NumCPUs        int        `json:"num_cpus"`
	NumCores       int        `json:"num_cores"`
	NumSockets     int        `json:"num_sockets"`
	NumNUMANodes   int        `json:"num_numa_nodes"`
	NumUncoreCache int        `json:"num_uncore_caches"`
	CPUsPerCore    int        `json:"cpus_per_core"`
	CPUsPerSocket  int        `json:"cpus_per_socket"`
	CPUsPerUncore  int        `json:"cpus_per_uncore"`
	CPUs           []cpuFacts `json:"cpus"`
	// CPUDetails.CPUs(), Cores(), Sockets(), NUMANodes(), UncoreCaches().
	IDs map[string][]int `json:"ids"`
	// CPUsInCores, CPUsInSockets, CPUsInNUMANodes, CPUsInUncoreCaches of each id above.
	Groups map[string]map[string][]int `json:"groups"`
}

func machineOf(req *machineRequest) (*machineInfoT, error) {
	if len(req.CPUs) > 0 {
		return machineInfo(&setupRequest{CPUs: req.CPUs})
	}
	mi := &machineInfoT{NumCores: req.NumCores, NumSockets: req.NumSockets}
	for _, n := range req.Nodes {
		node := numaNodeT{Id: n.ID}
		for _, c := range n.Cores {
			core := coreT{Id: c.ID, SocketID: c.Socket, Threads: c.Threads}
			for _, id := range c.Uncore {
				core.UncoreCaches = append(core.UncoreCaches, cacheT{Id: id, Level: 3, Type: "Unified"})
			}
			node.Cores = append(node.Cores, core)
		}
		mi.Topology = append(mi.Topology, node)
	}
	return mi, nil
}

func discoverFacts(req *machineRequest) (*topologyFacts, error) {
	if req == nil {
		return nil, fmt.Errorf("topology: missing \"machine\"")
	}
	mi, err := machineOf(req)
	if err != nil {
		return nil, err
	}
	topo, err := topology.Discover(klog.Background(), mi)
	if err != nil {
		return &topologyFacts{Error: err.Error()}, nil
	}
	f := &topologyFacts{
		NumCPUs: topo.NumCPUs, NumCores: topo.NumCores, NumSockets: topo.NumSockets,
		NumNUMANodes: topo.NumNUMANodes, NumUncoreCache: topo.NumUncoreCache,
		CPUsPerCore: topo.CPUsPerCore(), CPUsPerSocket: topo.CPUsPerSocket(),
		CPUsPerUncore: topo.CPUsPerUncore(),
	}
	d := topo.CPUDetails
	ids := d.CPUs().Union(cpuset.New(req.Probe...)).List()
	for _, id := range ids {
		c := cpuFacts{ID: id, Uncore: -1}
		var errs [3]error
		c.Core, errs[0] = topo.CPUCoreID(id)
		c.Socket, errs[1] = topo.CPUSocketID(id)
		c.NUMA, errs[2] = topo.CPUNUMANodeID(id)
		for i, e := range errs {
			if e != nil {
				c.Errors[i] = e.Error()
			}
		}
		if info, ok := d[id]; ok {
			c.Uncore = info.UncoreCacheID
		}
		f.CPUs = append(f.CPUs, c)
	}
	kinds := []struct {
		name string
		all  cpuset.CPUSet
		in   func(...int) cpuset.CPUSet
	}{
		{"cores", d.Cores(), d.CPUsInCores},
		{"sockets", d.Sockets(), d.CPUsInSockets},
		{"numa_nodes", d.NUMANodes(), d.CPUsInNUMANodes},
		{"uncore_caches", d.UncoreCaches(), d.CPUsInUncoreCaches},
	}
	f.IDs = map[string][]int{"cpus": d.CPUs().List()}
	f.Groups = map[string]map[string][]int{}
	for _, k := range kinds {
		f.IDs[k.name] = k.all.List()
		groups := map[string][]int{}
		for _, id := range k.all.List() {
			groups[strconv.Itoa(id)] = k.in(id).List()
		}
		f.Groups[k.name] = groups
	}
	return f, nil
}
