package main

// The kubelet's device manager in the reference (docs/design.md#reference): created as
// pkg/kubelet/cm/container_manager_linux.go creates it (right after the topology manager, and
// its first hint provider, before the CPU and memory managers), started after them, and fed
// by fake device plugins served in-process over the device plugin API
// (k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1), the pattern of realnode/deviceplugin: each
// resource is one plugin endpoint that registers with the manager's Registration service,
// which then connects back, asks GetDevicePluginOptions and reads ListAndWatch.
//
// The exported constructor fixes the socket at /var/lib/kubelet/device-plugins/kubelet.sock,
// a host path that every reference running at once would share (and its checkpoint with it).
// The reference calls the manager's own unexported constructor instead, with a socket in a
// private temporary folder; that is the only difference from the kubelet's NewManagerImpl.

import (
	"context"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"time"
	_ "unsafe" // go:linkname

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/sets"
	"k8s.io/klog/v2"
	pluginapi "k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"
	"k8s.io/kubernetes/pkg/kubelet/cm/devicemanager"
	"k8s.io/kubernetes/pkg/kubelet/cm/topologymanager"
	"k8s.io/kubernetes/pkg/kubelet/lifecycle"
	schedulerframework "k8s.io/kubernetes/pkg/scheduler/framework"
)

//go:linkname newDeviceManager k8s.io/kubernetes/pkg/kubelet/cm/devicemanager.newManagerImpl
func newDeviceManager(logger klog.Logger, socketPath string, topology []numaNodeT,
	store topologymanager.Store) (*devicemanager.ManagerImpl, error)

// deviceResource is one resource a plugin serves: its devices in the plugin's order of
// preference, each with the NUMA nodes of its topology (none: the plugin gives no topology).
type deviceResource struct {
	Name string `json:"name"`
	// Preferred: the plugin offers GetPreferredAllocation, answering the devices it must
	// include, then the available ones in the order of Devices, up to the size asked.
	Preferred bool `json:"preferred"`
	// PreStart: the plugin asks for PreStartContainer before each container starts.
	PreStart bool         `json:"pre_start"`
	Devices  []deviceSpec `json:"devices"`
}

type deviceSpec struct {
	ID   string  `json:"id"`
	NUMA []int64 `json:"numa"`
	// Unhealthy: the plugin lists the device as Unhealthy (the manager counts it in the
	// capacity, never allocates it).
	Unhealthy bool `json:"unhealthy,omitempty"`
}

// devices is the node's device manager and its plugins.
type devices struct {
	dir     string // the device-plugin folder: kubelet.sock, the plugins' sockets, the checkpoint
	dm      *devicemanager.ManagerImpl
	plugins []*fakePlugin
	// Per pod UID and container: why starting it failed (the device manager's allocation at
	// container start, which is where a pod with pod-level resources gets its devices).
	startErrors map[string]map[string]string
	// The extended-resource allocatable the predicate admit handler checked the last
	// admitted pod against, after the device manager's UpdatePluginResources.
	admitAllocatable map[string]int64
}

func (n *node) newDevices(tm topologymanager.Manager) error {
	if len(n.cfg.Devices) == 0 {
		return nil
	}
	if n.devs == nil {
		dir, err := os.MkdirTemp("", "podres-dp-")
		if err != nil {
			return err
		}
		n.devs = &devices{dir: dir, startErrors: map[string]map[string]string{}}
		for _, r := range n.cfg.Devices {
			if err := validDeviceResource(r); err != nil {
				return err
			}
			n.devs.plugins = append(n.devs.plugins, &fakePlugin{res: r, dir: dir})
		}
	} else {
		n.devs.stop(n.logger)
	}
	dm, err := newDeviceManager(n.logger, filepath.Join(n.devs.dir, "kubelet.sock"),
		n.machine.Topology, tm)
	if err != nil {
		return fmt.Errorf("device manager: %w", err)
	}
	n.devs.dm = dm
	tm.AddHintProvider(n.logger, dm)
	return nil
}

func validDeviceResource(r deviceResource) error {
	if !strings.Contains(r.Name, "/") || len(r.Devices) == 0 {
		return fmt.Errorf("setup: device resource %q: a DOMAIN/NAME with devices", r.Name)
	}
	seen := map[string]bool{}
	for _, d := range r.Devices {
		if d.ID == "" || seen[d.ID] {
			return fmt.Errorf("setup: device resource %s: empty or repeated id %q", r.Name, d.ID)
		}
		seen[d.ID] = true
	}
	return nil
}

