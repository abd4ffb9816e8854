package main

// The node and its protocol, the same for every kubelet minor; what the minors' APIs do
// differently (a logger or context argument, pod-level answers) is in api_*.go and
// podlevel*.go, picked by build tag (docs/design.md#reference).

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"sync"
	"time"

	"google.golang.org/grpc"
	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	utilfeature "k8s.io/apiserver/pkg/util/feature"
	"k8s.io/klog/v2"
	podresourcesapi "k8s.io/kubelet/pkg/apis/podresources/v1"
	kubeletconfig "k8s.io/kubernetes/pkg/kubelet/apis/config"
	"k8s.io/kubernetes/pkg/kubelet/apis/podresources"
	"k8s.io/kubernetes/pkg/kubelet/cm/containermap"
	"k8s.io/kubernetes/pkg/kubelet/cm/cpumanager"
	"k8s.io/kubernetes/pkg/kubelet/cm/memorymanager"
	memorystate "k8s.io/kubernetes/pkg/kubelet/cm/memorymanager/state"
	"k8s.io/kubernetes/pkg/kubelet/cm/topologymanager"
	"k8s.io/utils/cpuset"
)

// The CPU manager's reconcile loop only pushes cpusets to the (fake) runtime: a period this
// long keeps it from running again after the one pass Start makes.
const reconcilePeriod = 24 * time.Hour

// How long a start waits for what the managers do on goroutines of their own (the CPU
// manager's first reconcile pass, the device plugins' registration): far beyond what they
// take, so that only a reference that is broken, not one that is slow, reaches it.
const startLimit = 20 * time.Second

type node struct {
	// Held by each request of the script while it runs, and by each call of the PodResources
	// server that "serve" starts, which reads the node from goroutines of its own.
	mu      sync.Mutex
	cfg     *setupRequest
	dir     string
	ownDir  bool
	machine *machineInfoT
	tm      topologymanager.Manager
	cpu     cpumanager.Manager
	mem     memorymanager.Manager
	// The pods admitted and not removed, in admission order: the fake pod lister.
	pods []*v1.Pod
	// (pod UID, container name) -> container ID for the containers added.
	containers containermap.ContainerMap
	logger     klog.Logger
	ctx        context.Context
	server     *podResourcesServer
	fakes      *fakes   // the running managers' sources-ready and runtime stand-ins
	devs       *devices // the device manager and its plugins (devices.go); nil without devices
}

func machineInfo(cfg *setupRequest) (*machineInfoT, error) {
	if len(cfg.CPUs) == 0 {
		return nil, fmt.Errorf("setup: no CPUs")
	}
	type coreKey struct{ numa, socket, core int }
	nodes := map[int]*numaNodeT{}
	cores := map[coreKey]*coreT{}
	var order []coreKey
	sockets := map[int]bool{}
	seen := map[int]bool{}
	for _, c := range cfg.CPUs {
		if seen[c.ID] {
			return nil, fmt.Errorf("setup: CPU %d listed twice", c.ID)
		}
		seen[c.ID] = true
		sockets[c.Socket] = true
		if _, ok := nodes[c.NUMA]; !ok {
			mem := cfg.Memory[strconv.Itoa(c.NUMA)]
			nodes[c.NUMA] = &numaNodeT{Id: c.NUMA, Memory: mem,
				Distances: cfg.Distances[strconv.Itoa(c.NUMA)]}
		}
		k := coreKey{c.NUMA, c.Socket, c.Core}
		core, ok := cores[k]
		if !ok {
			core = &coreT{Id: c.Core, SocketID: c.Socket}
			if c.L3 >= 0 {
				core.UncoreCaches = []cacheT{{Id: c.L3, Level: 3, Type: "Unified"}}
			}
			cores[k] = core
			order = append(order, k)
		}
		core.Threads = append(core.Threads, c.ID)
	}
	for _, k := range order {
		nodes[k.numa].Cores = append(nodes[k.numa].Cores, *cores[k])
	}
	ids := make([]int, 0, len(nodes))
	for id := range nodes {
		ids = append(ids, id)
	}
	sort.Ints(ids)
	mi := &machineInfoT{NumCores: len(cfg.CPUs), NumSockets: len(sockets)}
	for _, id := range ids {
		if err := addHugepages(cfg, nodes[id]); err != nil {
			return nil, err
		}
		mi.Topology = append(mi.Topology, *nodes[id])
		mi.MemoryCapacity += nodes[id].Memory
	}
	return mi, nil
}

