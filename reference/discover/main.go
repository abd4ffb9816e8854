// Command discover prints the CPU topology the kubelet builds on this machine: cAdvisor's
// machine read (github.com/google/cadvisor/lib GetTopology, GetSockets) handed to the
// kubelet's own topology.Discover (k8s.io/kubernetes pkg/kubelet/cm/cpumanager/topology),
// as one JSON object on stdout. Nothing is reimplemented: it is the judge the exporter's
// sysfs reader is compared with (docs/design.md#topology).
//
// It reads the real /sys and /proc/cpuinfo. To read a dump of another machine, run it in a
// mount namespace with the dump bound over /sys (tests/topology/test_reference_discover.py
// does: unshare -m, mount --bind).
package main

import (
	"encoding/json"
	"fmt"
	"os"
	"sort"

	"github.com/google/cadvisor/lib/machine"
	"github.com/google/cadvisor/lib/utils/sysfs"
	cadvisorapi "github.com/google/cadvisor/lib/model"
	"k8s.io/klog/v2"
	"k8s.io/kubernetes/pkg/kubelet/cm/cpumanager/topology"
)

type cpuRow struct {
	CPU    int `json:"cpu"`
	Core   int `json:"core"`
	Socket int `json:"socket"`
	NUMA   int `json:"numa"`
	Uncore int `json:"uncore"`
}

type result struct {
	CPUs          []cpuRow       `json:"cpus"`
	Counts        map[string]int `json:"counts,omitempty"`
	TopologyNodes []int          `json:"topology_nodes"`
	DiscoverError *string        `json:"kubelet_discover_error"`
	ReadError     *string        `json:"cadvisor_error,omitempty"`
}

func main() {
	out := result{CPUs: []cpuRow{}, TopologyNodes: []int{}}
	nodes, numCores, err := machine.GetTopology(sysfs.NewRealSysFs())
	if err != nil {
		// The kubelet's cAdvisor fails to start on such a machine; Discover gets nothing.
		text := err.Error()
		out.ReadError = &text
		out.DiscoverError = &text
		emit(out)
		return
	}
	cpuinfo, _ := os.ReadFile("/proc/cpuinfo")
	info := &cadvisorapi.MachineInfo{
		NumCores:   numCores,
		NumSockets: machine.GetSockets(cpuinfo),
		Topology:   nodes,
	}
	for _, n := range nodes {
		out.TopologyNodes = append(out.TopologyNodes, n.Id)
	}
	sort.Ints(out.TopologyNodes)
	topo, err := topology.Discover(klog.Background(), info)
	if err != nil {
		text := err.Error()
		out.DiscoverError = &text
		emit(out)
		return
	}
	for _, cpu := range topo.CPUDetails.CPUs().List() {
		d := topo.CPUDetails[cpu]
		out.CPUs = append(out.CPUs, cpuRow{cpu, d.CoreID, d.SocketID, d.NUMANodeID, d.UncoreCacheID})
	}
	out.Counts = map[string]int{
		"NumCPUs": topo.NumCPUs, "NumCores": topo.NumCores, "NumSockets": topo.NumSockets,
		"NumNUMANodes": topo.NumNUMANodes, "NumUncoreCache": topo.NumUncoreCache,
	}
	emit(out)
}

func emit(r result) {
	if err := json.NewEncoder(os.Stdout).Encode(r); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
}
