// ckptdump reads a kubelet's checkpoint files with the kubelet's own Go types and restore code
// (k8s.io/kubernetes pkg/kubelet/cm/{cpumanager,memorymanager}/state and
// pkg/kubelet/cm/devicemanager/checkpoint, of the kubelet version this binary is built
// against), and prints them as one normalized JSON object. The real-node tests compare the
// exporter's ledger with it, so the kubelet's files are read independently of the exporter's
// own parser (exporter/sources/checkpoint.py).
//
// Nothing is written where the kubelet keeps its files: the CPU and memory states are restored
// from private copies (the kubelet's restore path writes a migrated file back), and the device
// checkpoint is read through the kubelet's checkpoint manager, which only reads.
//
// Output (a file that is absent is null):
//
//	{"kubernetes": "v1.37.2",
//	 "cpuManager": {"format", "policyName", "defaultCpuSet", "entries": {uid: {container: cpuset}},
//	                "podEntries": {uid: cpuset}},
//	 "memoryManager": {"format", "policyName", "machineState": {node: {...}},
//	                   "entries": {uid: {container: [block]}}, "podEntries": {uid: [block]}},
//	 "deviceManager": {"podDeviceEntries": [{"podUID", "containerName", "resourceName",
//	                                         "deviceIDs": {numaNode: [id]}}],
//	                   "registeredDevices": {resource: [id]}}}
//
// CPU sets are in the kubelet's canonical list form; maps are sorted by key (encoding/json),
// lists of device ids sorted.
package main

import (
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"runtime/debug"
	"sort"
	"strconv"

	utilfeature "k8s.io/apiserver/pkg/util/feature"
	"k8s.io/klog/v2"
	"k8s.io/kubernetes/pkg/features"
	"k8s.io/kubernetes/pkg/kubelet/checkpointmanager"
	"k8s.io/kubernetes/pkg/kubelet/cm/containermap"
	cpustate "k8s.io/kubernetes/pkg/kubelet/cm/cpumanager/state"
	devcheckpoint "k8s.io/kubernetes/pkg/kubelet/cm/devicemanager/checkpoint"
	memstate "k8s.io/kubernetes/pkg/kubelet/cm/memorymanager/state"
)

const (
	cpuFile    = "cpu_manager_state"
	memoryFile = "memory_manager_state"
	deviceFile = "kubelet_internal_checkpoint"
)

type cpuOut struct {
	Format        string                       `json:"format"`
	PolicyName    string                       `json:"policyName"`
	DefaultCPUSet string                       `json:"defaultCpuSet"`
	Entries       map[string]map[string]string `json:"entries"`
	PodEntries    map[string]string            `json:"podEntries"`
}

type memoryOut struct {
	Format       string                                 `json:"format"`
	PolicyName   string                                 `json:"policyName"`
	MachineState memstate.NUMANodeMap                   `json:"machineState"`
	Entries      map[string]map[string][]memstate.Block `json:"entries"`
	PodEntries   map[string][]memstate.Block            `json:"podEntries"`
}

type deviceEntry struct {
	PodUID        string              `json:"podUID"`
	ContainerName string              `json:"containerName"`
	ResourceName  string              `json:"resourceName"`
	DeviceIDs     map[string][]string `json:"deviceIDs"`
}

type deviceOut struct {
	PodDeviceEntries  []deviceEntry       `json:"podDeviceEntries"`
	RegisteredDevices map[string][]string `json:"registeredDevices"`
}

type dump struct {
	Kubernetes    string     `json:"kubernetes"`
	CPUManager    *cpuOut    `json:"cpuManager"`
	MemoryManager *memoryOut `json:"memoryManager"`
	DeviceManager *deviceOut `json:"deviceManager"`
}

// rawFormat names the on-disk generation from the top-level keys, as the kubelet's own
// types tell them apart: an inline "data" string (1.37), a top-level "podEntries" (1.36
// with the gate on), or neither.
func rawFormat(blob []byte, names [3]string) (string, string, error) {
	var top map[string]json.RawMessage
	if err := json.Unmarshal(blob, &top); err != nil {
		return "", "", err
	}
	var policy string
	_ = json.Unmarshal(top["policyName"], &policy)
	switch {
	case top["data"] != nil:
		return names[2], policy, nil
	case top["podEntries"] != nil:
		return names[1], policy, nil
	}
	return names[0], policy, nil
}

// private copies a checkpoint into a fresh directory, so that the kubelet's restore code,
// which may write a migrated file, never touches the kubelet's own.
func private(dir, name string) (string, []byte, func(), error) {
	blob, err := os.ReadFile(filepath.Join(dir, name))
	if err != nil {
		return "", nil, nil, err
	}
	tmp, err := os.MkdirTemp("", "ckptdump-")
	if err != nil {
		return "", nil, nil, err
	}
	done := func() { _ = os.RemoveAll(tmp) }
	if err := os.WriteFile(filepath.Join(tmp, name), blob, 0o600); err != nil {
		done()
		return "", nil, nil, err
	}
	return tmp, blob, done, nil
}

func readCPU(logger klog.Logger, dir string) (*cpuOut, error) {
	tmp, blob, done, err := private(dir, cpuFile)
	if err != nil {
		return nil, err
	}
	defer done()
	format, policy, err := rawFormat(blob, [3]string{"v2", "v3", "v4"})
	if err != nil {
		return nil, fmt.Errorf("%s: %w", cpuFile, err)
	}
	st, err := cpustate.NewCheckpointState(logger, tmp, cpuFile, policy, containermap.NewContainerMap())
	if err != nil {
		return nil, fmt.Errorf("%s: %w", cpuFile, err)
	}
	out := &cpuOut{Format: format, PolicyName: policy, DefaultCPUSet: st.GetDefaultCPUSet().String(),
		Entries: map[string]map[string]string{}, PodEntries: map[string]string{}}
	for uid, containers := range st.GetCPUAssignments() {
		out.Entries[uid] = map[string]string{}
		for name, set := range containers {
			out.Entries[uid][name] = set.String()
		}
	}
	for uid, entry := range st.GetPodCPUAssignments() {
		out.PodEntries[uid] = entry.CPUSet.String()
	}
	return out, nil
}