func newNode(cfg *setupRequest) (*node, error) {
	if err := utilfeature.DefaultMutableFeatureGate.SetFromMap(cfg.FeatureGates); err != nil {
		return nil, fmt.Errorf("feature gates: %w", err)
	}
	mi, err := machineInfo(cfg)
	if err != nil {
		return nil, err
	}
	n := &node{cfg: cfg, machine: mi, containers: containermap.NewContainerMap(),
		logger: klog.Background(), ctx: context.Background()}
	n.dir = cfg.StateDir
	if n.dir == "" {
		if n.dir, err = os.MkdirTemp("", "podres-reference-"); err != nil {
			return nil, err
		}
		n.ownDir = true
	}
	if err := n.start(); err != nil {
		n.close()
		return nil, err
	}
	n.fakes.ready.Store(true)
	return n, nil
}

func (n *node) reservation() (v1.ResourceList, []kubeletconfig.MemoryReservation, cpuset.CPUSet, error) {
	cfg := n.cfg
	res := v1.ResourceList{}
	specific := cpuset.New()
	if cfg.ReservedCPUs != "" {
		s, err := cpuset.Parse(cfg.ReservedCPUs)
		if err != nil {
			return nil, nil, specific, fmt.Errorf("reserved_cpus: %w", err)
		}
		specific = s
		// The kubelet sets the CPU reservation to the size of reservedSystemCPUs
		// (pkg/kubelet/cm/node_container_manager_linux.go via cmd/kubelet/app/server.go).
		res[v1.ResourceCPU] = *resource.NewQuantity(int64(s.Size()), resource.DecimalSI)
	} else if cfg.ReservedCPU != "" {
		q, err := resource.ParseQuantity(cfg.ReservedCPU)
		if err != nil {
			return nil, nil, specific, fmt.Errorf("reserved_cpu: %w", err)
		}
		// Kept when zero, as the kubelet's node allocatable reservation keeps a
		// kubeReserved cpu of "0": the static policy then refuses it as zero.
		res[v1.ResourceCPU] = q
	}
	var reserved []kubeletconfig.MemoryReservation
	total := resource.NewQuantity(0, resource.BinarySI)
	keys := make([]string, 0, len(cfg.ReservedMemory))
	for k := range cfg.ReservedMemory {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		id, err := strconv.Atoi(k)
		if err != nil {
			return nil, nil, specific, fmt.Errorf("reserved_memory: NUMA node %q", k)
		}
		q := *resource.NewQuantity(int64(cfg.ReservedMemory[k]), resource.BinarySI)
		reserved = append(reserved, kubeletconfig.MemoryReservation{
			NumaNode: int32(id), Limits: v1.ResourceList{v1.ResourceMemory: q}})
		total.Add(q)
	}
	if cfg.ReservedMemoryTotal != "" {
		q, err := resource.ParseQuantity(cfg.ReservedMemoryTotal)
		if err != nil {
			return nil, nil, specific, fmt.Errorf("reserved_memory_total: %w", err)
		}
		total = &q
	}
	if !total.IsZero() {
		res[v1.ResourceMemory] = *total
	}
	return res, reserved, specific, nil
}