// startDevices starts the device manager as the container manager does, last, with the
// containers known so far (all of them running but ordinary init containers, which have
// finished), then lets each plugin register in turn and waits until the manager has taken in
// its device list and written its checkpoint of it (devicewait.go): the plugins are back
// before the pods are admitted again, and no write of a list can land after an allocation.
func (n *node) startDevices() error {
	if n.devs == nil {
		return nil
	}
	running := sets.New[string]()
	for _, p := range n.pods {
		for _, c := range p.Spec.InitContainers {
			if c.RestartPolicy != nil && *c.RestartPolicy == v1.ContainerRestartPolicyAlways {
				running.Insert(containerID(string(p.UID), c.Name))
			}
		}
		for _, c := range p.Spec.Containers {
			running.Insert(containerID(string(p.UID), c.Name))
		}
	}
	writes, err := watchCheckpointWrites(n.devs.dir)
	if err != nil {
		return err
	}
	defer writes.close()
	dm := n.devs.dm
	if err := dm.Start(n.logger, devicemanager.ActivePodsFunc(n.activePods), n.fakes,
		n.containers.Clone(), running); err != nil {
		return fmt.Errorf("device manager start: %w", err)
	}
	sock := filepath.Join(n.devs.dir, "kubelet.sock")
	deadline := time.Now().Add(startLimit)
	// One plugin at a time, each list's write landed before the next plugin registers: two
	// lists taken in at once write two snapshots whose renames may land in either order, and
	// the one taken first, landing last, leaves a checkpoint without the other list (1 setup
	// in some 90 with three plugins, counting the writes of all of them at the end).
	for _, p := range n.devs.plugins {
		if err := p.serve(); err != nil {
			return err
		}
		if err := p.register(n.ctx, sock); err != nil {
			return fmt.Errorf("device plugin %s: register: %w", p.res.Name, err)
		}
		if err := writes.wait(1, deadline); err != nil {
			return fmt.Errorf("device plugin %s: %w", p.res.Name, err)
		}
	}
	if !n.devicesListed() {
		return fmt.Errorf("device plugins: the device manager does not list their devices")
	}
	return nil
}

func (n *node) devicesListed() bool {
	listed := allocatableDevices(n)
	for _, p := range n.devs.plugins {
		healthy := 0
		for _, d := range p.res.Devices {
			if !d.Unhealthy {
				healthy++
			}
		}
		if len(listed[p.res.Name]) != healthy {
			return false
		}
	}
	return true
}

// updatePluginResources is what the kubelet's predicate admit handler, which runs after
// the resource managers' admit handler (pkg/kubelet/kubelet.go), does with the device
// manager (pkg/kubelet/lifecycle/predicate.go): a NodeInfo of the other pods on the node's
// status, whose allocatable carries GetCapacity's, and UpdatePluginResources, which raises
// each resource's allocatable to what is allocated (sanitizeNodeAllocatable) so that
// pods holding devices pass the general predicates. The allocatable left is reported.
func (n *node) updatePluginResources(pod *v1.Pod) {
	if n.devs == nil {
		return
	}
	var others []*v1.Pod
	for _, p := range n.pods {
		if p.UID != pod.UID {
			others = append(others, p)
		}
	}
	status := &v1.Node{}
	status.Status.Allocatable = deviceAllocatable(n)
	info := schedulerframework.NewNodeInfo(others...)
	info.SetNode(status)
	_ = n.devs.dm.UpdatePluginResources(info, &lifecycle.PodAdmitAttributes{Pod: pod, OtherPods: others})
	n.devs.admitAllocatable = map[string]int64{}
	for name, q := range info.Allocatable.ScalarResources {
		n.devs.admitAllocatable[string(name)] = q
	}
}

// startContainers is what the kubelet does when it starts a pod's containers: it asks the
// device manager for each container's run options, which allocates the devices a container
// was not given at admission (a pod with pod-level resources under the pod scope, whose
// AllocatePod the device manager does not implement), with the topology manager's stored
// hint. A failure fails that container's start, not the pod's admission.
func (n *node) startContainers(pod *v1.Pod) {
	if n.devs == nil {
		return
	}
	for _, c := range allContainers(pod) {
		if _, err := n.devs.dm.GetDeviceRunContainerOptions(n.ctx, pod, &c); err != nil {
			uid := string(pod.UID)
			if n.devs.startErrors[uid] == nil {
				n.devs.startErrors[uid] = map[string]string{}
			}
			n.devs.startErrors[uid][c.Name] = err.Error()
		}
	}
}