func readMemory(logger klog.Logger, dir string) (*memoryOut, error) {
	tmp, blob, done, err := private(dir, memoryFile)
	if err != nil {
		return nil, err
	}
	defer done()
	format, policy, err := rawFormat(blob, [3]string{"v1", "v2", "v3"})
	if err != nil {
		return nil, fmt.Errorf("%s: %w", memoryFile, err)
	}
	st, err := memstate.NewCheckpointState(logger, tmp, memoryFile, policy)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", memoryFile, err)
	}
	out := &memoryOut{Format: format, PolicyName: policy, MachineState: st.GetMachineState(),
		Entries: map[string]map[string][]memstate.Block{}, PodEntries: map[string][]memstate.Block{}}
	for uid, containers := range st.GetMemoryAssignments() {
		out.Entries[uid] = map[string][]memstate.Block{}
		for name, blocks := range containers {
			out.Entries[uid][name] = blocks
		}
	}
	for uid, entry := range st.GetPodMemoryAssignments() {
		out.PodEntries[uid] = entry.MemoryBlocks
	}
	return out, nil
}

func readDevices(dir string) (*deviceOut, error) {
	if _, err := os.Stat(filepath.Join(dir, deviceFile)); err != nil {
		return nil, err
	}
	manager, err := checkpointmanager.NewCheckpointManager(dir)
	if err != nil {
		return nil, err
	}
	cp := devcheckpoint.New(nil, nil)
	if err := manager.GetCheckpoint(deviceFile, cp); err != nil {
		return nil, fmt.Errorf("%s: %w", deviceFile, err)
	}
	entries, registered := cp.GetData()
	out := &deviceOut{PodDeviceEntries: []deviceEntry{}, RegisteredDevices: map[string][]string{}}
	for _, e := range entries {
		ids := map[string][]string{}
		for node, list := range e.DeviceIDs {
			ids[strconv.FormatInt(node, 10)] = sortedCopy(list)
		}
		out.PodDeviceEntries = append(out.PodDeviceEntries, deviceEntry{
			PodUID: e.PodUID, ContainerName: e.ContainerName, ResourceName: e.ResourceName, DeviceIDs: ids})
	}
	sort.Slice(out.PodDeviceEntries, func(i, j int) bool {
		a, b := out.PodDeviceEntries[i], out.PodDeviceEntries[j]
		if a.PodUID != b.PodUID {
			return a.PodUID < b.PodUID
		}
		if a.ContainerName != b.ContainerName {
			return a.ContainerName < b.ContainerName
		}
		return a.ResourceName < b.ResourceName
	})
	for resource, list := range registered {
		out.RegisteredDevices[resource] = sortedCopy(list)
	}
	return out, nil
}

func sortedCopy(list []string) []string {
	out := append([]string{}, list...)
	sort.Strings(out)
	return out
}

func kubernetesVersion() string {
	info, ok := debug.ReadBuildInfo()
	if !ok {
		return ""
	}
	for _, dep := range info.Deps {
		if dep.Path == "k8s.io/kubernetes" {
			return dep.Version
		}
	}
	return ""
}

// absent turns "no such file" into a null entry.
func absent[T any](v *T, err error) (*T, error) {
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	return v, err
}

func main() {
	root := flag.String("root-dir", "", "the kubelet's --root-dir (holds cpu_manager_state and memory_manager_state)")
	devices := flag.String("device-plugins-dir", "",
		"the directory of kubelet_internal_checkpoint (the kubelet fixes it at /var/lib/kubelet/device-plugins; default ROOT/device-plugins)")
	podLevel := flag.Bool("pod-level-resource-managers", true,
		"read as a kubelet with the PodLevelResourceManagers gate in this state (off: podEntries are ignored, as that kubelet does)")
	flag.Parse()
	if *root == "" || flag.NArg() > 0 {
		fmt.Fprintln(os.Stderr, "usage: ckptdump --root-dir DIR [--device-plugins-dir DIR] [--pod-level-resource-managers=false]")
		os.Exit(2)
	}
	if *devices == "" {
		*devices = filepath.Join(*root, "device-plugins")
	}
	if err := utilfeature.DefaultMutableFeatureGate.SetFromMap(map[string]bool{
		string(features.PodLevelResources):        *podLevel,
		string(features.PodLevelResourceManagers): *podLevel,
	}); err != nil {
		fmt.Fprintf(os.Stderr, "ckptdump: %v\n", err)
		os.Exit(2)
	}
	// The restore code logs at V(2); keep stdout for the JSON only.
	klog.SetOutput(os.Stderr)
	logger := klog.Background()
	var d dump
	var err error
	d.Kubernetes = kubernetesVersion()
	if d.CPUManager, err = absent(readCPU(logger, *root)); err == nil {
		if d.MemoryManager, err = absent(readMemory(logger, *root)); err == nil {
			d.DeviceManager, err = absent(readDevices(*devices))
		}
	}
	if err != nil {
		fmt.Fprintf(os.Stderr, "ckptdump: %v\n", err)
		os.Exit(1)
	}
	enc := json.NewEncoder(os.Stdout)
	enc.SetIndent("", " ")
	if err := enc.Encode(d); err != nil {
		fmt.Fprintf(os.Stderr, "ckptdump: %v\n", err)
		os.Exit(1)
	}
}