// start creates the three managers as pkg/kubelet/cm/container_manager_linux.go does
// (topology manager first; CPU then memory manager as its hint providers) and starts the
// CPU and memory managers on the checkpoint directory.
func (n *node) start() error {
	cfg := n.cfg
	res, reservedMem, specific, err := n.reservation()
	if err != nil {
		return err
	}
	tm, err := newTopologyManager(n.logger, n.machine.Topology, orDefault(cfg.TopologyPolicy, "none"),
		orDefault(cfg.TopologyScope, "container"), cfg.TopologyOptions)
	if err != nil {
		return fmt.Errorf("topology manager: %w", err)
	}
	if err := n.newDevices(tm); err != nil {
		return err
	}
	cpu, err := cpumanager.NewManager(n.logger, orDefault(cfg.CPUPolicy, "static"), cfg.CPUPolicyOptions,
		reconcilePeriod, n.machine, specific, res, n.dir, tm)
	if err != nil {
		return fmt.Errorf("cpu manager: %w", err)
	}
	tm.AddHintProvider(n.logger, cpu)
	mem, err := memorymanager.NewManager(n.logger, orDefault(cfg.MemoryPolicy, "None"), n.machine, res,
		reservedMem, n.dir, tm)
	if err != nil {
		return fmt.Errorf("memory manager: %w", err)
	}
	tm.AddHintProvider(n.logger, mem)
	if n.fakes != nil {
		n.fakes.ready.Store(false) // the managers being replaced sweep nothing any more
	}
	f := newFakes(n)
	n.fakes = f
	if err := cpu.Start(n.ctx, f.cpuActivePods, f, f, f, n.containers.Clone()); err != nil {
		return fmt.Errorf("cpu manager start: %w", err)
	}
	// The none policy runs no reconcile loop (its Start returns before launching one).
	if orDefault(cfg.CPUPolicy, "static") != "none" {
		if err := f.pass.wait(startLimit); err != nil {
			return err
		}
	}
	if err := mem.Start(n.ctx, n.activePods, f, f, f, n.containers.Clone()); err != nil {
		return fmt.Errorf("memory manager start: %w", err)
	}
	if err := n.startDevices(); err != nil {
		return err
	}
	n.tm, n.cpu, n.mem = tm, cpu, mem
	return nil
}

func orDefault(s, d string) string {
	if s == "" {
		return d
	}
	return s
}

func (n *node) activePods() []*v1.Pod {
	return append([]*v1.Pod(nil), n.pods...)
}

func containerID(uid, name string) string { return uid + "/" + name }

func allContainers(p *v1.Pod) []v1.Container {
	return append(append([]v1.Container(nil), p.Spec.InitContainers...), p.Spec.Containers...)
}

// admit runs the topology manager's admit handler, as the kubelet's admission chain does, and
// on success creates the containers (AddContainer on every manager).
func (n *node) admit(raw json.RawMessage) (reason, message string, err error) {
	var pod v1.Pod
	if err := json.Unmarshal(raw, &pod); err != nil {
		return "", "", fmt.Errorf("admit: bad pod: %w", err)
	}
	if pod.UID == "" {
		return "", "", fmt.Errorf("admit: pod without metadata.uid")
	}
	for _, p := range n.pods {
		if p.UID == pod.UID {
			return "", "", fmt.Errorf("admit: pod %s is already admitted", pod.UID)
		}
	}
	// The kubelet adds a pod to its pod manager before it runs the admit handlers
	// (pkg/kubelet/kubelet.go: HandlePodAdditions), so the managers' stale-state sweep during
	// admission sees it as active.
	n.pods = append(n.pods, &pod)
	result := n.tmAdmit(&pod)
	if !result.Admit {
		n.pods = n.pods[:len(n.pods)-1]
		n.collectGarbage()
		return result.Reason, result.Message, nil
	}
	n.updatePluginResources(&pod)
	n.addContainers(&pod, true)
	n.startContainers(&pod)
	return "", "", nil
}

// created: the containers start now. After a restart they are running already, and the
// kubelet's PreStartContainer, which calls the CPU manager's AddContainer (so recording
// each exclusive cpuset as pushed), does not run for them: the reconcile loop pushes
// their cpusets instead (reconcile.go).
func (n *node) addContainers(pod *v1.Pod, created bool) {
	for _, c := range allContainers(pod) {
		id := containerID(string(pod.UID), c.Name)
		if created {
			n.cpu.AddContainer(n.logger, pod, &c, id)
		}
		n.mem.AddContainer(n.logger, pod, &c, id)
		n.tmAddContainer(pod, &c, id)
		n.containers.Add(string(pod.UID), c.Name, id)
	}
}