// reportDevices adds each container's devices (resource -> sorted ids) and start errors.
func (n *node) reportDevices(r *stateReport) {
	if n.devs == nil {
		return
	}
	r.Devices = map[string]map[string]map[string][]string{}
	r.DeviceStartErrors = map[string]map[string]string{}
	r.DeviceHealth = map[string]map[string]map[string][]string{}
	for _, p := range n.pods {
		uid := string(p.UID)
		for _, c := range allContainers(p) {
			got := n.devs.dm.GetDevices(uid, c.Name)
			if len(got) == 0 {
				continue
			}
			if r.Devices[uid] == nil {
				r.Devices[uid] = map[string]map[string][]string{}
			}
			r.Devices[uid][c.Name] = map[string][]string{}
			for resource, ids := range got {
				list := make([]string, 0, len(ids))
				for id := range ids {
					list = append(list, id)
				}
				sort.Strings(list)
				r.Devices[uid][c.Name][resource] = list
			}
		}
		n.reportDeviceHealth(r, p)
		if errs := n.devs.startErrors[uid]; len(errs) > 0 {
			r.DeviceStartErrors[uid] = errs
		}
	}
	// What the node status would advertise (GetCapacity, as the kubelet's status update
	// asks it).
	r.DeviceAllocatable = map[string]int64{}
	for name, q := range deviceAllocatable(n) {
		r.DeviceAllocatable[string(name)] = q.Value()
	}
	r.DeviceAdmitAllocatable = n.devs.admitAllocatable
}

// reportDeviceHealth adds what the device manager writes into the pod's status
// (UpdateAllocatedResourcesStatus, asked by the kubelet when it generates the status with
// ResourceHealthStatus on): per app container and resource, each device held and its
// health ("id=Healthy").
func (n *node) reportDeviceHealth(r *stateReport, p *v1.Pod) {
	status := &v1.PodStatus{}
	for _, c := range p.Spec.Containers {
		status.ContainerStatuses = append(status.ContainerStatuses, v1.ContainerStatus{Name: c.Name})
	}
	allocatedResourcesStatus(n, p, status)
	for _, cs := range status.ContainerStatuses {
		for _, rs := range cs.AllocatedResourcesStatus {
			var list []string
			for _, h := range rs.Resources {
				list = append(list, string(h.ResourceID)+"="+string(h.Health))
			}
			sort.Strings(list)
			uid := string(p.UID)
			if r.DeviceHealth[uid] == nil {
				r.DeviceHealth[uid] = map[string]map[string][]string{}
			}
			if r.DeviceHealth[uid][cs.Name] == nil {
				r.DeviceHealth[uid][cs.Name] = map[string][]string{}
			}
			r.DeviceHealth[uid][cs.Name][string(rs.Name)] = list
		}
	}
}

// forgetPod drops what the node remembers of a deleted pod's container starts.
func (n *node) forgetPod(uid string) {
	if n.devs != nil {
		delete(n.devs.startErrors, uid)
	}
}

func (d *devices) stop(logger klog.Logger) {
	if d.dm != nil {
		_ = d.dm.Stop(logger)
	}
	for _, p := range d.plugins {
		p.stop()
	}
}

func (d *devices) close(logger klog.Logger) {
	d.stop(logger)
	_ = os.RemoveAll(d.dir)
}

// fakePlugin serves one resource (realnode/deviceplugin's plugin, in-process).
type fakePlugin struct {
	pluginapi.UnimplementedDevicePluginServer
	res    deviceResource
	dir    string
	mu     sync.Mutex
	server *grpc.Server
	done   chan struct{}
}

func (p *fakePlugin) socket() string {
	return "fake-" + strings.NewReplacer("/", "_", ".", "_").Replace(p.res.Name) + ".sock"
}

func (p *fakePlugin) serve() error {
	p.stop()
	path := filepath.Join(p.dir, p.socket())
	_ = os.Remove(path)
	l, err := net.Listen("unix", path)
	if err != nil {
		return fmt.Errorf("device plugin %s: %w", p.res.Name, err)
	}
	p.mu.Lock()
	p.server = grpc.NewServer()
	p.done = make(chan struct{})
	pluginapi.RegisterDevicePluginServer(p.server, p)
	server := p.server
	p.mu.Unlock()
	go func() { _ = server.Serve(l) }()
	return nil
}

func (p *fakePlugin) stop() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.server != nil {
		close(p.done)
		p.server.Stop()
		p.server = nil
	}
	_ = os.Remove(filepath.Join(p.dir, p.socket()))
}