// remove removes one container, as the kubelet's container GC does (the managers'
// RemoveContainer by container ID), or, with no container named, deletes the pod: it
// leaves the pod lister and every container of it is removed.
func (n *node) remove(uid, container string) error {
	var pod *v1.Pod
	idx := -1
	for i, p := range n.pods {
		if string(p.UID) == uid {
			pod, idx = p, i
		}
	}
	if pod == nil {
		return fmt.Errorf("remove: no pod %s", uid)
	}
	names := []string{container}
	if container == "" {
		n.pods = append(n.pods[:idx:idx], n.pods[idx+1:]...)
		n.forgetPod(uid)
		names = nil
		for _, c := range allContainers(pod) {
			names = append(names, c.Name)
		}
	}
	for _, name := range names {
		id, err := n.containers.GetContainerID(uid, name)
		if err != nil {
			return fmt.Errorf("remove: pod %s has no container %q", uid, name)
		}
		if err := n.cpu.RemoveContainer(n.logger, id); err != nil {
			return fmt.Errorf("cpu manager: %w", err)
		}
		if err := n.mem.RemoveContainer(n.logger, id); err != nil {
			return fmt.Errorf("memory manager: %w", err)
		}
		if err := n.tmRemoveContainer(id); err != nil {
			return fmt.Errorf("topology manager: %w", err)
		}
		n.containers.RemoveByContainerID(id)
	}
	n.collectGarbage()
	return nil
}

// collectGarbage lets the managers drop the state of pods the pod lister no longer lists,
// as they do before the next admission (their removeStaleState runs first in
// GetTopologyHints): asked for hints of a BestEffort pod, which they give none.
func (n *node) collectGarbage() {
	probe := &v1.Pod{Spec: v1.PodSpec{Containers: []v1.Container{{Name: "gc"}}}}
	probe.UID = "podres-reference-gc-probe"
	probe.Status.QOSClass = v1.PodQOSBestEffort
	n.probeHints(probe)
}

// restart is a kubelet restart: new managers on the same checkpoint files (Start restores and
// validates them), then every pod admitted again in the order it was first admitted, as the
// kubelet's HandlePodAdditions does for the pods it finds (pkg/kubelet/allocation: AddPod). A
// pod refused then is killed: its containers are removed and it leaves the pod lister.
func (n *node) restart() ([]readmission, error) {
	if err := n.start(); err != nil {
		return nil, err
	}
	var out []readmission
	for _, pod := range n.activePods() {
		result := n.tmAdmit(pod)
		out = append(out, readmission{UID: string(pod.UID), Admitted: result.Admit,
			Reason: result.Reason, Message: result.Message})
		if result.Admit {
			n.updatePluginResources(pod)
			n.addContainers(pod, false)
		} else if err := n.remove(string(pod.UID), ""); err != nil {
			return out, err
		}
	}
	n.fakes.ready.Store(true)
	return out, nil
}

func (n *node) close() {
	if n.devs != nil {
		n.devs.close(n.logger)
	}
	if n.server != nil {
		n.server.stop()
	}
	if n.ownDir && !n.cfg.KeepStateDir {
		_ = os.RemoveAll(n.dir)
	}
}

func (n *node) checkpointFiles() map[string]string {
	files := map[string]string{}
	for _, name := range []string{"cpu_manager_state", "memory_manager_state"} {
		if b, err := os.ReadFile(filepath.Join(n.dir, name)); err == nil {
			files[name] = string(b)
		}
	}
	// The device manager's, in its own folder: it holds the devices a refused pod's
	// containers were given before the refusal, which the state no longer lists.
	if n.devs != nil {
		if b, err := os.ReadFile(filepath.Join(n.devs.dir, "kubelet_internal_checkpoint")); err == nil {
			files["kubelet_internal_checkpoint"] = string(b)
		}
	}
	return files
}

func (n *node) report() *stateReport {
	r := &stateReport{Containers: map[string]map[string]string{}, Pods: map[string]string{},
		Memory: map[string]map[string][]memBlock{}, PodMemory: map[string][]memBlock{},
		Affinity: map[string]map[string]affinity{}, Checkpoints: n.checkpointFiles(), StateDir: n.dir}
	cs := n.cpu.State()
	r.Default = cs.GetDefaultCPUSet().String()
	r.Allocatable = n.cpu.GetAllocatableCPUs().String()
	for uid, byName := range cs.GetCPUAssignments() {
		r.Containers[uid] = map[string]string{}
		for name, set := range byName {
			r.Containers[uid][name] = set.String()
		}
	}
	ms := n.mem.State()
	for uid, byName := range ms.GetMemoryAssignments() {
		r.Memory[uid] = map[string][]memBlock{}
		for name, blocks := range byName {
			r.Memory[uid][name] = memBlocks(blocks)
		}
	}
	n.podLevel(r)
	n.reportDevices(r)
	r.Answers = n.answers()
	for _, p := range n.pods {
		uid := string(p.UID)
		r.Affinity[uid] = map[string]affinity{}
		for _, c := range allContainers(p) {
			h := n.tmAffinity(uid, c.Name)
			a := affinity{Preferred: h.Preferred, NUMA: []int{}}
			if h.NUMANodeAffinity != nil {
				a.NUMA = h.NUMANodeAffinity.GetBits()
			}
			r.Affinity[uid][c.Name] = a
		}
	}
	return r
}

func memBlocks(blocks []memorystate.Block) []memBlock {
	out := make([]memBlock, 0, len(blocks))
	for _, b := range blocks {
		out = append(out, memBlock{NUMA: b.NUMAAffinity, Type: string(b.Type), Size: b.Size})
	}
	return out
}

// providers adapts the managers to the PodResources server as the kubelet's container
// manager does (pkg/kubelet/cm/container_manager_linux.go: GetCPUs, GetMemory,
// GetAllocatable*, containerMemoryFromBlock; GetPodCPUs and GetPodMemory from 1.37). No
// devices, no DRA. The methods whose signatures changed between minors are in api_*.go.
type providers struct{ n *node }

func (p providers) GetActivePods() []*v1.Pod { return p.n.activePods() }
func (p providers) GetPods() []*v1.Pod       { return p.n.activePods() }
func (p providers) GetPodByName(namespace, name string) (*v1.Pod, bool) {
	for _, pod := range p.n.pods {
		if pod.Namespace == namespace && pod.Name == name {
			return pod, true
		}
	}
	return nil, false
}

func (p providers) GetDevices(string, string) []*podresourcesapi.ContainerDevices {
	return []*podresourcesapi.ContainerDevices{}
}
func (p providers) GetAllocatableCPUs() []int64 { return int64s(p.n.cpu.GetAllocatableCPUs()) }

func (n *node) serve(socket string) error {
	if n.server != nil {
		return fmt.Errorf("serve: already serving on %s", n.server.socket)
	}
	p := providers{n}
	all := podresources.PodResourcesProviders{Pods: p, Devices: p, Cpus: p, Memory: p, DynamicResources: p}
	s, err := listen(socket, &n.mu, func(g *grpc.Server) {
		podresourcesapi.RegisterPodResourcesListerServer(g, podresources.NewV1PodResourcesServer(n.ctx, all))
	})
	if err != nil {
		return err
	}
	n.server = s
	return nil
}

func containerMemory(blocks []memorystate.Block) []*podresourcesapi.ContainerMemory {
	var out []*podresourcesapi.ContainerMemory
	for _, b := range blocks {
		m := &podresourcesapi.ContainerMemory{MemoryType: string(b.Type), Size: b.Size,
			Topology: &podresourcesapi.TopologyInfo{Nodes: []*podresourcesapi.NUMANode{}}}
		for _, id := range b.NUMAAffinity {
			m.Topology.Nodes = append(m.Topology.Nodes, &podresourcesapi.NUMANode{ID: int64(id)})
		}
		out = append(out, m)
	}
	return out
}