func (p *fakePlugin) register(ctx context.Context, kubeletSock string) error {
	conn, err := grpc.NewClient("unix://"+kubeletSock,
		grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		return err
	}
	defer conn.Close()
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	_, err = pluginapi.NewRegistrationClient(conn).Register(ctx, &pluginapi.RegisterRequest{
		Version: pluginapi.Version, Endpoint: p.socket(), ResourceName: p.res.Name,
		Options: p.options(),
	})
	return err
}

func (p *fakePlugin) options() *pluginapi.DevicePluginOptions {
	return &pluginapi.DevicePluginOptions{GetPreferredAllocationAvailable: p.res.Preferred,
		PreStartRequired: p.res.PreStart}
}

func (p *fakePlugin) GetDevicePluginOptions(context.Context, *pluginapi.Empty) (*pluginapi.DevicePluginOptions, error) {
	return p.options(), nil
}

func (p *fakePlugin) ListAndWatch(_ *pluginapi.Empty, stream pluginapi.DevicePlugin_ListAndWatchServer) error {
	devs := make([]*pluginapi.Device, 0, len(p.res.Devices))
	for _, d := range p.res.Devices {
		dev := &pluginapi.Device{ID: d.ID, Health: pluginapi.Healthy}
		if d.Unhealthy {
			dev.Health = pluginapi.Unhealthy
		}
		if len(d.NUMA) > 0 {
			dev.Topology = &pluginapi.TopologyInfo{}
			for _, id := range d.NUMA {
				dev.Topology.Nodes = append(dev.Topology.Nodes, &pluginapi.NUMANode{ID: id})
			}
		}
		devs = append(devs, dev)
	}
	if err := stream.Send(&pluginapi.ListAndWatchResponse{Devices: devs}); err != nil {
		return err
	}
	p.mu.Lock()
	done := p.done
	p.mu.Unlock()
	select {
	case <-stream.Context().Done():
	case <-done:
	}
	return nil
}

// GetPreferredAllocation: the devices it must include, then the available ones in the
// plugin's order of preference, up to the size asked.
func (p *fakePlugin) GetPreferredAllocation(_ context.Context, req *pluginapi.PreferredAllocationRequest) (*pluginapi.PreferredAllocationResponse, error) {
	resp := &pluginapi.PreferredAllocationResponse{}
	for _, c := range req.ContainerRequests {
		avail := sets.New(c.AvailableDeviceIDs...)
		chosen := append([]string(nil), c.MustIncludeDeviceIDs...)
		taken := sets.New(chosen...)
		for _, d := range p.res.Devices {
			if len(chosen) >= int(c.AllocationSize) {
				break
			}
			if avail.Has(d.ID) && !taken.Has(d.ID) {
				chosen = append(chosen, d.ID)
				taken.Insert(d.ID)
			}
		}
		resp.ContainerResponses = append(resp.ContainerResponses,
			&pluginapi.ContainerPreferredAllocationResponse{DeviceIDs: chosen})
	}
	return resp, nil
}

// Allocate answers what a real plugin hands the runtime (an environment variable, a mount,
// a device node, an annotation and a CDI device per device), so that the manager's run
// options and checkpoint carry them; nothing is attached to anything.
func (p *fakePlugin) Allocate(_ context.Context, req *pluginapi.AllocateRequest) (*pluginapi.AllocateResponse, error) {
	kind := p.res.Name[strings.LastIndex(p.res.Name, "/")+1:]
	resp := &pluginapi.AllocateResponse{}
	for _, c := range req.ContainerRequests {
		ids := append([]string(nil), c.DevicesIds...)
		sort.Strings(ids)
		r := &pluginapi.ContainerAllocateResponse{
			Envs:        map[string]string{"FAKE_" + strings.ToUpper(kind): strings.Join(ids, ",")},
			Annotations: map[string]string{"fake.example.com/" + kind: strings.Join(ids, ",")},
		}
		for _, id := range ids {
			r.Mounts = append(r.Mounts, &pluginapi.Mount{ContainerPath: "/run/fake/" + id,
				HostPath: filepath.Join(p.dir, id), ReadOnly: true})
			r.Devices = append(r.Devices, &pluginapi.DeviceSpec{ContainerPath: "/dev/fake-" + id,
				HostPath: "/dev/null", Permissions: "rw"})
			r.CdiDevices = append(r.CdiDevices, &pluginapi.CDIDevice{Name: p.res.Name + "=" + id})
		}
		resp.ContainerResponses = append(resp.ContainerResponses, r)
	}
	return resp, nil
}

func (p *fakePlugin) PreStartContainer(context.Context, *pluginapi.PreStartContainerRequest) (*pluginapi.PreStartContainerResponse, error) {
	return &pluginapi.PreStartContainerResponse{}, nil
}
